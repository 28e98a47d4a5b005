//! The sweeper: crash recovery, orphans, staleness, the daemon's activity watcher, and two
//! sweeps at once — all through the real binary, real repositories and (where marked) the
//! real Docker daemon.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::fixtures::{
    FixtureRepo, TestHome, container_of, docker_available, git, test_image, text,
};
use serde_json::Value;

use paddock::engine::CRASH_POINTS;

fn home_id(home: &TestHome) -> String {
    std::fs::read_to_string(home.root().join("home-id"))
        .unwrap()
        .trim()
        .to_string()
}

fn our_containers(home: &TestHome) -> Vec<String> {
    let Ok(id) = std::fs::read_to_string(home.root().join("home-id")) else {
        return Vec::new();
    };
    let output = Command::new("docker")
        .args([
            "ps",
            "-a",
            "--format",
            "{{.Names}}",
            "--filter",
            &format!("label=dev.paddock.home={}", id.trim()),
        ])
        .output();
    match output {
        Ok(o) => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// One field of every item a sweep report says it removed.
fn removed_field(report: &Value, field: &str) -> Vec<String> {
    report["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| text(item, field))
        .collect()
}

fn sweep(home: &TestHome, extra: &[&str]) -> Value {
    let mut args = vec!["sweep", "--json"];
    args.extend_from_slice(extra);
    home.json(&args)
}

/// After a sweep: no container, worktree directory, git worktree entry, branch without
/// commits or record is left, and a second sweep finds nothing to do.
pub(crate) fn assert_swept_clean(home: &TestHome, repo: &FixtureRepo, context: &str) {
    let report = sweep(home, &[]);
    assert!(
        report["errors"].as_array().unwrap().is_empty(),
        "{context}: {report}"
    );
    assert!(
        our_containers(home).is_empty(),
        "{context}: containers left: {:?}",
        our_containers(home)
    );
    assert_eq!(
        home.worktree_dirs(),
        0,
        "{context}: worktree directory left"
    );
    assert_eq!(
        repo.worktree_count(),
        1,
        "{context}: git worktree entry left"
    );
    assert_eq!(repo.worktree_admin_dirs(), 0, "{context}: admin dir left");
    assert_eq!(home.job_dirs(), 0, "{context}: job git dir left");
    assert_eq!(
        repo.branches(),
        vec!["main".to_string()],
        "{context}: branch left"
    );
    assert_eq!(home.job_records(), 0, "{context}: record left");
    assert_eq!(home.mounts(), Vec::<String>::new(), "{context}: mount left");
    assert_eq!(
        home.loop_devices(),
        Vec::<String>::new(),
        "{context}: loop device left"
    );
    let again = sweep(home, &[]);
    assert!(
        again["removed"].as_array().unwrap().is_empty(),
        "{context}: second sweep acted: {again}"
    );
    assert!(
        again["errors"].as_array().unwrap().is_empty(),
        "{context}: {again}"
    );
}

/// Kills a create (with these extra flags) at each of its crash points in turn, and checks
/// that one sweep after each leaves nothing.
pub(crate) fn crash_at_every_point(runtime: &[&str]) {
    let repo = FixtureRepo::with_files(200, 300);
    let home = TestHome::new();
    let path = repo.path().display().to_string();
    // The pristine checkout and the mount are steps of overlay checkouts only (a disk limit
    // implies one), the disk a step of jobs with a disk limit, or (as root) of container
    // jobs without one (their git disk).
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let limit = runtime.contains(&"--disk");
    let disk = limit || (runtime.contains(&"docker") && root);
    let overlay = limit
        || runtime.contains(&"overlay")
        || !runtime.contains(&"worktree") && crate::fixtures::current_checkout() == "overlay";
    for point in CRASH_POINTS {
        if !overlay && matches!(*point, "pristine" | "mounted") || !disk && *point == "disk" {
            continue;
        }
        // Passed by warm starts only (tests/it/pool.rs kills creates there).
        if matches!(*point, "claimed" | "pool-mounted") {
            continue;
        }
        let mut args = vec!["create", "--repo", &path, "--task", point];
        args.extend_from_slice(runtime);
        let status = home
            .cmd(&args)
            .env("PADDOCK_CRASH_AT", point)
            .output()
            .unwrap()
            .status;
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(9), "create should die at {point}");
        assert_swept_clean(&home, &repo, &format!("{runtime:?} killed at {point}"));
    }
}

#[test]
fn creates_killed_at_every_step_are_swept_clean_process_runtime() {
    // The overlay's own steps are the overlay tests' below: this one pins the other kind.
    crash_at_every_point(&["--runtime", "process", "--checkout", "worktree"]);
}

#[test]
fn overlay_creates_killed_at_every_step_are_swept_clean_process_runtime() {
    if !crate::fixtures::overlay_available(
        "overlay_creates_killed_at_every_step_are_swept_clean_process_runtime",
    ) {
        return;
    }
    crash_at_every_point(&["--runtime", "process", "--checkout", "overlay"]);
}

#[test]
fn overlay_creates_killed_at_every_step_are_swept_clean_docker_runtime() {
    if !docker_available("overlay_creates_killed_at_every_step_are_swept_clean_docker_runtime")
        || !crate::fixtures::overlay_available(
            "overlay_creates_killed_at_every_step_are_swept_clean_docker_runtime",
        )
    {
        return;
    }
    let image = test_image();
    crash_at_every_point(&[
        "--runtime",
        "docker",
        "--image",
        &image,
        "--checkout",
        "overlay",
    ]);
}

#[test]
fn creates_killed_at_every_step_are_swept_clean_docker_runtime() {
    if !docker_available("creates_killed_at_every_step_are_swept_clean_docker_runtime") {
        return;
    }
    let image = test_image();
    crash_at_every_point(&[
        "--runtime",
        "docker",
        "--image",
        &image,
        "--checkout",
        "worktree",
    ]);
}

#[test]
fn creates_killed_at_random_times_on_a_large_repo_are_swept_clean() {
    crate::fixtures::each_checkout(|| {
        let repo = FixtureRepo::with_files(20_000, 300);
        let home = TestHome::new();
        let path = repo.path().display().to_string();
        for (i, delay_ms) in [5u64, 20, 40, 80, 160, 320, 640].into_iter().enumerate() {
            let task = format!("timed-{i}");
            let mut child = home
                .cmd(&[
                    "create",
                    "--repo",
                    &path,
                    "--task",
                    &task,
                    "--runtime",
                    "process",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(delay_ms));
            let _ = child.kill();
            let _ = child.wait();
            // git children die with paddock; give any straggler a moment to prove otherwise.
            std::thread::sleep(Duration::from_millis(200));
            // A create that finished before the kill is a live job, not debris: remove it.
            for job in home.json(&["ls", "--json"]).as_array().unwrap() {
                if job["state"] == "ready" {
                    home.ok(&["rm", &text(job, "id")]);
                }
            }
            assert_swept_clean(&home, &repo, &format!("killed after {delay_ms}ms"));
        }
    });
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn orphans_of_ours_are_removed_and_nothing_else_is_touched() {
    crate::fixtures::each_checkout(|| {
        if !docker_available("orphans_of_ours_are_removed_and_nothing_else_is_touched") {
            return;
        }
        let repo = FixtureRepo::new();
        let home = TestHome::new();
        let image = test_image();
        // A job whose record vanished: its container and its checkout become orphans.
        let job = home.create(
            &repo,
            &["--task", "orphan", "--runtime", "docker", "--image", &image],
        );
        let id = text(&job, "id");
        let worktree = text(&job, "worktree");
        std::fs::write(Path::new(&worktree).join("unsaved.txt"), "agent work\n").unwrap();
        std::fs::remove_file(home.root().join("jobs").join(format!("{id}.json"))).unwrap();

        // Not ours: no labels, only the job label, another install's home label, a directory
        // under our root without a marker, and a directory outside our root.
        // Ours, named as before names carried the install: reaped all the same.
        let old_named = format!("paddock-{id}-old");
        let status = Command::new("docker")
            .args(["create", "--name", &old_named])
            .args(["--label", &format!("dev.paddock.job={id}-old")])
            .args(["--label", &format!("dev.paddock.home={}", home_id(&home))])
            .arg(&image)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
        let unlabelled = format!("paddock-test-unlabelled-{id}");
        let job_label_only = format!("paddock-test-joblabel-{id}");
        let other_home = format!("paddock-test-otherhome-{id}");
        for (name, labels) in [
            (&unlabelled, vec![]),
            (
                &job_label_only,
                vec!["--label".to_string(), format!("dev.paddock.job={id}")],
            ),
            (
                &other_home,
                vec![
                    "--label".to_string(),
                    "dev.paddock.job=x".to_string(),
                    "--label".to_string(),
                    "dev.paddock.home=someone-else".to_string(),
                ],
            ),
        ] {
            let mut args = vec!["create".to_string(), "--name".to_string(), name.clone()];
            args.extend(labels);
            args.push(image.clone());
            let status = Command::new("docker")
                .args(&args)
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
        }
        let stray_key = home.root().join("worktrees").join("elsewhere-00000000");
        std::fs::create_dir_all(stray_key.join("not-ours")).unwrap();
        std::fs::write(stray_key.join("not-ours").join("keep.txt"), "keep").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("keep.txt"), "keep").unwrap();

        let report = sweep(&home, &[]);
        let removed: Vec<(String, String)> = report["removed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| (text(i, "kind"), text(i, "name")))
            .collect();
        assert!(
            removed.contains(&("container".into(), container_of(&job))),
            "{report}"
        );
        assert!(
            removed.contains(&("container".into(), old_named.clone())),
            "{report}"
        );
        assert!(
            removed.contains(&("worktree".into(), worktree.clone())),
            "{report}"
        );
        assert!(!Path::new(&worktree).exists());
        // The orphan's uncommitted work was saved before its checkout was deleted.
        assert_eq!(
            git(
                &wip_store(&home),
                &["show", &format!("refs/paddock/wip/{id}:unsaved.txt")]
            ),
            "agent work"
        );

        let exists = |name: &str| {
            Command::new("docker")
                .args(["container", "inspect", name])
                .output()
                .unwrap()
                .status
                .success()
        };
        assert!(!exists(&old_named), "the old-named orphan went");
        assert!(exists(&unlabelled) && exists(&job_label_only) && exists(&other_home));
        assert!(stray_key.join("not-ours/keep.txt").exists());
        assert!(outside.path().join("keep.txt").exists());
        assert_eq!(home_id(&home).len(), 16);
        for name in [&unlabelled, &job_label_only, &other_home] {
            let _ = Command::new("docker").args(["rm", "-f", name]).output();
        }
    });
}

/// Moves a job's timestamps and its files' mtimes `hours` into the past.
fn backdate(home: &TestHome, id: &str, hours: i64) {
    let path = home.root().join("jobs").join(format!("{id}.json"));
    let mut record: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let then = (chrono::Utc::now() - chrono::TimeDelta::hours(hours)).to_rfc3339();
    for key in ["created_at", "last_activity_at"] {
        record[key] = Value::String(then.clone());
    }
    if !record["finished_at"].is_null() {
        record["finished_at"] = Value::String(then.clone());
    }
    std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
    let worktree = record["worktree"].as_str().unwrap();
    let status = Command::new("sh")
        .args([
            "-c",
            &format!("find '{worktree}' -exec touch -h -d '{hours} hours ago' {{}} +"),
        ])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn only_stale_jobs_are_removed_and_no_work_is_lost() {
    crate::fixtures::each_checkout(|| {
        let repo = FixtureRepo::new();
        let home = TestHome::new();
        let idle_wip = home.create(&repo, &["--task", "idle-wip", "--runtime", "process"]);
        let idle_commits = home.create(&repo, &["--task", "idle-commits", "--runtime", "process"]);
        let fresh = home.create(&repo, &["--task", "fresh", "--runtime", "process"]);
        let finished = home.create(&repo, &["--task", "finished", "--runtime", "process"]);

        std::fs::write(
            Path::new(&text(&idle_wip, "worktree")).join("draft.txt"),
            "draft\n",
        )
        .unwrap();
        let wt = text(&idle_commits, "worktree");
        std::fs::write(Path::new(&wt).join("done.txt"), "done\n").unwrap();
        git(Path::new(&wt), &["add", "done.txt"]);
        git(Path::new(&wt), &["commit", "-q", "-m", "done"]);
        backdate(&home, &text(&idle_wip, "id"), 3);
        backdate(&home, &text(&idle_commits, "id"), 3);
        home.ok(&["exec", &text(&finished, "id"), "--", "true"]);

        // A dry run changes nothing.
        let dry = sweep(&home, &["--dry-run"]);
        assert_eq!(dry["removed"].as_array().unwrap().len(), 2, "{dry}");
        assert_eq!(home.job_records(), 4);

        let report = sweep(&home, &[]);
        let removed = removed_field(&report, "name");
        assert_eq!(removed.len(), 2, "{report}");
        assert!(
            removed.contains(&text(&idle_wip, "id"))
                && removed.contains(&text(&idle_commits, "id"))
        );
        assert!(Path::new(&text(&fresh, "worktree")).exists());
        assert!(Path::new(&text(&finished, "worktree")).exists());
        // The branch with commits stays; the one without goes, its work saved in the wip ref.
        assert_eq!(
            repo.git(&["log", "-1", "--format=%s", "agent/agent/idle-commits"]),
            "done"
        );
        assert!(
            !repo
                .branches()
                .contains(&"agent/agent/idle-wip".to_string())
        );
        let wip = format!("refs/paddock/wip/{}", text(&idle_wip, "id"));
        assert_eq!(
            git(&wip_store(&home), &["show", &format!("{wip}:draft.txt")]),
            "draft"
        );

        // keep_finished: the finished job goes once it has been finished long enough; --now
        // moves the clock instead of waiting.
        let later = (chrono::Utc::now() + chrono::TimeDelta::minutes(30)).to_rfc3339();
        let report = sweep(&home, &["--keep-finished", "10m", "--now", &later]);
        let removed = removed_field(&report, "name");
        assert_eq!(removed, vec![text(&finished, "id")], "{report}");
        // max_age catches the rest.
        let report = sweep(&home, &["--max-age", "20m", "--now", &later]);
        assert_eq!(
            report["removed"][0]["name"],
            text(&fresh, "id").as_str(),
            "{report}"
        );
        assert_eq!(home.job_records(), 0);
    });
}

#[test]
fn the_daemon_watcher_moves_last_activity_on_file_writes() {
    crate::fixtures::each_checkout(|| {
        let repo = FixtureRepo::new();
        let home = TestHome::new();
        let job = home.create(&repo, &["--task", "watched", "--runtime", "process"]);
        let id = text(&job, "id");
        backdate(&home, &id, 2);
        let mut daemon = home
            .cmd(&["serve", "--sweep-interval", "1h", "--idle", "5h"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(800));
        let before = chrono::Utc::now();
        std::fs::write(
            Path::new(&text(&job, "worktree")).join("edit.txt"),
            "typing\n",
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let moved = loop {
            let shown = home.json(&["show", &id, "--json"]);
            let last: chrono::DateTime<chrono::Utc> = shown["job"]["last_activity_at"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap();
            if last >= before - chrono::TimeDelta::seconds(1) {
                break true;
            }
            if Instant::now() > deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        // SIGTERM stops the daemon.
        send_sigterm(daemon.id());
        let status = daemon.wait().unwrap();
        assert!(moved, "last_activity_at did not move while serve ran");
        assert!(
            status.success(),
            "serve exits cleanly on SIGTERM: {status:?}"
        );
    });
}

fn send_sigterm(pid: u32) {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn two_sweeps_at_once_do_not_both_act() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let mut ids = Vec::new();
    for i in 0..6 {
        let job = home.create(
            &repo,
            &["--task", &format!("stale-{i}"), "--runtime", "process"],
        );
        backdate(&home, &text(&job, "id"), 3);
        ids.push(text(&job, "id"));
    }
    let sweeps: Vec<_> = (0..2)
        .map(|_| {
            home.cmd(&["sweep", "--json"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut removed = Vec::new();
    for sweep in sweeps {
        let output = sweep.wait_with_output().unwrap();
        assert!(output.status.success());
        let report: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert!(report["errors"].as_array().unwrap().is_empty(), "{report}");
        removed.extend(
            report["removed"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| text(i, "name")),
        );
    }
    removed.sort();
    ids.sort();
    assert_eq!(removed, ids, "each stale job removed exactly once");
}

#[test]
fn stale_index_locks_go_and_fresh_ones_stay() {
    crate::fixtures::each_checkout(|| {
        let repo = FixtureRepo::new();
        let home = TestHome::new();
        let stale = home.create(&repo, &["--task", "stale-lock", "--runtime", "process"]);
        let fresh = home.create(&repo, &["--task", "fresh-lock", "--runtime", "process"]);
        let lock_of = |job: &Value| {
            let record: Value = serde_json::from_slice(
                &std::fs::read(
                    home.root()
                        .join("jobs")
                        .join(format!("{}.json", text(job, "id"))),
                )
                .unwrap(),
            )
            .unwrap();
            Path::new(record["git_dir"].as_str().unwrap()).join("index.lock")
        };
        let (old_lock, new_lock) = (lock_of(&stale), lock_of(&fresh));
        std::fs::write(&old_lock, "").unwrap();
        std::fs::write(&new_lock, "").unwrap();
        let status = Command::new("touch")
            .args(["-d", "1 hour ago"])
            .arg(&old_lock)
            .status()
            .unwrap();
        assert!(status.success());
        let report = sweep(&home, &[]);
        let removed = removed_field(&report, "kind");
        assert_eq!(removed, vec!["index-lock".to_string()], "{report}");
        assert!(!old_lock.exists());
        assert!(
            new_lock.exists(),
            "a recent lock may belong to a running git"
        );
        // With the stale lock gone, git works in that worktree again.
        git(Path::new(&text(&stale, "worktree")), &["add", "-A"]);
    });
}

/// paddock's wip store of the test's one repository, where `rm` and the sweep save
/// uncommitted work.
fn wip_store(home: &TestHome) -> std::path::PathBuf {
    let stores: Vec<_> = std::fs::read_dir(home.root().join("wip"))
        .expect("a wip store was made")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "git"))
        .collect();
    assert_eq!(stores.len(), 1, "{stores:?}");
    stores[0].clone()
}
