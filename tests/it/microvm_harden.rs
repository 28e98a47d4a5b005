//! The host side of a microVM job against an agent that owns the guest: with the test switch
//! `PADDOCK_TEST_MICROVM_GUEST_ROOT=1` an exec runs as root in the guest with every
//! capability there (as after a guest-kernel exploit), and attacks the shares: it chowns
//! files to root and to a stranger, sets setuid and setgid bits, makes device nodes (and a
//! rename's whiteout), creates a setuid file outright and writes a `security.capability`
//! xattr, in the workspace, the
//! git dir and the outbox. On the host, afterwards: no file of the job is owned by root
//! (but paddock's own, made before), none by any uid but the agent's and the one guest root
//! maps to, none is setuid or setgid, none is a device node, none has a file capability.
//! Then the job still works: a commit by the agent reaches the branch and `rm` cleans up.
//! Run as root on the default state root (the microVM runtime needs root; as another user
//! it refuses to start). The second test: QEMU and virtiofsd in their host cgroup.

use std::collections::BTreeSet;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use crate::default_paths::{Machine, Who};
use crate::fixtures::{microvm_available, test_image, text};
use crate::microvm::{KillVms, vm_processes};

/// The agent's uid in the guest and on the host (the default profile's).
const AGENT_UID: u32 = 1000;
/// The host uid that root in the guest maps to (`runtime::microvm::jail`).
const GUEST_ROOT_ON_HOST: u32 = 2_147_483_646;
/// The microVM assets every test shares (see `TestHome`).
const ASSETS: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/microvm-assets");

pub(crate) const ATTACK: &str = r#"
echo "as $(id -u)"
for d in /workspace /paddock/git /paddock/outbox; do
  [ -d "$d" ] || continue
  echo root > $d/by-root
  cp /bin/ls $d/suid; chown 0:0 $d/suid; chmod 4755 $d/suid
  echo x > $d/sgid; chown 0:0 $d/sgid; chmod 2755 $d/sgid
  echo x > $d/agents; chown 1000:1000 $d/agents; chmod 6755 $d/agents
  echo x > $d/stranger; chown 4321:4321 $d/stranger
  mknod $d/null c 1 3; mknod $d/loop b 7 0; mkfifo $d/fifo
  mkdir $d/rootdir; chmod 6777 $d/rootdir
  perl -MFcntl -e 'sysopen(F, $ARGV[0], O_CREAT|O_WRONLY, 06755) or print "sysopen: $!\n"' $d/made-suid
  echo x > $d/moved
  perl -e 'syscall(316, -100, $ARGV[0], -100, $ARGV[1], 4) == 0 or print "renameat2: $!\n"' $d/moved $d/whiteout
  echo x > $d/cap
  perl -e '$v = pack("V5", 0x02000001, 1 << 21, 0, 0, 0);
    syscall(188, $ARGV[0], "security.capability", $v, length($v), 0) == 0 or print "setxattr: $!\n"' $d/cap
  ls -ln $d
done
echo attacked
"#;

/// Every path under `root`, without following links, skipping `vm/` and `sync.git/`
/// (paddock's own files on the host, never shared into the guest).
fn walk(root: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path
            .file_name()
            .is_some_and(|n| n == "vm" || n == "sync.git")
        {
            continue;
        }
        found.push(path.clone());
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            walk(&path, found);
        }
    }
}

pub(crate) fn root_owned(dirs: &[PathBuf]) -> BTreeSet<PathBuf> {
    let mut paths = Vec::new();
    for dir in dirs {
        walk(dir, &mut paths);
    }
    paths
        .into_iter()
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.uid() == 0))
        .collect()
}

/// What the guest left on the host that it must not have: one line per offence.
pub(crate) fn offences(dirs: &[PathBuf], root_before: &BTreeSet<PathBuf>) -> Vec<String> {
    let mut paths = Vec::new();
    for dir in dirs {
        walk(dir, &mut paths);
    }
    let mut found = Vec::new();
    for path in paths {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let shown = path.display();
        let (uid, gid, mode) = (meta.uid(), meta.gid(), meta.mode());
        if uid == 0 && !root_before.contains(&path) {
            found.push(format!("{shown}: owned by root"));
        }
        for (what, id) in [("uid", uid), ("gid", gid)] {
            if ![0, AGENT_UID, GUEST_ROOT_ON_HOST].contains(&id) {
                found.push(format!("{shown}: {what} {id}"));
            }
        }
        if mode & 0o6000 != 0 {
            found.push(format!("{shown}: mode {mode:o}"));
        }
        let kind = meta.file_type();
        if kind.is_char_device() || kind.is_block_device() {
            found.push(format!("{shown}: a device node"));
        }
        let mut buffer = [0u8; 64];
        if !kind.is_symlink()
            && rustix::fs::lgetxattr(&path, "security.capability", &mut buffer).is_ok()
        {
            found.push(format!("{shown}: a security.capability xattr"));
        }
    }
    found
}

#[test]
fn root_in_the_guest_plants_no_root_owned_setuid_device_or_capability_file_on_the_host() {
    if !microvm_available("root_in_the_guest_plants_no_root_owned_setuid_device") {
        return;
    }
    let machine = Machine::new(Who::Root);
    let image = test_image();
    let assets = [("PADDOCK_MICROVM_ASSETS", ASSETS)];
    let job = machine.json_with(
        &[
            "create",
            "--runtime",
            "microvm",
            "--image",
            &image,
            "--json",
            "--task",
            "harden",
        ],
        &assets,
    );
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    let job_dir = machine.state_root().join("work").join(&id);
    let _cleanup = KillVms(job_dir.join("vm"));
    let shown = machine.json_with(&["show", &id, "--json"], &assets);
    let worktree = PathBuf::from(shown["job"]["worktree"].as_str().expect("a worktree"));
    let dirs = vec![worktree.clone(), job_dir.clone()];
    let root_before = root_owned(&dirs);
    assert!(
        offences(&dirs, &root_before).is_empty(),
        "{:?}",
        offences(&dirs, &root_before)
    );

    let attacked = machine.run_with(
        &["exec", &id, "--json", "--", "sh", "-c", ATTACK],
        &[assets[0], ("PADDOCK_TEST_MICROVM_GUEST_ROOT", "1")],
    );
    let result: serde_json::Value = serde_json::from_slice(&attacked.stdout).unwrap_or_else(|e| {
        panic!(
            "the attack printed no result ({e}): {}",
            String::from_utf8_lossy(&attacked.stderr)
        )
    });
    let said = text(&result, "stdout");
    assert!(
        said.starts_with("as 0\n"),
        "the switch gives guest root: {result}"
    );
    assert!(said.contains("attacked"), "{result}");

    let found = offences(&dirs, &root_before);
    assert!(
        found.is_empty(),
        "guest root left on the host:\n{}\n(the attack said: {said}{})",
        found.join("\n"),
        text(&result, "stderr")
    );

    // The job still works for its agent: a commit reaches the branch.
    let commit = machine.json_with(
        &[
            "exec",
            &id,
            "--json",
            "--",
            "sh",
            "-c",
            "git add -A . && git commit -q -m 'after the attack' && git log -1 --format=%s",
        ],
        &assets,
    );
    assert_eq!(commit["exit_code"], 0, "{commit}");
    let output = std::process::Command::new("git")
        .args([
            "-c",
            "safe.directory=*",
            "log",
            "-1",
            "--format=%s",
            &branch,
        ])
        .current_dir(&machine.repo)
        .output()
        .expect("git runs");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "after the attack"
    );
    let qemu: u32 = read(&job_dir.join("vm"), "qemu.pid")
        .parse()
        .expect("a pid");
    let cgroups = cgroup_dirs(qemu);
    assert!(
        cgroups.iter().all(|d| d.ends_with(format!("vm-{id}"))),
        "{cgroups:?}"
    );
    let removed = machine.run_with(&["rm", &id, "--force"], &assets);
    assert!(removed.status.success(), "{removed:?}");
    assert!(!job_dir.exists(), "the job's files are gone");
    assert!(vm_processes(&job_dir).is_empty());
    assert!(cgroups.iter().all(|d| !d.exists()), "{cgroups:?}");
}

/// The pids of live QEMU and virtiofsd processes naming `dir` (a VM's directory).
pub(crate) fn vm_pids(dir: &Path) -> Vec<u32> {
    let needle = format!("{}/", dir.display());
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let cmdline = String::from_utf8_lossy(&std::fs::read(e.path().join("cmdline")).ok()?)
                .replace('\0', " ");
            let live = !stat.rsplit(')').next()?.trim_start().starts_with('Z');
            (live
                && cmdline.contains(&needle)
                && (cmdline.contains("qemu-system") || cmdline.contains("virtiofsd")))
            .then_some(pid)
        })
        .collect()
}

/// The directories of the host cgroup a process is in: `(controller file prefix, dir)` for
/// the memory, cpu and pids hierarchies (v1), or the one unified directory (v2).
pub(crate) fn cgroup_dirs(pid: u32) -> Vec<PathBuf> {
    let lines = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup file");
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        let path = lines
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .expect("v2");
        return vec![PathBuf::from(format!("/sys/fs/cgroup{path}"))];
    }
    ["memory", "cpu", "pids"]
        .iter()
        .map(|controller| {
            let path = lines
                .lines()
                .find_map(|l| {
                    let mut parts = l.splitn(3, ':');
                    let (_, names, path) = (parts.next()?, parts.next()?, parts.next()?);
                    names.split(',').any(|n| n == *controller).then_some(path)
                })
                .expect("a v1 hierarchy");
            PathBuf::from(format!("/sys/fs/cgroup/{controller}{path}"))
        })
        .collect()
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}/{file}: {e}", dir.display()))
        .trim()
        .to_string()
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn a_vms_qemu_and_virtiofsd_run_in_a_host_cgroup_of_their_own_that_rm_and_the_sweep_remove() {
    if !microvm_available("a_vms_qemu_and_virtiofsd_run_in_a_host_cgroup") {
        return;
    }
    let repo = crate::fixtures::FixtureRepo::new();
    let home = crate::fixtures::TestHome::new();
    let _cleanup = KillVms(home.root());
    let image = test_image();
    let job = home.create(
        &repo,
        &[
            "--runtime",
            "microvm",
            "--image",
            &image,
            "--memory",
            "256m",
            "--cpus",
            "1",
            "--id",
            "vm-cg",
        ],
    );
    assert_eq!(job["runtime"], "microvm", "{job}");
    let vm_dir = home.root().join("work/vm-cg/vm");
    let qemu: u32 = read(&vm_dir, "qemu.pid").parse().expect("a pid");
    let dirs = cgroup_dirs(qemu);
    for dir in &dirs {
        let name = dir.display().to_string();
        assert!(
            name.contains("/paddock/") && name.ends_with("/vm-vm-cg"),
            "QEMU is in {name}"
        );
    }
    // Memory: the VM's (256 MiB + 256 MiB for the guest) + 512 MiB for QEMU and virtiofsd.
    let gib = (1u64 << 30).to_string();
    if dirs.len() == 1 {
        assert_eq!(read(&dirs[0], "memory.max"), gib);
        assert_eq!(read(&dirs[0], "cpu.max"), "100000 100000");
        assert_eq!(read(&dirs[0], "pids.max"), "1024");
    } else {
        assert_eq!(read(&dirs[0], "memory.limit_in_bytes"), gib);
        assert_eq!(read(&dirs[1], "cpu.cfs_quota_us"), "100000");
        assert_eq!(read(&dirs[1], "cpu.cfs_period_us"), "100000");
        assert_eq!(read(&dirs[2], "pids.max"), "1024");
    }
    let pids = vm_pids(&vm_dir);
    assert!(pids.len() >= 4, "QEMU and a virtiofsd per share: {pids:?}");
    for dir in &dirs {
        let members: Vec<u32> = read(dir, "cgroup.procs")
            .lines()
            .filter_map(|l| l.parse().ok())
            .collect();
        for pid in &pids {
            assert!(
                members.contains(pid),
                "{pid} not in {}: {members:?}",
                dir.display()
            );
        }
    }
    // `stop` ends the VM and its cgroup (its sync of the job's last commits runs in a VM
    // booted for it and ended again); the next exec boots both again.
    let stopped = home.ok(&["stop", "vm-cg"]);
    let left: Vec<String> = vm_pids(&vm_dir)
        .iter()
        .map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            format!("{p}: {}", stat.chars().take(60).collect::<String>())
        })
        .collect();
    assert!(!stopped.contains("nothing running"), "{stopped}");
    // An rmdir of a cgroup succeeds only once no process is left in it.
    assert!(
        dirs.iter().all(|d| !d.exists()),
        "{dirs:?} after stop ({stopped}); left: {left:?}"
    );
    assert!(left.is_empty(), "{left:?}");
    let alive = home.json(&["exec", "vm-cg", "--json", "--", "echo", "alive"]);
    assert_eq!(text(&alive, "stdout").trim(), "alive", "{alive}");
    assert!(
        dirs.iter().all(|d| d.exists()),
        "{dirs:?} after the next exec"
    );
    home.ok(&["rm", "vm-cg", "--force"]);
    for dir in &dirs {
        assert!(!dir.exists(), "{} is left after rm", dir.display());
    }

    // kill -9 of QEMU: once its virtiofsd processes end, one sweep removes the cgroup; the
    // job stays and its next exec boots a VM in a new one.
    home.create(
        &repo,
        &["--runtime", "microvm", "--image", &image, "--id", "vm-cg2"],
    );
    let vm_dir = home.root().join("work/vm-cg2/vm");
    let qemu = read(&vm_dir, "qemu.pid");
    let dirs = cgroup_dirs(qemu.parse().expect("a pid"));
    std::process::Command::new("kill")
        .args(["-9", &qemu])
        .status()
        .expect("kill");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !vm_pids(&vm_dir).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            vm_pids(&vm_dir)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(dirs.iter().all(|d| d.exists()), "the sweep has work to do");
    let report = home.json(&["sweep", "--json"]);
    for dir in &dirs {
        assert!(
            !dir.exists(),
            "{} is left after the sweep: {report}",
            dir.display()
        );
    }
    let again = home.json(&["sweep", "--json"]);
    assert_eq!(again["removed"], serde_json::json!([]), "{again}");
    let alive = home.json(&["exec", "vm-cg2", "--json", "--", "echo", "alive"]);
    assert_eq!(text(&alive, "stdout").trim(), "alive", "{alive}");
    let qemu: u32 = read(&vm_dir, "qemu.pid").parse().expect("a pid");
    assert!(cgroup_dirs(qemu).iter().all(|d| d.exists()));
    home.ok(&["rm", "vm-cg2", "--force"]);
    assert!(dirs.iter().all(|d| !d.exists()));
    // The install's own directory goes with its last VM.
    let install = dirs[0].parent().expect("paddock/<install>");
    assert!(!install.exists(), "{} is left", install.display());
    assert!(vm_processes(&home.root()).is_empty());
}
