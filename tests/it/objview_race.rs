//! Issue 41: a create right after a big commit. The commit leaves tens of thousands of loose
//! objects, so git's background auto-gc packs them and prunes the loose files while the
//! container jobs' views of the object store (`git::objview`) are made; a `git repack -ad`
//! replaces every pack. Every create succeeds (runc and gVisor, worktree and overlay
//! checkouts), and inside every job git finds every object of its base.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::fixtures::{
    FixtureRepo, TestHome, docker_available, overlay_available, test_image, text,
};

/// Files in the big commit: loose objects three times `gc --auto`'s threshold (6,700, which
/// git estimates from one of the 256 fan-out directories).
const FILES: usize = 20_000;

/// Rounds of "loose objects, auto-gc starts, jobs are created at once" (a last round, with
/// `repack -ad` in a loop, follows). One: each round holds four creates of 20,000-file
/// checkouts, minutes of this machine; a second one repeated the same race and assertions.
const GC_ROUNDS: usize = 1;

/// A repository whose last commit wrote [`FILES`] new files, with a copy (hard links) of
/// the loose objects it left, to put back before each round.
fn big_commit() -> (FixtureRepo, tempfile::TempDir) {
    let repo = FixtureRepo::new();
    for n in 0..FILES {
        let dir = repo.path().join(format!("gen/d{:03}", n / 100));
        if n % 100 == 0 {
            std::fs::create_dir_all(&dir).expect("mkdir");
        }
        std::fs::write(dir.join(format!("f{n:05}.txt")), format!("generated {n}\n"))
            .expect("write");
    }
    repo.commit_all("a big generated tree");
    let saved = tempfile::tempdir().expect("tempdir");
    let copied = Command::new("cp")
        .args(["-r", "-l"])
        .arg(store(&repo))
        .arg(saved.path().join("objects"))
        .status()
        .expect("cp runs");
    assert!(copied.success(), "saving the loose objects");
    (repo, saved)
}

fn store(repo: &FixtureRepo) -> PathBuf {
    repo.path().join(".git/objects")
}

/// Puts the saved loose objects back (a commit of the same files would write them again).
fn put_loose(saved: &Path, repo: &FixtureRepo) {
    let status = Command::new("cp")
        .args(["-r", "-l", "-n", "-T"])
        .arg(saved.join("objects"))
        .arg(store(repo))
        .status()
        .expect("cp runs");
    assert!(status.success(), "putting the loose objects back");
}

fn loose_count(repo: &FixtureRepo) -> usize {
    let counted = repo.git(&["count-objects"]);
    counted
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("count-objects: {counted}"))
}

/// Waits (up to two minutes) for a background gc of `repo` to end.
fn wait_for_gc(repo: &FixtureRepo) {
    let pid = repo.path().join(".git/gc.pid");
    let deadline = Instant::now() + Duration::from_secs(120);
    while pid.exists() {
        assert!(
            Instant::now() < deadline,
            "git gc --auto still runs after two minutes"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The job kinds the issue names: runc and gVisor, each with both checkouts.
fn kinds(test: &str) -> Vec<(&'static str, &'static str)> {
    let mut kinds = vec![("docker", "worktree"), ("runsc", "worktree")];
    if overlay_available(test) {
        kinds.extend([("docker", "overlay"), ("runsc", "overlay")]);
    }
    kinds
}

/// Creates one job of each kind at once (threads), each asserting its create succeeded;
/// then checks inside each that git finds every object its base reaches, and removes it.
fn create_all_at_once(home: &TestHome, repo: &FixtureRepo, kinds: &[(&str, &str)], round: &str) {
    let image = test_image();
    let jobs: Vec<Value> = std::thread::scope(|scope| {
        let handles: Vec<_> = kinds
            .iter()
            .map(|(runtime, checkout)| {
                let task = format!("{round}-{runtime}-{checkout}");
                let image = image.clone();
                scope.spawn(move || {
                    let args = [
                        "--runtime",
                        runtime,
                        "--checkout",
                        checkout,
                        "--image",
                        &image,
                    ];
                    let mut args = args.to_vec();
                    args.extend(["--task", task.as_str()]);
                    home.create(repo, &args)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a create thread does not panic"))
            .collect()
    });
    for job in &jobs {
        let id = text(job, "id");
        // Every object of the base, blobs included, is there (rev-list fails on a missing
        // one), and the object store's links hold (fsck, without hashing every blob).
        let out = home.sh(
            &id,
            "git rev-list --objects --quiet HEAD && git fsck --connectivity-only --no-dangling && echo whole",
        );
        assert!(out.trim_end().ends_with("whole"), "{round} {job}: {out}");
        home.ok(&["rm", "--force", &id]);
    }
}

#[test]
fn creates_right_after_a_big_commit_succeed_while_auto_gc_packs_and_repack_replaces_packs() {
    let test =
        "creates_right_after_a_big_commit_succeed_while_auto_gc_packs_and_repack_replaces_packs";
    if !docker_available(test) {
        return;
    }
    let (repo, saved) = big_commit();
    let home = TestHome::new();
    let kinds = kinds(test);
    for round in 0..GC_ROUNDS {
        if round > 0 {
            put_loose(saved.path(), &repo);
        }
        let loose = loose_count(&repo);
        assert!(loose > FILES, "round {round}: {loose} loose objects");
        // As after `git commit`: gc --auto sees the loose objects and goes to the background.
        let gc = Command::new("git")
            .args(["-c", "gc.autoDetach=true", "gc", "--auto", "--quiet"])
            .current_dir(repo.path())
            .status()
            .expect("git gc runs");
        assert!(gc.success());
        create_all_at_once(&home, &repo, &kinds, &format!("gc{round}"));
        wait_for_gc(&repo);
        assert!(
            loose_count(&repo) < loose / 10,
            "round {round}: auto-gc packed the loose objects"
        );
    }
    // And with every pack replaced again and again meanwhile.
    put_loose(saved.path(), &repo);
    let stop = Arc::new(AtomicBool::new(false));
    let repacks = {
        let (stop, path) = (stop.clone(), repo.path().to_path_buf());
        std::thread::spawn(move || {
            let mut runs = 0;
            while !stop.load(Ordering::Relaxed) {
                let out = Command::new("git")
                    .args(["repack", "-a", "-d", "-q"])
                    .current_dir(&path)
                    .output()
                    .expect("git repack runs");
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                runs += 1;
            }
            runs
        })
    };
    create_all_at_once(&home, &repo, &kinds, "repack");
    stop.store(true, Ordering::Relaxed);
    assert!(
        repacks.join().expect("the repack thread") >= 1,
        "repack ran"
    );
    let fsck = Command::new("git")
        .args(["fsck", "--no-dangling"])
        .current_dir(repo.path())
        .status()
        .expect("git fsck runs");
    assert!(fsck.success(), "the repository stays whole");
}
