//! The process runtime's exec contract (exit codes, timeouts under both kill policies, the
//! output cap, streaming, audit log, `logs`, `run`), through the real binary. No Docker.

use std::time::Instant;

use crate::fixtures::{FixtureRepo, TestHome};
use serde_json::Value;

fn process_job(home: &TestHome, repo: &FixtureRepo) -> String {
    let job = home.create(repo, &["--runtime", "process"]);
    assert!(job["container_id"].is_null());
    job["id"].as_str().unwrap().to_string()
}

fn exec_json(home: &TestHome, id: &str, flags: &[&str], cmd: &[&str]) -> (Value, Option<i32>) {
    let mut args = vec!["exec", id, "--json"];
    args.extend_from_slice(flags);
    args.push("--");
    args.extend_from_slice(cmd);
    let output = home.run(&args);
    let result = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "no ExecResult ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (result, output.status.code())
}

#[test]
fn exit_codes_pass_through_and_the_record_follows() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let id = process_job(&home, &repo);
    let (result, code) = exec_json(
        &home,
        &id,
        &[],
        &["sh", "-c", "echo out; echo err >&2; exit 7"],
    );
    assert_eq!(code, Some(7));
    assert_eq!(result["exit_code"], 7);
    assert_eq!(result["stdout"], "out\n");
    assert_eq!(result["stderr"], "err\n");
    assert_eq!(result["timed_out"], false);
    assert!(result["duration_ms"].is_u64());
    let job = home.json(&["show", &id, "--json"]);
    assert_eq!(job["job"]["state"], "exited");
    assert_eq!(job["job"]["exit_code"], 7);
    assert!(
        job["isolation"]
            .as_str()
            .unwrap()
            .contains("neither files nor network")
    );

    // Without --json the output streams to our stdout and paddock exits with the code.
    let output = home.run(&["exec", &id, "--", "sh", "-c", "pwd; exit 3"]);
    assert_eq!(output.status.code(), Some(3));
    let pwd = String::from_utf8_lossy(&output.stdout);
    let worktree = job["job"]["worktree"].as_str().unwrap();
    assert_eq!(pwd.trim(), worktree, "commands run in the worktree");

    // A missing program ends as a shell ends it (127, the reason on stderr): the command's
    // result, not paddock's failure (issue 28).
    let output = home.run(&["exec", &id, "--", "/no/such/program"]);
    assert_eq!(output.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&output.stderr).contains("command not found"));

    // Every exec is in the audit log; `logs` shows commands and output.
    let audit =
        std::fs::read_to_string(home.root().join("logs").join(&id).join("exec.jsonl")).unwrap();
    let entries: Vec<Value> = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(entries.len(), 3, "{audit}");
    assert_eq!(entries[0]["exit_code"], 7);
    assert_eq!(entries[0]["command"][0], "sh");
    for key in [
        "started_at",
        "duration_ms",
        "timed_out",
        "oom_killed",
        "truncated",
    ] {
        assert!(entries[0].get(key).is_some(), "audit entry lacks {key}");
    }
    assert_eq!(
        entries[2]["exit_code"], 127,
        "a missing program is an exit, not an error"
    );
    let logs = home.ok(&["logs", &id]);
    assert!(
        logs.contains("$ sh -c 'echo out; echo err >&2; exit 7'"),
        "{logs}"
    );
    assert!(
        logs.contains("out\n") && logs.contains("err\n") && logs.contains("<== exit 7"),
        "{logs}"
    );
}

#[test]
fn timeouts_kill_the_whole_group_under_both_policies() {
    let repo = FixtureRepo::new();
    for policy in ["graceful", "hard"] {
        let home = TestHome::new().env("PADDOCK_KILL_POLICY", policy);
        let id = process_job(&home, &repo);
        for cmd in ["sleep 1000", "trap '' TERM; sleep 1000 & sleep 1000"] {
            let started = Instant::now();
            let (result, code) = exec_json(&home, &id, &["--timeout", "2s"], &["sh", "-c", cmd]);
            let elapsed = started.elapsed().as_millis();
            assert_eq!(result["timed_out"], true, "{policy} {cmd}: {result}");
            assert_eq!(code, Some(124));
            // Default grace is 5s; hard kills at once.
            let bound = if policy == "hard" {
                2_000 + 1_000
            } else {
                2_000 + 5_000 + 1_000
            };
            assert!(elapsed < bound + 500, "{policy} `{cmd}` took {elapsed}ms");
        }
        assert_eq!(
            home.json(&["show", &id, "--json"])["job"]["state"],
            "timed-out"
        );
    }
}

#[test]
fn output_is_capped_in_the_middle_with_a_marker() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let id = process_job(&home, &repo);
    let (result, _) = exec_json(
        &home,
        &id,
        &[],
        &[
            "sh",
            "-c",
            "echo FIRST; head -c 3000000 /dev/zero | tr '\\0' x; echo; echo LAST",
        ],
    );
    assert_eq!(result["truncated"], true);
    let stdout = result["stdout"].as_str().unwrap();
    assert!(stdout.starts_with("FIRST\n"));
    assert!(stdout.ends_with("LAST\n"));
    assert!(stdout.contains("bytes of output omitted"), "marker missing");
    assert!(
        stdout.len() < (1 << 20) + 200,
        "kept {} bytes",
        stdout.len()
    );
    let (small, _) = exec_json(&home, &id, &[], &["echo", "small"]);
    assert_eq!(small["truncated"], false);
}

#[test]
fn run_removes_the_job_and_keeps_a_branch_with_commits() {
    crate::fixtures::each_checkout(|| {
        let repo = FixtureRepo::new();
        let home = TestHome::new();
        let path = repo.path().display().to_string();
        let output = home.run(&[
            "run", "--repo", &path, "--task", "oneshot", "--runtime", "process", "--json", "--",
            "sh", "-c",
            "echo done > result.txt && git add result.txt && git -c user.name=a -c user.email=a@b commit -q -m result && exit 3",
        ]);
        assert_eq!(
            output.status.code(),
            Some(3),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(report["branch_kept"], true);
        assert_eq!(report["result"]["exit_code"], 3);
        assert_eq!(
            repo.git(&["log", "-1", "--format=%s", "agent/agent/oneshot"]),
            "result"
        );
        assert_eq!(home.job_records(), 0);
        assert_eq!(home.worktree_dirs(), 0);
        assert_eq!(repo.worktree_count(), 1);

        // A run that commits nothing leaves no branch.
        let output = home.run(&[
            "run",
            "--repo",
            &path,
            "--task",
            "noop",
            "--runtime",
            "process",
            "--",
            "true",
        ]);
        assert_eq!(output.status.code(), Some(0));
        assert!(!repo.branches().contains(&"agent/agent/noop".to_string()));
    });
}

/// The README's first command, run as written against a fixture repo (`--repo .` is the
/// current directory), with the built binary standing in for `cargo run --`.
#[test]
fn the_readme_first_command_runs_a_job_end_to_end() {
    crate::fixtures::each_checkout(|| {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
        let line = readme
            .lines()
            .find(|l| l.starts_with("cargo run -- run "))
            .expect("the README starts with a `cargo run -- run` command");
        let command = line.replacen("cargo run --", env!("CARGO_BIN_EXE_paddock"), 1);
        let repo = FixtureRepo::new();
        // Force the process runtime: this test must pass on a machine without Docker too.
        let home = TestHome::new().env("PADDOCK_RUNTIME", "process");
        let output = std::process::Command::new("sh")
            .args(["-c", &command])
            .current_dir(repo.path())
            .envs(home.envs.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(
            repo.git(&["log", "-1", "--format=%s", "agent/agent/hello"]),
            "hello from paddock"
        );
        assert_eq!(home.job_records(), 0);
    });
}

/// The first `git status` in an overlay job reads no tracked file: the job's index is the
/// pristine checkout's, stamped after its files, and its git dir compares only size and
/// mtime, so git has nothing to rehash (strace shows every file git opens).
#[test]
fn the_first_git_status_in_an_overlay_job_opens_no_tracked_file() {
    if !crate::fixtures::overlay_available(
        "the_first_git_status_in_an_overlay_job_opens_no_tracked_file",
    ) {
        return;
    }
    let repo = FixtureRepo::with_files(2_000, 200);
    let home = TestHome::new();
    for task in ["first", "second"] {
        let job = home.create(
            &repo,
            &[
                "--runtime",
                "process",
                "--checkout",
                "overlay",
                "--task",
                task,
            ],
        );
        let worktree = job["worktree"].as_str().unwrap().to_string();
        let trace = home.dir.path().join(format!("strace-{task}.txt"));
        let output = std::process::Command::new("strace")
            .args(["-f", "-qq", "-e", "trace=openat", "-o"])
            .arg(&trace)
            .args(["git", "-C", &worktree, "status", "--porcelain"])
            .output()
            .expect("strace runs (Debian package strace; .ci/run installs it)");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            output.stdout.is_empty(),
            "a clean checkout: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let opened: Vec<String> = std::fs::read_to_string(&trace)
            .unwrap()
            .lines()
            .filter(|line| line.contains(".rs\""))
            .map(str::to_string)
            .collect();
        assert!(
            opened.is_empty(),
            "{task} job: git status opened tracked files: {:?}",
            &opened[..opened.len().min(5)]
        );
    }
}

/// A repository deleted under its job: `rm` refuses (nowhere to save the work) and names
/// `--force`, which removes everything of paddock's and no longer fails on the missing repo.
#[test]
fn rm_force_removes_a_job_whose_repository_was_deleted() {
    crate::fixtures::each_checkout(|| {
        let home = TestHome::new();
        let repo = FixtureRepo::new();
        let id = process_job(&home, &repo);
        std::fs::remove_dir_all(repo.path()).unwrap();
        let refused = home.run(&["rm", &id]);
        assert!(!refused.status.success());
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("--force"),
            "{}",
            String::from_utf8_lossy(&refused.stderr)
        );
        let removed = home.json(&["rm", &id, "--force", "--json"]);
        assert_eq!(removed["branch_kept"], false, "{removed}");
        assert_eq!(home.job_records(), 0);
        assert_eq!(home.job_dirs(), 0);
    });
}
