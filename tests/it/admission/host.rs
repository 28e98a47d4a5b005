//! The budget as agents use a host: jobs hold a small reserve while they exist and execs hold
//! an exec slot while they run. With the defaults, 20 jobs exist at once on a 2-core host
//! and each runs a command; a real overload (reserves past the budget, more running execs
//! than the slots) still queues or is refused; a create or exec that waits says so on its
//! terminal, once and again only when its place or the reason changes.
//!
//! The terminal is a real one: `script` runs paddock on a pseudo-terminal and copies what it
//! shows to a pipe this test reads line by line.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::fixtures::terminal::OnTerminal;
use crate::fixtures::{FixtureRepo, TestHome, docker_available, test_image, text};

/// Polls `ls --json` until job `id` is in `state`.
fn wait_for_state(home: &TestHome, id: &str, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let jobs = home.json(&["ls", "--json"]);
        if let Some(job) = jobs
            .as_array()
            .expect("ls --json is an array")
            .iter()
            .find(|j| j["id"] == id && j["state"] == state)
        {
            return job.clone();
        }
        assert!(
            Instant::now() < deadline,
            "{id} never became {state}: {jobs}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Creates 20 jobs one after another with the host's default budget and runs a command in
/// each; returns how long each create and exec took.
fn twenty_jobs(home: &TestHome, repo: &FixtureRepo, extra: &[&str]) -> Vec<(Duration, Duration)> {
    let path = repo.path().display().to_string();
    let mut times = Vec::new();
    for n in 0..20 {
        let task = format!("agent-{n}");
        let mut args = vec!["create", "--repo", &path, "--task", &task, "--json"];
        // A create that would have to wait fails at once instead of hanging the test.
        args.push("--no-wait");
        args.extend_from_slice(extra);
        let started = Instant::now();
        let output = home.run(&args);
        let created = started.elapsed();
        assert!(
            output.status.success(),
            "create {n} of 20 was refused on the default budget: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let job: Value = serde_json::from_slice(&output.stdout).expect("create --json");
        let id = text(&job, "id");
        let started = Instant::now();
        let out = home.ok(&["exec", &id, "--", "sh", "-c", "echo ran in $PWD"]);
        let ran = started.elapsed();
        assert!(out.starts_with("ran in "), "{out}");
        times.push((created, ran));
    }
    times
}

fn report(what: &str, times: &[(Duration, Duration)]) {
    let creates: Vec<u128> = times.iter().map(|(c, _)| c.as_millis()).collect();
    let execs: Vec<u128> = times.iter().map(|(_, e)| e.as_millis()).collect();
    let total: Duration = times.iter().map(|(c, _)| *c).sum();
    // Past the harness's capture, so the numbers show in every run's log.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "{what}: 20 creates in {total:?} (each ms: {creates:?}); execs (ms): {execs:?}"
    );
}

/// The budget line `ls` and `doctor` show, with 20 default jobs holding their reserves.
fn assert_twenty_hold_the_budget(home: &TestHome) {
    let ls = home.run(&["ls"]);
    let table = String::from_utf8_lossy(&ls.stdout);
    assert_eq!(table.lines().count(), 21, "a header and 20 jobs: {table}");
    let budget = String::from_utf8_lossy(&ls.stderr);
    assert!(
        budget.starts_with("budget: 20 jobs reserve 2 of ")
            && budget.contains(" CPUs and 5.0 GiB of ")
            && budget.contains("; nothing waits"),
        "{budget}"
    );
    let checks = home.json(&["doctor", "--json"]);
    let admission = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "admission")
        .expect("doctor has an admission check");
    assert_eq!(admission["status"], "ok", "{admission}");
    assert!(
        text(admission, "detail").starts_with("20 jobs reserve 2 of "),
        "{admission}"
    );
}

/// The "done when": with default settings (this machine's cores and memory; 2 cores
/// and 24 GiB where it was written), 20 jobs are created one after another, each within
/// seconds, and each runs a command. Their limits (2 CPUs, 2g each) would have filled two
/// cores with two jobs; their reserves (0.1 CPU, 256m) take 2 CPUs and 5 GiB.
#[test]
fn twenty_jobs_on_the_default_budget_each_run_a_command() {
    let repo = FixtureRepo::new();
    let home = TestHome::new().with_host_budget();
    let times = twenty_jobs(&home, &repo, &["--runtime", "process"]);
    report("process runtime", &times);
    for (n, (created, ran)) in times.iter().enumerate() {
        assert!(
            *created < Duration::from_secs(10),
            "create {n} took {created:?}"
        );
        assert!(*ran < Duration::from_secs(10), "exec {n} took {ran:?}");
    }
    assert_twenty_hold_the_budget(&home);
}

/// The same with Docker containers: 20 containers exist at once, each runs a command.
#[test]
fn twenty_docker_jobs_on_the_default_budget_each_run_a_command() {
    if !docker_available("twenty_docker_jobs_on_the_default_budget_each_run_a_command") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new().with_host_budget();
    let image = test_image();
    let times = twenty_jobs(&home, &repo, &["--runtime", "docker", "--image", &image]);
    report("docker runtime", &times);
    for (n, (created, ran)) in times.iter().enumerate() {
        assert!(
            *created < Duration::from_secs(30),
            "create {n} took {created:?}"
        );
        assert!(*ran < Duration::from_secs(30), "exec {n} took {ran:?}");
    }
    assert_eq!(home.docker_objects().len(), 20, "one container per job");
    assert_twenty_hold_the_budget(&home);
}

/// A real overload still queues or refuses: reserves past the budget, and more execs than
/// the exec slots; a reserve above its job's limit, or above the whole budget, is refused.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn reserves_past_the_budget_and_execs_past_the_slots_queue_or_are_refused() {
    let repo = FixtureRepo::new();
    let home = TestHome::new()
        .with_budget("  memory: 768m\n  cpus: 1000\n  max_running_execs: 1\n  max_wait: 3s\n");
    let path = repo.path().display().to_string();
    let create = |id: &str, extra: &[&str]| {
        let mut args = vec![
            "create",
            "--repo",
            &path,
            "--id",
            id,
            "--runtime",
            "process",
        ];
        args.extend_from_slice(extra);
        home.run(&args)
    };
    for id in ["r0", "r1", "r2"] {
        let out = create(id, &["--reserve-memory", "256m"]);
        assert!(out.status.success(), "{out:?}");
    }
    // Reserves past the budget: refused at once with --no-wait (exit 10) ...
    let refused = create("r3", &["--reserve-memory", "256m", "--no-wait"]);
    assert_eq!(refused.status.code(), Some(10), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("no room for job `r3`")
            && said.contains("jobs reserve 768.0 MiB of 768.0 MiB memory"),
        "{said}"
    );
    // ... and otherwise waited for, until `max_wait`.
    let started = Instant::now();
    let waited = create("r3", &["--reserve-memory", "256m"]);
    let took = started.elapsed();
    assert_eq!(waited.status.code(), Some(10), "{waited:?}");
    let said = String::from_utf8_lossy(&waited.stderr);
    assert!(
        said.contains("the create of job `r3` gave up waiting for room after 3s"),
        "{said}"
    );
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(20),
        "{took:?}"
    );
    assert_eq!(
        home.job_records(),
        3,
        "the queued record went with its ticket"
    );
    // A reserve above the job's own limit, or above the whole budget.
    let over_limit = create("big", &["--cpus", "1", "--reserve-cpus", "2"]);
    assert_eq!(over_limit.status.code(), Some(3), "{over_limit:?}");
    let said = String::from_utf8_lossy(&over_limit.stderr);
    assert!(
        said.contains("reserve.cpus") && said.contains("limit 1"),
        "{said}"
    );
    let over_budget = create("huge", &["--reserve-memory", "1g"]);
    assert_eq!(over_budget.status.code(), Some(4), "{over_budget:?}");
    assert!(
        String::from_utf8_lossy(&over_budget.stderr).contains("can never fit"),
        "{over_budget:?}"
    );

    // One exec slot: a second exec is refused with --no-wait, and otherwise waits its turn;
    // two waiting execs go in the order they came.
    set_budget(&home, "  max_running_execs: 1\n  max_wait: 1m\n");
    let order = home.dir.path().join("order");
    let busy = home
        .cmd(&["exec", "r0", "--", "sleep", "2"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let slots = home.root().join("execs-running");
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::read_dir(&slots).map_or(0, Iterator::count) == 0 {
        assert!(
            Instant::now() < deadline,
            "the first exec never took its slot"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let refused = home.run(&["exec", "r1", "--no-wait", "--", "true"]);
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("1 of 1 exec slots busy"), "{said}");
    let note = |who: &str| format!("echo {who} >> {}", order.display());
    let mut first = OnTerminal::start(&home, &["exec", "r1", "--", "sh", "-c", &note("r1")]);
    let line = first.wait_for("waiting for room");
    assert_eq!(
        line,
        "paddock: waiting for room: 1 of 1 exec slots busy; place 1 of 1; gives up after 1m; --no-wait fails at once"
    );
    let second = home
        .cmd(&["exec", "r2", "--", "sh", "-c", &note("r2")])
        .output();
    let (code, lines) = first.finish();
    assert_eq!(code, Some(0), "{lines:?}");
    assert!(second.unwrap().status.success());
    assert_eq!(std::fs::read_to_string(&order).unwrap(), "r1\nr2\n");
    assert!(busy.wait_with_output().unwrap().status.success());
    // A wait past `max_wait` gives up, and leaves no ticket behind.
    set_budget(&home, "  max_running_execs: 1\n  max_wait: 1s\n");
    let long = home
        .cmd(&["exec", "r0", "--", "sleep", "4"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let gave_up = home.run(&["exec", "r1", "--", "true"]);
    let said = String::from_utf8_lossy(&gave_up.stderr);
    assert!(
        said.contains("the exec of job `r1` gave up waiting for room after 1s (admission.max_wait): 1 of 1 exec slots busy"),
        "{said}"
    );
    let tickets = std::fs::read_dir(home.root().join("exec-queue"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .count();
    assert_eq!(tickets, 0);
    assert!(long.wait_with_output().unwrap().status.success());
}

/// A create that waits says so on its terminal: one line when it starts waiting, and a new
/// one only when its place (or the reason) changes, however often it looks meanwhile;
/// `ls` shows both waiters in order and the budget line says what holds it.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn a_waiting_create_says_so_on_its_terminal_once_and_as_its_place_changes() {
    let repo = FixtureRepo::new();
    let home = TestHome::new()
        .with_budget("  memory: 256m\n  cpus: 1000\n  max_running_execs: 8\n  max_wait: 2m\n");
    let path = repo.path().display().to_string();
    let create = |id: &str| -> Vec<String> {
        [
            "create",
            "--repo",
            &path,
            "--id",
            id,
            "--runtime",
            "process",
        ]
        .iter()
        .map(ToString::to_string)
        .collect()
    };
    home.ok(&strs(&create("holder")));
    let first_args = create("first");
    let mut first = OnTerminal::start(&home, &strs(&first_args));
    let waiting = "paddock: waiting for room: jobs reserve 256.0 MiB of 256.0 MiB memory";
    assert_eq!(
        first.wait_for("waiting for room"),
        format!("{waiting}; place 1 of 1; gives up after 2m; --no-wait fails at once")
    );
    let second_args = create("second");
    let mut second = OnTerminal::start(&home, &strs(&second_args));
    assert_eq!(
        second.wait_for("waiting for room"),
        format!("{waiting}; place 2 of 2; gives up after 2m; --no-wait fails at once")
    );
    // Both look four times a second: let them look a few times with nothing changing.
    std::thread::sleep(Duration::from_millis(1500));

    let ls = home.run(&["ls"]);
    let table = String::from_utf8_lossy(&ls.stdout);
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| {
            l.split("  ")
                .filter(|c| !c.is_empty())
                .map(str::trim)
                .collect()
        })
        .collect();
    let state = |id: &str| {
        rows.iter()
            .find(|r| r.first() == Some(&id))
            .map_or_else(|| panic!("{id} not in {table}"), |r| r[1].to_string())
    };
    assert_eq!(state("holder"), "ready");
    assert_eq!(state("first"), "queued #1");
    assert_eq!(state("second"), "queued #2");
    assert_eq!(
        String::from_utf8_lossy(&ls.stderr),
        "budget: 1 job reserves 0.1 of 1000 CPUs and 256.0 MiB of 256.0 MiB memory; 0 of 8 exec slots busy; waiting: 2 creates, 0 execs\n"
    );
    let listed = home.json(&["ls", "--json"]);
    let queued: Vec<(String, Value)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (text(j, "id"), j["queue_position"].clone()))
        .collect();
    assert!(queued.contains(&("first".into(), 1.into())), "{listed}");
    assert!(queued.contains(&("second".into(), 2.into())), "{listed}");
    let view = home.json(&["doctor", "--json"]);
    let admission = view
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "admission")
        .unwrap()
        .clone();
    assert_eq!(admission["status"], "warn", "{admission}");

    // The holder goes: the first is created, the second moves up (one new line).
    home.ok(&["rm", "holder"]);
    wait_for_state(&home, "first", "ready");
    assert_eq!(
        second.wait_for("place 1"),
        format!("{waiting}; place 1 of 1; gives up after 2m; --no-wait fails at once")
    );
    std::thread::sleep(Duration::from_millis(1000));
    home.ok(&["rm", "first"]);

    let root = home.root().display().to_string();
    for (who, terminal, lines) in [("first", first, 1), ("second", second, 2)] {
        let (code, shown) = terminal.finish();
        assert_eq!(code, Some(0), "{who}: {shown:?}");
        let (waits, rest): (Vec<&String>, Vec<&String>) = shown
            .iter()
            .partition(|l| l.starts_with("paddock: waiting"));
        assert_eq!(
            waits.len(),
            lines,
            "{who} said it waits once per place: {shown:?}"
        );
        assert_eq!(rest.len(), 1, "{who}: {shown:?}");
        assert!(
            rest[0].starts_with(&format!(
                "created job {who} on branch agent/agent/{who} at {root}"
            )),
            "{who}: {shown:?}"
        );
    }
}

/// `--json` (and a stderr that is no terminal) stays quiet until the answer.
#[test]
fn a_waiting_create_under_json_says_nothing_until_its_answer() {
    let repo = FixtureRepo::new();
    let home = TestHome::new().with_budget("  memory: 256m\n  max_wait: 2s\n");
    let path = repo.path().display().to_string();
    home.ok(&[
        "create",
        "--repo",
        &path,
        "--id",
        "holder",
        "--runtime",
        "process",
    ]);
    let quiet = OnTerminal::start(
        &home,
        &[
            "create",
            "--repo",
            &path,
            "--id",
            "quiet",
            "--runtime",
            "process",
            "--json",
        ],
    );
    let (code, shown) = quiet.finish();
    assert_eq!(code, Some(10), "{shown:?}");
    assert!(
        shown.iter().all(|l| !l.starts_with("paddock: waiting")),
        "{shown:?}"
    );
    assert!(
        shown.iter().any(|l| l.contains("gave up waiting")),
        "{shown:?}"
    );
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Replaces the user config's `admission:` section of `home` (each command reads it anew).
fn set_budget(home: &TestHome, section: &str) {
    std::fs::write(
        home.dir.path().join("config/paddock/config.yaml"),
        format!("admission:\n{section}"),
    )
    .expect("write the test's user config");
}

/// Through a daemon: a waiting exec's terminal line comes from `GET /v1/admission`, where
/// its place carries the tag the CLI sent (`X-Paddock-Waiter`).
#[test]
fn through_the_daemon_a_waiting_exec_says_so_and_the_api_shows_its_place() {
    use crate::api::{Daemon, api};
    let repo = FixtureRepo::new();
    let home = TestHome::new().with_budget("  max_running_execs: 1\n  max_wait: 1m\n");
    let daemon = Daemon::start(&home, &[]);
    let path = repo.path().display().to_string();
    for id in ["d0", "d1"] {
        home.ok(&[
            "create",
            "--repo",
            &path,
            "--id",
            id,
            "--runtime",
            "process",
        ]);
    }
    let busy = home
        .cmd(&["exec", "d0", "--", "sleep", "3"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, view) = api(&daemon.socket, "GET", "/v1/admission", None);
        assert_eq!(status, 200, "{view}");
        if view["held"]["execs"] == 1 {
            assert_eq!(view["running_execs"], serde_json::json!(["d0"]), "{view}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the first exec never ran: {view}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut waiting = OnTerminal::start(&home, &["exec", "d1", "--", "echo", "done"]);
    assert_eq!(
        waiting.wait_for("waiting for room"),
        "paddock: waiting for room: 1 of 1 exec slots busy; place 1 of 1; gives up after 1m; --no-wait fails at once"
    );
    let (_, view) = api(&daemon.socket, "GET", "/v1/admission", None);
    let waiter = &view["waiting"][0];
    assert_eq!(waiter["kind"], "exec", "{view}");
    assert_eq!(waiter["job"], "d1", "{view}");
    assert_eq!(waiter["place"], 1, "{view}");
    assert!(text(waiter, "tag").starts_with("w-"), "{view}");
    assert_eq!(view["budget"]["exec_slots"], 1, "{view}");
    let (code, shown) = waiting.finish();
    assert_eq!(code, Some(0), "{shown:?}");
    assert_eq!(shown.last().map(String::as_str), Some("done"), "{shown:?}");
    assert!(busy.wait_with_output().unwrap().status.success());
    daemon.stop();
}
