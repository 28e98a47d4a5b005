//! Orchestrator-grade control: two installs on one Docker daemon, a `create` that fails at any
//! step leaving nothing behind, and the job's limits visible inside it — through the real
//! binary, real repositories and (where marked) the real Docker daemon.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use crate::fixtures::{FixtureRepo, TestHome, container_of, docker_available, test_image, text};

use paddock::engine::FAIL_POINTS;

fn docker_ok(args: &[&str]) -> bool {
    Command::new("docker")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn container_running(name: &str) -> bool {
    let out = Command::new("docker")
        .args(["inspect", "-f", "{{.State.Running}}", name])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "true"
}

/// Ownership markers (`.<id>.paddock`) left under the worktree root.
fn markers(home: &TestHome) -> Vec<String> {
    let Ok(keys) = std::fs::read_dir(home.root().join("worktrees")) else {
        return Vec::new();
    };
    keys.flatten()
        .flat_map(|key| std::fs::read_dir(key.path()).into_iter().flatten())
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".paddock"))
        .collect()
}

/// Nothing of a failed create is left: branch, checkout, job dir, record, marker, and (for
/// Docker) container, sidecar or network.
fn assert_nothing_left(home: &TestHome, repo: &FixtureRepo, context: &str) {
    assert_eq!(
        repo.branches(),
        vec!["main".to_string()],
        "{context}: branch left"
    );
    assert_eq!(home.worktree_dirs(), 0, "{context}: checkout left");
    assert_eq!(home.job_dirs(), 0, "{context}: job dir left");
    assert_eq!(home.job_records(), 0, "{context}: record left");
    assert_eq!(
        markers(home),
        Vec::<String>::new(),
        "{context}: marker left"
    );
    assert_eq!(
        repo.worktree_count(),
        1,
        "{context}: git worktree entry left"
    );
    assert_eq!(home.mounts(), Vec::<String>::new(), "{context}: mount left");
    assert_eq!(
        home.loop_devices(),
        Vec::<String>::new(),
        "{context}: loop device left"
    );
    if docker_ok(&["version"]) {
        assert_eq!(
            home.docker_objects(),
            Vec::<String>::new(),
            "{context}: Docker objects left"
        );
    }
}

#[test]
fn two_installs_on_one_daemon_each_run_and_remove_their_own_job_of_the_same_id() {
    if !docker_available("two_installs_on_one_daemon") {
        return;
    }
    let (repo_a, repo_b) = (FixtureRepo::new(), FixtureRepo::new());
    let (home_a, home_b) = (TestHome::new(), TestHome::new());
    let job_a = home_a.create_docker(&repo_a, &["--id", "twin"]);
    let job_b = home_b.create_docker(&repo_b, &["--id", "twin"]);
    let (name_a, name_b) = (container_of(&job_a), container_of(&job_b));
    assert_ne!(name_a, name_b, "each install names its own container");
    // The name is the one the library makes for that install (one function, one place).
    let id = paddock::job::JobId::parse("twin").unwrap();
    let install_a = paddock::store::PaddockHome::open_at(&home_a.root()).unwrap();
    assert_eq!(name_a, paddock::runtime::container_name(&install_a, &id));
    assert!(
        name_a.starts_with("paddock-") && name_a.ends_with("-twin"),
        "{name_a}"
    );

    assert_eq!(home_a.sh("twin", "echo a $PADDOCK_JOB_ID"), "a twin\n");
    assert_eq!(home_b.sh("twin", "echo b $PADDOCK_JOB_ID"), "b twin\n");
    assert_eq!(
        home_a.json(&["show", "twin", "--json"])["job"]["container_name"],
        name_a.as_str()
    );

    home_a.ok(&["rm", "twin", "--force"]);
    assert!(
        !docker_ok(&["container", "inspect", &name_a]),
        "A's container is gone"
    );
    assert!(container_running(&name_b), "B's container is untouched");
    assert_eq!(home_b.sh("twin", "echo still"), "still\n");
    home_b.ok(&["rm", "twin", "--force"]);
    assert!(
        !docker_ok(&["container", "inspect", &name_b]),
        "B's container is gone"
    );
    assert!(home_a.docker_objects().is_empty() && home_b.docker_objects().is_empty());
}

#[test]
fn a_job_recorded_before_names_carried_the_install_keeps_its_old_container() {
    if !docker_available("a_job_recorded_before_names_carried_the_install") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    // Unique on the daemon: an old name carries no install, so other runs could collide.
    let id = format!("old-{}", std::process::id());
    let job = home.create_docker(&repo, &["--id", &id]);
    // Made as paddock did before: the container is `paddock-<job>` and the record has no name.
    let old_name = format!("paddock-{id}");
    assert!(docker_ok(&["rename", &container_of(&job), &old_name]));
    let record_path = home.root().join("jobs").join(format!("{id}.json"));
    let mut record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&record_path).unwrap()).unwrap();
    record.as_object_mut().unwrap().remove("container_name");
    std::fs::write(&record_path, serde_json::to_vec_pretty(&record).unwrap()).unwrap();
    let container_id = |name: &str| {
        let out = Command::new("docker")
            .args(["inspect", "-f", "{{.Id}}", name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let before = container_id(&old_name);

    assert_eq!(home.sh(&id, "echo $PADDOCK_JOB_ID"), format!("{id}\n"));
    assert_eq!(container_id(&old_name), before, "the old container ran it");
    assert!(
        home.json(&["show", &id, "--json"])["job"]["container_name"].is_null(),
        "no name recorded"
    );
    assert_eq!(
        home.docker_objects(),
        vec![old_name.clone()],
        "no second container"
    );
    home.ok(&["stop", &id, "--grace", "1s"]);
    assert!(
        !container_running(&old_name),
        "stop reached the old container"
    );
    home.ok(&["rm", &id, "--force"]);
    assert!(
        !docker_ok(&["container", "inspect", &old_name]),
        "rm removed it"
    );
    assert!(home.docker_objects().is_empty());
}

/// A repository whose config gives every job a cache, so cache placement is a real step.
fn repo_with_cache() -> FixtureRepo {
    let repo = FixtureRepo::new();
    repo.write(
        ".paddock.yaml",
        "caches:\n  - path: node_modules\n    strategy: symlink\n",
    );
    repo.commit_all("a cache");
    repo
}

/// Makes a create (with these extra flags) fail at each of its failpoints in turn, and checks
/// that its rollback leaves nothing.
pub(crate) fn fail_at_every_point(runtime: &[&str], docker: bool) {
    let repo = repo_with_cache();
    let home = TestHome::new();
    let path = repo.path().display().to_string();
    for point in FAIL_POINTS {
        if !docker && point.starts_with("container-") {
            continue;
        }
        let mut args = vec!["create", "--repo", &path, "--task", point];
        args.extend_from_slice(runtime);
        let output = home
            .cmd(&args)
            .env("PADDOCK_FAIL_AT", point)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(1),
            "create failing at {point}: {stderr}"
        );
        assert!(
            stderr.contains(&format!("failure injected at `{point}`")),
            "{point}: {stderr}"
        );
        assert_nothing_left(&home, &repo, &format!("{runtime:?} failed at {point}"));
    }
    // The same create without a failpoint works and is removed whole.
    let mut args = vec!["--task", "whole"];
    args.extend_from_slice(runtime);
    let job = home.create(&repo, &args);
    let id = text(&job, "id");
    home.ok(&["rm", &id, "--force"]);
    assert_nothing_left(&home, &repo, &format!("{runtime:?} after rm"));
}

#[test]
fn a_create_failing_at_any_step_leaves_nothing_process_runtime() {
    fail_at_every_point(&["--runtime", "process"], false);
}

#[test]
fn a_create_failing_at_any_step_leaves_nothing_docker_runtime() {
    if !docker_available("a_create_failing_at_any_step_leaves_nothing_docker_runtime") {
        return;
    }
    let image = test_image();
    // An allowlist job, so a network and an egress sidecar exist before the container.
    fail_at_every_point(
        &[
            "--runtime",
            "docker",
            "--image",
            &image,
            "--allow",
            "example.com",
        ],
        true,
    );
}

#[test]
fn a_create_whose_container_name_is_taken_fails_and_leaves_nothing() {
    if !docker_available("a_create_whose_container_name_is_taken_fails_and_leaves_nothing") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let image = test_image();
    let install = paddock::store::PaddockHome::open_at(&home.root()).unwrap();
    let id = paddock::job::JobId::parse("taken").unwrap();
    let name = paddock::runtime::container_name(&install, &id);
    assert!(
        docker_ok(&["create", "--name", &name, &image]),
        "blocker made"
    );
    let path = repo.path().display().to_string();
    let output = home.run(&[
        "create",
        "--repo",
        &path,
        "--id",
        "taken",
        "--runtime",
        "docker",
        "--image",
        &image,
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let blocker_left = docker_ok(&["container", "inspect", &name]);
    let _ = Command::new("docker").args(["rm", "-f", &name]).output();
    assert_eq!(output.status.code(), Some(6), "a conflict: {stderr}");
    assert!(
        stderr.contains(&name) && stderr.contains("already in use"),
        "{stderr}"
    );
    assert!(blocker_left, "the other container was not touched");
    assert_nothing_left(&home, &repo, "name taken");
}

/// `PADDOCK_*` variables an exec sees, and when the exec started (±1 s).
fn paddock_env(home: &TestHome, id: &str) -> (BTreeMap<String, String>, i64, i64) {
    let before = chrono::Utc::now().timestamp() - 1;
    let out = home.ok(&["exec", id, "--timeout", "90s", "--", "sh", "-c", "env"]);
    let after = chrono::Utc::now().timestamp() + 1;
    let env = out
        .lines()
        .filter(|line| line.starts_with("PADDOCK_"))
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (env, before, after)
}

fn assert_deadline(env: &BTreeMap<String, String>, before: i64, after: i64) {
    let deadline = chrono::DateTime::parse_from_rfc3339(&env["PADDOCK_DEADLINE"])
        .unwrap_or_else(|e| panic!("PADDOCK_DEADLINE is RFC 3339 ({e}): {env:?}"))
        .timestamp();
    assert!(
        (before + 90..=after + 90).contains(&deadline),
        "the exec's deadline is its start plus its 90s timeout: {deadline} not in {}..={}",
        before + 90,
        after + 90
    );
}

#[test]
fn limits_are_visible_inside_a_docker_job() {
    if !docker_available("limits_are_visible_inside_a_docker_job") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create_docker(
        &repo,
        &["--id", "seen", "--cpus", "1.5", "--memory", "256m"],
    );
    let (env, before, after) = paddock_env(&home, "seen");
    assert_eq!(env["PADDOCK_JOB_ID"], "seen", "{env:?}");
    assert_eq!(env["PADDOCK_CPUS"], "1.5", "{env:?}");
    assert_eq!(
        env["PADDOCK_MEMORY_BYTES"],
        (256u64 << 20).to_string(),
        "{env:?}"
    );
    assert_deadline(&env, before, after);
    // They are the container's real limits, and its own environment (a `docker exec` or a
    // shell sees them too).
    let name = container_of(&job);
    let inspect = |format: &str| {
        let out = Command::new("docker")
            .args(["inspect", "-f", format, &name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(inspect("{{.HostConfig.NanoCpus}}"), "1500000000");
    assert_eq!(
        inspect("{{.HostConfig.Memory}}"),
        (256u64 << 20).to_string()
    );
    let container_env = inspect("{{json .Config.Env}}");
    assert!(
        container_env.contains("\"PADDOCK_CPUS=1.5\"")
            && container_env.contains(&format!("\"PADDOCK_MEMORY_BYTES={}\"", 256u64 << 20))
            && container_env.contains("\"PADDOCK_JOB_ID=seen\""),
        "{container_env}"
    );
    home.ok(&["rm", "seen", "--force"]);
}

#[test]
fn limits_are_visible_inside_a_process_job() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    home.create(
        &repo,
        &[
            "--id",
            "seen",
            "--runtime",
            "process",
            "--cpus",
            "1.5",
            "--memory",
            "256m",
        ],
    );
    let (env, before, after) = paddock_env(&home, "seen");
    assert_eq!(env["PADDOCK_JOB_ID"], "seen", "{env:?}");
    // The process runtime sets no CPU share: the job may use every CPU of the host.
    let host_cpus = std::thread::available_parallelism().unwrap().to_string();
    assert_eq!(env["PADDOCK_CPUS"], host_cpus, "{env:?}");
    // Its memory limit is the address-space rlimit.
    assert_eq!(
        env["PADDOCK_MEMORY_BYTES"],
        (256u64 << 20).to_string(),
        "{env:?}"
    );
    assert_deadline(&env, before, after);
    home.ok(&["rm", "seen", "--force"]);
}
