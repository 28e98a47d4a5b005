//! Issue 26, items 1 and 3, attacked through the daemon: the host trusts no name and no tree
//! a job wrote. Ids that are not ids (`a/../b`, `../jobs/b`, `a/git/evil`, a NUL, 300 bytes)
//! are a 400 with the API's error body at every id-bearing route, a usage error in the CLI and
//! an `invalid_input` tool error over MCP; a record an agent planted in its git dir is never
//! read; a 20,000-level directory chain an agent made in its git dir and checkout is removed
//! by `DELETE /v1/jobs/{id}` while the daemon keeps answering; a handler that panics answers
//! 500 and the daemon goes on. Docker tests run under runc and gVisor and fail when Docker is
//! absent unless PADDOCK_SKIP_DOCKER_TESTS=1.

use std::os::unix::net::UnixStream;

use serde_json::{Value, json};

use crate::api::{Daemon, api, http};
use crate::fixtures::{FixtureRepo, TestHome, docker_available, test_image};
use crate::mcp::McpClient;

/// Ids an attacker would send (already percent-encoded for a URL path), with the job `ova`
/// and `ovb` existing.
fn hostile_ids() -> Vec<String> {
    vec![
        "ova%2F..%2Fovb".into(),
        "%2E%2E%2Fjobs%2Fova".into(),
        "..%2Fjobs%2Fovb".into(),
        "ova%2Fgit%2Fevil".into(),
        "ova%00".into(),
        "%00".into(),
        "a".repeat(300),
        "OVA".into(),
    ]
}

fn assert_invalid_id(status: u16, body: &Value, what: &str) {
    assert_eq!(status, 400, "{what}: {body}");
    assert_eq!(body["error"]["code"], "invalid_input", "{what}: {body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("invalid job id") && message.contains("lowercase letters"),
        "{what}: the message names the rule: {body}"
    );
}

#[test]
fn ids_that_are_not_ids_are_a_400_at_every_route() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let path = repo.path().display().to_string();
    let daemon = Daemon::start(&home, &[]);
    let mut worktrees = Vec::new();
    for id in ["ova", "ovb"] {
        let (status, job) = api(
            &daemon.socket,
            "POST",
            "/v1/jobs",
            Some(&json!({"repo": path, "id": id, "runtime": "process"})),
        );
        assert_eq!(status, 201, "{job}");
        worktrees.push(std::path::PathBuf::from(job["worktree"].as_str().unwrap()));
    }
    let exec = json!({"cmd": ["sh", "-c", "echo ran > ran-by-api"]});
    for id in hostile_ids() {
        for (method, route, body) in [
            ("GET", format!("/v1/jobs/{id}"), None),
            ("GET", format!("/v1/jobs/{id}/log"), None),
            ("GET", format!("/v1/jobs/{id}/logs"), None),
            ("GET", format!("/v1/jobs/{id}/diff"), None),
            ("GET", format!("/v1/jobs/{id}/execs"), None),
            ("GET", format!("/v1/jobs/{id}/execs/x/output"), None),
            ("GET", format!("/v1/jobs/{id}/files?path=README.md"), None),
            ("POST", format!("/v1/jobs/{id}/exec"), Some(&exec)),
            ("POST", format!("/v1/jobs/{id}/stop"), None),
            ("DELETE", format!("/v1/jobs/{id}"), None),
            ("GET", format!("/jobs/{id}"), None),
        ] {
            let (status, answer) = api(&daemon.socket, method, &route, body);
            assert_invalid_id(status, &answer, &format!("{method} {route}"));
        }
    }
    let (status, answer) = api(&daemon.socket, "GET", "/v1/events?job=ova%2F..%2Fovb", None);
    assert_invalid_id(status, &answer, "events filter");
    // Nothing ran and both jobs are still there.
    for (id, worktree) in ["ova", "ovb"].iter().zip(&worktrees) {
        let (status, job) = api(&daemon.socket, "GET", &format!("/v1/jobs/{id}"), None);
        assert_eq!(status, 200, "{job}");
        assert!(!worktree.join("ran-by-api").exists());
    }
    // The CLI: a usage error naming the rule, before anything is looked up.
    for id in [
        "ova/../ovb",
        "../jobs/ovb",
        "ova/git/evil",
        &"a".repeat(300),
    ] {
        let out = home.run(&["exec", id, "--", "true"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{id}: {stderr}");
        assert!(stderr.contains("invalid job id"), "{id}: {stderr}");
    }
    daemon.stop();
}

#[test]
fn a_panicking_handler_answers_500_and_the_daemon_goes_on() {
    let home = TestHome::new().env("PADDOCK_FAIL_AT", "api-list-panic");
    let daemon = Daemon::start(&home, &[]);
    for _ in 0..3 {
        let (status, body) = api(&daemon.socket, "GET", "/v1/jobs", None);
        assert_eq!(status, 500, "{body}");
        assert_eq!(body["error"]["code"], "internal", "{body}");
        let (status, body) = api(&daemon.socket, "GET", "/healthz", None);
        assert_eq!(status, 200, "{body}");
    }
    daemon.stop();
}

/// A Docker job on `runtime` made through the daemon.
pub(crate) fn create(daemon: &Daemon, repo: &FixtureRepo, runtime: &str, id: &str) -> Value {
    let (status, job) = api(
        &daemon.socket,
        "POST",
        "/v1/jobs",
        Some(&json!({
            "repo": repo.path().display().to_string(),
            "id": id,
            "runtime": runtime,
            "image": test_image(),
        })),
    );
    assert_eq!(status, 201, "{job}");
    job
}

/// `POST /v1/jobs/{id}/exec` of `sh -c script`: the status and the exec's result.
pub(crate) fn exec(daemon: &Daemon, id: &str, script: &str) -> (u16, Value) {
    let mut stream = UnixStream::connect(&daemon.socket).unwrap();
    http(
        &mut stream,
        "POST",
        &format!("/v1/jobs/{id}/exec"),
        Some(&json!({"cmd": ["sh", "-c", script], "timeout": "10m"})),
        &[],
    )
}

/// Removes what a failed test left of the deep chains before the temporary directories go
/// (their own removal recurses, and would abort the test binary with a stack overflow,
/// hiding the failure).
pub(crate) struct DeepCleanup(pub(crate) std::path::PathBuf);

impl Drop for DeepCleanup {
    fn drop(&mut self) {
        for dir in ["work", "worktrees", "jobs"] {
            let _ = paddock::tree::remove_tree(&self.0.join(dir));
        }
    }
}

/// Job `evil`'s agent plants a copy of job `good`'s record in its git dir, then makes a
/// 20,000-level chain in its git dir's objects and in its checkout. The planted record is
/// never read (API, MCP, CLI), and `DELETE` removes the job while the daemon keeps answering.
fn deep_trees_and_planted_records(runtime: &str, test: &str) {
    if !docker_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let _cleanup = DeepCleanup(home.root());
    let daemon = Daemon::start_with_runtime(&home, &[], runtime);
    let evil = create(&daemon, &repo, runtime, "evil");
    let good = create(&daemon, &repo, runtime, "good");
    let record = std::fs::read(home.root().join("jobs/good.json")).unwrap();
    use base64::Engine as _;
    let record = base64::engine::general_purpose::STANDARD.encode(record);
    let plant = format!(
        "echo {record} | base64 -d > /paddock/git/evil.json && \
         mkdir -p /paddock/git/git && cp /paddock/git/evil.json /paddock/git/git/evil.json"
    );
    let (status, answer) = exec(&daemon, "evil", &plant);
    assert_eq!((status, &answer["exit_code"]), (200, &json!(0)), "{answer}");
    // 20,000 levels in each under runc. gVisor's gofer keeps a host descriptor per directory
    // and runs out near 19,800 for the whole sandbox (EMFILE, measured here), so under runsc
    // each chain gets 9,000.
    let want: u64 = if runtime == "runsc" { 9_000 } else { 20_000 };
    let deep = "for d in /paddock/git/objects \"$PWD\"; do cd \"$d\" && \
        perl -e 'mkdir \"zz\"; chdir \"zz\"; $n = 0; \
        while ($n < WANT) { mkdir \"d\" or last; chdir \"d\" or last; $n++ } print \"$n\\n\"'; \
        done"
        .replace("WANT", &want.to_string());
    let started = std::time::Instant::now();
    let (status, answer) = exec(&daemon, "evil", &deep);
    assert_eq!(status, 200, "{answer}");
    let depths: Vec<u64> = answer["stdout"]
        .as_str()
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    eprintln!(
        "{test}: chains of {depths:?} levels made in {:?}",
        started.elapsed()
    );
    assert_eq!(depths.len(), 2, "{answer}");
    assert!(depths.iter().all(|d| *d == want), "{depths:?}: {answer}");

    // The planted record, under every name that would reach it.
    let pwn = json!({"cmd": ["sh", "-c", "touch /tmp/pwned"]});
    for id in [
        "evil%2Fgit%2Fevil",
        "evil%2Fgit%2Fgit%2Fevil",
        "..%2Fwork%2Fevil%2Fgit%2Fevil",
    ] {
        let (status, answer) = api(
            &daemon.socket,
            "POST",
            &format!("/v1/jobs/{id}/exec"),
            Some(&pwn),
        );
        assert_invalid_id(status, &answer, id);
    }
    let out = home.run(&["exec", "evil/git/evil", "--", "touch", "/tmp/pwned"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let mut mcp = McpClient::start(&home, &["--all-jobs"]);
    let result = mcp.call(
        "job_exec",
        &json!({"job": "evil/git/evil", "cmd": ["touch", "/tmp/pwned"]}),
    );
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(
        result["structuredContent"]["error"]["code"], "invalid_input",
        "{result}"
    );
    let (status, answer) = exec(&daemon, "good", "test ! -e /tmp/pwned && echo clean");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["exit_code"], 0, "nothing ran in job good: {answer}");

    // Removal through the daemon, which answers all along.
    let git_dir = evil["git_dir"].as_str().map(std::path::PathBuf::from);
    let worktree = std::path::PathBuf::from(evil["worktree"].as_str().unwrap());
    let started = std::time::Instant::now();
    let (status, removed) = api(&daemon.socket, "DELETE", "/v1/jobs/evil?force=true", None);
    eprintln!("{test}: removed in {:?}: {removed}", started.elapsed());
    assert_eq!(status, 200, "{removed}");
    let (status, listed) = api(&daemon.socket, "GET", "/v1/jobs", None);
    assert_eq!(status, 200, "the daemon still answers: {listed}");
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert!(!worktree.exists(), "the checkout is gone");
    assert!(
        !home.root().join("work/evil").exists(),
        "the job dir is gone"
    );
    if let Some(git_dir) = git_dir {
        assert!(!git_dir.exists(), "the git dir is gone");
    }
    assert_eq!(good["id"], "good");
    let (status, removed) = api(&daemon.socket, "DELETE", "/v1/jobs/good", None);
    assert_eq!(status, 200, "{removed}");
    daemon.stop();
}

#[test]
fn deep_trees_and_planted_records_under_runc() {
    deep_trees_and_planted_records("docker", "deep_trees_and_planted_records_under_runc");
}

#[test]
fn deep_trees_and_planted_records_under_gvisor() {
    deep_trees_and_planted_records("runsc", "deep_trees_and_planted_records_under_gvisor");
}
