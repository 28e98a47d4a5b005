//! Resumable events and re-readable execs, through the real binary: an SSE client that
//! reconnects with `Last-Event-ID` gets exactly what it missed, a `since` older than the kept
//! window gets `reset`, ids keep increasing across daemon restarts and CLI runs without a
//! daemon, `paddock events --json --since N` prints the same with and without a daemon, and
//! an exec's output and result stay readable by its id after its client went away.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::api::{Daemon, api};
use crate::fixtures::{FixtureRepo, TestHome};
use serde_json::{Value, json};

/// Reads Server-Sent Events from `path` until `count` arrived or `wait` passed; returns each
/// event's data with its SSE `id:` (as `"sse_id"`).
fn sse(
    socket: &Path,
    path: &str,
    headers: &[(&str, &str)],
    count: usize,
    wait: Duration,
) -> Vec<Value> {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut request =
        format!("GET {path} HTTP/1.1\r\nHost: paddock\r\nAccept: text/event-stream\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let deadline = Instant::now() + wait;
    let mut events = Vec::new();
    let mut id = Value::Null;
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { break };
        if let Some(value) = line.strip_prefix("id: ") {
            id = json!(value.parse::<u64>().unwrap());
        }
        if let Some(data) = line.strip_prefix("data: ") {
            let mut event: Value = serde_json::from_str(data).unwrap();
            event["sse_id"] = std::mem::take(&mut id);
            events.push(event);
            if events.len() == count {
                break;
            }
        }
        if Instant::now() > deadline {
            break;
        }
    }
    events
}

fn dry_sweep(socket: &Path) {
    let (status, report) = api(socket, "POST", "/v1/sweep?dry_run=true", None);
    assert_eq!(status, 200, "{report}");
}

/// The events `paddock events --json` prints, as values.
fn cli_events(home: &TestHome, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["events", "--json"];
    args.extend_from_slice(extra);
    home.ok(&args)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Waits until the log holds `count` events (the daemon's start sweep runs after its socket
/// opens).
fn wait_for_events(home: &TestHome, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while cli_events(home, &[]).len() < count {
        assert!(Instant::now() < deadline, "fewer than {count} events");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn ids(events: &[Value]) -> Vec<u64> {
    events.iter().map(|e| e["id"].as_u64().unwrap()).collect()
}

#[test]
fn a_reconnecting_client_gets_exactly_what_it_missed_and_ids_survive_restarts() {
    let home = TestHome::new();
    let daemon = Daemon::start(&home, &[]);
    // The daemon's own first sweep (at start) must be over, or its event could land among
    // the 50 below on a loaded machine.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cli_events(&home, &[])
        .iter()
        .any(|e| e["type"] == "sweep.done")
    {
        assert!(
            Instant::now() < deadline,
            "the daemon's first sweep never ended"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Live: the next event, with its id as the SSE id.
    let socket = daemon.socket.clone();
    let live =
        std::thread::spawn(move || sse(&socket, "/v1/events", &[], 1, Duration::from_secs(30)));
    std::thread::sleep(Duration::from_millis(300));
    dry_sweep(&daemon.socket);
    let first = live.join().unwrap();
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0]["type"], "sweep.done");
    let seen = first[0]["id"].as_u64().unwrap();
    assert_eq!(first[0]["sse_id"], seen);

    // Disconnected while 50 events happen, then back with Last-Event-ID.
    for _ in 0..50 {
        dry_sweep(&daemon.socket);
    }
    let last = seen.to_string();
    let missed = sse(
        &daemon.socket,
        "/v1/events",
        &[("Last-Event-ID", &last)],
        51,
        Duration::from_secs(3),
    );
    assert_eq!(
        ids(&missed),
        (seen + 1..=seen + 50).collect::<Vec<_>>(),
        "exactly the 50 missed"
    );
    assert!(
        missed
            .iter()
            .all(|e| e["type"] == "sweep.done" && e["sse_id"] == e["id"])
    );
    // `since` does the same; filtering by a job that had none gives nothing.
    let since = sse(
        &daemon.socket,
        &format!("/v1/events?since={}&follow=false", seen + 45),
        &[],
        100,
        Duration::from_secs(10),
    );
    assert_eq!(ids(&since), (seen + 46..=seen + 50).collect::<Vec<_>>());
    let none = sse(
        &daemon.socket,
        "/v1/events?since=0&follow=false&job=ghost",
        &[],
        100,
        Duration::from_secs(10),
    );
    assert!(none.is_empty(), "{none:?}");

    // A restarted daemon and a CLI without one continue the ids in the same log.
    daemon.stop();
    home.ok(&["sweep", "--dry-run"]);
    let before_restart = cli_events(&home, &[]).len();
    let daemon = Daemon::start(&home, &[]);
    wait_for_events(&home, before_restart + 1);
    dry_sweep(&daemon.socket);
    let after = sse(
        &daemon.socket,
        &format!("/v1/events?since={}&follow=false", seen + 50),
        &[],
        100,
        Duration::from_secs(10),
    );
    let after_ids = ids(&after);
    assert_eq!(
        after_ids.len(),
        3,
        "the CLI's sweep, the daemon's start sweep, ours: {after:?}"
    );
    assert_eq!(
        after_ids,
        (seen + 51..seen + 51 + after_ids.len() as u64).collect::<Vec<_>>()
    );
    daemon.stop();
}

#[test]
fn a_since_older_than_the_kept_window_gets_reset_first() {
    let home = TestHome::new();
    // Three events from eight days ago: outside the seven-day window.
    let dir = home.root().join("events");
    std::fs::create_dir_all(&dir).unwrap();
    let old = (chrono::Utc::now() - chrono::Duration::days(8)).to_rfc3339();
    let lines: String = (1..=3)
        .map(|id| {
            format!(
                "{}\n",
                json!({"schema": 1, "event": {"id": id, "type": "sweep.done", "job": null, "state": null, "at": old, "detail": {}}})
            )
        })
        .collect();
    std::fs::write(dir.join(format!("{:020}.jsonl", 1)), lines).unwrap();
    home.ok(&["sweep", "--dry-run"]);
    let events = cli_events(&home, &["--since", "1"]);
    assert_eq!(events[0]["type"], "reset", "{events:?}");
    assert_eq!(events[0]["detail"]["oldest"], 4);
    assert_eq!(ids(&events[1..]), vec![4]);

    let daemon = Daemon::start(&home, &[]);
    wait_for_events(&home, 2);
    let replay = sse(
        &daemon.socket,
        "/v1/events?since=2&follow=false",
        &[],
        100,
        Duration::from_secs(10),
    );
    assert_eq!(replay[0]["type"], "reset", "{replay:?}");
    assert_eq!(replay[0]["detail"]["oldest"], 4);
    assert_eq!(
        ids(&replay[1..]),
        vec![4, 5],
        "ours and the daemon's start sweep"
    );
    // Up to date: no reset.
    let current = sse(
        &daemon.socket,
        "/v1/events?since=3&follow=false",
        &[],
        100,
        Duration::from_secs(10),
    );
    assert_eq!(ids(&current), vec![4, 5]);
    daemon.stop();
}

#[test]
fn events_since_prints_the_same_with_and_without_a_daemon() {
    let repo = FixtureRepo::new();
    let home = TestHome::new().env("PADDOCK_RUNTIME", "process");
    let job = home.create(&repo, &["--task", "events"]);
    let id = job["id"].as_str().unwrap().to_string();
    home.sh(&id, "echo hi");
    home.ok(&["sweep", "--dry-run"]);
    let all = cli_events(&home, &[]);
    let kinds: Vec<&str> = all.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["job.created", "job.state", "exec.finished", "sweep.done"]
    );
    assert_eq!(ids(&all), vec![1, 2, 3, 4]);
    let after = cli_events(&home, &["--since", "2"]);
    assert_eq!(ids(&after), vec![3, 4]);
    assert_eq!(after[0]["job"], id.as_str());
    let of_job = cli_events(&home, &["--job", &id]);
    assert_eq!(ids(&of_job), vec![1, 2, 3]);
    let table = home.ok(&["events", "--since", "2"]);
    assert!(table.starts_with("ID"), "{table}");
    assert!(
        table.contains("exec.finished") && table.contains("exit_code=0"),
        "{table}"
    );

    let daemon = Daemon::start(&home, &[]);
    wait_for_events(&home, 5);
    let through = cli_events(&home, &["--since", "2"]);
    assert_eq!(
        through[..2],
        after[..],
        "the same events through the daemon"
    );
    assert_eq!(ids(&through), vec![3, 4, 5], "and the daemon's start sweep");

    // Following prints new events as they come, through the daemon and without it.
    for no_daemon in ["0", "1"] {
        let mut follow = home
            .cmd(&["events", "--json", "--follow"])
            .env("PADDOCK_NO_DAEMON", no_daemon)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = follow.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        // New events until the follower (which starts at "now" once it runs) prints one.
        let deadline = Instant::now() + Duration::from_secs(30);
        let line = loop {
            dry_sweep(&daemon.socket);
            if let Ok(line) = rx.recv_timeout(Duration::from_millis(500)) {
                break line;
            }
            assert!(
                Instant::now() < deadline,
                "`events --follow` printed nothing"
            );
        };
        let _ = follow.kill();
        let _ = follow.wait();
        let event: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(event["type"], "sweep.done", "{line}");
    }
    daemon.stop();
}

/// A raw GET; returns the status, the head and the (de-chunked) body.
fn get(socket: &Path, path: &str) -> (u16, String, String) {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: paddock\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let response = String::from_utf8(response).unwrap();
    let (head, rest) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut text = rest;
        while let Some((size, tail)) = text.split_once("\r\n") {
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            if size == 0 {
                break;
            }
            out.push_str(&tail[..size]);
            text = &tail[size + 2..];
        }
        out
    } else {
        rest.to_string()
    };
    (status, head.to_string(), body)
}

/// The stdout and stderr in an output log.
fn streams(ndjson: &str) -> (String, String) {
    let (mut out, mut err) = (String::new(), String::new());
    for line in ndjson.lines() {
        let value: Value = serde_json::from_str(line).unwrap();
        match value["stream"].as_str() {
            Some("stdout") => out.push_str(value["data"].as_str().unwrap()),
            Some("stderr") => err.push_str(value["data"].as_str().unwrap()),
            _ => panic!("unexpected line {line}"),
        }
    }
    (out, err)
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn an_exec_whose_client_dropped_runs_on_and_its_output_and_result_stay_readable() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let daemon = Daemon::start(&home, &[]);
    let (status, job) = api(
        &daemon.socket,
        "POST",
        "/v1/jobs",
        Some(&json!({"repo": repo.path().display().to_string(), "task": "dropped"})),
    );
    assert_eq!(status, 201, "{job}");
    let id = job["id"].as_str().unwrap().to_string();

    // Stream an exec, read up to its id, hang up while it sleeps.
    let script = "echo start; sleep 2; i=0; while [ $i -lt 300 ]; do i=$((i+1)); echo line $i; done; echo oops >&2; exit 7";
    let body = json!({"cmd": ["sh", "-c", script], "timeout": "1m"}).to_string();
    let mut stream = UnixStream::connect(&daemon.socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "POST /v1/jobs/{id}/exec HTTP/1.1\r\nHost: paddock\r\nAccept: application/x-ndjson\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut seen = String::new();
    let mut buffer = [0u8; 4096];
    while !seen.contains("\"start\\n\"") {
        let n = stream.read(&mut buffer).unwrap();
        assert!(n > 0, "the stream ended early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buffer[..n]));
    }
    drop(stream);
    let header = seen
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("x-paddock-exec: ")
                .map(str::to_string)
        })
        .unwrap_or_else(|| panic!("no X-Paddock-Exec header: {seen}"));
    let exec = header.trim().to_string();
    assert!(exec.starts_with("x-"), "{exec}");
    assert!(
        seen.contains(&format!("{{\"exec\":\"{exec}\"}}")),
        "the first line names the exec: {seen}"
    );

    // Following its output from where we were gets the rest, until it ends.
    let (status, _, before) = get(
        &daemon.socket,
        &format!("/v1/jobs/{id}/execs/{exec}/output"),
    );
    assert_eq!(status, 200);
    let (status, _, followed) = get(
        &daemon.socket,
        &format!(
            "/v1/jobs/{id}/execs/{exec}/output?offset={}&follow=true",
            before.len()
        ),
    );
    assert_eq!(status, 200);
    let (status, info) = api(
        &daemon.socket,
        "GET",
        &format!("/v1/jobs/{id}/execs/{exec}"),
        None,
    );
    assert_eq!(status, 200, "{info}");
    assert_eq!(
        info["state"], "finished",
        "the follow ended with the exec: {info}"
    );
    assert_eq!(info["result"]["exit_code"], 7, "{info}");
    assert_eq!(info["result"]["exec_id"], exec.as_str());

    // Whole, and from an offset.
    let (_, _, whole) = get(
        &daemon.socket,
        &format!("/v1/jobs/{id}/execs/{exec}/output"),
    );
    assert_eq!(format!("{before}{followed}"), whole);
    let (out, err) = streams(&whole);
    let expected: String = std::iter::once("start\n".to_string())
        .chain((1..=300).map(|i| format!("line {i}\n")))
        .collect();
    assert_eq!(out, expected);
    assert_eq!(err, "oops\n");
    let cut = whole
        .find("line 100")
        .map(|at| whole[..at].rfind('\n').unwrap() + 1)
        .unwrap();
    let (_, _, tail) = get(
        &daemon.socket,
        &format!("/v1/jobs/{id}/execs/{exec}/output?offset={cut}"),
    );
    assert_eq!(tail, whole[cut..]);

    // Listed, and readable from the CLI (through the daemon and without it).
    let (status, list) = api(&daemon.socket, "GET", &format!("/v1/jobs/{id}/execs"), None);
    assert_eq!(status, 200);
    assert_eq!(list[0]["id"], exec.as_str(), "{list}");
    for no_daemon in ["0", "1"] {
        let output = home
            .cmd(&["execs", &id, &exec])
            .env("PADDOCK_NO_DAEMON", no_daemon)
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&output.stdout), expected);
        assert_eq!(String::from_utf8_lossy(&output.stderr), "oops\n");
    }
    let listed = home.ok(&["execs", &id]);
    assert!(
        listed.contains(&exec) && listed.contains("finished"),
        "{listed}"
    );
    let (status, error) = api(
        &daemon.socket,
        "GET",
        &format!("/v1/jobs/{id}/execs/x-0000"),
        None,
    );
    assert_eq!(status, 404, "{error}");
    let (status, _) = api(
        &daemon.socket,
        "GET",
        &format!("/v1/jobs/{id}/execs/..%2F..%2Fx"),
        None,
    );
    assert_eq!(status, 404);

    // A plain (non-streaming) exec answers with its id too.
    let mut stream = UnixStream::connect(&daemon.socket).unwrap();
    let body = json!({"cmd": ["true"]}).to_string();
    write!(
        stream,
        "POST /v1/jobs/{id}/exec HTTP/1.1\r\nHost: paddock\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(
        response.to_ascii_lowercase().contains("x-paddock-exec: x-"),
        "{response}"
    );
    daemon.stop();
}
