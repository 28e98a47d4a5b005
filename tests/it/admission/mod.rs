//! The host budget and its queue, through the real daemon and CLI: a budget that fits the
//! reserves of three jobs admits three of eight concurrent creates and queues the rest in the
//! order they came, `no_wait` is refused at once (HTTP 429, exit 10), a daemon killed with
//! jobs queued and started again keeps their order, the CLI without a daemon queues behind
//! them, and at no moment do more jobs hold the budget than it fits. `host` has the budget
//! as agents use a host: the defaults, real overloads, and what a waiting request says.

mod host;

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::api::{Daemon, api};
use crate::fixtures::{FixtureRepo, TestHome};

/// Job id → (state, queue position), from the daemon.
fn jobs(socket: &std::path::Path) -> BTreeMap<String, (String, Option<u64>)> {
    let (status, body) = api(socket, "GET", "/v1/jobs", None);
    assert_eq!(status, 200, "{body}");
    body.as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap().to_string(),
                (
                    j["state"].as_str().unwrap().to_string(),
                    j["queue_position"].as_u64(),
                ),
            )
        })
        .collect()
}

/// Polls until `done` holds, asserting the budget (at most 3 admitted) at every look.
fn wait_for(
    socket: &std::path::Path,
    what: &str,
    done: impl Fn(&BTreeMap<String, (String, Option<u64>)>) -> bool,
) -> BTreeMap<String, (String, Option<u64>)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = jobs(socket);
        let admitted = now.values().filter(|(s, _)| s != "queued").count();
        assert!(admitted <= 3, "more jobs than the budget holds: {now:?}");
        if done(&now) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {now:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn queued_in_order(jobs: &BTreeMap<String, (String, Option<u64>)>) -> Vec<String> {
    let mut queued: Vec<(u64, String)> = jobs
        .iter()
        .filter(|(_, (s, _))| s == "queued")
        .map(|(id, (_, p))| (p.expect("a queued job has a position"), id.clone()))
        .collect();
    queued.sort();
    queued.into_iter().map(|(_, id)| id).collect()
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn a_budget_of_three_jobs_queues_the_rest_in_order_across_a_daemon_restart() {
    let repo = FixtureRepo::new();
    let home = TestHome::new().with_budget("  memory: 768m\n  cpus: 1000\n");
    let daemon = Daemon::start(&home, &[]);
    let socket = daemon.socket.clone();
    let path = repo.path().display().to_string();
    let body = |id: &str| json!({"repo": path, "id": id, "task": id, "reserve_memory": "256m", "runtime": "process"});

    // Eight creates, each sent once the one before has its record, so the order they came
    // in is known whatever the machine's load.
    let mut senders = Vec::new();
    for i in 0..8 {
        let socket = socket.clone();
        let id = format!("q{i}");
        let request = body(&id);
        senders.push(std::thread::spawn(move || {
            api(&socket, "POST", "/v1/jobs", Some(&request))
        }));
        wait_for(&daemon.socket, &format!("{id}'s record"), |j| {
            j.contains_key(&id)
        });
    }
    let first = wait_for(&socket, "3 admitted and 5 queued", |j| {
        j.len() == 8 && j.values().filter(|(s, _)| s == "ready").count() == 3
    });
    for id in ["q0", "q1", "q2"] {
        assert_eq!(first[id].0, "ready", "{first:?}");
    }
    assert_eq!(queued_in_order(&first), ["q3", "q4", "q5", "q6", "q7"]);
    for (place, id) in ["q3", "q4", "q5", "q6", "q7"].iter().enumerate() {
        assert_eq!(first[*id].1, Some(place as u64 + 1));
    }

    // `no_wait`: refused at once, by the API and by the CLI without a daemon.
    let mut stream = std::os::unix::net::UnixStream::connect(&socket).unwrap();
    let started = Instant::now();
    let mut refused = body("nowait");
    refused["no_wait"] = json!(true);
    let (status, error) = crate::api::http(&mut stream, "POST", "/v1/jobs", Some(&refused), &[]);
    assert_eq!(status, 429, "{error}");
    assert_eq!(error["error"]["code"], "queue_full");
    assert!(started.elapsed() < Duration::from_secs(5));
    let cli = home
        .cmd(&[
            "create",
            "--repo",
            &path,
            "--id",
            "nowait-cli",
            "--reserve-memory",
            "256m",
            "--runtime",
            "process",
            "--no-wait",
        ])
        .env("PADDOCK_NO_DAEMON", "1")
        .output()
        .unwrap();
    assert_eq!(cli.status.code(), Some(10), "{cli:?}");
    assert!(
        String::from_utf8_lossy(&cli.stderr).contains("no room"),
        "{cli:?}"
    );

    // Kill the daemon with five queued; a new one keeps their order.
    drop(daemon);
    for sender in senders {
        let _ = sender.join();
    }
    let daemon = Daemon::start(&home, &[]);
    let adopted = |j: &BTreeMap<String, (String, Option<u64>)>| {
        j.len() == 8
            && j.values()
                .filter(|(s, _)| s == "queued")
                .all(|(_, p)| p.is_some())
    };
    let after = wait_for(&socket, "the queue after a restart", adopted);
    assert_eq!(queued_in_order(&after), ["q3", "q4", "q5", "q6", "q7"]);
    // A graceful stop (SIGTERM) keeps the queue too, and does not wait out its grace.
    let stopping = Instant::now();
    daemon.stop();
    assert!(
        stopping.elapsed() < Duration::from_secs(20),
        "queued creates held up the stop"
    );
    let daemon = Daemon::start(&home, &[]);
    let after = wait_for(&socket, "the queue after a graceful restart", adopted);
    assert_eq!(queued_in_order(&after), ["q3", "q4", "q5", "q6", "q7"]);

    // The CLI without a daemon queues behind them (same lock, same records).
    let mut cli = home
        .cmd(&[
            "create",
            "--repo",
            &path,
            "--id",
            "qc",
            "--reserve-memory",
            "256m",
            "--runtime",
            "process",
            "--json",
        ])
        .env("PADDOCK_NO_DAEMON", "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let with_cli = wait_for(&socket, "the CLI's create to queue", |j| {
        j.contains_key("qc")
    });
    assert_eq!(
        queued_in_order(&with_cli),
        ["q3", "q4", "q5", "q6", "q7", "qc"]
    );

    // Each job that ends lets exactly the next one in.
    let order = ["q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7", "qc"];
    for (n, ended) in order.iter().take(6).enumerate() {
        let (status, removed) = api(&socket, "DELETE", &format!("/v1/jobs/{ended}"), None);
        assert_eq!(status, 200, "{removed}");
        let next = order[n + 3];
        let now = wait_for(&socket, &format!("{next} to be admitted"), |j| {
            j.get(next).is_some_and(|(s, _)| s == "ready")
        });
        assert_eq!(queued_in_order(&now), order[n + 4..].to_vec());
    }
    let status = cli.wait().unwrap();
    assert!(status.success(), "the CLI's queued create finished");
    let mut out = String::new();
    std::io::Read::read_to_string(cli.stdout.as_mut().unwrap(), &mut out).unwrap();
    let created: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(created["id"], "qc");
    daemon.stop();
}

#[test]
fn a_queued_create_whose_client_went_away_is_dropped_and_rm_cancels_one() {
    let repo = FixtureRepo::new();
    let home = TestHome::new().with_budget("  memory: 256m\n");
    let path = repo.path().display().to_string();
    let args = |id: &'static str| {
        vec![
            "create".to_string(),
            "--repo".into(),
            path.clone(),
            "--id".into(),
            id.into(),
            "--reserve-memory".into(),
            "256m".into(),
            "--runtime".into(),
            "process".into(),
        ]
    };
    let holder = args("holder");
    home.ok(&holder.iter().map(String::as_str).collect::<Vec<_>>());
    let waiter = args("waiter");
    let mut child = home
        .cmd(&waiter.iter().map(String::as_str).collect::<Vec<_>>())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let record = home.root().join("jobs/waiter.json");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !record.exists() {
        assert!(Instant::now() < deadline, "the waiter never queued");
        std::thread::sleep(Duration::from_millis(50));
    }
    let shown = home.json(&["show", "waiter", "--json"]);
    assert_eq!(shown["job"]["state"], "queued");
    assert_eq!(shown["job"]["queue_position"], 1);
    // The client goes away: its place and record go with it once anyone looks.
    child.kill().unwrap();
    child.wait().unwrap();
    let third = args("third");
    let third = home
        .cmd(&third.iter().map(String::as_str).collect::<Vec<_>>())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while record.exists() || !home.root().join("jobs/third.json").exists() {
        assert!(Instant::now() < deadline, "the dead waiter was not dropped");
        std::thread::sleep(Duration::from_millis(50));
    }
    // `rm` of a queued job cancels it; its creator fails and nothing is left.
    home.ok(&["rm", "third"]);
    let out = third.wait_with_output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cancelled"),
        "{out:?}"
    );
    assert!(!home.root().join("jobs/third.json").exists());
    let listed = home.json(&["ls", "--json"]);
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    let branches = repo.git(&["branch", "--list", "agent/*"]);
    assert!(
        !branches.contains("waiter") && !branches.contains("third"),
        "{branches}"
    );
}

#[test]
fn a_queued_api_create_whose_connection_closes_leaves_nothing() {
    use std::io::Write;
    let repo = FixtureRepo::new();
    let home = TestHome::new().with_budget("  memory: 256m\n");
    let daemon = Daemon::start(&home, &[]);
    let path = repo.path().display().to_string();
    let body =
        |id: &str| json!({"repo": path, "id": id, "reserve_memory": "256m", "runtime": "process"});
    let (status, held) = api(&daemon.socket, "POST", "/v1/jobs", Some(&body("holder")));
    assert_eq!(status, 201, "{held}");
    // A create that queues, then its client hangs up.
    let payload = body("gone").to_string();
    let mut stream = std::os::unix::net::UnixStream::connect(&daemon.socket).unwrap();
    write!(
        stream,
        "POST /v1/jobs HTTP/1.1\r\nHost: paddock\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{payload}",
        payload.len()
    )
    .unwrap();
    wait_until("the create to queue", || {
        jobs(&daemon.socket)
            .get("gone")
            .is_some_and(|(s, _)| s == "queued")
    });
    drop(stream);
    wait_until("the abandoned create to go", || {
        !jobs(&daemon.socket).contains_key("gone")
    });
    assert!(!home.root().join("jobs/gone.json").exists());
    // The record goes first, its ticket right after (a ticket without a record is dropped
    // by the next look anyway).
    let tickets = || {
        std::fs::read_dir(home.root().join("queue"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy() != "next-seq")
            .count()
    };
    wait_until("its ticket to go too", || tickets() == 0);
    daemon.stop();
}

fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
