//! Reads of what a job wrote are bounded (Docker, runc): a job whose background loop keeps
//! every sync file in its outbox at a sparse terabyte gets its exec answered within the
//! exec's timeout and grace, with the sync refused by name and cap, and the daemon keeps
//! answering about another job meanwhile.

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::api::{Daemon, http};
use crate::fixtures::{FixtureRepo, TestHome, docker_available, text};

/// Keeps every sync stream and stderr file in the outbox at 1 TiB (sparse: no disk used).
const TRUNCATE_LOOP: &str = "while :; do for f in /paddock/outbox/*.err /paddock/outbox/*.stream; \
     do [ -e \"$f\" ] && truncate -s 1T \"$f\" 2>/dev/null; done; done";

/// The profile's default grace (see docs/configuration.md): the exec's deadline is its
/// timeout plus this.
const GRACE: Duration = Duration::from_secs(5);
const TIMEOUT: Duration = Duration::from_secs(5);
/// Room above timeout + grace for what is not the command: creating and inspecting the
/// Docker exec, the record writes, and a loaded 2-core host (the job's loop takes half a
/// core). The fix answers in about the command's own time; the old code took minutes.
const MARGIN: Duration = Duration::from_secs(5);

/// One API request with a read deadline, so a daemon that stopped answering fails the test
/// instead of hanging it.
fn request(
    socket: &std::path::Path,
    method: &str,
    path: &str,
    body: Option<&Value>,
    wait: Duration,
) -> (u16, Value) {
    let mut stream = UnixStream::connect(socket).expect("connect to the daemon");
    stream.set_read_timeout(Some(wait)).expect("read timeout");
    http(&mut stream, method, path, body, &[])
}

/// A sync error that names an outbox file refused at its cap (or cut off by the deadline).
fn refused_by_cap(error: &str) -> bool {
    error.contains("/outbox/")
        && (error.contains("over its cap of") || error.contains("grew past its cap of"))
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn a_sparse_terabyte_in_the_outbox_neither_stalls_the_exec_nor_the_daemon() {
    if !docker_available("a_sparse_terabyte_in_the_outbox_neither_stalls_the_exec_nor_the_daemon") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let victim = text(
        &home.create_docker(&repo, &["--task", "sparse", "--cpus", "0.5"]),
        "id",
    );
    let other = text(&home.create_docker(&repo, &["--task", "other"]), "id");
    home.ok(&[
        "exec",
        &victim,
        "--",
        "sh",
        "-c",
        &format!("setsid nohup sh -c '{TRUNCATE_LOOP}' >/dev/null 2>&1 </dev/null &"),
    ]);

    let daemon = Daemon::start_with_runtime(&home, &[], "docker");
    let socket = daemon.socket.clone();
    let bound = TIMEOUT + GRACE + MARGIN;
    let mut errors = Vec::new();
    for round in 0..2 {
        // A commit moves the branch, so the exec's sync runs and writes its stream.
        let body = json!({
            "cmd": ["sh", "-c", format!("sleep 2; git commit -q --allow-empty -m round{round}")],
            "timeout": "5s",
        });
        let exec_socket = socket.clone();
        let exec_path = format!("/v1/jobs/{victim}/exec");
        let exec = std::thread::spawn(move || {
            let started = Instant::now();
            let answer = request(&exec_socket, "POST", &exec_path, Some(&body), bound * 3);
            (answer, started.elapsed())
        });
        // Another job's details, again and again while the exec runs.
        let mut latencies = Vec::new();
        while !exec.is_finished() {
            let started = Instant::now();
            let (status, details) = request(
                &socket,
                "GET",
                &format!("/v1/jobs/{other}"),
                None,
                Duration::from_secs(10),
            );
            latencies.push(started.elapsed());
            assert_eq!(status, 200, "{details}");
        }
        let slowest = latencies.iter().max().copied().unwrap_or_default();
        eprintln!(
            "round {round}: {} requests for the other job during the exec, slowest {slowest:?}",
            latencies.len()
        );
        let ((status, result), took) = exec.join().expect("the exec request answers");
        eprintln!(
            "round {round}: exec answered in {took:?}; GET /v1/jobs/{other} took {latencies:?}"
        );
        assert_eq!(status, 200, "{result}");
        assert!(
            took < bound,
            "the exec answered after {took:?}, past its timeout and grace ({bound:?} with margin): {result}"
        );
        assert!(
            latencies.len() >= 2,
            "the other job was asked about during the exec: {latencies:?}"
        );
        assert!(
            slowest < Duration::from_secs(1),
            "GET /v1/jobs/{other} took {slowest:?} during the exec: {latencies:?}"
        );
        errors.push(
            result["sync_error"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    // The loop must have caught the stream at least once (it runs while the sync does).
    assert!(
        errors.iter().any(|e| refused_by_cap(e)),
        "a sync refused by its cap: {errors:?}"
    );
    eprintln!("sync errors: {errors:?}");
    // The refusal was recorded: the audit log says the sync failed, and `job.sync_failed`
    // was emitted. (A later full sync, as `GET /v1/jobs/{id}` runs, reads no outbox.)
    let audit = std::fs::read_to_string(home.root().join("logs").join(&victim).join("exec.jsonl"))
        .expect("an audit log");
    assert!(audit.contains(r#""sync":"failed""#), "{audit}");
    let events: String = std::fs::read_dir(home.root().join("events"))
        .expect("an event log")
        .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path()).ok())
        .collect();
    assert!(
        events.lines().any(|line| line.contains("job.sync_failed")
            && line.contains(&victim)
            && line.contains("over its cap of")),
        "a job.sync_failed event naming the cap"
    );
    daemon.stop();

    // The CLI without a daemon: the same bound. The job's last sync failed, so each of
    // these runs in full, and the loop catches its stream (on a loaded host it may miss
    // one: a few tries, each within the bound).
    let mut results = Vec::new();
    for _ in 0..5 {
        let (result, took) = cli_exec(&home, &victim, "git commit -q --allow-empty -m cli", bound);
        assert!(took < bound, "paddock exec took {took:?}: {result}");
        assert_eq!(result["exit_code"], 0, "{result}");
        let caught = refused_by_cap(result["sync_error"].as_str().unwrap_or_default());
        results.push(result);
        if caught {
            break;
        }
    }
    assert!(
        results
            .iter()
            .any(|r| refused_by_cap(r["sync_error"].as_str().unwrap_or_default())),
        "a CLI sync error names the cap: {results:?}"
    );

    // A command killed at its timeout leaves no report: the exec syncs on its own, by the
    // same deadline (its stream comes over the Docker exec, where the loop cannot reach).
    let (result, took) = cli_exec(&home, &victim, "sleep 60", bound);
    assert!(took < bound, "paddock exec took {took:?}: {result}");
    assert_eq!(result["timed_out"], true, "{result}");
}

/// `paddock exec JOB --timeout 5s --json -- sh -c SCRIPT` with no daemon running, killed
/// (failing the test) when it runs three times past `bound`; its result and how long it
/// took.
fn cli_exec(home: &TestHome, job: &str, script: &str, bound: Duration) -> (Value, Duration) {
    let started = Instant::now();
    let mut child = home
        .cmd(&[
            "exec",
            job,
            "--timeout",
            "5s",
            "--json",
            "--",
            "sh",
            "-c",
            script,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("paddock exec runs");
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > bound * 3 {
            let _ = child.kill();
            panic!(
                "paddock exec --timeout 5s still ran after {:?}",
                started.elapsed()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = started.elapsed();
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .expect("read stdout");
    let result: Value = serde_json::from_str(&stdout).expect("a JSON result");
    eprintln!("cli `{script}`: answered in {took:?}: {result}");
    (result, took)
}
