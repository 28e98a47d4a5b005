//! The microVM runtime: one QEMU virtual machine per job, with a kernel of its own, so the
//! agent's code never talks to the host's kernel (runc shares it, gVisor narrows it).
//!
//! A job's VM boots Debian's kernel and paddock's initramfs ([`assets`]), with the agent
//! image's files as a read-only root disk under a tmpfs overlay. The job's files are shared
//! by virtiofsd ([`vm`]) at the paths a container job sees them: the workspace and the
//! job's private git dir writable, the borrowed object store at [`GUEST_OBJECTS`] and the
//! git dir's config, hooks, info and alternates read-only, enforced on the host. Commands
//! run through paddock's own binary as the guest agent ([`guest`]) over a virtio-serial
//! channel ([`protocol`], [`exec`]), as the job's uid inside a cgroup holding the job's
//! memory and pids limits; the VM has the job's vCPUs and its memory plus
//! [`vm::GUEST_OVERHEAD`]. Network `none` is a VM without a NIC; `open` a user-mode NIC;
//! `allowlist` a restricted user-mode NIC whose only way out is the job's proxy ([`egress`]).
//!
//! Every QEMU and virtiofsd process of a job has a pid file in the job's `vm/` directory and
//! names that directory in its command line, which is how stop, destroy and the sweep find
//! them and prove them the job's before signalling. `shell` attaches to the same channel
//! ([`shell`]).

pub mod accel;
pub mod assets;
pub mod cgroup;
pub mod egress;
mod error;
pub mod exec;
pub mod guest;
pub mod jail;
pub mod pool;
pub mod protocol;
pub mod shell;
pub mod vm;

use std::path::PathBuf;
use std::time::Duration;

use crate::config::NetworkMode;
use crate::job::JobRecord;
use crate::pool::{HostBind, PoolSlot};
use crate::runtime::capabilities::{Capabilities, Network, Pool, Sandboxes};
use crate::runtime::{
    Described, ExecOutcome, ExecRequest, ExecResult, OutputSink, Runtime, RuntimeError,
    SandboxLayout, SandboxStatus,
};
use crate::store::{JobStore, PaddockHome};

pub use error::MicrovmError;
use error::{end_cgroup, runtime_error};

/// Where the job's private git dir is inside the VM (as in containers).
pub const GUEST_GIT_DIR: &str = crate::runtime::layout::SANDBOX_GIT_DIR;
/// Where the repository's object store is inside the VM (as in containers).
pub const GUEST_OBJECTS: &str = crate::runtime::layout::SANDBOX_OBJECTS;
/// Where the job's outbox is inside the VM (as in containers).
pub const GUEST_OUTBOX: &str = crate::runtime::layout::SANDBOX_OUTBOX;
/// How long a VM may take from start to its agent's first answer (the emulator boots in
/// 5-30 s on a busy 2-core host).
pub const BOOT_DEADLINE: Duration = Duration::from_secs(120);

/// Jobs in QEMU microVMs.
pub struct MicrovmRuntime {
    home: PaddockHome,
    /// The guest mounts the job's files where a container does; the VM has no name on
    /// the machine beyond its directory.
    layout: SandboxLayout,
}

/// Registers microVM jobs (this host only).
pub(crate) fn register(registry: &mut crate::runtime::registration::Registry, home: &PaddockHome) {
    registry.add(
        crate::job::RuntimeKind::Microvm,
        std::sync::Arc::new(MicrovmRuntime::new(home)),
    );
}

impl MicrovmRuntime {
    pub fn new(home: &PaddockHome) -> MicrovmRuntime {
        MicrovmRuntime {
            home: home.clone(),
            layout: SandboxLayout::Mounted { names: None },
        }
    }

    fn assets_dir(&self) -> PathBuf {
        assets_dir(&self.home)
    }

    /// Boots the job's VM unless it runs, and waits for its agent.
    async fn ensure_running(&self, record: &JobRecord) -> Result<exec::Channel, MicrovmError> {
        let vm = vm::VmDir::of(&self.home, record);
        if vm.qemu_pid().is_some() {
            match exec::connect(&vm, Duration::from_secs(30)).await {
                // It ended between the look and the connect (a guest that powered off, a
                // QEMU killed): booted again below, as a VM found dead would be.
                Err(error @ MicrovmError::NotRunning { .. }) => {
                    tracing::warn!(job = %record.id, %error, "the job's VM ended; booting it again");
                }
                answered => return answered,
            }
        }
        // Leftovers of a VM that died (its virtiofsd, stale sockets) go first.
        vm::kill_all(&vm, Duration::from_secs(1)).await;
        self.boot(record, &vm).await?;
        exec::connect(&vm, BOOT_DEADLINE).await
    }

    async fn boot(&self, record: &JobRecord, vm: &vm::VmDir) -> Result<i32, MicrovmError> {
        check_host()?;
        if let Some((uid, _)) = self.layout.files_owner(record) {
            crate::runtime::access::grant_agent_access(record, uid)?;
        }
        let shares = vm::shares(record)?;
        let netdev = match record.limits.network {
            NetworkMode::None => None,
            NetworkMode::Open => Some("ipv6=off".into()),
            NetworkMode::Allowlist => {
                std::fs::create_dir_all(&vm.dir).map_err(|source| MicrovmError::Io {
                    path: vm.dir.clone(),
                    source,
                })?;
                Some(egress::start_proxy(&self.home, vm, record).await?)
            }
        };
        let cgroup = vm::cgroup(self.home.id(), record)?;
        self.boot_vm(
            vm,
            record.id.as_str(),
            &cgroup,
            &record.limits,
            &shares,
            netdev,
        )
        .await
    }

    /// Starts a VM named `name` with `limits` and `shares` (`netdev`: the NIC's options, or
    /// none); on failure, ends whatever of it started.
    async fn boot_vm(
        &self,
        vm: &vm::VmDir,
        name: &str,
        cgroup: &cgroup::VmCgroup,
        limits: &crate::job::Limits,
        shares: &[vm::Share],
        netdev: Option<String>,
    ) -> Result<i32, MicrovmError> {
        check_host()?;
        let dir = self.assets_dir();
        let kernel = assets::Kernel::locate()?;
        let initramfs = {
            let (dir, kernel) = (dir.clone(), kernel.clone());
            tokio::task::spawn_blocking(move || assets::initramfs(&dir, &kernel))
                .await
                .expect("building the initramfs does not panic")?
        };
        let rootfs = assets::rootfs(&dir, self.home.id(), &limits.image).await?;
        let (accel, warning) = accel::choose(&dir, &kernel.image, &initramfs).await?;
        if let Some(warning) = warning {
            tracing::warn!(vm = %name, "{warning}");
        }
        // The job's own cgroup, or the pool slot's (which a claiming job keeps).
        let (memory, cpus) = vm::size(limits);
        cgroup.create(memory, cpus)?;
        let boot = vm::Boot {
            cgroup,
            kernel: &kernel.image,
            initramfs: &initramfs,
            rootfs: &rootfs,
            accel,
            netdev,
            net: if limits.network == NetworkMode::Allowlist {
                "proxy"
            } else {
                "user"
            },
        };
        let started = vm::start(vm, name, limits, shares, &boot).await;
        if started.is_err() {
            vm::kill_all(vm, Duration::from_secs(1)).await;
            cgroup.remove(Duration::from_secs(2)).await;
        }
        started
    }

    async fn run(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
        throwaway: bool,
    ) -> Result<ExecResult, MicrovmError> {
        if request.cmd.is_empty() {
            return Err(RuntimeError::EmptyCommand.into());
        }
        let vm = vm::VmDir::of(&self.home, record);
        std::fs::create_dir_all(&vm.dir).map_err(|source| MicrovmError::Io {
            path: vm.dir.clone(),
            source,
        })?;
        let lock_path = vm.exec_lock();
        let wait = request.timeout + BOOT_DEADLINE;
        let _lock =
            tokio::task::spawn_blocking(move || crate::store::FileLock::acquire(&lock_path, wait))
                .await
                .expect("locking does not panic")
                .map_err(|e| MicrovmError::Config {
                    message: format!("waiting for the job's other exec: {e}"),
                })?;
        // A stopped job's sync (`throwaway`) boots a VM for itself only and ends it again,
        // as a container job's runs in a throwaway container; under the lock, so no exec
        // takes that VM meanwhile.
        let booted_here = throwaway && vm.qemu_pid().is_none();
        let channel = match self.ensure_running(record).await {
            Ok(channel) => channel,
            Err(error) => {
                if booted_here {
                    self.power_off(&vm, record, Duration::from_secs(1)).await;
                }
                return Err(error);
            }
        };
        let mut argv = match &request.after {
            None => vec!["sh".into(), "-c".into(), r#"exec "$@""#.into(), "sh".into()],
            // As in containers: the wrapper stays the command's parent to run the snippet.
            Some(after) => vec![
                "sh".into(),
                "-c".into(),
                crate::runtime::exec::AFTER_WRAPPER.into(),
                "sh".into(),
                after.clone(),
            ],
        };
        argv.extend(request.cmd.iter().cloned());
        let workspace = std::path::Path::new(&record.limits.workspace_dir);
        let workdir = request
            .workdir
            .as_ref()
            .map_or_else(|| workspace.to_path_buf(), |dir| workspace.join(dir));
        let (key, deadline) = crate::runtime::deadline_env(request.timeout);
        let env: Vec<(String, String)> = self
            .shell_env(record)
            .into_iter()
            .chain(request.env.clone())
            .chain(crate::runtime::job_env(record, true))
            .chain([(key, deadline)])
            .collect();
        let user = if guest_root_for_tests() {
            (0, 0)
        } else {
            request
                .user
                .unwrap_or_else(|| crate::runtime::agent_user(record.limits.uid))
        };
        let result = exec::run(
            channel,
            argv,
            env,
            workdir.display().to_string(),
            user,
            request,
            sink,
        )
        .await;
        // A channel that closed under the exec is most often a VM that ended: then the
        // error says so, with what QEMU and the guest's console said last.
        let result = match result {
            Err(MicrovmError::Frame(_) | MicrovmError::Channel(_)) if vm.qemu_pid().is_none() => {
                Err(MicrovmError::not_running(&vm))
            }
            other => other,
        };
        if booted_here {
            self.power_off(&vm, record, Duration::from_secs(5)).await;
        }
        result
    }

    /// Ends the VM: the guest powers off (up to `grace`), then SIGTERM and SIGKILL to what
    /// is left, and its host cgroup goes; true when a VM ran.
    async fn power_off(&self, vm: &vm::VmDir, record: &JobRecord, grace: Duration) -> bool {
        let ran = vm.qemu_pid().is_some();
        if ran && exec::tell(vm, &protocol::ToGuest::Shutdown).await {
            let until = tokio::time::Instant::now() + grace.max(Duration::from_secs(1));
            while vm.qemu_pid().is_some() && tokio::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let killed = vm::kill_all(vm, Duration::from_secs(2)).await;
        self.remove_cgroup(vm::cgroup(self.home.id(), record)).await;
        ran || killed
    }

    /// Removes the cgroup of VM `name` (a job's id or a pool slot's; up to 5 s for its
    /// killed processes to exit); true when none is left.
    async fn remove_cgroup(&self, cgroup: Result<cgroup::VmCgroup, MicrovmError>) -> bool {
        match cgroup {
            Ok(cgroup) => cgroup.remove(Duration::from_secs(5)).await,
            Err(_) => true,
        }
    }

    /// The environment every command of the job gets (an exec adds its own and the job's
    /// facts after it).
    fn shell_env(&self, record: &JobRecord) -> Vec<(String, String)> {
        [
            (
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            ),
            ("HOME", crate::runtime::layout::SANDBOX_HOME),
            ("PADDOCK_WORKSPACE", record.limits.workspace_dir.as_str()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain(crate::runtime::agent_git_env(record, true))
        .chain(if record.limits.network == NetworkMode::Allowlist {
            egress::proxy_env()
        } else {
            Vec::new()
        })
        .chain(record.limits.env.clone())
        .collect()
    }
}

/// Where the built initramfs and root disks of `home` are: `PADDOCK_MICROVM_ASSETS` (a
/// cache several installs may share; tests do), else the install's `microvm/`.
pub fn assets_dir(home: &PaddockHome) -> PathBuf {
    std::env::var_os("PADDOCK_MICROVM_ASSETS")
        .map_or_else(|| home.root().join("microvm"), PathBuf::from)
}

/// The test switch (`PADDOCK_TEST_MICROVM_GUEST_ROOT=1`, docs/testing.md): execs run as
/// root in the guest, with every capability there, standing in for an agent that took the
/// guest's kernel, so tests can attack the host side of the shares from inside.
pub fn guest_root_for_tests() -> bool {
    std::env::var_os("PADDOCK_TEST_MICROVM_GUEST_ROOT").is_some_and(|v| v == "1")
}

/// What the host needs before any VM: root (virtiofsd), QEMU and virtiofsd.
fn check_host() -> Result<(), MicrovmError> {
    if !crate::sys::is_root() {
        return Err(MicrovmError::NotRoot);
    }
    for (what, path, hint) in [
        (
            "virtiofsd",
            vm::VIRTIOFSD,
            "install Debian's qemu-system-x86 (it ships /usr/lib/qemu/virtiofsd)",
        ),
        (
            "QEMU",
            "/usr/bin/qemu-system-x86_64",
            "install Debian's qemu-system-x86",
        ),
    ] {
        if !std::path::Path::new(path).exists() {
            return Err(MicrovmError::Missing {
                what,
                path: path.into(),
                hint,
            });
        }
    }
    Ok(())
}

#[async_trait::async_trait]
impl Runtime for MicrovmRuntime {
    fn describe(&self) -> Described<'_> {
        Described {
            name: "microvm",
            isolation: "microVM (QEMU): a kernel of its own, own filesystem and network, resource limits, non-root",
            engine: None,
            ports: false,
            // The VM sees only its own shares; a host cache is no directory it can mount.
            host_caches: false,
            fuse_checkout: Some(
                "a microVM job's files are shared by virtiofsd, which does not serve a fuse-overlayfs checkout; use `--checkout worktree`, or run paddock as root (kernel overlayfs)",
            ),
        }
    }

    fn layout(&self) -> &SandboxLayout {
        &self.layout
    }

    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities {
            sandboxes: Some(self),
            network: Some(self),
            pool: Some(self),
            freeze: Some(self),
            other_users: Some(self),
            ..Capabilities::default()
        }
    }

    async fn check_ready(&self, image: &str, network: NetworkMode) -> Result<(), RuntimeError> {
        let _ = network;
        check_host().map_err(runtime_error)?;
        assets::Kernel::locate().map_err(runtime_error)?;
        if !crate::runtime::docker::export::image_id(
            &crate::runtime::docker::Daemon::local(),
            image,
        )
        .await
        .is_ok_and(|id| !id.is_empty())
        {
            return Err(RuntimeError::ImageMissing {
                image: image.to_string(),
            });
        }
        Ok(())
    }

    async fn start(&self, record: &JobRecord) -> Result<Option<String>, RuntimeError> {
        let vm = vm::VmDir::of(&self.home, record);
        let _ = self.ensure_running(record).await.map_err(runtime_error)?;
        Ok(vm.qemu_pid().map(|pid| format!("qemu:{pid}")))
    }

    async fn exec(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecOutcome, RuntimeError> {
        let result = self
            .run(record, request, sink, false)
            .await
            .map_err(runtime_error)?;
        let vm = vm::VmDir::of(&self.home, record);
        Ok(ExecOutcome {
            result,
            container_id: vm.qemu_pid().map(|pid| format!("qemu:{pid}")),
            oom_kills: None,
            image_id: None,
            exec_path: Some("guest-agent"),
        })
    }

    async fn exec_in_sandbox(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecResult, RuntimeError> {
        self.run(record, request, sink, true)
            .await
            .map_err(runtime_error)
    }

    async fn shell_command(
        &self,
        record: &JobRecord,
    ) -> Result<tokio::process::Command, RuntimeError> {
        // Boot first, so the shell itself only attaches.
        drop(self.ensure_running(record).await.map_err(runtime_error)?);
        let vm = vm::VmDir::of(&self.home, record);
        let exe = std::env::current_exe().map_err(|source| RuntimeError::Io {
            path: "/proc/self/exe".into(),
            source,
        })?;
        let (uid, gid) = crate::runtime::agent_user(record.limits.uid);
        let mut command = tokio::process::Command::new(exe);
        command
            .arg("vm-shell")
            .arg("--vm")
            .arg(&vm.dir)
            .args(["--uid", &uid.to_string(), "--gid", &gid.to_string()])
            .args(["--workdir", &record.limits.workspace_dir]);
        for (key, value) in self
            .shell_env(record)
            .into_iter()
            .chain(crate::runtime::job_env(record, true))
        {
            command.arg("--env").arg(format!("{key}={value}"));
        }
        Ok(command)
    }

    async fn stop(&self, record: &JobRecord, grace: Duration) -> Result<bool, RuntimeError> {
        let vm = vm::VmDir::of(&self.home, record);
        Ok(self.power_off(&vm, record, grace).await)
    }

    async fn stop_for_removal(
        &self,
        _store: &JobStore,
        record: JobRecord,
    ) -> Result<JobRecord, RuntimeError> {
        // The VM stays up for the removal's last sync (booting one again just for that
        // costs seconds under the emulator); the job's own processes end now, and
        // `destroy` ends the VM.
        let vm = vm::VmDir::of(&self.home, &record);
        if vm.qemu_pid().is_some() {
            exec::tell(&vm, &protocol::ToGuest::KillAll).await;
        }
        Ok(record)
    }

    async fn destroy(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        let vm = vm::VmDir::of(&self.home, record);
        vm::kill_all(&vm, Duration::from_secs(1)).await;
        if !self.remove_cgroup(vm::cgroup(self.home.id(), record)).await {
            // Left for the sweep, which finds it by its name.
            tracing::warn!(job = %record.id, "the VM's host cgroup still holds processes");
        }
        match std::fs::remove_dir_all(&vm.dir) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(RuntimeError::Io {
                path: vm.dir,
                source: error,
            }),
            _ => Ok(()),
        }
    }

    async fn status(&self, _record: &JobRecord) -> Option<SandboxStatus> {
        None
    }
}

#[async_trait::async_trait]
impl Sandboxes for MicrovmRuntime {
    async fn list_sandboxes(&self) -> Result<Vec<crate::runtime::Sandbox>, RuntimeError> {
        let roots = self.home.job_dir_roots();
        let pool_root = crate::pool::PoolSlots::of(&self.home).root().to_path_buf();
        let home = self.home.clone();
        let mut found = tokio::task::spawn_blocking(move || vm::running_vms(&roots, &pool_root))
            .await
            .expect("listing processes does not panic");
        // A VM cgroup with no VM process naming its job or slot: what a killed QEMU or
        // paddock left (not running; removing it is only an rmdir of an empty cgroup).
        let install = self.home.id();
        let jobs = cgroup::jobs(install).into_iter().filter_map(|job| {
            let id = crate::job::JobId::parse(&job).ok()?;
            let dir = home.job_dir(&id).join("vm");
            Some((job, dir, crate::runtime::SandboxRole::Job))
        });
        let slots = cgroup::slots(install).into_iter().map(|slot| {
            let dir = vm::VmDir::of_slot(&home, &slot).dir;
            (slot, dir, crate::runtime::SandboxRole::Pool)
        });
        for (name, dir, role) in jobs.chain(slots).collect::<Vec<_>>() {
            if found.iter().any(|s| s.job == name && s.role == role) {
                continue;
            }
            found.push(crate::runtime::Sandbox {
                name: dir.display().to_string(),
                job: name,
                running: false,
                role,
                created: None,
                volumes: Vec::new(),
            });
        }
        Ok(found)
    }

    async fn remove_sandbox(&self, sandbox: &crate::runtime::Sandbox) -> Result<(), RuntimeError> {
        // `name` is the VM's directory; it must still be under this install's job dirs.
        let dir = PathBuf::from(&sandbox.name);
        let pool_root = crate::pool::PoolSlots::of(&self.home).root().to_path_buf();
        if !self
            .home
            .job_dir_roots()
            .iter()
            .chain(std::iter::once(&pool_root))
            .any(|root| dir == root.join(&sandbox.job).join("vm"))
        {
            return Err(RuntimeError::NotOurContainer {
                name: sandbox.name.clone(),
            });
        }
        vm::kill_all(&vm::VmDir { dir }, Duration::from_secs(2)).await;
        let cgroup = if sandbox.role == crate::runtime::SandboxRole::Pool {
            cgroup::VmCgroup::of_slot(self.home.id(), &sandbox.job)
        } else {
            cgroup::VmCgroup::of(self.home.id(), &sandbox.job)
        };
        end_cgroup(cgroup, &sandbox.job).await
    }
}

#[async_trait::async_trait]
impl Network for MicrovmRuntime {
    async fn apply_network(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        // The proxy reads the policy file at each connection.
        if record.limits.network == NetworkMode::Allowlist {
            crate::runtime::egress_files::write_policy(
                &self.home,
                record,
                crate::sys::host_addresses(),
            )?;
        }
        Ok(())
    }

    async fn cut_connections(&self, _record: &JobRecord) -> Result<(), RuntimeError> {
        // The proxy reads the policy at each connection; a VM keeps no tunnel open past it.
        Ok(())
    }

    async fn refresh_egress_log(&self, _record: &JobRecord) -> Result<(), RuntimeError> {
        // The VM's proxy runs on this host and writes the job's log itself.
        Ok(())
    }

    async fn guard_job_ranges(&self, _image: &str) -> Option<Result<bool, RuntimeError>> {
        // A VM's NIC is user-mode: no host route to guard.
        None
    }

    async fn exec_beside(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
        _network: NetworkMode,
    ) -> Result<ExecOutcome, RuntimeError> {
        // A VM has one network; setup commands run in it, never wider than the job's.
        self.exec(record, request, sink).await
    }
}

#[async_trait::async_trait]
impl Pool for MicrovmRuntime {
    fn unsupported(&self) -> Option<&'static str> {
        None
    }

    fn fixed_limits(&self) -> bool {
        // A VM's vCPUs and memory are set at its boot.
        true
    }

    async fn start_pool_slot(&self, slot: &PoolSlot) -> Result<String, RuntimeError> {
        pool::start_slot(self, slot).await.map_err(runtime_error)
    }

    fn pool_binds(&self, record: &JobRecord) -> Result<Vec<HostBind>, String> {
        pool::layout(record).map(|(binds, _)| binds)
    }

    async fn adopt_pool_slot(
        &self,
        record: &JobRecord,
        slot: &PoolSlot,
    ) -> Result<String, RuntimeError> {
        pool::adopt(self, record, slot).await.map_err(runtime_error)
    }

    async fn pool_claimed(&self, record: &JobRecord, slot: &PoolSlot) -> Result<(), RuntimeError> {
        pool::mount_claimed(&self.home, record, slot)
            .await
            .map_err(runtime_error)
    }

    async fn remove_pool_slot(
        &self,
        slot: &PoolSlot,
        _job_name: Option<&str>,
    ) -> Result<(), RuntimeError> {
        pool::remove_slot(&self.home, slot).await
    }
}

/// A VM is frozen whole by stopping its QEMU (every vCPU and device thread with it); its
/// virtiofsd helpers only answer the guest, so they idle meanwhile. A stopped QEMU keeps the
/// guest's memory and state exactly; SIGCONT lets it run on (the guest's clock then jumps).
#[async_trait::async_trait]
impl crate::runtime::capabilities::Freeze for MicrovmRuntime {
    async fn freeze(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        let dir = vm::VmDir::of(&self.home, record);
        if signal_qemu(&dir, libc::SIGSTOP)? {
            // A stop signal is taken by each thread when it next runs: `pause` answers once
            // every thread of QEMU has stopped (seen: the main thread still running right
            // after the signal, on a loaded host), within a bound.
            if let Some(pid) = dir.qemu_pid() {
                let deadline = std::time::Instant::now() + STOP_WITHIN;
                while !all_threads_stopped(pid) && std::time::Instant::now() < deadline {
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                }
            }
            return Ok(());
        }
        Err(runtime_error(MicrovmError::Config {
            message: "the job's VM is not running: nothing to freeze".into(),
        }))
    }

    async fn thaw(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        // No QEMU runs: nothing is frozen.
        signal_qemu(&vm::VmDir::of(&self.home, record), libc::SIGCONT).map(|_| ())
    }
}

/// How long `freeze` waits for QEMU's threads to stop after the signal.
const STOP_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether every thread of process `pid` is stopped (or gone): the state letter of each
/// `/proc/PID/task/TID/stat`.
fn all_threads_stopped(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).map_or(true, |stat| {
            stat.rsplit(')')
                .next()
                .and_then(|rest| rest.trim_start().chars().next())
                .is_none_or(|state| matches!(state, 'T' | 't' | 'Z' | 'X'))
        })
    })
}

/// Sends `signal` to the VM's own QEMU (its pidfile, checked to name the VM's directory);
/// false when none runs.
fn signal_qemu(vm: &vm::VmDir, signal: i32) -> Result<bool, RuntimeError> {
    let Some(pid) = vm.qemu_pid().and_then(rustix::process::Pid::from_raw) else {
        return Ok(false);
    };
    let signal = rustix::process::Signal::from_named_raw(signal).expect("a signal of Linux");
    rustix::process::kill_process(pid, signal).map_err(|e| {
        runtime_error(MicrovmError::Config {
            message: format!("cannot signal the job's VM: {e}"),
        })
    })?;
    Ok(true)
}

/// The guest's kernel contains root: root in the guest is no one of the host's, and what it
/// writes through a share is the unprivileged [`jail::GUEST_ROOT_ON_HOST`]'s there, never
/// setuid (the jail's filter), so there is nothing to settle after it.
#[async_trait::async_trait]
impl crate::runtime::capabilities::OtherUsers for MicrovmRuntime {
    async fn check_other_user(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        let _ = record;
        Ok(())
    }

    async fn settle(&self, record: &JobRecord, user: (u32, u32)) -> Result<(), RuntimeError> {
        let _ = (record, user);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_reads_as_stopped_only_once_its_threads_are() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("sleep runs");
        let pid = i32::try_from(child.id()).expect("a pid fits");
        assert!(
            !all_threads_stopped(pid),
            "a sleeping process is not stopped"
        );
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid).expect("a live pid"),
            rustix::process::Signal::STOP,
        )
        .expect("the child takes the signal");
        let deadline = std::time::Instant::now() + STOP_WITHIN;
        while !all_threads_stopped(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(all_threads_stopped(pid), "stopped within {STOP_WITHIN:?}");
        child.kill().expect("the child ends");
        child.wait().expect("the child is reaped");
        assert!(all_threads_stopped(pid), "a process gone counts as stopped");
    }
}
