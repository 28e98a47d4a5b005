//! A new job's `copy` and `setup` (`.paddock.yaml`) through the real binary: untracked files
//! copied in and never committed or snapshotted, entries that would read outside the
//! repository refused before anything exists, a failing setup that rolls the create back
//! whole with its output in the error, and an optional one that `show` reports.

use crate::fixtures::{FixtureRepo, TestHome, docker_available, test_image, text};
use serde_json::Value;

/// A repository whose committed `.paddock.yaml` is `config`, with an untracked `.env` and
/// `config/local.toml` in the user's checkout.
fn repo_with(config: &str) -> FixtureRepo {
    let repo = FixtureRepo::new();
    repo.write(".paddock.yaml", config);
    repo.commit_all("paddock config");
    repo.write(".env", "API_KEY=local-secret\n");
    // Readable by its owner only, as secrets are: the agent's uid must own its copy.
    std::fs::set_permissions(
        repo.path().join(".env"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    repo.write("config/local.toml", "port = 7000\n");
    repo
}

/// No record, job dir, checkout, marker, branch or Docker object of a failed create.
fn assert_nothing_left(home: &TestHome, repo: &FixtureRepo, docker: bool, context: &str) {
    assert_eq!(
        repo.branches(),
        vec!["main".to_string()],
        "{context}: branch left"
    );
    assert_eq!(home.job_records(), 0, "{context}: record left");
    assert_eq!(home.job_dirs(), 0, "{context}: job dir left");
    assert_eq!(home.worktree_dirs(), 0, "{context}: checkout left");
    let markers = std::fs::read_dir(home.root().join("worktrees"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .flat_map(|key| std::fs::read_dir(key.path()).into_iter().flatten())
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".paddock"))
        .count();
    assert_eq!(markers, 0, "{context}: marker left");
    if docker {
        assert_eq!(
            home.docker_objects(),
            Vec::<String>::new(),
            "{context}: Docker objects left"
        );
    }
}

fn runtime_args(docker: bool) -> Vec<String> {
    if docker {
        vec![
            "--runtime".into(),
            "docker".into(),
            "--image".into(),
            test_image(),
        ]
    } else {
        vec!["--runtime".into(), "process".into()]
    }
}

/// `paddock create` with the runtime's flags; the raw output, whatever the exit code. The
/// user trusts the repository first: `copy`, and setup on the process runtime, are a
/// trusted repository's (tests/it/hostile_repo.rs has the untrusted ones).
fn create(home: &TestHome, repo: &FixtureRepo, docker: bool, task: &str) -> std::process::Output {
    home.trust(repo.path());
    let path = repo.path().display().to_string();
    let mut args = vec!["create", "--repo", &path, "--task", task, "--json"];
    let runtime = runtime_args(docker);
    args.extend(runtime.iter().map(String::as_str));
    home.run(&args)
}

fn copied_files_stay_out_of_commits_and_snapshots(docker: bool) {
    let repo = repo_with("copy: [\".env\", \"config/local.toml\"]\n");
    let home = TestHome::new();
    let output = create(&home, &repo, docker, "copy");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let job: Value = serde_json::from_slice(&output.stdout).unwrap();
    let id = text(&job, "id");
    assert_eq!(
        job["copied"],
        serde_json::json!([".env", "config/local.toml"]),
        "{job}"
    );

    // The agent (uid 1000 in a container run by root) reads them; git does not see them.
    assert_eq!(
        home.sh(&id, "cat .env config/local.toml"),
        "API_KEY=local-secret\nport = 7000\n"
    );
    assert_eq!(home.sh(&id, "git status --porcelain --ignored=no"), "");
    // An agent that commits everything commits its own work only.
    home.sh(
        &id,
        "echo work > work.txt && git add -A && git commit -q -m work && echo more >> .env",
    );
    let branch = text(&job, "branch");
    let tree = repo.git(&["ls-tree", "-r", "--name-only", &branch]);
    assert!(tree.lines().any(|l| l == "work.txt"), "{tree}");
    assert!(
        !tree.contains(".env") && !tree.contains("local.toml"),
        "copied files were committed: {tree}"
    );
    // Uncommitted work is snapshotted on rm, without the copied files.
    home.sh(&id, "echo wip > wip.txt && echo again >> config/local.toml");
    let report = home.json(&["rm", &id, "--force", "--json"]);
    // The snapshot is in paddock's wip store, not the user's repository: fetch it.
    repo.git(&[
        "fetch",
        "-q",
        &text(&report, "wip_store"),
        &text(&report, "wip_ref"),
    ]);
    let tree = repo.git(&["ls-tree", "-r", "--name-only", "FETCH_HEAD"]);
    assert!(tree.lines().any(|l| l == "wip.txt"), "{tree}");
    assert!(
        !tree.contains(".env") && !tree.contains("local.toml"),
        "copied files reached the wip snapshot: {tree}"
    );
    // The user's own files are as they were.
    assert_eq!(
        std::fs::read_to_string(repo.path().join(".env")).unwrap(),
        "API_KEY=local-secret\n"
    );
}

#[test]
fn copied_files_reach_the_job_but_never_a_commit_or_a_snapshot_process_runtime() {
    crate::fixtures::each_checkout(|| {
        copied_files_stay_out_of_commits_and_snapshots(false);
    });
}

#[test]
fn copied_files_reach_the_job_but_never_a_commit_or_a_snapshot_docker() {
    crate::fixtures::each_checkout(|| {
        if !docker_available("copied_files_reach_the_job_but_never_a_commit_or_a_snapshot_docker") {
            return;
        }
        copied_files_stay_out_of_commits_and_snapshots(true);
    });
}

#[test]
fn copy_entries_that_read_outside_the_repository_are_refused_before_anything_exists() {
    let home = TestHome::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "host secret\n").unwrap();
    let secret = outside.path().join("secret").display().to_string();

    // `..` and absolute paths: a configuration error naming the file and the key.
    for entry in ["../secret", "/etc/hostname"] {
        let repo = repo_with(&format!("copy: [\".env\", \"{entry}\"]\n"));
        let output = create(&home, &repo, false, "dots");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(3), "{entry}: {stderr}");
        assert!(
            stderr.contains("copy[1]") && stderr.contains(entry),
            "{stderr}"
        );
        assert_nothing_left(&home, &repo, false, entry);
    }
    // A symlink out of the repository: the entry itself, one inside a copied directory, a
    // relative one that climbs out, and a parent directory that is a link out.
    let cases: [(&str, &Plant<'_>); 4] = [
        ("copy: [\".env\"]\n", &|repo| {
            std::fs::remove_file(repo.path().join(".env")).unwrap();
            std::os::unix::fs::symlink(&secret, repo.path().join(".env")).unwrap();
        }),
        ("copy: [config]\n", &|repo| {
            std::os::unix::fs::symlink(&secret, repo.path().join("config/key")).unwrap();
        }),
        ("copy: [config]\n", &|repo| {
            std::os::unix::fs::symlink(
                "../../../../../../../../etc/hostname",
                repo.path().join("config/up"),
            )
            .unwrap();
        }),
        ("copy: [linked/secret]\n", &|repo| {
            std::os::unix::fs::symlink(outside.path(), repo.path().join("linked")).unwrap();
        }),
    ];
    for (i, (config, plant)) in cases.iter().enumerate() {
        let repo = repo_with(config);
        plant(&repo);
        let output = create(&home, &repo, false, "link");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(9), "case {i}: {stderr}");
        assert!(
            stderr.contains("copy entry") && stderr.contains("out"),
            "case {i}: {stderr}"
        );
        assert!(!stderr.contains("host secret"), "{stderr}");
        assert_nothing_left(&home, &repo, false, &format!("symlink case {i}"));
    }
    // A missing source: invalid input, nothing made.
    let repo = repo_with("copy: [.env.missing]\n");
    let output = create(&home, &repo, false, "missing");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains(".env.missing") && stderr.contains("does not exist"),
        "{stderr}"
    );
    assert_nothing_left(&home, &repo, false, "missing");
    // A tracked path: `copy` is for untracked files only.
    let repo = repo_with("copy: [README.md]\n");
    let output = create(&home, &repo, false, "tracked");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(9), "{stderr}");
    assert!(
        stderr.contains("already exists in the job's checkout"),
        "{stderr}"
    );
    assert_nothing_left(&home, &repo, false, "tracked");
}

/// Puts a symlink in place in a fixture repository.
type Plant<'a> = dyn Fn(&FixtureRepo) + 'a;

fn failing_setup_rolls_back(docker: bool) {
    let repo = repo_with(
        "copy: [.env]\nsetup:\n  - echo first > first.txt\n  - echo out-line; echo boom-on-stderr >&2; exit 3\n  - echo never > never.txt\n",
    );
    let home = TestHome::new();
    let output = create(&home, &repo, docker, "failing");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(11), "{stderr}");
    assert!(
        stderr.contains("setup command `echo out-line; echo boom-on-stderr >&2; exit 3`")
            && stderr.contains("exit 3")
            && stderr.contains("boom-on-stderr")
            && stderr.contains("out-line"),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: ") && stderr.contains("setup_optional"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
    assert_nothing_left(&home, &repo, docker, "failed setup");

    // A command past its deadline fails the same way.
    let repo = repo_with("setup_timeout: 1s\nsetup: [\"sleep 30\"]\n");
    let started = std::time::Instant::now();
    let output = create(&home, &repo, docker, "slow");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(11), "{stderr}");
    assert!(stderr.contains("timed out after 1s"), "{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(25),
        "the deadline held"
    );
    assert_nothing_left(&home, &repo, docker, "timed-out setup");
}

#[test]
fn a_failing_setup_fails_the_create_with_its_output_and_leaves_nothing_process_runtime() {
    crate::fixtures::each_checkout(|| {
        failing_setup_rolls_back(false);
    });
}

#[test]
fn a_failing_setup_fails_the_create_with_its_output_and_leaves_nothing_docker() {
    crate::fixtures::each_checkout(|| {
        if !docker_available(
            "a_failing_setup_fails_the_create_with_its_output_and_leaves_nothing_docker",
        ) {
            return;
        }
        failing_setup_rolls_back(true);
    });
}

fn optional_setup_is_reported(docker: bool) {
    let repo = repo_with(
        "setup:\n  - echo ready > ready.txt && id -u\nprofiles:\n  default:\n    setup_optional: true\n    setup: [\"echo half; exit 4\", \"echo skipped\"]\n",
    );
    let home = TestHome::new();
    let output = create(&home, &repo, docker, "optional");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: setup command `echo half; exit 4` failed (exit 4)"),
        "{stderr}"
    );
    let job: Value = serde_json::from_slice(&output.stdout).unwrap();
    let id = text(&job, "id");
    assert_eq!(job["state"], "ready");
    // The setup ran in the job (in its container as the agent's uid), before it was ready.
    assert_eq!(home.sh(&id, "cat ready.txt"), "ready\n");
    let shown = home.json(&["show", &id, "--json"]);
    let setup = shown["job"]["setup"].as_array().unwrap().clone();
    assert_eq!(setup.len(), 3, "{shown}");
    assert_eq!(setup[0]["command"], "echo ready > ready.txt && id -u");
    assert_eq!(setup[0]["ok"], true);
    assert_eq!(setup[0]["result"]["exit_code"], 0);
    if docker {
        assert_eq!(setup[0]["result"]["stdout"], "1000\n", "{shown}");
    }
    assert_eq!(setup[1]["ok"], false);
    assert_eq!(setup[1]["result"]["exit_code"], 4);
    assert_eq!(setup[1]["result"]["stdout"], "half\n");
    assert_eq!(setup[2]["ok"], false);
    assert!(setup[2]["result"].is_null());
    assert!(text(&setup[2], "error").starts_with("not run"), "{shown}");
    // The failed command's output is one of the job's execs.
    let exec = text(&setup[1]["result"], "exec_id");
    let info = home.json(&["execs", &id, &exec, "--json"]);
    assert_eq!(info["state"], "finished", "{info}");
    assert!(home.ok(&["execs", &id, &exec]).contains("half"));
    let human = home.ok(&["show", &id]);
    assert!(
        human.contains("FAILED echo half; exit 4 (exit 4") && human.contains(&exec),
        "{human}"
    );
    home.ok(&["rm", &id, "--force"]);
}

#[test]
fn an_optional_setup_that_fails_keeps_the_job_and_show_reports_it_process_runtime() {
    optional_setup_is_reported(false);
}

#[test]
fn an_optional_setup_that_fails_keeps_the_job_and_show_reports_it_docker() {
    if !docker_available("an_optional_setup_that_fails_keeps_the_job_and_show_reports_it_docker") {
        return;
    }
    optional_setup_is_reported(true);
}

#[test]
fn through_the_daemon_a_failing_setup_is_a_422_and_exit_11() {
    use crate::api::{Daemon, http};
    let repo = repo_with("setup: [\"echo api-boom >&2; exit 5\"]\n");
    let home = TestHome::new().trusting(repo.path());
    let daemon = Daemon::start(&home, &[]);
    let mut stream = std::os::unix::net::UnixStream::connect(&daemon.socket).unwrap();
    let body = serde_json::json!({"repo": repo.path(), "task": "api", "runtime": "process"});
    let (status, answer) = http(&mut stream, "POST", "/v1/jobs", Some(&body), &[]);
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "setup_failed", "{answer}");
    let message = text(&answer["error"], "message");
    assert!(
        message.contains("exit 5") && message.contains("api-boom"),
        "{message}"
    );
    // The CLI through the daemon gets the same kind back: exit 11.
    let output = create(&home, &repo, false, "cli");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(11), "{stderr}");
    assert!(stderr.contains("api-boom"), "{stderr}");
    assert_nothing_left(&home, &repo, false, "through the daemon");
    daemon.stop();
}
