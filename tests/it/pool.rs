//! The warm pool against the real Docker daemon: a create claims a waiting container and
//! the job behaves as a cold one (git inside, limits, isolation, rm keeps work); a claimed
//! container is never handed out again; gVisor and an empty pool start cold and say why;
//! an idle pool drains; creates killed mid-claim are swept clean. These fail when Docker is
//! absent unless PADDOCK_SKIP_DOCKER_TESTS=1, and then each says it skipped.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::fixtures::{FixtureRepo, TestHome, docker_available, test_image, text};

/// A repository whose default profile keeps a pool of `size` containers of the test image
/// (`runtime` docker or runsc), and a home that does not refill it in the background (the
/// tests fill it themselves, so what they see does not race a refill).
fn pooled(size: u32, runtime: &str) -> (FixtureRepo, TestHome) {
    let repo = FixtureRepo::new();
    repo.write(
        ".paddock.yaml",
        &format!(
            "profiles:\n  default:\n    runtime: {runtime}\n    image: {}\n    memory: 512m\n    pool: {{size: {size}}}\n",
            test_image()
        ),
    );
    repo.commit_all("a pooled profile");
    let home = TestHome::new()
        .env("PADDOCK_POOL_REFILL", "off")
        .trusting(repo.path());
    (repo, home)
}

fn fill(home: &TestHome, repo: &FixtureRepo) -> Value {
    let path = repo.path().display().to_string();
    home.json(&["pool", "fill", "--repo", &path, "--json"])
}

fn slots(home: &TestHome) -> Vec<Value> {
    home.json(&["pool", "status", "--json"])
        .as_array()
        .unwrap()
        .clone()
}

fn slots_in(home: &TestHome, state: &str) -> usize {
    slots(home).iter().filter(|s| s["state"] == state).count()
}

fn create(home: &TestHome, repo: &FixtureRepo, extra: &[&str]) -> Value {
    let path = repo.path().display().to_string();
    let mut args = vec!["create", "--repo", &path, "--json"];
    args.extend_from_slice(extra);
    home.json(&args)
}

fn inspect(container: &str, format: &str) -> String {
    let output = Command::new("docker")
        .args(["inspect", "--format", format, container])
        .output()
        .expect("docker runs");
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

fn exec_status(home: &TestHome, job: &str, script: &str) -> (i32, String) {
    let output = home.run(&["exec", job, "--", "sh", "-c", script]);
    (
        output.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

fn container_exists(name: &str) -> bool {
    Command::new("docker")
        .args(["container", "inspect", name])
        .output()
        .is_ok_and(|o| o.status.success())
}

fn slot_dirs(home: &TestHome) -> Vec<String> {
    std::fs::read_dir(home.root().join("pool")).map_or(Vec::new(), |d| {
        d.filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect()
    })
}

#[test]
fn a_create_claims_a_waiting_container_and_the_job_behaves_as_a_cold_one() {
    if !docker_available("a_create_claims_a_waiting_container") {
        return;
    }
    let (repo, home) = pooled(2, "docker");
    // An empty pool: the job starts cold, and says why.
    let cold = create(&home, &repo, &["--task", "cold"]);
    assert_eq!(cold["pool"]["start"], "cold", "{cold}");
    assert!(
        text(&cold["pool"], "reason").contains("no ready container"),
        "{cold}"
    );
    home.ok(&["rm", &text(&cold, "id")]);

    let filled = fill(&home, &repo);
    assert_eq!(filled["started"].as_array().unwrap().len(), 2, "{filled}");
    assert_eq!(slots_in(&home, "ready"), 2);
    let waiting: Vec<String> = slots(&home).iter().map(|s| text(s, "container")).collect();

    let job = create(
        &home,
        &repo,
        &["--task", "warm", "--memory", "300m", "--cpus", "1"],
    );
    let id = text(&job, "id");
    assert_eq!(job["pool"]["start"], "warm", "{job}");
    let slot = text(&job["pool"], "slot");
    let name = text(&job, "container_name");
    // The waiting container became the job's: renamed, the job's limits applied.
    assert!(!waiting.contains(&name), "renamed to the job's name");
    assert!(inspect(&name, "{{.Config.Labels}}").contains(&slot));
    assert_eq!(
        inspect(&name, "{{.HostConfig.Memory}}"),
        (300u64 << 20).to_string()
    );
    assert_eq!(inspect(&name, "{{.HostConfig.NanoCpus}}"), "1000000000");
    assert_eq!(slots_in(&home, "ready"), 1);
    assert_eq!(slots_in(&home, "claimed"), 1);

    // Git inside works on the job's branch, with the job's identity and environment.
    let (code, out) = exec_status(
        &home,
        &id,
        &format!(
            "test \"$PADDOCK_JOB_ID\" = {id} && git status --short && echo work > warm.txt && git add warm.txt && git commit -qm 'warm work' && git log --format=%an -1"
        ),
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("paddock agent ({id})")), "{out}");
    // The same isolation as a cold job: the link, git dir config and the object store are
    // read-only, and no mount can be made.
    for attack in [
        "echo 'gitdir: /tmp' > .git",
        "echo '[core]' >> /paddock/git/config",
        "touch /paddock/git/hooks/pre-commit",
        &format!("touch {}/.git/objects/planted", repo.path().display()),
        "mount -t tmpfs x /workspace",
        "touch /paddock-objects/planted",
    ] {
        let (code, out) = exec_status(&home, &id, attack);
        assert_ne!(code, 0, "`{attack}` worked inside a warm job: {out}");
    }
    // Another create never gets the claimed container.
    let second = create(&home, &repo, &["--task", "second"]);
    assert_eq!(second["pool"]["start"], "warm", "{second}");
    assert_ne!(text(&second["pool"], "slot"), slot);
    // A warm job reads the objects of its create through its view: the first job's synced
    // commit (landed before), not a commit made after.
    let warm_work = repo.git(&["rev-parse", &text(&job, "branch")]);
    repo.write("later.txt", "later\n");
    let later = repo.commit_all("later");
    let second_id = text(&second, "id");
    let (code, out) = exec_status(&home, &second_id, &format!("git cat-file -e {warm_work}"));
    assert_eq!(code, 0, "the view holds what was there at create: {out}");
    let (code, _) = exec_status(&home, &second_id, &format!("git cat-file -e {later}"));
    assert_ne!(
        code, 0,
        "a warm job reads an object that landed after its create"
    );
    assert_eq!(slots_in(&home, "ready"), 0);
    let third = create(&home, &repo, &["--task", "third"]);
    assert_eq!(third["pool"]["start"], "cold", "{third}");

    // rm keeps the work and takes the slot's container and mounts along.
    home.ok(&["rm", &id]);
    let branch = text(&job, "branch");
    assert_eq!(
        repo.git(&["log", "--format=%s", "-1", &branch]).trim(),
        "warm work"
    );
    assert!(!container_exists(&name), "the job's container is gone");
    assert!(!slot_dirs(&home).contains(&slot), "the slot is gone");
    assert!(
        !home.mounts().iter().any(|m| m.contains(&slot)),
        "a mount of the slot is left: {:?}",
        home.mounts()
    );
    for other in [&second, &third] {
        home.ok(&["rm", &text(other, "id")]);
    }
    assert!(
        home.docker_objects().is_empty(),
        "{:?}",
        home.docker_objects()
    );
    assert!(home.mounts().is_empty(), "{:?}", home.mounts());
    assert!(slot_dirs(&home).is_empty(), "{:?}", slot_dirs(&home));
}

#[test]
fn gvisor_jobs_start_cold_and_say_why() {
    if !docker_available("gvisor_jobs_start_cold_and_say_why") {
        return;
    }
    let (repo, home) = pooled(1, "runsc");
    let filled = fill(&home, &repo);
    assert!(filled["started"].as_array().unwrap().is_empty(), "{filled}");
    assert!(text(&filled, "note").contains("gVisor"), "{filled}");
    let job = create(&home, &repo, &[]);
    assert_eq!(job["pool"]["start"], "cold", "{job}");
    assert!(text(&job["pool"], "reason").contains("gVisor"), "{job}");
    let shown = home.ok(&["show", &text(&job, "id")]);
    assert!(shown.contains("cold start: gVisor"), "{shown}");
    home.ok(&["rm", &text(&job, "id")]);
}

#[test]
fn drain_and_an_idle_sweep_remove_waiting_containers_only() {
    if !docker_available("drain_and_an_idle_sweep_remove_waiting_containers_only") {
        return;
    }
    let (repo, home) = pooled(2, "docker");
    fill(&home, &repo);
    let job = create(&home, &repo, &[]);
    assert_eq!(job["pool"]["start"], "warm", "{job}");
    // Within the idle time the sweep keeps the waiting one.
    let report = home.json(&["sweep", "--json"]);
    assert_eq!(slots_in(&home, "ready"), 1, "{report}");
    // A day later the pool saw no claim for longer than its idle time (30m): it drains;
    // the claimed slot is the job's and stays.
    let later = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    let report = home.json(&[
        "sweep",
        "--json",
        "--now",
        &later,
        "--idle",
        "1000d",
        "--keep-finished",
        "1000d",
    ]);
    assert!(report.to_string().contains("saw no claim"), "{report}");
    assert_eq!(slots_in(&home, "ready"), 0);
    assert_eq!(slots_in(&home, "claimed"), 1);
    let (code, out) = exec_status(&home, &text(&job, "id"), "git status --short");
    assert_eq!(code, 0, "{out}");
    // A stopped warm job starts again in its container; after a reboot (which loses the
    // slot's host mounts: unmounted here) it comes back in a container that mounts its
    // files itself, still found as the slot's by the sweep.
    let id = text(&job, "id");
    let name = text(&job, "container_name");
    let container_id = inspect(&name, "{{.Id}}");
    home.ok(&["stop", &id]);
    let (code, out) = exec_status(&home, &id, "test -f src/lib.rs && git status --short");
    assert_eq!(code, 0, "{out}");
    assert_eq!(
        inspect(&name, "{{.Id}}"),
        container_id,
        "restarted, not replaced"
    );
    home.ok(&["stop", &id]);
    let slot = text(&job["pool"], "slot");
    let mnt = home.root().join("pool").join(&slot).join("mnt");
    let mut points: Vec<String> = home
        .mounts()
        .into_iter()
        .filter(|m| m.starts_with(mnt.to_str().unwrap()))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for point in points {
        assert!(
            Command::new("umount")
                .args(["-l", &point])
                .status()
                .unwrap()
                .success()
        );
    }
    let (code, out) = exec_status(&home, &id, "test -f src/lib.rs && git status --short");
    assert_eq!(code, 0, "{out}");
    assert_ne!(
        inspect(&name, "{{.Id}}"),
        container_id,
        "replaced after its mounts went"
    );
    let report = home.json(&["sweep", "--json"]);
    assert!(report["removed"].as_array().unwrap().is_empty(), "{report}");
    // The pool's size counts waiting containers: a claimed one is a job's.
    fill(&home, &repo);
    assert_eq!(slots_in(&home, "ready"), 2);
    let drained = home.json(&["pool", "drain", "--json"]);
    assert_eq!(drained["removed"].as_array().unwrap().len(), 2, "{drained}");
    assert_eq!(slots_in(&home, "claimed"), 1);
    home.ok(&["rm", &text(&job, "id")]);
    assert!(
        home.docker_objects().is_empty(),
        "{:?}",
        home.docker_objects()
    );
    assert!(home.mounts().is_empty(), "{:?}", home.mounts());
}

#[test]
fn a_claim_refills_the_pool_in_the_background() {
    if !docker_available("a_claim_refills_the_pool_in_the_background") {
        return;
    }
    let (repo, home) = pooled(1, "docker");
    let home = home.env("PADDOCK_POOL_REFILL", "on");
    fill(&home, &repo);
    let job = create(&home, &repo, &[]);
    assert_eq!(job["pool"]["start"], "warm", "{job}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while slots_in(&home, "ready") < 1 {
        assert!(Instant::now() < deadline, "no refill: {:?}", slots(&home));
        std::thread::sleep(Duration::from_millis(200));
    }
    home.ok(&["rm", &text(&job, "id")]);
    home.ok(&["pool", "drain"]);
    assert!(
        home.docker_objects().is_empty(),
        "{:?}",
        home.docker_objects()
    );
}

#[test]
fn creates_killed_during_a_claim_are_swept_clean() {
    if !docker_available("creates_killed_during_a_claim_are_swept_clean") {
        return;
    }
    let (repo, home) = pooled(1, "docker");
    let path = repo.path().display().to_string();
    for point in ["claimed", "pool-mounted"] {
        fill(&home, &repo);
        assert_eq!(slots_in(&home, "ready"), 1);
        let status = home
            .cmd(&["create", "--repo", &path, "--task", point])
            .env("PADDOCK_CRASH_AT", point)
            .output()
            .unwrap()
            .status;
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "create should die at {point}");
        crate::sweep::assert_swept_clean(&home, &repo, &format!("killed at {point}"));
        assert!(
            slot_dirs(&home).is_empty(),
            "{point}: {:?}",
            slot_dirs(&home)
        );
    }
}

#[test]
fn a_fill_killed_midway_is_swept_clean() {
    if !docker_available("a_fill_killed_midway_is_swept_clean") {
        return;
    }
    let (repo, home) = pooled(1, "docker");
    fill(&home, &repo);
    // A slot left `starting` by a filler that is gone, with its container and mounts.
    let slot = text(&slots(&home)[0], "id");
    let record = home.root().join("pool").join(&slot).join("slot.json");
    let mut value: Value = serde_json::from_slice(&std::fs::read(&record).unwrap()).unwrap();
    value["state"] =
        serde_json::json!({"state": "starting", "owner": {"pid": 999_999, "start": 1}});
    std::fs::write(&record, serde_json::to_vec(&value).unwrap()).unwrap();
    let report = home.json(&["sweep", "--json"]);
    assert!(report.to_string().contains("killed fill"), "{report}");
    assert!(
        home.docker_objects().is_empty(),
        "{:?}",
        home.docker_objects()
    );
    assert!(home.mounts().is_empty(), "{:?}", home.mounts());
    assert!(slot_dirs(&home).is_empty());
}
