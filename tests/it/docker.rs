//! The Docker runtime against the real daemon: git inside the container, isolation, limits,
//! timeouts, OOM, gVisor, recovery and `paddock run`. These fail when Docker is absent unless
//! PADDOCK_SKIP_DOCKER_TESTS=1, and then each says it skipped. They need the agent image
//! (`.ci/run` builds it; see docs/testing.md).

use std::process::Command;

use crate::fixtures::{FixtureRepo, TestHome, container_of, docker_available, test_image, text};
use serde_json::Value;

/// `paddock exec --json`; returns the ExecResult and paddock's exit code.
pub(crate) fn exec(home: &TestHome, id: &str, flags: &[&str], cmd: &[&str]) -> (Value, i32) {
    let mut args = vec!["exec", id, "--json"];
    args.extend_from_slice(flags);
    args.push("--");
    args.extend_from_slice(cmd);
    let output = home.run(&args);
    let result: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "exec {cmd:?} printed no result ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (result, output.status.code().unwrap_or(-1))
}

pub(crate) fn sh(home: &TestHome, id: &str, script: &str) -> Value {
    exec(home, id, &[], &["sh", "-c", script]).0
}

pub(crate) fn docker(args: &[&str]) -> String {
    let output = Command::new("docker")
        .args(args)
        .output()
        .expect("docker runs");
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

fn container_exists(name: &str) -> bool {
    Command::new("docker")
        .args(["container", "inspect", name])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn git_in_the_container_commits_to_the_branch_and_cannot_touch_config_or_hooks() {
    crate::fixtures::each_checkout(|| {
        if !docker_available("git_in_the_container") {
            return;
        }
        let repo = FixtureRepo::new();
        let home = TestHome::new();
        let job = home.create_docker(&repo, &["--task", "commit"]);
        let id = text(&job, "id");
        let config_before = std::fs::read(repo.path().join(".git/config")).unwrap();
        let hooks_before = std::fs::read_dir(repo.path().join(".git/hooks"))
            .unwrap()
            .count();

        let result = sh(
            &home,
            &id,
            "git status --short && echo feature > feature.txt && git add feature.txt && git commit -q -m 'commit from the container' && git log -1 --format=%s",
        );
        assert_eq!(result["exit_code"], 0, "{result}");
        assert_eq!(
            repo.git(&["log", "-1", "--format=%s", "agent/agent/commit"]),
            "commit from the container"
        );
        assert_eq!(
            repo.git(&["show", "agent/agent/commit:feature.txt"]),
            "feature"
        );

        let common = repo.path().join(".git").canonicalize().unwrap();
        for target in ["config", "hooks/pre-commit", "worktrees/escape"] {
            let path = common.join(target);
            let result = sh(&home, &id, &format!("echo evil > '{}'", path.display()));
            assert_ne!(
                result["exit_code"], 0,
                "writing {target} from inside must fail: {result}"
            );
        }
        // Nor can the agent redirect host-side git through its own admin dir.
        let admin = common.join("worktrees").join(&id);
        for target in ["commondir", "gitdir", "config.worktree"] {
            let result = sh(
                &home,
                &id,
                &format!("echo /evil > '{}'", admin.join(target).display()),
            );
            assert_ne!(
                result["exit_code"], 0,
                "writing {target} must fail: {result}"
            );
        }
        assert_eq!(
            std::fs::read(repo.path().join(".git/config")).unwrap(),
            config_before
        );
        assert_eq!(
            std::fs::read_dir(repo.path().join(".git/hooks"))
                .unwrap()
                .count(),
            hooks_before
        );
        home.ok(&["rm", &id]);
        assert!(!container_exists(&container_of(&job)));
    });
}

#[test]
fn timeouts_end_commands_under_both_kill_policies() {
    if !docker_available("timeouts_end_commands_under_both_kill_policies") {
        return;
    }
    let repo = FixtureRepo::new();
    for policy in ["graceful", "hard"] {
        let home = TestHome::new().env("PADDOCK_KILL_POLICY", policy);
        let job = home.create_docker(&repo, &["--task", &format!("timeout-{policy}")]);
        let id = text(&job, "id");
        assert_eq!(job["limits"]["kill_policy"], policy);
        let grace_ms = 5_000;
        // What an exec costs on this machine right now (the CLI, the runtime's round trip, the
        // sync after it): the bounds below are the timeout and the grace over that, so a
        // loaded machine slows both sides alike and only a wrong kill policy fails them.
        let started = std::time::Instant::now();
        let (result, _) = exec(&home, &id, &[], &["true"]);
        assert_eq!(result["exit_code"], 0, "{result}");
        let overhead = u64::try_from(started.elapsed().as_millis()).unwrap();
        let slack = overhead + 2_500;
        // `sleep` dies on SIGTERM; the trap ignores it, so only SIGKILL ends the second one.
        for cmd in ["sleep 1000", "trap '' TERM; sleep 1000"] {
            let started = std::time::Instant::now();
            let (result, code) = exec(&home, &id, &["--timeout", "2s"], &["sh", "-c", cmd]);
            let elapsed = u64::try_from(started.elapsed().as_millis()).unwrap();
            assert_eq!(result["timed_out"], true, "{policy} {cmd}: {result}");
            assert_eq!(code, 124, "paddock exits 124 on a timeout");
            assert!(
                elapsed >= 2_000,
                "{policy} `{cmd}` ended before its timeout"
            );
            assert!(
                elapsed < 2_000 + grace_ms + slack,
                "{policy} `{cmd}` took {elapsed}ms (an exec costs {overhead}ms here)"
            );
            if policy == "hard" {
                assert!(
                    elapsed < 2_000 + slack,
                    "hard kill waits for no grace: {elapsed}ms (an exec costs {overhead}ms here)"
                );
            } else if cmd.starts_with("trap") {
                // SIGTERM is ignored: only the kill after the grace ends it.
                assert!(
                    elapsed >= 2_000 + grace_ms,
                    "graceful `{cmd}` was killed before its grace ended: {elapsed}ms"
                );
            }
        }
        let state = home.json(&["show", &id, "--json"])["job"]["state"].clone();
        assert_eq!(state, "timed-out");
        home.ok(&["rm", &id]);
    }
}

#[test]
fn exec_brings_back_a_restarted_or_killed_container() {
    if !docker_available("exec_brings_back_a_restarted_or_killed_container") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create_docker(&repo, &["--task", "recover"]);
    let id = text(&job, "id");
    let name = container_of(&job);
    docker(&["restart", "-t", "0", &name]);
    assert_eq!(sh(&home, &id, "echo back")["stdout"], "back\n");
    docker(&["kill", &name]);
    assert_eq!(
        docker(&["inspect", "-f", "{{.State.Running}}", &name]),
        "false"
    );
    assert_eq!(sh(&home, &id, "echo again")["stdout"], "again\n");
    docker(&["rm", "-f", &name]);
    let result = sh(
        &home,
        &id,
        "echo recreated && git status --short && echo ok",
    );
    assert_eq!(result["exit_code"], 0, "{result}");
    assert!(result["stdout"].as_str().unwrap().starts_with("recreated"));
    home.ok(&["rm", &id]);
    assert!(!container_exists(&name));
}

#[test]
fn run_commits_exits_with_the_command_code_and_leaves_nothing_but_the_branch() {
    crate::fixtures::each_checkout(|| {
        if !docker_available("run_commits_exits_with_the_command_code") {
            return;
        }
        let repo = FixtureRepo::new();
        let home = TestHome::new();
        let path = repo.path().display().to_string();
        let image = test_image();
        let output = home.run(&[
            "run", "--repo", &path, "--task", "oneshot", "--runtime", "docker", "--image", &image,
            "--json", "--",
            "sh", "-c", "echo done > result.txt && git add result.txt && git commit -q -m 'one-shot result' && exit 3",
        ]);
        assert_eq!(
            output.status.code(),
            Some(3),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(report["result"]["exit_code"], 3);
        assert_eq!(report["branch_kept"], true);
        assert_eq!(
            repo.git(&["log", "-1", "--format=%s", "agent/agent/oneshot"]),
            "one-shot result"
        );
        assert!(
            !container_exists(&container_of(&report["job"])),
            "no container left"
        );
        assert_eq!(home.worktree_dirs(), 0, "no worktree left");
        assert_eq!(repo.worktree_count(), 1, "no git worktree entry left");
        assert_eq!(home.job_records(), 0, "no record left");
    });
}

#[test]
fn gvisor_profile_commits_and_reports_a_gvisor_kernel() {
    crate::fixtures::each_checkout(|| {
        if !docker_available("gvisor_profile_commits_and_reports_a_gvisor_kernel") {
            return;
        }
        let repo = FixtureRepo::new();
        repo.write(
            ".paddock.yaml",
            &format!(
                "profiles:\n  sandboxed:\n    runtime: runsc\n    image: {}\n",
                test_image()
            ),
        );
        repo.commit_all("a gVisor profile");
        let home = TestHome::new();
        let job = home.create(&repo, &["--task", "gvisor", "--profile", "sandboxed"]);
        assert_eq!(text(&job, "runtime"), "runsc");
        assert_eq!(text(&job, "profile"), "sandboxed");
        let id = text(&job, "id");
        let result = sh(
            &home,
            &id,
            "dmesg 2>/dev/null | head -3; echo g > g.txt && git add g.txt && git commit -q -m 'from gvisor' && echo committed",
        );
        let stdout = result["stdout"].as_str().unwrap();
        assert!(stdout.contains("gVisor"), "no gVisor kernel in: {result}");
        assert!(stdout.contains("committed"), "{result}");
        assert_eq!(
            repo.git(&["log", "-1", "--format=%s", "agent/agent/gvisor"]),
            "from gvisor"
        );
        home.ok(&["rm", &id]);
    });
}

#[test]
fn missing_image_and_unreachable_docker_fail_cleanly() {
    if !docker_available("missing_image_and_unreachable_docker_fail_cleanly") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let path = repo.path().display().to_string();
    let output = home.run(&[
        "create",
        "--repo",
        &path,
        "--runtime",
        "docker",
        "--image",
        "paddock-no-such:image",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(8), "{stderr}");
    assert!(
        stderr.contains("paddock-no-such:image") && stderr.contains("paddock image build"),
        "{stderr}"
    );

    let unreachable = TestHome::new().env("DOCKER_HOST", "unix:///nonexistent/docker.sock");
    let output = unreachable.run(&["create", "--repo", &path, "--runtime", "docker"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(8), "{stderr}");
    assert!(stderr.contains("paddock doctor"), "{stderr}");
    // auto falls back to the process runtime with a one-line warning.
    let output = unreachable.run(&["create", "--repo", &path, "--json"]);
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("warning: using the process runtime"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert_eq!(
        repo.branches().len(),
        2,
        "only main and the auto job's branch"
    );
    assert_eq!(home.job_records(), 0);
    assert_eq!(home.worktree_dirs(), 0);
}

#[test]
fn stop_ends_the_container_and_the_next_exec_starts_it() {
    if !docker_available("stop_ends_the_container_and_the_next_exec_starts_it") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create_docker(&repo, &["--task", "stop"]);
    let id = text(&job, "id");
    let name = container_of(&job);
    let stopped = home.ok(&["stop", &id, "--grace", "1s"]);
    assert!(stopped.contains("stopped"), "{stopped}");
    assert_eq!(
        docker(&["inspect", "-f", "{{.State.Running}}", &name]),
        "false"
    );
    // `diff` syncs a stopped job in a throwaway container beside it (network none), which
    // is gone afterwards, and leaves the job's own container stopped.
    let diff = home.ok(&["diff", &id]);
    assert!(diff.is_empty(), "{diff}");
    assert_eq!(
        docker(&["inspect", "-f", "{{.State.Running}}", &name]),
        "false"
    );
    let beside = docker(&["ps", "-aq", "--filter", &format!("name={name}-sync-")]);
    assert!(beside.is_empty(), "a sync container stayed: {beside}");
    assert_eq!(home.sh(&id, "echo up"), "up\n");
    assert_eq!(
        docker(&["inspect", "-f", "{{.State.Running}}", &name]),
        "true"
    );
    home.ok(&["rm", &id]);
}

#[test]
fn doctor_reports_docker_the_image_and_runsc() {
    if !docker_available("doctor_reports_docker_the_image_and_runsc") {
        return;
    }
    let home = TestHome::new().env("PADDOCK_IMAGE", &test_image());
    let checks = home.json(&["doctor", "--json"]);
    let status = |name: &str| {
        checks
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .map_or_else(
                || panic!("no {name} check in {checks}"),
                |c| c["status"].as_str().unwrap().to_string(),
            )
    };
    for name in ["git", "docker", "image", "runtimes", "limits", "disk"] {
        assert_eq!(status(name), "ok", "{checks}");
    }
    // A missing image is a failure with the exact build command as the fix.
    let missing = TestHome::new().env("PADDOCK_IMAGE", "paddock-missing:image");
    let output = missing.run(&["doctor", "--json"]);
    assert_eq!(output.status.code(), Some(8));
    let checks: Value = serde_json::from_slice(&output.stdout).unwrap();
    let image = checks
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "image")
        .unwrap();
    assert_eq!(image["status"], "fail");
    assert!(
        image["fix"]
            .as_str()
            .unwrap()
            .contains("paddock image build --tag paddock-missing:image")
    );
}
