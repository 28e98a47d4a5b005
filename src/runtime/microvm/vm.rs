//! One job's VM on the host: its virtiofsd processes (one per shared directory) and its
//! QEMU process, their pid files, sockets and console log in the job's `vm/` directory.
//!
//! Ownership: a pid from a pid file is acted on only when `/proc/<pid>/cmdline` names that
//! job's `vm/` directory (every socket paddock gives QEMU and virtiofsd lives there), so a
//! recycled pid is never signalled. Read-only shares are made read-only on the host: each
//! virtiofsd starts in a private mount namespace (`unshare --mount`) where its source, or the
//! protected paths inside a writable source (the git dir's config, hooks, info, alternates;
//! the worktree's `.git` link), are bind-mounted read-only over themselves, so even root in
//! the guest cannot write them through the share. Stop is polite first (the guest agent
//! powers off), then SIGTERM, then SIGKILL, each with a deadline.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::MicrovmError;
use crate::job::JobRecord;

pub use super::accel::QEMU;
pub use super::jail::VIRTIOFSD;
/// Memory the guest needs beyond the job's own (its kernel, the agent, page cache).
pub const GUEST_OVERHEAD: u64 = 256 << 20;
/// The VM's memory when the job has no memory limit.
const UNLIMITED_MEMORY: u64 = 2 << 30;

/// One host directory shared into the guest.
#[derive(Debug, Clone)]
pub struct Share {
    pub tag: String,
    pub host: PathBuf,
    pub guest: PathBuf,
    pub read_only: bool,
    /// Paths inside `host` made read-only on the host side of a writable share.
    pub protected: Vec<PathBuf>,
    /// Mounted by the guest only when a pool slot is claimed (not by the init), and served
    /// with the host's later mounts under `host` (virtiofsd's namespace a slave of the
    /// host's, where the pool's are private).
    pub later: bool,
}

/// The shares of a job, mirroring a container job's mounts (see `runtime::docker::mounts`).
pub fn shares(record: &JobRecord) -> Result<Vec<Share>, MicrovmError> {
    let git_dir = record.git_dir.clone().ok_or(MicrovmError::NoGitDir)?;
    let share = |tag: &str, host: PathBuf, guest: PathBuf, read_only, protected| Share {
        tag: tag.to_string(),
        host,
        guest,
        read_only,
        protected,
        later: false,
    };
    let mut shares = vec![
        share(
            "ws",
            record.worktree.clone(),
            record.limits.workspace_dir.clone().into(),
            false,
            vec![record.worktree.join(".git")],
        ),
        share(
            "git",
            git_dir.clone(),
            super::GUEST_GIT_DIR.into(),
            false,
            crate::git::jobdir::PROTECTED
                .iter()
                .map(|name| git_dir.join(name))
                .filter(|path| path.exists())
                .collect(),
        ),
    ];
    let objects = match &record.object_view {
        Some(view) => view.clone(),
        None => crate::git::object_dirs(&record.git_common_dir)
            .into_iter()
            .next()
            .unwrap_or_else(|| record.git_common_dir.join("objects")),
    };
    shares.push(share(
        "objects",
        objects,
        super::GUEST_OBJECTS.into(),
        true,
        vec![],
    ));
    shares.extend(nested_object_shares(&record.git_common_dir));
    if let Some(outbox) = record.outbox().filter(|o| o.is_dir()) {
        shares.push(share(
            "outbox",
            outbox,
            super::GUEST_OUTBOX.into(),
            false,
            vec![],
        ));
    }
    for s in &shares {
        let text = s.guest.to_string_lossy();
        if text.contains([' ', ',', ':', '\n', '\t']) {
            return Err(MicrovmError::Path {
                path: s.guest.clone(),
            });
        }
    }
    Ok(shares)
}

/// The object stores the repository's own borrows from (its `alternates`), each shared
/// read-only at its own path, as in every job's container.
pub fn nested_object_shares(git_common_dir: &Path) -> Vec<Share> {
    crate::git::object_dirs(git_common_dir)
        .into_iter()
        .skip(1)
        .enumerate()
        .map(|(n, nested)| Share {
            tag: format!("alt{n}"),
            host: nested.clone(),
            guest: nested,
            read_only: true,
            protected: vec![],
            later: false,
        })
        .collect()
}

/// The files of one job's VM.
#[derive(Debug, Clone)]
pub struct VmDir {
    pub dir: PathBuf,
}

/// The host cgroup of `record`'s VM: the pool slot's it claimed (its VM booted, and stays,
/// in the slot's cgroup, as in the slot's directory) or the job's own.
pub fn cgroup(install: &str, record: &JobRecord) -> Result<super::cgroup::VmCgroup, MicrovmError> {
    match record.pool_slot() {
        Some(slot) if record.runtime == crate::job::RuntimeKind::Microvm => {
            super::cgroup::VmCgroup::of_slot(install, slot)
        }
        _ => super::cgroup::VmCgroup::of(install, record.id.as_str()),
    }
}

impl VmDir {
    /// The job's VM directory: `<job dir>/vm`, or for a job that claimed a pool slot's VM,
    /// the slot's `vm/`, which that VM's processes name in their command lines (the slot's
    /// record then names the job, and the job's record the slot).
    pub fn of(home: &crate::store::PaddockHome, record: &JobRecord) -> VmDir {
        match record.pool_slot() {
            Some(slot) if record.runtime == crate::job::RuntimeKind::Microvm => {
                VmDir::of_slot(home, slot)
            }
            _ => VmDir {
                dir: home.job_dir(&record.id).join("vm"),
            },
        }
    }

    /// A pool slot's VM directory (`pool/<slot>/vm`).
    pub fn of_slot(home: &crate::store::PaddockHome, slot: &str) -> VmDir {
        VmDir {
            dir: crate::pool::PoolSlots::of(home).dir(slot).join("vm"),
        }
    }
    pub fn agent_socket(&self) -> PathBuf {
        self.dir.join("agent.sock")
    }
    fn qemu_pidfile(&self) -> PathBuf {
        self.dir.join("qemu.pid")
    }
    /// What QEMU itself says (why it stopped, when it says so: "terminating on signal").
    pub fn qemu_log(&self) -> PathBuf {
        self.dir.join("qemu.log")
    }
    pub fn console(&self) -> PathBuf {
        self.dir.join("console.log")
    }
    pub fn exec_lock(&self) -> PathBuf {
        self.dir.join("exec.lock")
    }

    /// The QEMU process, when one of this VM runs.
    pub fn qemu_pid(&self) -> Option<i32> {
        self.owned_pid(&self.qemu_pidfile())
    }

    /// Every process of this VM that still runs (QEMU, each virtiofsd and the helper it
    /// forks): every process whose command line names this VM's directory.
    pub fn pids(&self) -> Vec<i32> {
        processes_naming(&self.dir)
    }

    /// The pid in `file`, when that process still runs and its command line names this VM's
    /// directory (the ownership mark).
    fn owned_pid(&self, file: &Path) -> Option<i32> {
        let pid: i32 = std::fs::read_to_string(file).ok()?.trim().parse().ok()?;
        owned(pid, &self.dir).then_some(pid)
    }
}

/// The VMs of this install that have a live process: for each job dir root, every process
/// whose command line names `<root>/<job>/vm/`, one sandbox per job (its `name` is the VM's
/// directory); under `pool_root`, each pool slot's VM (`<pool_root>/<slot>/vm/`), as a
/// [`SandboxRole::Pool`](crate::runtime::SandboxRole) sandbox named by the slot, running
/// while its QEMU is.
pub fn running_vms(roots: &[PathBuf], pool_root: &Path) -> Vec<crate::runtime::Sandbox> {
    let mut found: Vec<crate::runtime::Sandbox> = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline);
        for root in roots
            .iter()
            .chain(std::iter::once(&pool_root.to_path_buf()))
        {
            let pool = root == pool_root;
            let prefix = format!("{}/", root.display());
            let Some(at) = cmdline.find(&prefix) else {
                continue;
            };
            let rest = &cmdline[at + prefix.len()..];
            let Some((job, tail)) = rest.split_once('/') else {
                continue;
            };
            let named = if pool {
                job.starts_with("pool-")
            } else {
                crate::job::JobId::parse(job).is_ok()
            };
            if !tail.starts_with("vm/") || !named {
                continue;
            }
            let dir = root.join(job).join("vm");
            let pid: i32 = entry.file_name().to_string_lossy().parse().unwrap_or(0);
            if owned(pid, &dir) && !found.iter().any(|s| s.job == job) {
                let vm = VmDir { dir: dir.clone() };
                found.push(crate::runtime::Sandbox {
                    name: dir.display().to_string(),
                    job: job.to_string(),
                    // A slot whose QEMU died is no waiting VM (its virtiofsd may linger).
                    running: !pool || vm.qemu_pid().is_some(),
                    role: if pool {
                        crate::runtime::SandboxRole::Pool
                    } else {
                        crate::runtime::SandboxRole::Job
                    },
                    created: None,
                    volumes: Vec::new(),
                });
            }
        }
    }
    found
}

/// Every running process whose command line names `dir` (with a trailing slash, so job
/// `a` never matches job `ab`).
pub fn processes_naming(dir: &Path) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| owned(*pid, dir))
        .collect()
}

/// Whether process `pid` runs with `dir/` in its command line (and is not a zombie).
pub fn owned(pid: i32, dir: &Path) -> bool {
    if pid <= 1 || pid == std::process::id().cast_signed() {
        return false;
    }
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let mut needle = dir.as_os_str().as_encoded_bytes().to_vec();
    needle.push(b'/');
    let needle = needle.as_slice();
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
        stat.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    });
    !zombie && cmdline.windows(needle.len()).any(|w| w == needle)
}

/// What the VM boots and how.
pub struct Boot<'a> {
    pub kernel: &'a Path,
    pub initramfs: &'a Path,
    pub rootfs: &'a Path,
    pub accel: super::accel::Accel,
    /// `-netdev` options, or `None` for no NIC at all.
    pub netdev: Option<String>,
    /// The guest's network setup (`user` or `proxy`), with `netdev`.
    pub net: &'static str,
    /// The host cgroup QEMU and virtiofsd start in (made, with its limits).
    pub cgroup: &'a super::cgroup::VmCgroup,
}

/// The VM's memory in bytes and its vCPUs, from the job's (or the pool slot's) limits.
pub fn size(limits: &crate::job::Limits) -> (u64, u64) {
    let memory = match limits.memory.0 {
        0 => UNLIMITED_MEMORY,
        bytes => bytes + GUEST_OVERHEAD,
    };
    let cpus = (limits.cpus.nano_cpus() + 999_999_999) / 1_000_000_000;
    (
        memory.div_ceil(1 << 20) << 20,
        u64::try_from(cpus.max(1)).unwrap_or(1),
    )
}

/// Starts the job's virtiofsd processes and its VM (daemonized); returns QEMU's pid.
/// `name` is the job's id or the pool slot's.
#[expect(
    clippy::too_many_lines,
    reason = "QEMU's command line and its helpers, in the order they start"
)]
pub async fn start(
    vm: &VmDir,
    name: &str,
    limits: &crate::job::Limits,
    shares: &[Share],
    boot: &Boot<'_>,
) -> Result<i32, MicrovmError> {
    std::fs::create_dir_all(&vm.dir).map_err(io(&vm.dir))?;
    let agent = crate::runtime::layout::agent_user(limits.uid);
    for share in shares {
        spawn_virtiofsd(vm, share, agent, boot.cgroup).await?;
    }
    let (memory, cpus) = size(limits);
    let memory_mb = memory >> 20;
    let (uid, _) = crate::runtime::layout::agent_user(limits.uid);
    let mut append = format!(
        "{} paddock.pids={} paddock.uid={uid} paddock.net={}",
        super::accel::KERNEL_ARGS,
        limits.pids,
        if boot.netdev.is_some() {
            boot.net
        } else {
            "none"
        }
    );
    if limits.memory.0 > 0 {
        append.push_str(&format!(" paddock.mem={}", limits.memory.0));
    }
    // A fractional CPU limit (1.5) gets whole vCPUs (2) and a CFS quota inside.
    let quota = limits.cpus.nano_cpus() / 10_000;
    if quota > 0 && quota % 100_000 != 0 {
        append.push_str(&format!(" paddock.cpu={quota}"));
    }
    for share in shares.iter().filter(|s| !s.later) {
        let mode = if share.read_only { "ro" } else { "rw" };
        append.push_str(&format!(
            " paddock.share={}:{}:{mode}",
            share.tag,
            share.guest.display()
        ));
    }
    let mut args: Vec<String> = vec![
        "-name".into(),
        format!("paddock-{name}"),
        "-no-user-config".into(),
        "-nodefaults".into(),
        "-no-reboot".into(),
        "-display".into(),
        "none".into(),
        "-serial".into(),
        format!("file:{}", vm.console().display()),
        "-M".into(),
        "q35".into(),
    ];
    args.extend(boot.accel.qemu_args());
    args.extend([
        "-m".into(),
        format!("{memory_mb}M"),
        "-smp".into(),
        cpus.to_string(),
        "-object".into(),
        format!("memory-backend-memfd,id=mem,size={memory_mb}M,share=on"),
        "-numa".into(),
        "node,memdev=mem".into(),
        "-kernel".into(),
        boot.kernel.display().to_string(),
        "-initrd".into(),
        boot.initramfs.display().to_string(),
        "-append".into(),
        append,
        "-drive".into(),
        format!(
            "file={},if=virtio,format=raw,readonly=on",
            boot.rootfs.display()
        ),
        "-device".into(),
        "virtio-serial-pci".into(),
        "-chardev".into(),
        format!(
            "socket,id=agent,path={},server=on,wait=off",
            vm.agent_socket().display()
        ),
        "-device".into(),
        format!(
            "virtserialport,chardev=agent,name={}",
            super::guest::PORT_NAME
        ),
    ]);
    for (n, share) in shares.iter().enumerate() {
        args.extend([
            "-chardev".into(),
            format!("socket,id=fs{n},path={}", share_socket(vm, share).display()),
            "-device".into(),
            format!("vhost-user-fs-pci,chardev=fs{n},tag={}", share.tag),
        ]);
    }
    if let Some(netdev) = &boot.netdev {
        args.extend([
            "-netdev".into(),
            format!("user,id=net0,{netdev}"),
            "-device".into(),
            "virtio-net-pci,netdev=net0".into(),
        ]);
    }
    args.extend([
        "-daemonize".into(),
        "-pidfile".into(),
        vm.qemu_pidfile().display().to_string(),
    ]);
    let log = std::fs::File::create(vm.qemu_log()).map_err(io(&vm.dir))?;
    let out = tokio::time::timeout(
        Duration::from_secs(30),
        boot.cgroup
            .command(QEMU)
            .args(&args)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().map_err(io(&vm.dir))?)
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true)
            .status(),
    )
    .await
    .map_err(|_| MicrovmError::Start {
        message: "qemu did not daemonize within 30s".into(),
    })?
    .map_err(io(Path::new(QEMU)))?;
    if !status_ok(out) {
        let log = std::fs::read_to_string(vm.qemu_log()).unwrap_or_default();
        return Err(MicrovmError::Start {
            message: format!("qemu exited {out}: {}", log.trim()),
        });
    }
    vm.qemu_pid().ok_or_else(|| MicrovmError::Start {
        message: "qemu daemonized but its pid file names no running qemu".into(),
    })
}

fn status_ok(status: std::process::ExitStatus) -> bool {
    status.success()
}

fn share_socket(vm: &VmDir, share: &Share) -> PathBuf {
    vm.dir.join(format!("fs-{}.sock", share.tag))
}

/// Starts one share's virtiofsd in a private mount namespace with its read-only paths bound
/// read-only (a writable share's in its jail, see [`super::jail`]), and waits for its socket.
async fn spawn_virtiofsd(
    vm: &VmDir,
    share: &Share,
    agent: (u32, u32),
    cgroup: &super::cgroup::VmCgroup,
) -> Result<(), MicrovmError> {
    let socket = share_socket(vm, share);
    let _ = std::fs::remove_file(&socket);
    let mut read_only: Vec<&Path> = share.protected.iter().map(PathBuf::as_path).collect();
    if share.read_only {
        read_only.push(&share.host);
    }
    // A pool slot's share receives the claim's mounts later: those must reach virtiofsd
    // (the jail makes user and network namespaces only, so its mount namespace stays this
    // slave one and sees them too).
    let propagation = if share.later { "slave" } else { "private" };
    // `$1` the socket, `$2` the source, `$3` paddock, then the paths to make read-only.
    let script = format!(
        r#"set -e; sock=$1; src=$2; paddock=$3; shift 3
for p; do mount --bind "$p" "$p"; mount -o remount,bind,ro "$p"; done
{}"#,
        super::jail::exec_line(share.read_only, agent)
    );
    let paddock = std::env::current_exe().map_err(io(Path::new("/proc/self/exe")))?;
    let log = std::fs::File::create(vm.dir.join(format!("virtiofsd-{}.log", share.tag)))
        .map_err(io(&vm.dir))?;
    let child = cgroup
        .command("unshare")
        .args([
            "--mount",
            "--propagation",
            propagation,
            "--",
            "/bin/sh",
            "-c",
        ])
        .arg(&script)
        .arg("sh")
        .arg(&socket)
        .arg(&share.host)
        .arg(&paddock)
        .args(&read_only)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().map_err(io(&vm.dir))?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .map_err(io(Path::new("unshare")))?;
    let pid = child.id().ok_or_else(|| MicrovmError::Start {
        message: format!("virtiofsd for `{}` exited at once", share.tag),
    })?;
    let pidfile = vm.dir.join(format!("virtiofsd-{}.pid", share.tag));
    std::fs::write(&pidfile, pid.to_string()).map_err(io(&pidfile))?;
    // Reaped in the background when it ends; it must outlive this process (the VM does).
    drop(child);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    // The socket's file appears at bind(), before virtiofsd listens: QEMU connecting in
    // between is refused and the VM does not start (seen in CI). So wait until its network
    // namespace lists the socket as listening; a table that never names it (another path
    // spelling) is given 2 s after the file appears. Nothing connects to probe: virtiofsd
    // serves one front end.
    let mut appeared = None;
    while !socket.exists()
        || !(listening(pid, &socket)
            || appeared
                .get_or_insert_with(tokio::time::Instant::now)
                .elapsed()
                > Duration::from_secs(2))
    {
        if tokio::time::Instant::now() > deadline {
            let log = std::fs::read_to_string(vm.dir.join(format!("virtiofsd-{}.log", share.tag)))
                .unwrap_or_default();
            return Err(MicrovmError::Start {
                message: format!(
                    "virtiofsd for `{}` made no socket within 10s: {}",
                    share.tag,
                    log.trim()
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Whether process `pid`'s network namespace has a listening Unix socket at `path`
/// (`/proc/PID/net/unix`: flags `00010000` is `__SO_ACCEPTCON`).
fn listening(pid: u32, path: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string(format!("/proc/{pid}/net/unix")) else {
        return false;
    };
    let path = path.to_string_lossy();
    table.lines().any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.len() >= 8 && fields[3] == "00010000" && fields[7] == path
    })
}

/// Ends every process of the VM: SIGTERM, up to `grace`, then SIGKILL, and waits (bounded)
/// for them to go. True when something was running.
pub async fn kill_all(vm: &VmDir, grace: Duration) -> bool {
    let pids = vm.pids();
    if pids.is_empty() {
        return false;
    }
    for pid in &pids {
        signal(*pid, libc::SIGTERM);
    }
    let until = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < until && pids.iter().any(|p| owned(*p, &vm.dir)) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for pid in pids.iter().filter(|p| owned(**p, &vm.dir)) {
        signal(*pid, libc::SIGKILL);
    }
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < until && pids.iter().any(|p| owned(*p, &vm.dir)) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

fn signal(pid: i32, signal: i32) {
    // Only ever called with a pid just checked to be this VM's.
    if let (Some(pid), Some(signal)) = (
        rustix::process::Pid::from_raw(pid),
        rustix::process::Signal::from_named_raw(signal),
    ) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> MicrovmError + '_ {
    move |source| MicrovmError::Io {
        path: path.to_path_buf(),
        source,
    }
}
