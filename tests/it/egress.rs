//! Egress allow-lists against the real daemon. Every destination is a listener this test
//! starts: an echo server on this machine's address on Docker's default bridge (what the
//! job's egress proxy reaches), never an outside address. Fails when Docker is absent unless
//! PADDOCK_SKIP_DOCKER_TESTS=1.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;

use crate::api::Daemon;
use crate::fixtures::{
    FixtureRepo, TestHome, bridge_gateway, container_of, container_with_role, docker_available,
    text,
};
use serde_json::Value;

/// An echo server on `address`; returns its port. It runs until the test process ends.
fn echo_server(address: &str) -> u16 {
    let listener = TcpListener::bind((address, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut buffer = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buffer) {
                    if n == 0 || stream.write_all(&buffer[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

/// Runs a bash script in the job; returns stdout (the script decides what it prints).
pub(crate) fn bash(home: &TestHome, id: &str, script: &str) -> String {
    let output = home.run(&[
        "exec",
        id,
        "--",
        "bash",
        "-c",
        &format!("{PRELUDE}{script}"),
    ]);
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// bash functions a script in an allowlist job uses: `connect HOST:PORT` (a CONNECT through
/// the job's proxy on fd 3, printing the status line), `line`, `take N`. Reads poll: under
/// gVisor (runsc --network=host) bash's /dev/tcp sockets are non-blocking, so a plain `read`
/// can fail with EAGAIN before the answer arrives.
pub(crate) const PRELUDE: &str = r#"h=${HTTPS_PROXY#http://}; proxy_host=${h%:*}; proxy_port=${h##*:}
line() { local out="" c tries=0
  while [ $tries -lt 100 ]; do
    if IFS= read -r -n1 -d "" c <&3; then [ "$c" = $'\n' ] && break; out+="$c"
    else tries=$((tries+1)); sleep 0.05; fi
  done; printf '%s\n' "${out%$'\r'}"; }
take() { local out="" c tries=0
  while [ ${#out} -lt $1 ] && [ $tries -lt 60 ]; do
    if IFS= read -r -n1 -d "" c <&3; then out+="$c"; else tries=$((tries+1)); sleep 0.05; fi
  done; printf '%s' "$out"; }
connect() { exec 3<>/dev/tcp/$proxy_host/$proxy_port || { echo no-proxy; exit 1; }
  printf 'CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n' "$1" "$1" >&3
  status=$(line); while [ -n "$(line)" ]; do :; done; echo "$status"; }
"#;

pub(crate) fn decisions(home: &TestHome, id: &str) -> Vec<Value> {
    let path = home.root().join("logs").join(id).join("egress.jsonl");
    std::fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn labelled(kind: &str, home: &TestHome) -> String {
    let home_id = std::fs::read_to_string(home.root().join("home-id")).unwrap();
    let filter = format!("label=dev.paddock.home={}", home_id.trim());
    let args: Vec<&str> = if kind == "network" {
        vec!["network", "ls", "-q", "--filter", &filter]
    } else {
        vec!["ps", "-aq", "--filter", &filter]
    };
    let out = Command::new("docker").args(&args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn an_allowlisted_job_reaches_only_what_is_listed_under_runc() {
    if docker_available("an_allowlisted_job_reaches_only_what_is_listed_under_runc") {
        allowlist_holds("docker");
    }
}

#[test]
fn an_allowlisted_job_reaches_only_what_is_listed_under_gvisor() {
    if docker_available("an_allowlisted_job_reaches_only_what_is_listed_under_gvisor") {
        allowlist_holds("runsc");
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn allowlist_holds(runtime: &str) {
    let gateway = bridge_gateway();
    let allowed = echo_server(&gateway);
    let other = echo_server(&gateway);
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    // Through a daemon, so refusals reach its event stream.
    let daemon = Daemon::start(&home, &[]);
    let denials = collect_denials(&daemon, 4);
    let allow = format!("{gateway}:{allowed}");
    let image = crate::fixtures::test_image();
    // A long task makes a long id (55 characters), so the sidecar's name is longer than a
    // DNS label: the job reaches its proxy all the same (by its short alias).
    let task = "an-allowlisted-job-whose-task-makes-an-id-of-fifty-five-characters";
    let job = home.create(
        &repo,
        &[
            "--runtime",
            runtime,
            "--image",
            &image,
            "--allow",
            &allow,
            "--task",
            task,
        ],
    );
    assert_eq!(job["runtime"], runtime, "{job}");
    let id = text(&job, "id");
    assert_eq!(id.len(), 55, "{id}");
    assert_eq!(job["limits"]["network"], "allowlist", "{job}");
    assert_eq!(job["limits"]["allow"][0], allow.as_str(), "{job}");
    let shown = home.json(&["show", &id, "--json"]);
    assert_eq!(
        shown["job"]["limits"]["allow"][0],
        allow.as_str(),
        "{shown}"
    );

    // Allowed: 200, and bytes both ways.
    let out = bash(
        &home,
        &id,
        &format!("connect {allow}; printf ping >&3; take 4; echo"),
    );
    assert_eq!(out, "HTTP/1.1 200 Connection established\nping", "{out}");

    // Another port of the allowed address, and a name not listed: 403.
    let out = bash(&home, &id, &format!("connect {gateway}:{other}"));
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    let out = bash(&home, &id, "connect unlisted.example:443");
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");

    // Domain fronting: a ClientHello for another name inside the allowed tunnel is cut
    // before anything reaches the server.
    let hello: String = paddock::egress::tls::client_hello("fronted.example")
        .iter()
        .map(|b| format!("\\x{b:02x}"))
        .collect();
    let out = bash(
        &home,
        &id,
        &format!("connect {allow}; printf '{hello}' >&3; back=$(take 1); echo \"back=${{#back}}\""),
    );
    assert_eq!(out, "HTTP/1.1 200 Connection established\nback=0", "{out}");

    // Past the proxy: a raw connect to the allowed address itself fails (no route out).
    let out = bash(
        &home,
        &id,
        &format!(
            "timeout 5 bash -c 'exec 3<>/dev/tcp/{gateway}/{allowed}' 2>/dev/null && echo open || echo blocked"
        ),
    );
    assert_eq!(out, "blocked", "{out}");

    // Names: the proxy's alias resolves (Docker's resolver knows the network's members);
    // no other name does, and the resolver has no upstream to carry a query out. The job
    // reaches its proxy by a fixed address in 198.18.0.0/15, with no lookup at all.
    let out = bash(
        &home,
        &id,
        "getent hosts paddock-egress >/dev/null && echo proxy; getent hosts unlisted.example || echo unresolved; case $proxy_host in 198.1[89].*) ;; *) echo not-fixed: $proxy_host;; esac",
    );
    assert_eq!(out, "proxy\nunresolved", "{out}");
    let dns = Command::new("docker")
        .args([
            "inspect",
            "--format",
            "{{json .HostConfig.Dns}}",
            &container_of(&job),
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&dns.stdout).trim(),
        r#"["127.0.0.1"]"#
    );

    // Every decision is in egress.jsonl.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let log = decisions(&home, &id);
    let says = |allowed: bool, words: &str| {
        log.iter()
            .any(|d| d["allowed"] == allowed && d["reason"].as_str().unwrap().contains(words))
    };
    assert!(
        log.iter()
            .any(|d| d["allowed"] == true && d["bytes_down"] == 4),
        "{log:?}"
    );
    assert!(
        says(false, &format!("port {other} is not allowed")),
        "{log:?}"
    );
    assert!(
        says(false, "unlisted.example is not in the allow-list"),
        "{log:?}"
    );
    assert!(says(false, "fronted.example"), "{log:?}");

    // Tightened on the running job: the next connection is refused; loosened again: let
    // through. No restart in between.
    let container = container_of(&job);
    let started_at = || {
        let out = Command::new("docker")
            .args(["inspect", "--format", "{{.State.StartedAt}}", &container])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let before = started_at();
    let tightened = home.json(&["net", &id, "--deny", &allow, "--json"]);
    assert_eq!(
        tightened["limits"]["allow"],
        serde_json::json!([]),
        "{tightened}"
    );
    let out = bash(&home, &id, &format!("connect {allow}"));
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    home.ok(&["net", &id, "--allow", &allow]);
    let out = bash(&home, &id, &format!("connect {allow}"));
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    home.ok(&["net", &id, "--network", "none"]);
    let out = bash(&home, &id, &format!("connect {allow}"));
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert_eq!(
        started_at(),
        before,
        "the job's container was not restarted"
    );

    // After the job and its proxy stopped (as a daemon restart leaves them), the next exec
    // brings both back: the proxy answers again (with a refusal: the list is empty).
    let sidecar = container_with_role(&home, &id, "egress");
    let stopped = Command::new("docker")
        .args(["stop", &sidecar])
        .output()
        .unwrap();
    assert!(stopped.status.success(), "{stopped:?}");
    home.ok(&["stop", &id]);
    let out = bash(&home, &id, &format!("connect {allow}"));
    assert!(out.starts_with("HTTP/1.1 403"), "the proxy is back: {out}");

    // The daemon relayed the refusals as `egress.denied` events.
    let events = denials.join().unwrap();
    assert!(events.len() >= 4, "{events:?}");
    assert!(
        events
            .iter()
            .all(|e| e["job"] == id.as_str() && e["detail"]["reason"].is_string()),
        "{events:?}"
    );

    // rm takes the sidecar and the network with the job.
    home.ok(&["rm", &id, "--force"]);
    assert_eq!(labelled("container", &home), "", "no container left");
    assert_eq!(labelled("network", &home), "", "no network left");
    daemon.stop();
}

/// Reads the daemon's event stream until `count` `egress.denied` events came (or a minute
/// passed); returns them.
pub(crate) fn collect_denials(
    daemon: &Daemon,
    count: usize,
) -> std::thread::JoinHandle<Vec<Value>> {
    use std::io::BufRead;
    let mut stream = std::os::unix::net::UnixStream::connect(&daemon.socket).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    stream
        .write_all(b"GET /v1/events HTTP/1.1\r\nHost: paddock\r\nAccept: text/event-stream\r\n\r\n")
        .unwrap();
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        for line in std::io::BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            if let Some(data) = line.strip_prefix("data: ") {
                let event: Value = serde_json::from_str(data).unwrap();
                if event["type"] == "egress.denied" {
                    seen.push(event);
                    if seen.len() == count {
                        break;
                    }
                }
            }
        }
        seen
    })
}

#[test]
fn allow_lists_are_refused_where_they_cannot_hold() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let path = repo.path().display().to_string();
    for (extra, code, says) in [
        (
            &["--runtime", "process", "--allow", "example.org"][..],
            4,
            "process runtime cannot enforce an allow-list",
        ),
        (
            &[
                "--runtime",
                "process",
                "--network",
                "open",
                "--allow",
                "example.org",
            ][..],
            4,
            "needs `--network allowlist`",
        ),
        (
            &["--allow", "bad host"][..],
            2,
            "invalid allow entry `bad host`",
        ),
    ] {
        let mut args = vec!["create", "--repo", path.as_str()];
        args.extend_from_slice(extra);
        let out = home.run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{extra:?}: {stderr}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
    }
    assert_eq!(home.job_records(), 0, "nothing was created");
}
