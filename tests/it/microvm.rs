//! The microVM runtime against real QEMU: a job's commands run under a kernel of their own,
//! git inside commits to the job's branch, limits hold inside the VM, the network is closed,
//! and removing the job leaves no QEMU or virtiofsd behind. Under the emulator (TCG, on
//! hosts whose KVM cannot boot a stock kernel) each boot takes seconds, so one VM serves
//! several checks. `PADDOCK_SKIP_MICROVM_TESTS=1` skips them and says so.

use std::path::Path;

use crate::fixtures::{FixtureRepo, TestHome, microvm_available, test_image, text};
use serde_json::Value;

fn exec(home: &TestHome, id: &str, flags: &[&str], script: &str) -> Value {
    let mut args = vec!["exec", id, "--json"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    let output = home.run(&args);
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "exec {script:?} printed no result ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// Live (not zombie) QEMU and virtiofsd processes whose command line names `root`.
fn vm_processes(root: &Path) -> Vec<String> {
    let needle = root.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let state = stat.rsplit(')').next()?.trim_start().chars().next()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (state != 'Z'
                && cmdline.contains(&needle)
                && (cmdline.contains("qemu-system") || cmdline.contains("virtiofsd")))
            .then_some(cmdline)
        })
        .collect()
}

/// Ends the VMs of a test's install when the test fails half-way (a passing test has
/// removed them and checked that nothing was left).
struct KillVms(std::path::PathBuf);

impl Drop for KillVms {
    fn drop(&mut self) {
        let needle = self.0.display().to_string();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&needle)
                && let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>()
            {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status();
            }
        }
    }
}

#[test]
fn a_microvm_job_runs_under_its_own_kernel_commits_holds_its_limits_and_leaves_nothing() {
    if !microvm_available("a_microvm_job_runs_under_its_own_kernel") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let _cleanup = KillVms(home.root());
    let image = test_image();
    let job = home.create(
        &repo,
        &[
            "--runtime", "microvm", "--image", &image, "--memory", "256m", "--cpus", "1",
            "--pids", "64", "--task", "vm",
        ],
    );
    assert_eq!(job["runtime"], "microvm", "{job}");
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    assert!(!vm_processes(&home.root()).is_empty(), "the VM runs");

    // A kernel of its own.
    let host_kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let inside = exec(&home, &id, &[], "uname -r; nproc; cat /proc/net/dev; id -u");
    assert_eq!(inside["exit_code"], 0, "{inside}");
    let stdout = text(&inside, "stdout");
    let mut lines = stdout.lines();
    let guest_kernel = lines.next().unwrap();
    assert_ne!(guest_kernel.trim(), host_kernel.trim(), "{inside}");
    // --cpus 1: one vCPU.
    assert_eq!(lines.next(), Some("1"), "{inside}");
    // network none: no interface but loopback.
    let interfaces: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim()))
        .filter(|name| !name.is_empty() && !name.contains(' ') && !name.contains('|'))
        .filter(|name| name.chars().all(|c| c.is_ascii_alphanumeric()))
        .collect();
    assert_eq!(interfaces, vec!["lo"], "{inside}");
    assert_ne!(stdout.lines().last(), Some("0"), "commands do not run as root: {inside}");

    // git inside: the commit reaches the job's branch in the user's repository.
    let committed = exec(
        &home,
        &id,
        &[],
        "echo vm > vm.txt && git add vm.txt && git commit -q -m 'from the vm' && git log -1 --format=%s",
    );
    assert_eq!(committed["exit_code"], 0, "{committed}");
    assert_eq!(
        repo.git(&["log", "-1", "--format=%s", &branch]),
        "from the vm"
    );

    // What stays read-only in containers stays read-only here, even through the share.
    let protected = exec(
        &home,
        &id,
        &[],
        "for f in /paddock/git/config /paddock/git/hooks/pre-commit /paddock-objects/planted /workspace/.git; do \
           if echo x >> $f 2>/dev/null; then echo WROTE $f; fi; done; echo checked",
    );
    assert_eq!(text(&protected, "stdout").trim(), "checked", "{protected}");

    // A memory overrun is reported as OOM; the VM keeps answering.
    let hog = exec(&home, &id, &[], "head -c 600m /dev/zero | tail > /dev/null");
    assert_eq!(hog["oom_killed"], true, "{hog}");
    assert_eq!(hog["exit_code"], 137, "{hog}");

    // A fork bomb meets the pids limit and ends at its timeout; the VM keeps answering.
    let bomb = exec(
        &home,
        &id,
        &["--timeout", "8s"],
        "bomb() { bomb | bomb & }; bomb; sleep 30",
    );
    assert_eq!(bomb["timed_out"], true, "{bomb}");
    let after = exec(&home, &id, &[], "echo alive");
    assert_eq!(text(&after, "stdout").trim(), "alive", "{after}");

    // `show` names the runtime; `rm` keeps the branch and leaves no process or file.
    let shown = home.json(&["show", &id, "--json"]);
    assert_eq!(shown["job"]["runtime"], "microvm", "{shown}");
    let job_dir = home.root().join("work").join(&id);
    assert!(job_dir.exists());
    home.ok(&["rm", &id]);
    assert!(!job_dir.exists(), "the job's files are gone");
    let left = vm_processes(&home.root());
    assert!(left.is_empty(), "left running: {left:?}");
    assert_eq!(
        repo.git(&["log", "-1", "--format=%s", &branch]),
        "from the vm"
    );
    let fsck = repo.git(&["fsck", "--full", "--strict"]);
    assert!(!fsck.contains("error"), "{fsck}");
}
