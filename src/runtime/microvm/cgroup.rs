//! The host cgroup of one VM: its QEMU and every virtiofsd run in
//! `paddock/<install>/vm-<job>`, so what the guest makes them do on the host (the
//! emulator's translation cache, virtiofsd's threads and page cache) has a bound of its own:
//! memory = the VM's memory + [`HOST_OVERHEAD`], CPU = a CFS quota of the VM's vCPUs,
//! [`PIDS_MAX`] tasks. cgroup v1 (the memory, cpu and pids hierarchies, each with the same
//! path) and v2 (one unified directory, the controllers enabled on the way down) are both
//! handled; a host with neither refuses to start a VM rather than run it unbounded.
//!
//! Processes enter at exec, not after: each is started through `sh`, which writes its own
//! pid into the cgroup's `cgroup.procs` and then execs the program, so no thread or child
//! ever runs outside. A cgroup is removed (rmdir, which the kernel allows only when no
//! process is left in it) when its VM is stopped or destroyed and by the sweep; only
//! directories named `vm-<job id>` or `slot-<pool slot>` (a warm pool's VM, whose cgroup
//! the job that claims it keeps) under this install's own `paddock/<install>/` are ever
//! touched (and that directory and `paddock/` when the last VM's goes: an rmdir, refused
//! while another cgroup is in them), and a removal is retried for a short while as the
//! killed processes exit.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::MicrovmError;

/// Host memory a VM's processes may use beyond the guest's RAM: QEMU itself and its
/// emulator's translation cache (bounded by [`super::accel::TCG_CODE_CACHE_MIB`]), and the
/// virtiofsd processes.
pub const HOST_OVERHEAD: u64 = 512 << 20;
/// Tasks (threads count) of one VM's processes: QEMU's vCPU, I/O and worker threads and each
/// virtiofsd's thread pool stay far below.
pub const PIDS_MAX: u32 = 1024;
/// The CFS period the quota is a multiple of (the kernel's default).
const PERIOD_US: u64 = 100_000;
const ROOT: &str = "/sys/fs/cgroup";
/// The v1 hierarchies a VM's cgroup has a directory in.
const V1_CONTROLLERS: [&str; 3] = ["memory", "cpu", "pids"];

/// A VM's cgroup: one directory per hierarchy (v1) or one (v2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmCgroup {
    dirs: Vec<PathBuf>,
    unified: bool,
}

/// Where this host's cgroups are: `Some(true)` unified (v2), `Some(false)` v1, `None` neither.
fn layout(root: &Path) -> Option<bool> {
    if root.join("cgroup.controllers").exists() {
        Some(true)
    } else if V1_CONTROLLERS.iter().all(|c| root.join(c).is_dir()) {
        Some(false)
    } else {
        None
    }
}

/// `paddock/<install>` inside a hierarchy.
fn install_dir(install: &str) -> PathBuf {
    Path::new("paddock").join(install)
}

impl VmCgroup {
    /// The cgroup of job `job` of install `install` on this host (nothing is made).
    pub fn of(install: &str, job: &str) -> Result<VmCgroup, MicrovmError> {
        Self::under(Path::new(ROOT), install, &format!("vm-{job}"))
    }

    /// The cgroup of pool slot `slot`'s VM, `slot-<slot>` (a job's id may look like a
    /// slot's name: the prefix keeps them apart), kept by the job that claims it.
    pub fn of_slot(install: &str, slot: &str) -> Result<VmCgroup, MicrovmError> {
        Self::under(Path::new(ROOT), install, &format!("slot-{slot}"))
    }

    /// `leaf` (`vm-<job>` or `slot-<slot>`) under `paddock/<install>/` in each hierarchy.
    fn under(root: &Path, install: &str, leaf: &str) -> Result<VmCgroup, MicrovmError> {
        let relative = install_dir(install).join(leaf);
        match layout(root) {
            Some(true) => Ok(VmCgroup {
                dirs: vec![root.join(relative)],
                unified: true,
            }),
            Some(false) => Ok(VmCgroup {
                dirs: V1_CONTROLLERS
                    .iter()
                    .map(|c| root.join(c).join(&relative))
                    .collect(),
                unified: false,
            }),
            None => Err(MicrovmError::Start {
                message: format!(
                    "no cgroup v1 (memory, cpu, pids) or v2 hierarchy at {}: a VM's QEMU and \
                     virtiofsd are not started without their host limits",
                    root.display()
                ),
            }),
        }
    }

    /// Makes the cgroup (again) with `memory` bytes of guest RAM and `cpus` vCPUs.
    pub fn create(&self, memory: u64, cpus: u64) -> Result<(), MicrovmError> {
        // Another VM's removal may take an emptied parent away half-way: once more then.
        let mut tries = 0;
        loop {
            match self.try_create(memory, cpus) {
                Err(MicrovmError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound && tries < 3 =>
                {
                    tries += 1;
                }
                done => return done,
            }
        }
    }

    fn try_create(&self, memory: u64, cpus: u64) -> Result<(), MicrovmError> {
        let memory = (memory + HOST_OVERHEAD).to_string();
        let quota = (cpus.max(1) * PERIOD_US).to_string();
        let pids = PIDS_MAX.to_string();
        if self.unified {
            let dir = &self.dirs[0];
            // Controllers reach a cgroup only through its ancestors' subtree_control.
            let root = Path::new(ROOT);
            let mut at = root.to_path_buf();
            for part in dir.strip_prefix(root).unwrap_or(dir).iter() {
                write(&at.join("cgroup.subtree_control"), "+memory +cpu +pids")?;
                at.push(part);
                make_dir(&at)?;
            }
            write(&dir.join("memory.max"), &memory)?;
            let _ = std::fs::write(dir.join("memory.swap.max"), "0");
            write(&dir.join("cpu.max"), &format!("{quota} {PERIOD_US}"))?;
            write(&dir.join("pids.max"), &pids)?;
            return Ok(());
        }
        for dir in &self.dirs {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        let [memory_dir, cpu_dir, pids_dir] = [&self.dirs[0], &self.dirs[1], &self.dirs[2]];
        write(&memory_dir.join("memory.limit_in_bytes"), &memory)?;
        // Swap counts too where the kernel accounts it (no swap accounting: no file).
        let memsw = memory_dir.join("memory.memsw.limit_in_bytes");
        if memsw.exists() {
            write(&memsw, &memory)?;
        }
        write(&cpu_dir.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
        write(&cpu_dir.join("cpu.cfs_quota_us"), &quota)?;
        write(&pids_dir.join("pids.max"), &pids)?;
        Ok(())
    }

    /// `program` started inside the cgroup: `sh` puts itself in, then execs it.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("/bin/sh");
        command
            .args([
                "-c",
                r#"n=$1; shift
while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n - 1)); done
exec "$@""#,
                "sh",
            ])
            .arg(self.dirs.len().to_string())
            .args(self.dirs.iter().map(|d| d.join("cgroup.procs")))
            .arg(program);
        command
    }

    /// The processes in the cgroup (from its first hierarchy).
    pub fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dirs[0].join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Removes the cgroup once its processes are gone (waiting up to `within` for the
    /// killed ones to exit). True when nothing of it is left.
    pub async fn remove(&self, within: Duration) -> bool {
        let until = tokio::time::Instant::now() + within;
        loop {
            let mut left = false;
            for dir in &self.dirs {
                match std::fs::remove_dir(dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(_) => left = true,
                }
            }
            if !left {
                // The install's and paddock's own directories go with their last VM (an
                // rmdir of a parent that still has one fails, and is meant to).
                for dir in &self.dirs {
                    for parent in dir.ancestors().skip(1).take(2) {
                        let _ = std::fs::remove_dir(parent);
                    }
                }
                return true;
            }
            if tokio::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl VmCgroup {
    /// Removes the cgroup, SIGKILLing what is still in it after a first try (only processes
    /// started in it by the VM's own: it is this install's, for a VM being removed). True
    /// when nothing of it is left.
    pub async fn kill_and_remove(&self) -> bool {
        if self.remove(Duration::from_secs(5)).await {
            return true;
        }
        for pid in self
            .pids()
            .into_iter()
            .filter_map(rustix::process::Pid::from_raw)
        {
            if let Some(kill) = rustix::process::Signal::from_named_raw(libc::SIGKILL) {
                let _ = rustix::process::kill_process(pid, kill);
            }
        }
        self.remove(Duration::from_secs(5)).await
    }
}

/// Which cgroups a VM's processes get on this host (`v1` or `v2`), or why none (`doctor`).
pub fn host_version() -> Result<&'static str, MicrovmError> {
    VmCgroup::of("install", "job").map(|c| if c.unified { "v2" } else { "v1" })
}

/// The jobs that have a VM cgroup of install `install` on this host (`vm-<job>` entries of
/// `paddock/<install>/` whose name is a job id).
pub fn jobs(install: &str) -> Vec<String> {
    named_under(Path::new(ROOT), install, "vm-")
        .into_iter()
        .filter(|job| crate::job::JobId::parse(job).is_ok())
        .collect()
}

/// The pool slots that have a VM cgroup of install `install` on this host (`slot-<slot>`).
pub fn slots(install: &str) -> Vec<String> {
    named_under(Path::new(ROOT), install, "slot-")
        .into_iter()
        .filter(|slot| crate::pool::is_slot_name(slot))
        .collect()
}

#[cfg(test)]
fn jobs_under(root: &Path, install: &str) -> Vec<String> {
    named_under(root, install, "vm-")
        .into_iter()
        .filter(|job| crate::job::JobId::parse(job).is_ok())
        .collect()
}

fn named_under(root: &Path, install: &str, prefix: &str) -> Vec<String> {
    let dir = match layout(root) {
        Some(true) => root.join(install_dir(install)),
        Some(false) => root.join("memory").join(install_dir(install)),
        None => return Vec::new(),
    };
    let mut jobs: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_prefix(prefix)
                .map(String::from)
        })
        .collect();
    jobs.sort();
    jobs
}

fn make_dir(dir: &Path) -> Result<(), MicrovmError> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(MicrovmError::Io {
            path: dir.to_path_buf(),
            source: e,
        }),
        _ => Ok(()),
    }
}

fn write(file: &Path, value: &str) -> Result<(), MicrovmError> {
    std::fs::write(file, value).map_err(io(file))
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> MicrovmError + '_ {
    move |source| MicrovmError::Io {
        path: path.to_path_buf(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vm_cgroup_has_one_directory_per_v1_hierarchy_or_one_unified() {
        let v1 = tempfile::tempdir().expect("tempdir");
        for c in V1_CONTROLLERS {
            std::fs::create_dir(v1.path().join(c)).expect("mkdir");
        }
        let cgroup = VmCgroup::under(v1.path(), "abc", "vm-job-1").expect("v1");
        assert_eq!(
            cgroup.dirs,
            ["memory", "cpu", "pids"].map(|c| v1.path().join(c).join("paddock/abc/vm-job-1"))
        );
        std::fs::create_dir_all(v1.path().join("memory/paddock/abc/vm-job-1")).expect("mkdir");
        std::fs::create_dir_all(v1.path().join("memory/paddock/abc/vm-..")).expect("mkdir");
        std::fs::create_dir_all(v1.path().join("memory/paddock/abc/other")).expect("mkdir");
        std::fs::create_dir_all(v1.path().join("memory/paddock/abc/slot-pool-0a1b"))
            .expect("mkdir");
        assert_eq!(jobs_under(v1.path(), "abc"), vec!["job-1".to_string()]);
        assert_eq!(
            named_under(v1.path(), "abc", "slot-"),
            vec!["pool-0a1b".to_string()]
        );
        assert!(jobs_under(v1.path(), "xyz").is_empty());

        let v2 = tempfile::tempdir().expect("tempdir");
        std::fs::write(v2.path().join("cgroup.controllers"), "memory cpu pids").expect("write");
        let cgroup = VmCgroup::under(v2.path(), "abc", "vm-job-1").expect("v2");
        assert_eq!(cgroup.dirs, vec![v2.path().join("paddock/abc/vm-job-1")]);
        assert!(cgroup.unified);

        let neither = tempfile::tempdir().expect("tempdir");
        assert!(VmCgroup::under(neither.path(), "abc", "vm-job-1").is_err());
    }
}
