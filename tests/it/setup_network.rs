//! `setup_network` / `setup_allow`: setup commands reach what the job itself may not, and
//! the agent afterwards does not. The destination is a listener this test starts on this
//! machine's address on Docker's default bridge. Fails when Docker is absent unless
//! PADDOCK_SKIP_DOCKER_TESTS=1.

use std::io::Write;
use std::net::TcpListener;

use crate::fixtures::{FixtureRepo, TestHome, bridge_gateway, docker_available, text};

/// A server on `address` that greets every connection with one line; returns its port.
pub(crate) fn greeter(address: &str) -> u16 {
    let listener = TcpListener::bind((address, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let _ = stream.write_all(b"hello from the test\n");
        }
    });
    port
}

/// A repository with `.paddock.yaml` = `config` and a committed `fetch.sh` = `script`.
fn repo_with(config: &str, script: &str) -> FixtureRepo {
    let repo = FixtureRepo::new();
    repo.write(".paddock.yaml", config);
    repo.write("fetch.sh", script);
    repo.commit_all("paddock config");
    repo
}

/// Bash in the job: reads one line from `target` directly, or through the job's proxy with
/// CONNECT when `proxied`; prints what it got, or `unreachable`.
fn reach(target: &str, proxied: bool) -> String {
    let (host, port) = target.split_once(':').unwrap();
    if proxied {
        format!(
            r#"h=${{HTTPS_PROXY#http://}}; exec 3<>/dev/tcp/${{h%:*}}/${{h##*:}} || {{ echo unreachable; exit 0; }}; printf 'CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n' >&3; read -r -t 5 status <&3; case "$status" in *" 200"*) while read -r -t 5 l <&3 && [ "$l" != $'\r' ]; do :; done; read -r -t 5 line <&3; echo "$line";; *) echo unreachable;; esac"#
        )
    } else {
        format!(
            "timeout 5 bash -c 'exec 3<>/dev/tcp/{host}/{port} && read -r -t 5 line <&3 && echo \"$line\"' || echo unreachable"
        )
    }
}

#[test]
fn setup_with_an_open_network_fetches_and_the_agent_then_runs_offline() {
    if !docker_available("setup_with_an_open_network_fetches_and_the_agent_then_runs_offline") {
        return;
    }
    let gateway = bridge_gateway();
    let target = format!("{gateway}:{}", greeter(&gateway));
    let repo = repo_with(
        "setup_network: open\nsetup: [\"bash fetch.sh > fetched.txt\"]\n",
        &reach(&target, false),
    );
    let home = TestHome::new().trusting(repo.path());
    let job = home.create_docker(&repo, &[]);
    let id = text(&job, "id");
    assert_eq!(job["limits"]["network"], "none", "{job}");
    assert_eq!(job["setup"][0]["ok"], true, "{job}");
    // What setup fetched stays in the workspace...
    assert_eq!(home.sh(&id, "cat fetched.txt"), "hello from the test\n");
    // ...and the agent, on the job's own network (none), reaches nothing.
    assert_eq!(home.sh(&id, "bash fetch.sh"), "unreachable\n");
    // No setup container stays behind.
    let name = job["container_name"].as_str().unwrap();
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("name={name}-setup-")])
        .output()
        .unwrap();
    assert!(out.stdout.is_empty(), "a setup container stayed");
}

#[test]
fn setup_allow_widens_an_allowlist_job_only_during_setup() {
    if !docker_available("setup_allow_widens_an_allowlist_job_only_during_setup") {
        return;
    }
    let gateway = bridge_gateway();
    let target = format!("{gateway}:{}", greeter(&gateway));
    let repo = repo_with(
        &format!("setup_allow: [\"{target}\"]\nsetup: [\"bash fetch.sh > fetched.txt\"]\n"),
        &reach(&target, true),
    );
    let home = TestHome::new().trusting(repo.path());
    let job = home.create_docker(&repo, &["--network", "allowlist"]);
    let id = text(&job, "id");
    assert_eq!(job["limits"]["allow"], serde_json::json!([]), "{job}");
    assert_eq!(home.sh(&id, "cat fetched.txt"), "hello from the test\n");
    assert_eq!(
        home.sh(&id, "bash fetch.sh"),
        "unreachable\n",
        "the agent got setup's allow-list"
    );
}

#[test]
fn an_allowlist_setup_needs_an_allowlist_job() {
    let repo = repo_with(
        "setup_network: allowlist\nsetup_allow: [\"example.com\"]\nsetup: [\"true\"]\n",
        "",
    );
    let home = TestHome::new().trusting(repo.path());
    let out = home.run(&[
        "create",
        "--repo",
        repo.path().to_str().unwrap(),
        "--runtime",
        "process",
    ]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("setup_network: allowlist"), "{stderr}");
    assert_eq!(home.job_records(), 0);
}
