//! `Idempotency-Key` through the real daemon and Docker, and `--idempotency-key` on the CLI
//! with and without a daemon: a create sent twice makes one job and one container, an exec
//! sent twice runs once, another body under a used key is a 422, and a key still answers
//! after the daemon restarts.

use std::os::unix::net::UnixStream;
use std::process::Command;

use serde_json::json;

use crate::api::{Daemon, http};
use crate::fixtures::{FixtureRepo, TestHome, docker_available, test_image};

fn keyed(
    socket: &std::path::Path,
    method: &str,
    path: &str,
    body: &serde_json::Value,
    key: &str,
) -> (u16, serde_json::Value) {
    let mut stream = UnixStream::connect(socket).unwrap();
    http(
        &mut stream,
        method,
        path,
        Some(body),
        &[("Idempotency-Key", key)],
    )
}

fn containers_of(job: &str) -> usize {
    let out = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=dev.paddock.job={job}"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[test]
fn a_keyed_create_or_exec_sent_twice_happens_once_even_across_a_restart() {
    if !docker_available("a_keyed_create_or_exec_sent_twice_happens_once_even_across_a_restart") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let daemon = Daemon::start_with_runtime(&home, &[], "docker");
    let socket = daemon.socket.clone();
    let image = test_image();
    let path = repo.path().display().to_string();
    // No id: a second create without the key would make a second job.
    let body = json!({"repo": path, "task": "keyed", "runtime": "docker", "image": image});
    let (first_status, first) = keyed(&socket, "POST", "/v1/jobs", &body, "create-1");
    assert_eq!(first_status, 201, "{first}");
    let (again_status, again) = keyed(&socket, "POST", "/v1/jobs", &body, "create-1");
    assert_eq!(again_status, 201, "{again}");
    let id = first["id"].as_str().unwrap().to_string();
    assert_eq!(again["id"], first["id"]);
    assert_eq!(home.json(&["ls", "--json"]).as_array().unwrap().len(), 1);
    assert_eq!(containers_of(&id), 1);

    // The same key with another body: 422, nothing made.
    let other = json!({"repo": path, "task": "other", "runtime": "docker", "image": image});
    let (status, error) = keyed(&socket, "POST", "/v1/jobs", &other, "create-1");
    assert_eq!(status, 422, "{error}");
    assert_eq!(error["error"]["code"], "idempotency_mismatch");
    assert_eq!(home.json(&["ls", "--json"]).as_array().unwrap().len(), 1);

    // An exec sent twice runs once and answers the same.
    let exec = json!({"cmd": ["bash", "-c", "echo ran >> /tmp/count; wc -l < /tmp/count"]});
    let exec_path = format!("/v1/jobs/{id}/exec");
    let (status, ran) = keyed(&socket, "POST", &exec_path, &exec, "exec-1");
    assert_eq!(status, 200, "{ran}");
    let (status, replayed) = keyed(&socket, "POST", &exec_path, &exec, "exec-1");
    assert_eq!(status, 200, "{replayed}");
    assert_eq!(replayed["stdout"], ran["stdout"]);
    assert_eq!(replayed["exec_id"], ran["exec_id"]);
    let count = Command::new("docker")
        .args([
            "exec",
            first["container_name"].as_str().unwrap(),
            "cat",
            "/tmp/count",
        ])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&count.stdout), "ran\n");

    // After a restart the key still answers with the first job.
    drop(daemon);
    let daemon = Daemon::start_with_runtime(&home, &[], "docker");
    let (status, after) = keyed(&daemon.socket, "POST", "/v1/jobs", &body, "create-1");
    assert_eq!(status, 201, "{after}");
    assert_eq!(after["id"], first["id"]);
    assert_eq!(containers_of(&id), 1);

    // The CLI's flag, through the daemon and without one.
    let cli = |no_daemon: bool| {
        let mut command = home.cmd(&[
            "create",
            "--repo",
            &path,
            "--task",
            "cli-keyed",
            "--runtime",
            "process",
            "--idempotency-key",
            "cli-1",
            "--json",
        ]);
        if no_daemon {
            command.env("PADDOCK_NO_DAEMON", "1");
        }
        let out = command.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["id"].clone()
    };
    let through_daemon = cli(false);
    assert_eq!(cli(false), through_daemon);
    // Without a daemon the same key still names the same job.
    assert_eq!(cli(true), through_daemon);
    assert_eq!(home.json(&["ls", "--json"]).as_array().unwrap().len(), 2);
    for job in home.json(&["ls", "--json"]).as_array().unwrap() {
        home.ok(&["rm", job["id"].as_str().unwrap(), "--force"]);
    }
    assert_eq!(containers_of(&id), 0);
    daemon.stop();
}
