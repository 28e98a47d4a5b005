//! `paddock serve`'s HTTP API, driven over its real Unix socket (and TCP for the token
//! checks): concurrent creates with events, auth, restart without losing jobs, and the
//! example Python orchestrator.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::fixtures::{FixtureRepo, TestHome, docker_available};
use serde_json::{Value, json};

pub(crate) struct Daemon {
    child: Child,
    pub(crate) socket: PathBuf,
    /// The daemon's stderr (its warnings), for a test's failure message.
    pub(crate) log: PathBuf,
}

impl Daemon {
    pub(crate) fn start(home: &TestHome, extra: &[&str]) -> Daemon {
        Self::start_with_runtime(home, extra, "process")
    }

    /// A daemon whose own PADDOCK_RUNTIME is `runtime`.
    pub(crate) fn start_with_runtime(home: &TestHome, extra: &[&str], runtime: &str) -> Daemon {
        let mut args = vec!["serve"];
        // A test's own interval replaces the default hour.
        if !extra.contains(&"--sweep-interval") {
            args.extend(["--sweep-interval", "1h"]);
        }
        args.extend_from_slice(extra);
        // Beside the state root, not in it: tests look at what the root holds.
        let log = home.dir.path().join("serve.log");
        let child = home
            .cmd(&args)
            .env("PADDOCK_RUNTIME", runtime)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let socket = home.root().join("paddock.sock");
        let deadline = Instant::now() + Duration::from_secs(10);
        while UnixStream::connect(&socket).is_err() {
            assert!(Instant::now() < deadline, "serve did not open its socket");
            std::thread::sleep(Duration::from_millis(50));
        }
        Daemon { child, socket, log }
    }

    /// A daemon (whose own PADDOCK_RUNTIME is `runtime`) also listening on a free loopback
    /// TCP port with `token`: it, the address and the token file.
    pub(crate) fn start_on_tcp(
        home: &TestHome,
        token: &str,
        extra: &[&str],
        runtime: &str,
    ) -> (Daemon, String, PathBuf) {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let token_file = home.dir.path().join("token");
        std::fs::write(&token_file, format!("{token}\n")).unwrap();
        let mut args = vec![
            "--listen",
            &addr,
            "--token-file",
            token_file.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let daemon = Daemon::start_with_runtime(home, &args, runtime);
        (daemon, addr, token_file)
    }

    /// The daemon's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "serve exits 0 on SIGTERM: {status:?}");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request over a stream; returns the status and the parsed JSON body.
pub(crate) fn http(
    stream: &mut (impl Read + Write),
    method: &str,
    path: &str,
    body: Option<&Value>,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let body = body
        .map(std::string::ToString::to_string)
        .unwrap_or_default();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: paddock\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, rest) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status: u16 = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let text = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

pub(crate) fn dechunk(mut text: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = text.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        text = &rest[size + 2..];
    }
    out
}

pub(crate) fn api(socket: &Path, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut stream = UnixStream::connect(socket).unwrap();
    http(&mut stream, method, path, body, &[])
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn twenty_concurrent_jobs_with_execs_and_events_then_all_deleted() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let daemon = Daemon::start(&home, &[]);
    let socket = daemon.socket.clone();

    // Subscribe to events before anything happens.
    let events_socket = socket.clone();
    let events = std::thread::spawn(move || {
        let mut stream = UnixStream::connect(&events_socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        stream
            .write_all(
                b"GET /v1/events HTTP/1.1\r\nHost: paddock\r\nAccept: text/event-stream\r\n\r\n",
            )
            .unwrap();
        let mut seen = Vec::new();
        let mut removed = 0;
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if let Some(data) = line.strip_prefix("data: ") {
                let event: Value = serde_json::from_str(data).unwrap();
                if event["type"] == "job.removed" {
                    removed += 1;
                }
                seen.push(event);
                if removed == 20 {
                    break;
                }
            }
        }
        seen
    });
    std::thread::sleep(Duration::from_millis(300));

    let path = repo.path().display().to_string();
    let workers: Vec<_> = (0..20)
        .map(|i| {
            let socket = socket.clone();
            let path = path.clone();
            std::thread::spawn(move || {
                let (status, job) = api(
                    &socket,
                    "POST",
                    "/v1/jobs",
                    Some(&json!({"repo": path, "task": format!("api-{i}")})),
                );
                assert_eq!(status, 201, "{job}");
                let id = job["id"].as_str().unwrap().to_string();
                let (status, result) = api(
                    &socket,
                    "POST",
                    &format!("/v1/jobs/{id}/exec"),
                    Some(&json!({"cmd": ["sh", "-c", format!("echo job {i}")], "timeout": "1m"})),
                );
                assert_eq!(status, 200, "{result}");
                assert_eq!(result["stdout"], format!("job {i}\n"));
                id
            })
        })
        .collect();
    let ids: Vec<String> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let (status, listed) = api(&socket, "GET", "/v1/jobs", None);
    assert_eq!(status, 200);
    assert_eq!(listed.as_array().unwrap().len(), 20);
    for id in &ids {
        let (status, report) = api(
            &socket,
            "DELETE",
            &format!("/v1/jobs/{id}?delete_branch=true"),
            None,
        );
        assert_eq!(status, 200, "{report}");
    }
    let seen = events.join().unwrap();
    for kind in ["job.created", "exec.finished", "job.removed"] {
        let jobs: std::collections::BTreeSet<&str> = seen
            .iter()
            .filter(|e| e["type"] == kind)
            .filter_map(|e| e["job"].as_str())
            .collect();
        assert_eq!(jobs.len(), 20, "{kind} events for every job");
    }
    assert_eq!(home.job_records(), 0);
    assert_eq!(repo.branches(), vec!["main".to_string()]);

    // Errors are JSON with fitting statuses; metrics are Prometheus text.
    let (status, error) = api(&socket, "GET", "/v1/jobs/ghost", None);
    assert_eq!(status, 404);
    assert_eq!(error["error"]["code"], "not_found");
    let (status, error) = api(
        &socket,
        "POST",
        "/v1/jobs",
        Some(&json!({"repo": "/no/such/repo"})),
    );
    assert_eq!(status, 400, "{error}");
    let (status, error) = api(
        &socket,
        "POST",
        "/v1/jobs",
        Some(&json!({"repo": "/no/such/repo", "labels": {"bad key": "x"}})),
    );
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["code"], "invalid_input", "{error}");
    let mut stream = UnixStream::connect(&socket).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    assert!(text.contains("paddock_create_seconds_count 20"), "{text}");
    assert!(text.contains("paddock_jobs{state=\"ready\"} 0"), "{text}");
    daemon.stop();
}

#[test]
fn tcp_needs_a_token_and_rejects_a_wrong_one() {
    let home = TestHome::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let output = home.run(&["serve", "--listen", &addr]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--token-file"));

    let token_file = home.dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token-0123456789\n").unwrap();
    let daemon = Daemon::start(
        &home,
        &[
            "--listen",
            &addr,
            "--token-file",
            token_file.to_str().unwrap(),
        ],
    );
    let request = |auth: Option<&str>| {
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        let header = auth.map(|a| format!("Bearer {a}"));
        let headers: Vec<(&str, &str)> = header
            .iter()
            .map(|h| ("Authorization", h.as_str()))
            .collect();
        http(&mut stream, "GET", "/v1/jobs", None, &headers).0
    };
    assert_eq!(request(None), 401);
    assert_eq!(request(Some("wrong-token-0123456789")), 401);
    assert_eq!(request(Some("s3cret-token-0123456789")), 200);
    // The Unix socket (mode 0600) needs no token.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&daemon.socket)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(api(&daemon.socket, "GET", "/v1/jobs", None).0, 200);
    daemon.stop();
}

#[test]
fn a_restarted_daemon_loses_no_job_and_cli_and_api_agree() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let path = repo.path().display().to_string();
    let daemon = Daemon::start(&home, &[]);
    let mut ids = Vec::new();
    for i in 0..3 {
        let (status, job) = api(
            &daemon.socket,
            "POST",
            "/v1/jobs",
            Some(&json!({"repo": path, "task": format!("keep-{i}")})),
        );
        assert_eq!(status, 201, "{job}");
        ids.push(job["id"].as_str().unwrap().to_string());
    }
    daemon.stop();
    // One more job made by the CLI while no daemon runs.
    let cli_job = home.create(&repo, &["--task", "cli", "--runtime", "process"]);
    ids.push(cli_job["id"].as_str().unwrap().to_string());

    let daemon = Daemon::start(&home, &[]);
    let (status, listed) = api(&daemon.socket, "GET", "/v1/jobs", None);
    assert_eq!(status, 200);
    let mut from_api: Vec<String> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect();
    let mut from_cli: Vec<String> = home
        .json(&["ls", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect();
    from_api.sort();
    from_cli.sort();
    ids.sort();
    assert_eq!(from_api, ids);
    assert_eq!(from_cli, ids);
    daemon.stop();
}

/// Runs examples/orchestrator.py against a daemon and checks every feature's branch.
fn run_orchestrator(jobs: usize, extra: &[&str], runtime: &str) {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let daemon = Daemon::start_with_runtime(&home, &[], runtime);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/orchestrator.py");
    let jobs_arg = jobs.to_string();
    let output = Command::new("python3")
        .args([
            script,
            "--repo",
            repo.path().to_str().unwrap(),
            "--socket",
            daemon.socket.to_str().unwrap(),
            "--jobs",
            &jobs_arg,
        ])
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let results: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), jobs);
    for (n, result) in results.iter().enumerate() {
        let branch = format!("agent/orchestrator/feature-{}", n + 1);
        assert_eq!(result["branch"], branch.as_str());
        assert_eq!(result["exit_code"], 0, "{result}");
        assert_eq!(result["commits_ahead"], 1, "{result}");
        assert_eq!(
            repo.git(&["log", "-1", "--format=%s", &branch]),
            format!("feature {}", n + 1)
        );
    }
    assert_eq!(home.job_records(), 0, "the orchestrator cleaned up");
    daemon.stop();
}

#[test]
fn the_python_orchestrator_dispatches_five_features() {
    run_orchestrator(5, &[], "process");
}

#[test]
fn the_python_orchestrator_runs_twelve_parallel_docker_jobs() {
    if !docker_available("the_python_orchestrator_runs_twelve_parallel_docker_jobs") {
        return;
    }
    let image = crate::fixtures::test_image();
    run_orchestrator(12, &["--runtime", "docker", "--image", &image], "docker");
}

#[test]
fn the_cli_goes_through_a_running_daemon_and_gets_the_same_results() {
    let repo = FixtureRepo::new();
    // The daemon's own PADDOCK_RUNTIME says docker; the CLI's (process) reaches it as a
    // create field and wins, as it would without a daemon.
    let home = TestHome::new().env("PADDOCK_RUNTIME", "process");
    let daemon = Daemon::start_with_runtime(&home, &[], "docker");
    let events_socket = daemon.socket.clone();
    let events = std::thread::spawn(move || {
        let mut stream = UnixStream::connect(&events_socket).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream
            .write_all(b"GET /v1/events HTTP/1.1\r\nHost: paddock\r\n\r\n")
            .unwrap();
        let mut kinds = Vec::new();
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if let Some(data) = line.strip_prefix("data: ") {
                let event: Value = serde_json::from_str(data).unwrap();
                // The daemon's own first sweep may finish after the stream opens.
                if event["type"] == "sweep.done" {
                    continue;
                }
                kinds.push(event["type"].as_str().unwrap().to_string());
                if event["type"] == "job.removed" {
                    break;
                }
            }
        }
        kinds
    });
    std::thread::sleep(Duration::from_millis(300));
    let job = home.create(&repo, &["--task", "via-daemon"]);
    assert_eq!(job["runtime"], "process");
    let id = job["id"].as_str().unwrap().to_string();
    let output = home.run(&["exec", &id, "--", "sh", "-c", "echo streamed; exit 3"]);
    assert_eq!(output.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "streamed\n");
    let missing = home.run(&["show", "ghost"]);
    assert_eq!(
        missing.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    let listed = home.json(&["ls", "--json"]);
    assert_eq!(listed[0]["id"], id.as_str());
    home.ok(&["rm", &id]);
    let kinds = events.join().unwrap();
    assert_eq!(
        kinds,
        ["job.created", "job.state", "exec.finished", "job.removed"],
        "the daemon saw the CLI's work"
    );
    daemon.stop();
}
