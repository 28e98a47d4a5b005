//! Execution runtimes: where a job's commands run.
//!
//! The [`Runtime`] trait is the core contract between the engine (and sweep, doctor, the
//! CLI's `image build`) and a runtime: start a job's sandbox, run commands in it, stop and
//! destroy it, say what it is. What only some runtimes can do is a trait of its own in
//! [`capabilities`]. Each runtime is one folder (`docker/`: one hardened container per job,
//! runc or gVisor's runsc; `microvm/`: a QEMU guest per job; `process/`: child processes
//! with rlimits, isolating neither files nor network) whose `register` adds it to the
//! [`registry`]; [`Runtimes`] holds what registered and picks by a job's recorded
//! [`RuntimeKind`]. The sandbox layout they share is in [`layout`]. Nothing outside
//! `runtime/docker/` builds a bollard struct or talks to the daemon.

mod absent;
pub mod access;
pub mod capabilities;
pub(crate) mod docker;
pub mod egress_files;
mod error;
pub mod exec;
#[cfg(test)]
pub(crate) mod fake;
pub mod layout;
pub mod microvm;
mod on_engine;
pub(crate) mod process;
pub(crate) mod registration;
pub(crate) mod registry;
mod runtimes;

use std::time::Duration;

use crate::config::{NetworkMode, RuntimeChoice};
use crate::job::{JobRecord, RuntimeKind};
use crate::store::JobStore;

pub use capabilities::Capabilities;
pub use docker::{DockerRuntime, container_name};
pub use error::RuntimeError;
pub use exec::{ExecRequest, ExecResult, OutputSink};
pub use layout::{SandboxLayout, agent_git_env, agent_user, deadline_env, job_env};
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
    /// How the command was started: `exec-server` (the container's resident server),
    /// `docker-exec` (Docker's exec API), `guest-agent` (a microVM's), `process`.
    pub exec_path: Option<&'static str>,
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

/// What a runtime says of itself, for `show` and `doctor`.
#[derive(Debug, Clone, Copy)]
pub struct Described<'a> {
    /// Its name in errors (`docker`, `runsc`, `process`, ...).
    pub name: &'static str,
    /// One plain sentence on what this runtime isolates.
    pub isolation: &'static str,
    /// The engine of `engines:` this runtime's jobs live on (`None`: this host).
    pub engine: Option<&'a str>,
    /// Whether a job's ports can reach this host (published by the engine, or relayed).
    pub ports: bool,
    /// Whether its sandboxes can mount the host's shared cache directories.
    pub host_caches: bool,
    /// Why its sandboxes cannot open a checkout fuse-overlayfs mounted, if they cannot.
    pub fuse_checkout: Option<&'static str>,
}

/// One way of running a job's commands: the core every runtime implements. What only some
/// runtimes can do (a warm pool, images, job networks, relayed ports, engine volumes) is a
/// trait of its own in [`capabilities`], handed out by [`Runtime::capabilities`]. Every
/// method that waits on something outside the process has its own deadline; methods that
/// remove things check ownership right before they act and succeed when the thing is
/// already gone.
#[async_trait::async_trait]
pub trait Runtime: Send + Sync {
    /// What it isolates, and the engine its jobs live on.
    fn describe(&self) -> Described<'_>;

    /// How its sandboxes see a job's files (paths, owner, names).
    fn layout(&self) -> &SandboxLayout;

    /// What it offers beyond the core.
    fn capabilities(&self) -> Capabilities<'_>;

    /// Whether a job could start here with `image` and `network`: the engine answers, the
    /// image exists, the OCI runtime is registered so that the job keeps its limits and can
    /// have that network (the process runtime cannot hold an allow-list). Never pulls.
    async fn check_ready(&self, image: &str, network: NetworkMode) -> Result<(), RuntimeError>;

    /// Starts whatever a new job needs to run commands; returns the sandbox's id, if any.
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

    /// What the job's sandbox is doing now (state, health, CPU and memory), for display;
    /// None when this runtime cannot tell or the look failed. Never waits long.
    async fn status(&self, record: &JobRecord) -> Option<SandboxStatus>;
}

/// Runs one command beside the job's sandbox with the network `network` where the runtime
/// has job networks of its own; else in the job, as [`Runtime::exec`] does (a runtime that
/// isolates no network has no other network to give).
pub async fn exec_beside(
    runtime: &dyn Runtime,
    record: &JobRecord,
    request: &ExecRequest,
    sink: &mut dyn OutputSink,
    network: NetworkMode,
) -> Result<ExecOutcome, RuntimeError> {
    match runtime.capabilities().network {
        Some(networks) => networks.exec_beside(record, request, sink, network).await,
        None => runtime.exec(record, request, sink).await,
    }
}

/// Whether the job's sandbox answers: an exec of `true` within a few seconds.
pub async fn health_check(runtime: &dyn Runtime, record: &JobRecord) -> Result<(), String> {
    let request = ExecRequest {
        cmd: vec!["true".into()],
        env: Default::default(),
        workdir: None,
        timeout: Duration::from_secs(5),
        kill_policy: crate::config::KillPolicy::Hard,
        grace: Duration::ZERO,
        output_cap: 4096,
        after: None,
        stdin: Default::default(),
        user: None,
    };
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        runtime.exec(record, &request, &mut exec::Discard),
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
pub fn pool_refusal(runtime: &dyn Runtime) -> Option<&'static str> {
    match runtime.capabilities().pool {
        Some(pool) => pool.unsupported(),
        None => Some("its runtime keeps no sandbox to start ahead of a job"),
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

/// The error of asking `runtime` for a capability it lacks (`what` it cannot do).
pub fn lacks(runtime: &dyn Runtime, what: &'static str) -> RuntimeError {
    RuntimeError::Unsupported {
        runtime: runtime.describe().name,
        what,
    }
}

/// Makes the job's sandbox follow its record's network policy (see
/// [`capabilities::Network`]); nothing for a runtime without job networks.
pub async fn apply_network(runtime: &dyn Runtime, record: &JobRecord) -> Result<(), RuntimeError> {
    match runtime.capabilities().network {
        Some(network) => network.apply_network(record).await,
        None => Ok(()),
    }
}

/// Ends the connections the job's policy let through so far; nothing for a runtime
/// without job networks.
pub async fn cut_connections(
    runtime: &dyn Runtime,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    match runtime.capabilities().network {
        Some(network) => network.cut_connections(record).await,
        None => Ok(()),
    }
}

/// Brings the job's egress log up to date where it is kept elsewhere; nothing for a
/// runtime without job networks.
pub async fn refresh_egress_log(
    runtime: &dyn Runtime,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    match runtime.capabilities().network {
        Some(network) => network.refresh_egress_log(record).await,
        None => Ok(()),
    }
}

/// The sandboxes this install keeps with `runtime`; none for a runtime that keeps none.
pub async fn list_sandboxes(runtime: &dyn Runtime) -> Result<Vec<Sandbox>, RuntimeError> {
    match runtime.capabilities().sandboxes {
        Some(sandboxes) => sandboxes.list_sandboxes().await,
        None => Ok(Vec::new()),
    }
}

/// Removes a listed sandbox of `runtime` (ownership checked again by the runtime).
pub async fn remove_sandbox(runtime: &dyn Runtime, sandbox: &Sandbox) -> Result<(), RuntimeError> {
    match runtime.capabilities().sandboxes {
        Some(sandboxes) => sandboxes.remove_sandbox(sandbox).await,
        None => Ok(()),
    }
}
