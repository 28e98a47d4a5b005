//! What a job can write on the host is capped (issue 26): under `--disk` its git dir and
//! outbox (mounted read-write at `/paddock/git` and `/paddock/outbox`) live on the job's
//! disk with its checkout's changes, so writing past the limit there fails inside the job
//! and the host grows by at most the limit; without `--disk`, a container job made as root
//! gets a git disk of its own (`git_disk`, default 2g) for them, while its checkout stays
//! unbounded. Either way the job works on after a full disk, and `rm` leaves no mount.

use std::path::{Path, PathBuf};

use crate::disk::{MIB, eventually, host_free, image_bytes, mount_type, sh};
use crate::fixtures::{FixtureRepo, TestHome, disk_available, docker_available, text};
use serde_json::Value;

/// The job's record on disk (the fields the API does not show: its git dir, its git disk).
fn record(home: &TestHome, id: &str) -> Value {
    let path = home.root().join("jobs").join(format!("{id}.json"));
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

/// Writes 500 MiB of zeros at `target` inside the job; returns the exec's output and exit
/// line (every error goes to stdout with it).
fn write_500m(home: &TestHome, id: &str, target: &str) -> String {
    let result = sh(
        home,
        id,
        &format!("exec 2>&1; head -c 500M /dev/zero >{target}; echo \"write exit $?\""),
    );
    text(&result, "stdout")
}

fn assert_no_space(output: &str, target: &str) {
    assert!(
        output.contains("No space left on device"),
        "writing 500 MiB at {target} should run out of space: {output}"
    );
    assert!(!output.contains("write exit 0"), "{target}: {output}");
}

/// The job's disk mount on the host (`work/<id>/overlay/layers`).
fn disk_mount(home: &TestHome, id: &str) -> PathBuf {
    home.root().join("work").join(id).join("overlay/layers")
}

/// A worktree-checkout job on its git disk with one commit (`subject`), stopped: what a
/// reboot keeps of a job but its disk's mount.
fn committed_and_stopped(home: &TestHome, repo: &FixtureRepo, task: &str, subject: &str) -> Value {
    let job = home.create_docker(repo, &["--task", task, "--checkout", "worktree"]);
    let id = text(&job, "id");
    let result = sh(
        home,
        &id,
        &format!("echo one > one.txt && git add one.txt && git commit -q -m '{subject}'"),
    );
    assert_eq!(result["exit_code"], 0, "{result}");
    home.ok(&["stop", &id]);
    job
}

/// Unmounts the job's disk in this mount namespace, as a reboot would; returns the mount point.
fn unmount_disk(home: &TestHome, id: &str) -> PathBuf {
    let mount = disk_mount(home, id);
    let status = std::process::Command::new("umount")
        .arg(&mount)
        .status()
        .expect("umount runs");
    assert!(status.success());
    assert_eq!(mount_type(&mount), None);
    mount
}

/// The last commit's subject on `branch` of the user's repository.
fn branch_subject(repo: &FixtureRepo, branch: &str) -> String {
    repo.git(&["log", "-1", "--format=%s", branch])
}

/// Removes the job and checks it leaves no mount, no loop device and no job dir.
fn remove_clean(home: &TestHome, id: &str) {
    home.ok(&["rm", id, "--keep-branch"]);
    assert_eq!(home.mounts(), Vec::<String>::new(), "rm left a mount");
    eventually("rm frees the loop device", || {
        home.loop_devices().is_empty()
    });
    assert_eq!(home.job_dirs(), 0);
}

#[test]
fn under_a_disk_limit_the_git_dir_and_outbox_count_against_it() {
    let test = "under_a_disk_limit_the_git_dir_and_outbox_count_against_it";
    if !docker_available(test) || !disk_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    // Its own filesystem: what the job takes from it is all that changes its free space.
    let home = TestHome::new().on_own_filesystem("1g");
    let before = host_free(&home.root());
    let job = home.create_docker(&repo, &["--task", "caps", "--disk", "64m"]);
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    let saved = record(&home, &id);
    let git_dir = PathBuf::from(text(&saved, "git_dir"));
    assert_eq!(git_dir, disk_mount(&home, &id).join("git"), "{saved}");
    assert!(saved.get("git_disk").is_none(), "{saved}");
    assert_eq!(mount_type(&disk_mount(&home, &id)).as_deref(), Some("ext4"));
    assert!(disk_mount(&home, &id).join("outbox").is_dir());

    let grown = || before.saturating_sub(host_free(&home.root()));
    let output = write_500m(&home, &id, "/paddock/git/junk");
    assert_no_space(&output, "/paddock/git/junk");
    assert!(
        grown() <= 66 * MIB,
        "the host lost {} MiB to a job limited to 64 MiB",
        grown() / MIB
    );
    assert!(image_bytes(&home, &id) <= 64 * MIB);
    let shown = home.json(&["show", &id, "--json"]);
    assert!(
        shown["job"]["disk"]["used_bytes"].as_u64().unwrap() > 50 * MIB,
        "the git dir's junk counts in the job's disk usage: {shown}"
    );

    // The outbox alone, once the git dir's junk is gone.
    let result = sh(&home, &id, "rm /paddock/git/junk");
    assert_eq!(result["exit_code"], 0, "{result}");
    let output = write_500m(&home, &id, "/paddock/outbox/junk");
    assert_no_space(&output, "/paddock/outbox/junk");
    assert!(
        grown() <= 66 * MIB,
        "the host lost {} MiB to a job limited to 64 MiB",
        grown() / MIB
    );
    assert!(image_bytes(&home, &id) <= 64 * MIB);

    // Freed, the job works on: a commit reaches the branch through the outbox's sync.
    let result = sh(
        &home,
        &id,
        "rm -f /paddock/outbox/junk && echo kept > after.txt && git add after.txt && git commit -q -m 'after the full git dir' && git log -1 --format=%s",
    );
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(branch_subject(&repo, &branch), "after the full git dir");
    remove_clean(&home, &id);
}

#[test]
fn without_a_disk_limit_the_git_dir_and_outbox_have_their_own_cap() {
    let test = "without_a_disk_limit_the_git_dir_and_outbox_have_their_own_cap";
    if !docker_available(test) || !disk_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    repo.write(
        ".paddock.yaml",
        "profiles:\n  default:\n    git_disk: 32m\n",
    );
    repo.commit_all("a small git disk");
    let home = TestHome::new();
    let job = home.create_docker(&repo, &["--task", "gitcap"]);
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    assert!(job["disk"].is_null(), "no disk limit: {job}");
    let saved = record(&home, &id);
    assert_eq!(saved["git_disk"], "32m", "{saved}");
    assert_eq!(
        PathBuf::from(text(&saved, "git_dir")),
        disk_mount(&home, &id).join("git"),
        "{saved}"
    );
    let image = home.root().join("work").join(&id).join("overlay/disk.img");
    let allocated = || {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(&image).unwrap().blocks() * 512
    };

    for target in ["/paddock/git/junk", "/paddock/outbox/junk"] {
        let output = write_500m(&home, &id, target);
        assert_no_space(&output, target);
        assert!(
            allocated() <= 32 * MIB,
            "{target}: the git disk holds {} MiB on the host, over its 32 MiB",
            allocated() / MIB
        );
        sh(&home, &id, &format!("rm -f {target}"));
    }
    // The checkout is not on the git disk: it takes more than the git disk's size.
    let result = sh(&home, &id, "head -c 100M /dev/zero > big && rm big");
    assert_eq!(result["exit_code"], 0, "{result}");

    let result = sh(
        &home,
        &id,
        "echo kept > after.txt && git add after.txt && git commit -q -m 'after the full git disk'",
    );
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(branch_subject(&repo, &branch), "after the full git disk");
    remove_clean(&home, &id);
}

#[test]
fn a_container_job_gets_a_git_disk_of_2g_by_default() {
    let test = "a_container_job_gets_a_git_disk_of_2g_by_default";
    if !docker_available(test) || !disk_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create_docker(&repo, &["--task", "default-cap"]);
    let id = text(&job, "id");
    assert_eq!(record(&home, &id)["git_disk"], "2g");
    // What the job sees: `/paddock/git` and `/paddock/outbox` on one filesystem of 2 GiB.
    let result = sh(
        &home,
        &id,
        "df -B1 --output=size,target /paddock/git /paddock/outbox | tail -n 2",
    );
    let output = text(&result, "stdout");
    let sizes: Vec<u64> = output
        .lines()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(sizes.len(), 2, "{output}");
    for size in sizes {
        assert!(
            (1900 * MIB..=2048 * MIB).contains(&size),
            "a 2 GiB git disk: {output}"
        );
    }
    assert!(
        Path::new(&disk_mount(&home, &id))
            .join("git/HEAD")
            .is_file()
    );
    // `show` gives its usage: the git dir's few files, ext4's metadata.
    let shown = home.json(&["show", &id, "--json"]);
    let git_disk = &shown["job"]["git_disk"];
    assert_eq!(git_disk["limit_bytes"], 2048 * MIB, "{shown}");
    assert!(
        git_disk["used_bytes"].as_u64().unwrap() < 100 * MIB,
        "{shown}"
    );
    assert!(shown["job"]["disk"].is_null(), "{shown}");
    let human = home.ok(&["show", &id]);
    assert!(
        human
            .lines()
            .any(|l| l.starts_with("git disk ") && l.contains(" of 2.0 GiB (")),
        "{human}"
    );
    remove_clean(&home, &id);
}

#[test]
fn a_git_disk_a_reboot_unmounted_is_mounted_again_before_the_container_starts() {
    let test = "a_git_disk_a_reboot_unmounted_is_mounted_again_before_the_container_starts";
    if !docker_available(test) || !disk_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = committed_and_stopped(&home, &repo, "reboot", "before the reboot");
    let id = text(&job, "id");
    // The reboot: the mount goes (and with it, autoclear, the loop device); the image stays.
    let mount = unmount_disk(&home, &id);
    let result = sh(
        &home,
        &id,
        "git log -1 --format=%s && ls /paddock/outbox >/dev/null",
    );
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(text(&result, "stdout").trim(), "before the reboot");
    assert_eq!(mount_type(&mount).as_deref(), Some("ext4"));
    remove_clean(&home, &id);
}

/// An unmount only takes the disk out of this mount namespace: a process that copied the
/// mount table a moment before (any container being made does) keeps its filesystem alive.
/// The next exec must mount that same filesystem again, not a second ext4 of the same image
/// that would miss what the first has not written back (the commit, the git dir itself).
#[test]
fn a_git_disk_another_namespace_still_holds_is_mounted_again_from_its_own_device() {
    let test = "a_git_disk_another_namespace_still_holds_is_mounted_again_from_its_own_device";
    if !docker_available(test) || !disk_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = committed_and_stopped(&home, &repo, "held", "before the unmount");
    let id = text(&job, "id");
    let mount = disk_mount(&home, &id);
    // The holder: a private copy of this namespace's mounts, the disk among them.
    let mut holder = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sleep", "300"])
        .spawn()
        .expect("unshare runs");
    let holder_mounts = format!("/proc/{}/mountinfo", holder.id());
    eventually("the holder has its own mount table", || {
        std::fs::read_to_string(&holder_mounts)
            .is_ok_and(|table| table.contains(&mount.display().to_string()))
            && std::fs::read_link(format!("/proc/{}/ns/mnt", holder.id())).ok()
                != std::fs::read_link("/proc/self/ns/mnt").ok()
    });
    unmount_disk(&home, &id);
    assert_eq!(home.loop_devices().len(), 1, "the holder keeps the device");

    let result = sh(
        &home,
        &id,
        "git log -1 --format=%s && echo two > two.txt && git add two.txt && git commit -q -m after",
    );
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(text(&result, "stdout").trim(), "before the unmount");
    assert_eq!(mount_type(&mount).as_deref(), Some("ext4"));
    let devices = home.loop_devices();
    assert_eq!(devices.len(), 1, "one image, one device: {devices:?}");
    // The holder goes; the filesystem stays whole under the job's own mount.
    holder.kill().expect("the holder is ours");
    holder.wait().expect("the holder ends");
    let result = sh(&home, &id, "git log --format=%s | head -2 | tr '\\n' ' '");
    assert_eq!(text(&result, "stdout").trim(), "after before the unmount");
    assert_eq!(branch_subject(&repo, &text(&job, "branch")), "after");
    remove_clean(&home, &id);
}

/// The same as root the way people run it: no `PADDOCK_HOME` (`/var/lib/paddock`), the
/// repository under a closed directory.
#[test]
fn on_the_default_state_root_a_held_git_disk_is_mounted_again_from_its_own_device() {
    use crate::default_paths::{Machine, Who};
    let test = "on_the_default_state_root_a_held_git_disk_is_mounted_again_from_its_own_device";
    if !docker_available(test) || !disk_available(test) {
        return;
    }
    let machine = Machine::new(Who::Root);
    let image = crate::fixtures::test_image();
    let exec = |id: &str, script: &str| {
        let result = machine.json(&["exec", id, "--json", "--", "sh", "-c", script]);
        assert_eq!(result["exit_code"], 0, "{result}");
        text(&result, "stdout")
    };
    let job = machine.json(&[
        "create",
        "--json",
        "--task",
        "held",
        "--runtime",
        "docker",
        "--image",
        &image,
        "--checkout",
        "worktree",
    ]);
    let id = text(&job, "id");
    let job_dir = machine.state_root().join("work").join(&id);
    let devices = || {
        std::fs::read_dir("/sys/block")
            .expect("sysfs")
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("loop/backing_file")).ok())
            .filter(|backing| Path::new(backing.trim()).starts_with(&job_dir))
            .count()
    };
    exec(
        &id,
        "echo one > one.txt && git add one.txt && git commit -q -m one",
    );
    assert!(machine.run(&["stop", &id]).status.success());
    let mount = job_dir.join("overlay/layers");
    let holder = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sleep", "300"])
        .spawn()
        .expect("unshare runs");
    // On a failure half-way: no holder and no job of this test left in the shared state root.
    struct Cleanup<'a>(&'a Machine, String, std::process::Child);
    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            let _ = self.2.kill();
            let _ = self.2.wait();
            if std::thread::panicking() {
                let _ = self.0.run(&["rm", &self.1, "--force"]);
            }
        }
    }
    let mut cleanup = Cleanup(&machine, id.clone(), holder);
    let holder_pid = cleanup.2.id();
    eventually("the holder has its own mount table", || {
        std::fs::read_link(format!("/proc/{holder_pid}/ns/mnt")).ok()
            != std::fs::read_link("/proc/self/ns/mnt").ok()
    });
    assert!(
        std::process::Command::new("umount")
            .arg(&mount)
            .status()
            .expect("umount runs")
            .success()
    );
    assert_eq!(devices(), 1, "the holder keeps the device");
    let said = exec(
        &id,
        "git log -1 --format=%s && echo two > two.txt && git add two.txt && git commit -q -m two",
    );
    assert_eq!(said.trim(), "one");
    assert_eq!(devices(), 1, "one image, one device");
    cleanup.2.kill().expect("the holder is ours");
    cleanup.2.wait().expect("the holder ends");
    assert_eq!(
        machine
            .repo_git(&["log", "-1", "--format=%s", &text(&job, "branch")])
            .trim(),
        "two"
    );
    assert!(machine.run(&["rm", &id, "--keep-branch"]).status.success());
    eventually("rm frees the loop device", || devices() == 0);
    assert!(!job_dir.exists());
}
