//! Execution runtimes: where a job's commands run.
//!
//! The [`Runtime`] trait is the whole contract between the engine (and sweep, doctor, the
//! CLI's `image build`) and a runtime: start a job's sandbox, run commands in it, stop and
//! destroy it, list and remove what this install left behind. Two implementations:
//! [`DockerRuntime`] (one long-lived, hardened container per job, runc or gVisor's
//! runsc) and [`ProcessRuntime`] (child processes in the worktree with rlimits;
//! isolates neither files nor network). [`Runtimes`] holds one of each and picks by a job's
//! recorded [`RuntimeKind`]; a test can hand the engine its own. Nothing outside
//! `runtime/docker/` builds a bollard struct or talks to the daemon.

pub(crate) mod docker;
mod error;
pub mod exec;
pub mod microvm;
mod on_engine;
pub(crate) mod process;
mod runtimes;

use std::path::PathBuf;
use std::time::Duration;

use crate::config::{NetworkMode, RuntimeChoice};
use crate::job::{JobId, JobRecord, RuntimeKind};
use crate::store::{JobStore, PaddockHome};

pub use docker::{DockerRuntime, container_name};
pub use error::RuntimeError;
pub use exec::{ExecRequest, ExecResult, OutputSink};
pub use process::ProcessRuntime;
pub use runtimes::Runtimes;

/// The runtime a new job gets, and a warning when `auto` fell back to processes.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub kind: RuntimeKind,
    pub warning: Option<String>,
}

/// What one exec produced, plus what the record must learn from it.
#[derive(Debug, Clone)]
pub struct ExecOutcome {
    pub result: ExecResult,
    /// The container id after the exec (it changes when a lost container was recreated).
    pub container_id: Option<String>,
    /// The container's OOM-kill counter, when it was read.
    pub oom_kills: Option<u64>,
    /// The id of the image the command's container runs (`sha256:...`), when known.
    pub image_id: Option<String>,
}

/// A sandbox this install left on the machine (a container carrying its labels), as the
/// sweeper sees it.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub name: String,
    pub job: String,
    pub running: bool,
    pub role: SandboxRole,
    pub created: Option<chrono::DateTime<chrono::Utc>>,
    /// The named volumes it mounts (a remote job's files, its repository's object cache).
    pub volumes: Vec<String>,
}

/// What a listed sandbox is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxRole {
    /// The job's own container.
    Job,
    /// A short-lived container beside the job's: a sync of a stopped job, or setup
    /// commands with their own network.
    Sync,
    /// The egress proxy of an `allowlist` job.
    Egress,
    /// A warm pool slot's container: waiting (its job label is the slot's id), or claimed
    /// by the job whose record names that slot.
    Pool,
}

/// What `doctor` reports of a runtime's engine (the Docker daemon).
#[derive(Debug, Clone)]
pub struct EngineFacts {
    pub version: String,
    pub api_version: String,
    /// OCI runtimes registered with the engine, sorted.
    pub oci_runtimes: Vec<String>,
    /// Resource limits the engine cannot enforce here (`memory`, `swap`, `cpu`, `pids`).
    pub unenforced_limits: Vec<&'static str>,
    /// OCI runtimes registered in a way that breaks paddock's promises (limits, networks),
    /// each with what is wrong.
    pub misconfigured: Vec<(String, String)>,
    /// The engine's CPUs (`engine: auto` budgets an engine by them).
    pub cpus: u64,
    /// Why the engine cannot hold a repository's build in a cell with the job's caps
    /// (`None`: it can).
    pub no_build_cell: Option<String>,
}

/// An image build from a repository's content (a devcontainer's `build`): what to build.
#[derive(Debug, Clone, Copy)]
pub struct ContextBuild<'a> {
    pub dockerfile: &'a str,
    pub args: &'a std::collections::BTreeMap<String, String>,
    pub target: Option<&'a str>,
    pub tag: &'a str,
    pub limits: BuildLimits,
}

/// The walls of a build from repository content, which is as untrusted as the agent: the
/// job's process, memory and CPU caps, and no network unless the user's profile opens it
/// (`build_network: open`; a repository's file cannot).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BuildLimits {
    /// Bytes; 0: none.
    pub memory: u64,
    pub cpus: f64,
    /// Processes (the job's `pids`); 0: none.
    pub pids: u32,
    pub network: bool,
    /// The user trusts the repository (`trust:`): on an engine that cannot cap a build's
    /// processes it builds anyway, with the caps the build API takes.
    pub trusted: bool,
}

/// One way of running a job's commands. Every method that waits on something outside the
/// process has its own deadline; methods that remove things check ownership right before
/// they act and succeed when the thing is already gone.
#[async_trait::async_trait]
pub trait Runtime: Send + Sync {
    /// One plain sentence on what this runtime isolates, for `show` and `doctor`.
    fn isolation_note(&self) -> &'static str;

    /// The engine of `engines:` this runtime's jobs live on (`None`: this host).
    fn engine(&self) -> Option<&str> {
        None
    }

    /// Who must own the files of a job's checkout when that is not paddock's own user.
    fn files_owner(&self, record: &JobRecord) -> Option<(u32, u32)>;

    /// The job's git dir and work tree as commands in its sandbox see them.
    fn sandbox_git_paths(&self, record: &JobRecord) -> Option<(PathBuf, PathBuf)>;

    /// Where the repository's object store is as the sandbox sees it, when not at its host
    /// path (the job git dir's alternates then name this path).
    fn sandbox_objects(&self) -> Option<PathBuf> {
        None
    }

    /// Where the job's outbox is as the sandbox sees it, when this runtime can run paddock's
    /// snippet after an exec (see [`ExecRequest::after`]); `None` when it cannot.
    fn sandbox_outbox(&self) -> Option<PathBuf>;

    /// Whether a job could start here with `image` and `network`: the engine answers, the
    /// image exists, the OCI runtime is registered so that the job keeps its limits and can
    /// have that network (the process runtime cannot hold an allow-list). Never pulls.
    async fn check_ready(&self, image: &str, network: NetworkMode) -> Result<(), RuntimeError>;

    /// The name a new job's sandbox will have on the machine (its container's), recorded so
    /// the job finds it again; `None` for runtimes without named sandboxes.
    fn sandbox_name(&self, id: &JobId) -> Option<String> {
        let _ = id;
        None
    }

    /// Starts whatever a new job needs to run commands; returns the container id, if any.
    async fn start(&self, record: &JobRecord) -> Result<Option<String>, RuntimeError>;

    /// Runs one command in the job, starting (or recreating) its sandbox when needed.
    async fn exec(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecOutcome, RuntimeError>;

    /// Runs a short command of paddock's own (the sync script) in the job's sandbox without
    /// starting the job again.
    async fn exec_in_sandbox(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecResult, RuntimeError>;

    /// Runs one command beside the job's sandbox, in a throwaway one with the same files,
    /// user and limits but the network `network` (setup commands with their own network
    /// policy). A runtime that isolates no network runs it as [`exec`](Self::exec) does.
    async fn exec_beside(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
        network: NetworkMode,
    ) -> Result<ExecOutcome, RuntimeError> {
        let _ = network;
        self.exec(record, request, sink).await
    }

    /// An interactive shell in the job (its sandbox started if needed).
    async fn shell_command(
        &self,
        record: &JobRecord,
    ) -> Result<tokio::process::Command, RuntimeError>;

    /// Stops whatever runs for a job (signal, `grace`, kill); true when something was running.
    async fn stop(&self, record: &JobRecord, grace: Duration) -> Result<bool, RuntimeError>;

    /// Records the sandbox's exit code and OOM flag in the job, then stops it, ahead of
    /// removing the job.
    async fn stop_for_removal(
        &self,
        store: &JobStore,
        record: JobRecord,
    ) -> Result<JobRecord, RuntimeError>;

    /// Removes whatever the runtime holds for a job (each part tried even when another
    /// fails; the first error is returned).
    async fn destroy(&self, record: &JobRecord) -> Result<(), RuntimeError>;

    /// Makes the job's sandbox follow its record's network policy from the next connection
    /// on (the allow-list of an `allowlist` job). Nothing for runtimes without one.
    async fn apply_network(&self, _record: &JobRecord) -> Result<(), RuntimeError> {
        Ok(())
    }

    /// Brings the job's egress log (`logs/<job>/egress.jsonl`) up to date where it is kept
    /// elsewhere (a remote engine's proxy writes it there). Nothing for the others.
    async fn refresh_egress_log(&self, _record: &JobRecord) -> Result<(), RuntimeError> {
        Ok(())
    }

    /// Ends every connection the job's network policy let through so far (its proxy's open
    /// tunnels), so a narrower policy holds for everything from now on, not only for new
    /// connections. Nothing for runtimes without one.
    async fn cut_connections(&self, _record: &JobRecord) -> Result<(), RuntimeError> {
        Ok(())
    }

    /// Carries one connection the host accepted to `port` of a job whose ports go through
    /// its engine's API (a remote job's: `docker/port_relay.rs`), until both ways ended.
    async fn relay_port(
        &self,
        _record: &JobRecord,
        _port: u16,
        _client: tokio::net::TcpStream,
    ) -> Result<(), RuntimeError> {
        Err(RuntimeError::Unsupported {
            runtime: "local",
            what: "relay a port through an engine",
        })
    }

    /// Starts a warm pool slot's sandbox (see `crate::pool`); returns its container id.
    async fn start_pool_slot(&self, slot: &crate::pool::PoolSlot) -> Result<String, RuntimeError> {
        let _ = slot;
        Err(RuntimeError::Unsupported {
            runtime: "process",
            what: "keep a warm pool",
        })
    }

    /// The host binds that make `record`'s files appear in a pool slot's sandbox, or why
    /// the job cannot start in one.
    fn pool_binds(&self, record: &JobRecord) -> Result<Vec<crate::pool::HostBind>, String> {
        let _ = record;
        Err("the process runtime has no containers".into())
    }

    /// Hands a claimed pool slot's sandbox (the job's files already mounted into it) to
    /// `record`: limits, name, file owners. Returns the container id.
    async fn adopt_pool_slot(
        &self,
        record: &JobRecord,
        slot: &crate::pool::PoolSlot,
    ) -> Result<String, RuntimeError> {
        let _ = (record, slot);
        Err(RuntimeError::Unsupported {
            runtime: "process",
            what: "keep a warm pool",
        })
    }

    /// Makes a claimed slot's sandbox ready for the job: a local container sees its files by
    /// propagation (nothing to do), a VM's guest mounts its share; a remote slot's container
    /// is checked to still run (before the claim's fill writes its volumes).
    async fn pool_claimed(
        &self,
        record: &JobRecord,
        slot: &crate::pool::PoolSlot,
    ) -> Result<(), RuntimeError> {
        let _ = (record, slot);
        Ok(())
    }

    /// Removes a pool slot's sandbox (under its waiting name, or `job_name` once claimed),
    /// after checking it carries this install's labels with the slot's id.
    async fn remove_pool_slot(
        &self,
        slot: &crate::pool::PoolSlot,
        job_name: Option<&str>,
    ) -> Result<(), RuntimeError> {
        let _ = (slot, job_name);
        Ok(())
    }

    /// Every sandbox this install has on the machine, including ones no record names.
    async fn list_sandboxes(&self) -> Result<Vec<Sandbox>, RuntimeError> {
        Ok(Vec::new())
    }

    /// Removes one listed sandbox, after checking again that it is this install's.
    async fn remove_sandbox(&self, sandbox: &Sandbox) -> Result<(), RuntimeError> {
        let _ = sandbox;
        Ok(())
    }

    /// Makes sure the job networks' range (`egress::ranges`) is unreachable from the host,
    /// adding its route when missing, with `image` for a helper container when not root:
    /// `Some(true)` when it was added now; `None` for runtimes without job networks.
    async fn guard_job_ranges(&self, image: &str) -> Option<Result<bool, RuntimeError>> {
        let _ = image;
        None
    }

    /// On a remote engine: this install's cache volumes there (others' caches are the host's).
    async fn cache_volumes(&self) -> Result<Vec<crate::engines::CacheVolume>, RuntimeError> {
        Ok(Vec::new())
    }

    /// On a remote engine: removes the cache volume `name` when it still carries this
    /// install's labels as a cache (checked right before); false when it does not.
    async fn remove_cache_volume(&self, _name: &str) -> Result<bool, RuntimeError> {
        Ok(false)
    }

    /// The engine's version and capabilities, for `doctor`; `None` for runtimes without one.
    async fn engine_facts(&self) -> Option<Result<EngineFacts, RuntimeError>> {
        None
    }

    /// Builds the agent image `tag` from `base_image`; returns the image id.
    async fn build_image(
        &self,
        base_image: &str,
        tag: &str,
        progress: &mut (dyn for<'line> FnMut(&'line str) + Send),
    ) -> Result<String, RuntimeError>;

    /// The tags `repository:*` of images this install built (they carry its image and home
    /// labels), each with when its image was made.
    async fn labelled_images(
        &self,
        _repository: &str,
    ) -> Result<Vec<(String, Option<chrono::DateTime<chrono::Utc>>)>, RuntimeError> {
        Ok(Vec::new())
    }

    /// Removes the image tag `tag`, never by force (an image a container uses stays).
    async fn remove_image(&self, _tag: &str) -> Result<(), RuntimeError> {
        Err(RuntimeError::Unsupported {
            runtime: "process",
            what: "remove images",
        })
    }

    /// On a remote engine: fills the job's volumes with `tip` checked out, its git dir staged
    /// on the host at `staged_git` and the objects its engine's cache lacks (a stream through
    /// the engine's API; no host path is mounted). Other runtimes keep files on the host.
    async fn fill_files(
        &self,
        _record: &JobRecord,
        _staged_git: &std::path::Path,
        _tip: &str,
    ) -> Result<crate::engines::FillReport, RuntimeError> {
        Err(RuntimeError::Unsupported {
            runtime: "local",
            what: "fill a remote engine's volumes",
        })
    }

    /// A remote engine's half of `place::JobFiles`: the outbox volume's sync files brought to
    /// the host's outbox (capped); the job's volumes removed (labels checked). Else nothing.
    async fn collect_outbox(&self, _record: &JobRecord) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn remove_files(&self, _record: &JobRecord) -> Result<(), RuntimeError> {
        Ok(())
    }

    /// The env of the image `tag` (`NAME=value` entries) when it is present, `None` when it
    /// is not (a devcontainer's cached build, and its `${containerEnv:...}`).
    async fn image_env(&self, _tag: &str) -> Result<Option<Vec<String>>, RuntimeError> {
        Err(RuntimeError::Unsupported {
            runtime: "process",
            what: "use images",
        })
    }

    /// Builds `build.tag` from a repository's build context (a tar) with its Dockerfile,
    /// args and target (a devcontainer's `build`), inside `build.limits`; returns the image id.
    async fn build_from_context(
        &self,
        _context: Vec<u8>,
        _build: &ContextBuild<'_>,
        _progress: &mut (dyn for<'line> FnMut(&'line str) + Send),
    ) -> Result<String, RuntimeError> {
        Err(RuntimeError::Unsupported {
            runtime: "process",
            what: "build images (it runs no containers)",
        })
    }

    /// What the job's sandbox is doing now (state, health, CPU and memory), for display;
    /// None when this runtime cannot tell or the look failed. Never waits long.
    async fn sandbox_status(&self, _record: &JobRecord) -> Option<SandboxStatus> {
        None
    }

    /// Whether the job's sandbox answers: an exec of `true` within a few seconds.
    async fn health_check(&self, record: &JobRecord) -> Result<(), String> {
        let request = ExecRequest {
            cmd: vec!["true".into()],
            env: Default::default(),
            workdir: None,
            timeout: Duration::from_secs(5),
            kill_policy: crate::config::KillPolicy::Hard,
            grace: Duration::ZERO,
            output_cap: 4096,
            after: None,
        };
        let outcome = tokio::time::timeout(
            Duration::from_secs(10),
            self.exec(record, &request, &mut exec::Discard),
        )
        .await;
        match outcome {
            Ok(Ok(done)) if done.result.exit_code == 0 && !done.result.timed_out => Ok(()),
            Ok(Ok(done)) => Err(format!(
                "`true` exited {} (timed out: {})",
                done.result.exit_code, done.result.timed_out
            )),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err("no answer within 10s".into()),
        }
    }
}

/// A sandbox as its runtime sees it now (the dashboard's container columns).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SandboxStatus {
    /// The runtime's word for it (`running`, `exited`, `absent`, ...).
    pub status: String,
    /// The health check's verdict, when the sandbox has one.
    pub health: Option<String>,
    /// CPU in use, in percent of one CPU.
    pub cpu_percent: Option<f64>,
    /// Memory in use, in bytes.
    pub memory_bytes: Option<u64>,
}

/// Why a job of `runtime` cannot start in a warm pool slot, if it cannot.
pub fn pool_unsupported(runtime: RuntimeKind) -> Option<&'static str> {
    match runtime {
        RuntimeKind::Runsc => Some(
            "gVisor serves a container's files through its own gofer: mounts made on the host after the start never reach it",
        ),
        RuntimeKind::Process => Some("the process runtime has no containers"),
        RuntimeKind::Microvm | RuntimeKind::Docker => None,
    }
}

/// A test-only failpoint: fails with [`RuntimeError::Injected`] when `PADDOCK_FAIL_AT`
/// names `point` (see `engine::FAIL_POINTS`).
pub(crate) fn failpoint(point: &'static str) -> Result<(), RuntimeError> {
    if crate::env::fail_at(point) {
        return Err(RuntimeError::Injected { point });
    }
    Ok(())
}

/// What a job's commands learn about the job itself, the same in every runtime:
/// `PADDOCK_JOB_ID`, `PADDOCK_CPUS` (the CPU limit as a decimal; the host's count where the
/// runtime sets none, as the process runtime) and `PADDOCK_MEMORY_BYTES` (the memory limit
/// in bytes; absent when it is 0, which Docker takes as no limit).
pub fn job_env(record: &JobRecord) -> Vec<(String, String)> {
    let cpus = if record.runtime.sandboxed() {
        record.limits.cpus.to_string()
    } else {
        std::thread::available_parallelism().map_or_else(|_| "1".into(), |n| n.to_string())
    };
    let mut env = vec![
        ("PADDOCK_JOB_ID".to_string(), record.id.to_string()),
        ("PADDOCK_CPUS".to_string(), cpus),
    ];
    if record.limits.memory.0 > 0 {
        env.push((
            "PADDOCK_MEMORY_BYTES".to_string(),
            record.limits.memory.0.to_string(),
        ));
    }
    env
}

/// `PADDOCK_DEADLINE` for an exec starting now with `timeout`: when paddock will stop the
/// command (RFC 3339, UTC, seconds). A job has no deadline of its own; each exec has one.
pub fn deadline_env(timeout: Duration) -> (String, String) {
    let deadline = chrono::Duration::from_std(timeout)
        .ok()
        .and_then(|timeout| chrono::Utc::now().checked_add_signed(timeout))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
    (
        "PADDOCK_DEADLINE".to_string(),
        deadline.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    )
}

/// Git's identity and settings for the agent's commands, the same in every runtime: commits
/// carry `paddock agent (<job>)` unless `PADDOCK_GIT_AUTHOR_NAME`/`_EMAIL` are set where
/// paddock runs. In containers they are part of the container's environment, so even the
/// first exec has them.
pub fn agent_git_env(record: &JobRecord) -> Vec<(String, String)> {
    let job = record.id.as_str();
    let name = std::env::var("PADDOCK_GIT_AUTHOR_NAME")
        .unwrap_or_else(|_| format!("paddock agent ({job})"));
    let email = std::env::var("PADDOCK_GIT_AUTHOR_EMAIL")
        .unwrap_or_else(|_| format!("{job}@paddock.invalid"));
    let mut env = vec![
        ("GIT_AUTHOR_NAME".to_string(), name.clone()),
        ("GIT_COMMITTER_NAME".to_string(), name),
        ("GIT_AUTHOR_EMAIL".to_string(), email.clone()),
        ("GIT_COMMITTER_EMAIL".to_string(), email),
    ];
    if record.runtime.sandboxed() {
        // The borrowed object store belongs to another uid; git must not refuse the job's
        // own files for that either.
        for (key, value) in [
            ("GIT_CONFIG_COUNT", "1"),
            ("GIT_CONFIG_KEY_0", "safe.directory"),
            ("GIT_CONFIG_VALUE_0", "*"),
        ] {
            env.push((key.to_string(), value.to_string()));
        }
    }
    env
}
