//! Per-job disk limits (`--disk`): writing past the limit fails inside the job with ENOSPC
//! while the host keeps its space, deleting gives the space back, the job keeps working and
//! its work reaches the branch; a limit implies the overlay checkout and is refused with an
//! explicit worktree one; removal and the sweep leave no mount and no loop device.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::fixtures::{FixtureRepo, TestHome, disk_available, docker_available, text};
use serde_json::Value;

pub(crate) const MIB: u64 = 1 << 20;

/// `paddock exec JOB --json -- sh -c SCRIPT`: the exec's result.
pub(crate) fn sh(home: &TestHome, id: &str, script: &str) -> Value {
    let output = home.run(&["exec", id, "--json", "--", "sh", "-c", script]);
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "exec {script:?} printed no result ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// Bytes free on the filesystem holding `path`, once everything written is on it (the
/// job's writes pass through its own filesystem's cache and the loop device first).
pub(crate) fn host_free(path: &Path) -> u64 {
    Command::new("sync").status().expect("sync runs");
    let output = Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(path)
        .output()
        .expect("df runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .nth(1)
        .and_then(|line| line.trim().parse().ok())
        .expect("df prints the free bytes")
}

/// What the job's disk image takes on the host (its allocated blocks: it is sparse).
pub(crate) fn image_bytes(home: &TestHome, id: &str) -> u64 {
    let image = home.root().join("work").join(id).join("overlay/disk.img");
    std::fs::metadata(&image)
        .unwrap_or_else(|e| panic!("{}: {e}", image.display()))
        .blocks()
        * 512
}

/// The type of the mount at `path`, from the mount table (what `findmnt` shows).
pub(crate) fn mount_type(path: &Path) -> Option<String> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    table.lines().rev().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        (Path::new(before.split(' ').nth(4)?) == path)
            .then(|| after.split(' ').next().unwrap_or_default().to_string())
    })
}

/// Waits up to 10 s for `done` (the kernel frees a loop device, or punches the holes of a
/// discard, a moment after the call that asked for it).
pub(crate) fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < Duration::from_secs(10), "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn fill_the_disk_inside_a_container(extra: &[&str], test: &str) {
    if !docker_available(test) || !disk_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    // Its own 1 GiB filesystem: what the job takes from it is all that changes its free space
    // (and a limit that did not hold would let the job fill it).
    let home = TestHome::new().on_own_filesystem("1g");
    let mut args = vec!["--task", "disk"];
    args.extend_from_slice(extra);
    let before = host_free(&home.root());
    let job = home.create_docker(&repo, &args);
    let id = text(&job, "id");
    assert_eq!(job["disk"]["limit_bytes"], 200 * MIB, "{job}");
    let worktree = Path::new(&text(&job, "worktree")).to_path_buf();
    let layers = home.root().join("work").join(&id).join("overlay/layers");
    assert_eq!(mount_type(&worktree).as_deref(), Some("overlay"), "{job}");
    assert_eq!(mount_type(&layers).as_deref(), Some("ext4"));

    let result = sh(
        &home,
        &id,
        "dd if=/dev/zero of=big bs=1M count=1024 2>&1; echo \"dd exit $?\"",
    );
    let output = text(&result, "stdout");
    assert!(
        output.contains("No space left on device"),
        "dd should run out of space: {result}"
    );
    assert!(!output.contains("dd exit 0"), "{result}");
    let dropped = before.saturating_sub(host_free(&home.root()));
    assert!(
        dropped <= 210 * MIB,
        "the host lost {} MiB to a job limited to 200 MiB",
        dropped / MIB
    );
    assert!(image_bytes(&home, &id) <= 200 * MIB);
    let shown = home.json(&["show", &id, "--json"]);
    let disk = &shown["job"]["disk"];
    assert_eq!(disk["limit_bytes"], 200 * MIB, "{shown}");
    assert!(disk["used_bytes"].as_u64().unwrap() > 150 * MIB, "{disk}");
    assert!(disk["free_bytes"].as_u64().unwrap() < 10 * MIB, "{disk}");

    // Deleting the file gives the space back, to the job and (discard) to the host, and the
    // job works on: a new file, a commit.
    let result = sh(
        &home,
        &id,
        "rm big && sync && echo kept > after.txt && git add after.txt && git commit -q -m 'after the full disk' && git log -1 --format=%s",
    );
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(text(&result, "stdout").trim(), "after the full disk");
    eventually("the deleted file's blocks go back to the host", || {
        image_bytes(&home, &id) < 50 * MIB
    });
    let shown = home.json(&["show", &id, "--json"]);
    assert!(
        shown["job"]["disk"]["used_bytes"].as_u64().unwrap() < 20 * MIB,
        "{shown}"
    );
    let human = home.ok(&["show", &id]);
    assert!(
        human
            .lines()
            .any(|l| l.starts_with("disk ") && l.contains(" of 200.0 MiB (")),
        "{human}"
    );
    let listed = home.json(&["ls", "--json"]);
    assert_eq!(listed[0]["disk"]["limit_bytes"], 200 * MIB, "{listed}");

    home.ok(&["rm", &id]);
    assert_eq!(
        repo.git(&["log", "-1", "--format=%s", "agent/agent/disk"]),
        "after the full disk"
    );
    assert_eq!(home.mounts(), Vec::<String>::new(), "rm left a mount");
    eventually("rm frees the loop device", || {
        home.loop_devices().is_empty()
    });
    assert_eq!(home.job_dirs(), 0);
}

#[test]
fn a_full_disk_fails_writes_inside_the_job_and_spares_the_host() {
    fill_the_disk_inside_a_container(
        &["--checkout", "overlay", "--disk", "200m"],
        "a_full_disk_fails_writes_inside_the_job_and_spares_the_host",
    );
}

#[test]
fn a_disk_limit_alone_implies_the_overlay_checkout() {
    fill_the_disk_inside_a_container(
        &["--disk", "200m"],
        "a_disk_limit_alone_implies_the_overlay_checkout",
    );
}

#[test]
fn a_disk_limit_with_a_worktree_checkout_is_refused_before_anything_is_made() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let path = repo.path().display().to_string();
    let refused = |args: &[&str], env: Option<&str>, says: &str| {
        let mut command =
            home.cmd(&[&["create", "--repo", &path, "--runtime", "process"], args].concat());
        command.env_remove("PADDOCK_CHECKOUT");
        if let Some(value) = env {
            command.env("PADDOCK_CHECKOUT", value);
        }
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(4), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert_eq!(home.job_records(), 0, "{args:?} reserved a job");
        assert_eq!(home.job_dirs(), 0, "{args:?} made a job dir");
        assert_eq!(repo.branches(), vec!["main".to_string()]);
    };
    refused(
        &["--checkout", "worktree", "--disk", "200m"],
        None,
        "a disk limit needs the overlay checkout, but `--checkout worktree` asks for a worktree checkout",
    );
    refused(
        &["--checkout", "worktree", "--disk", "200m"],
        None,
        "--checkout overlay",
    );
    refused(
        &["--disk", "200m"],
        Some("worktree"),
        "`PADDOCK_CHECKOUT=worktree`",
    );
    repo.write(
        ".paddock.yaml",
        "profiles:\n  default:\n    checkout: worktree\n",
    );
    refused(&["--disk", "200m"], None, ".paddock.yaml");
    std::fs::remove_file(repo.path().join(".paddock.yaml")).unwrap();
    refused(
        &["--checkout", "overlay", "--disk", "1m"],
        None,
        "disk limit `1m` is too small",
    );
}

#[test]
fn a_disk_limit_is_refused_when_paddock_is_not_root() {
    if Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() != "0")
    {
        // Already unprivileged: the refusal is what every create with --disk gets here.
        return;
    }
    let uid = "4242";
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    crate::fixtures::chown_trees(&[repo.dir.path(), home.dir.path()], 4242);
    let output = Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
            "--",
            env!("CARGO_BIN_EXE_paddock"),
            "create",
            "--repo",
            repo.path().to_str().unwrap(),
            "--runtime",
            "process",
            "--disk",
            "200m",
        ])
        .envs(home.envs.iter().map(|(k, v)| (k, v)))
        .env("HOME", home.dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("a disk limit is not available on this machine: paddock is not root"),
        "{stderr}"
    );
    assert!(stderr.contains("paddock doctor"), "{stderr}");
    let status = Command::new("chown")
        .args(["-R", "0:0", repo.path().to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(home.job_records(), 0);
    assert_eq!(repo.branches(), vec!["main".to_string()]);
}

#[test]
fn creates_with_a_disk_failing_at_any_step_leave_nothing() {
    if !disk_available("creates_with_a_disk_failing_at_any_step_leave_nothing") {
        return;
    }
    crate::installs::fail_at_every_point(&["--runtime", "process", "--disk", "32m"], false);
}

#[test]
fn creates_with_a_disk_killed_at_every_step_are_swept_clean() {
    if !disk_available("creates_with_a_disk_killed_at_every_step_are_swept_clean") {
        return;
    }
    crate::sweep::crash_at_every_point(&["--runtime", "process", "--disk", "32m"]);
}
