//! What a runtime may offer beyond the core [`Runtime`](super::Runtime) contract, each a
//! trait of its own that a runtime hands out through [`Capabilities`]: sandboxes to list
//! and reap, an image engine, job networks, a warm pool, ports relayed through an engine,
//! files in an engine's volumes, and freezing a job's processes in place. A caller asks for the capability and handles `None`
//! itself, so no runtime answers "unsupported" in another's name, and a runtime that lacks
//! one cannot misreport itself through a forgotten default.

use std::path::Path;

use super::{
    ContextBuild, EngineFacts, ExecOutcome, ExecRequest, OutputSink, RuntimeError, Sandbox,
};
use crate::config::NetworkMode;
use crate::job::JobRecord;
use crate::pool::{HostBind, PoolSlot};

/// The optional parts of one runtime (`None`: it has none of that).
#[derive(Clone, Copy, Default)]
pub struct Capabilities<'a> {
    pub sandboxes: Option<&'a dyn Sandboxes>,
    pub images: Option<&'a dyn Images>,
    pub network: Option<&'a dyn Network>,
    pub pool: Option<&'a dyn Pool>,
    pub ports: Option<&'a dyn PortRelay>,
    pub volumes: Option<&'a dyn EngineVolumes>,
    pub freeze: Option<&'a dyn Freeze>,
    pub other_users: Option<&'a dyn OtherUsers>,
}

/// Commands as another uid than the job's, root among them (`exec --user`), and a job root
/// layer it can write (`rootfs: writable`): only where the runtime's kernel is not the
/// host's, so root inside is no one of the host's. Such a user has no capabilities inside;
/// what it may still leave in the job's host files (an owner that is not the agent's, a
/// setuid bit) is undone by [`OtherUsers::settle`] before paddock reads them.
#[async_trait::async_trait]
pub trait OtherUsers: Send + Sync {
    /// Whether `record`'s sandbox can run another user now (its helper is in place), or
    /// why not.
    async fn check_other_user(&self, record: &JobRecord) -> Result<(), RuntimeError>;

    /// After a command as `user`: ends that user's processes left in the sandbox, then
    /// gives every file of the job's writable host mounts that is not the agent's back to
    /// the agent and clears setuid and setgid bits there.
    async fn settle(&self, record: &JobRecord, user: (u32, u32)) -> Result<(), RuntimeError>;

    /// Whether a writable root layer (`rootfs: writable`) lives in the engine's own storage,
    /// out of reach of a job's disk limit (Docker's container layer); false where it lives in
    /// the sandbox's memory and is bounded by its memory limit (the microVM's tmpfs overlay).
    fn root_layer_outside_disk(&self) -> bool {
        false
    }
}

/// Freezing every process of a job's sandbox in place and thawing them again (`pause`,
/// `resume`): frozen, they keep their memory and use no CPU, and nothing of the job ends.
#[async_trait::async_trait]
pub trait Freeze: Send + Sync {
    /// Freezes the job's sandbox (it must run); freezing a frozen one is no error.
    async fn freeze(&self, record: &JobRecord) -> Result<(), RuntimeError>;

    /// Thaws the job's sandbox; thawing one that is not frozen is no error.
    async fn thaw(&self, record: &JobRecord) -> Result<(), RuntimeError>;

    /// Whether paddock's own commands (a checkpoint's sync) can read the job's files while
    /// its sandbox is frozen: they run beside it (Docker's throwaway container with the
    /// same mounts). A frozen microVM runs nothing, the guest's agent included.
    fn reads_while_frozen(&self) -> bool {
        false
    }

    /// Freezes the sandbox for a moment (a checkpoint) when it runs; false when nothing
    /// runs (nothing to freeze) or the runtime cannot read files while frozen.
    async fn freeze_if_running(&self, record: &JobRecord) -> Result<bool, RuntimeError> {
        let _ = record;
        Ok(false)
    }
}

/// Sandboxes this install keeps on the machine (containers, VMs), listed and reaped by the
/// sweep, including ones no record names.
#[async_trait::async_trait]
pub trait Sandboxes: Send + Sync {
    /// Every sandbox this install has on the machine.
    async fn list_sandboxes(&self) -> Result<Vec<Sandbox>, RuntimeError>;

    /// Removes one listed sandbox, after checking again that it is this install's.
    async fn remove_sandbox(&self, sandbox: &Sandbox) -> Result<(), RuntimeError>;
}

/// What the agent image carries beyond a shell, git, CA certificates and ps
/// (Dockerfile.agent's `TOOLCHAINS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentTools {
    /// Nothing more: a devcontainer's image brings its own tools, and `image build
    /// --minimal` keeps the image small.
    Minimal,
    /// Python 3 with pip and venv, Node.js with npm, build-essential, curl, wget, jq,
    /// ripgrep, unzip, xz, less and openssh-client, from Debian's packages.
    Full,
}

impl AgentTools {
    /// The build argument's value.
    pub fn arg(self) -> &'static str {
        match self {
            AgentTools::Minimal => "minimal",
            AgentTools::Full => "full",
        }
    }
}

/// An image engine (the Docker daemon): its facts for `doctor`, the agent image and
/// repository builds, the images this install made.
#[async_trait::async_trait]
pub trait Images: Send + Sync {
    /// The engine's version and capabilities.
    async fn engine_facts(&self) -> Result<EngineFacts, RuntimeError>;

    /// Builds the agent image `tag` from `base_image` with `tools`; returns the image id.
    async fn build_image(
        &self,
        base_image: &str,
        tag: &str,
        tools: AgentTools,
        progress: &mut (dyn for<'line> FnMut(&'line str) + Send),
    ) -> Result<String, RuntimeError>;

    /// Builds `build.tag` from a repository's build context (a tar) with its Dockerfile,
    /// args and target (a devcontainer's `build`), inside `build.limits`; returns the image id.
    async fn build_from_context(
        &self,
        context: Vec<u8>,
        build: &ContextBuild<'_>,
        progress: &mut (dyn for<'line> FnMut(&'line str) + Send),
    ) -> Result<String, RuntimeError>;

    /// The tags `repository:*` of images this install built (they carry its image and home
    /// labels), each with when its image was made.
    async fn labelled_images(
        &self,
        repository: &str,
    ) -> Result<Vec<(String, Option<chrono::DateTime<chrono::Utc>>)>, RuntimeError>;

    /// Removes the image tag `tag`, never by force (an image a container uses stays).
    async fn remove_image(&self, tag: &str) -> Result<(), RuntimeError>;

    /// The env of the image `tag` (`NAME=value` entries) when it is present, `None` when it
    /// is not (a devcontainer's cached build, and its `${containerEnv:...}`).
    async fn image_env(&self, tag: &str) -> Result<Option<Vec<String>>, RuntimeError>;

    /// The id (`sha256:...`) of the image `record`'s sandbox runs, when it has one now.
    async fn sandbox_image(&self, record: &JobRecord) -> Option<String>;

    /// The bytes of the regular file `path` of image `tag` (at most `cap`), read without
    /// running anything of the image; `None`: no such file, or larger.
    async fn image_file(
        &self,
        tag: &str,
        path: &str,
        cap: u64,
    ) -> Result<Option<Vec<u8>>, RuntimeError>;
}

/// A network of the job's own that follows its record's policy.
#[async_trait::async_trait]
pub trait Network: Send + Sync {
    /// Makes the job's sandbox follow its record's network policy from the next connection
    /// on (the allow-list of an `allowlist` job).
    async fn apply_network(&self, record: &JobRecord) -> Result<(), RuntimeError>;

    /// Ends every connection the job's policy let through so far (its proxy's open
    /// tunnels), so a narrower policy holds for everything from now on.
    async fn cut_connections(&self, record: &JobRecord) -> Result<(), RuntimeError>;

    /// Brings the job's egress log (`logs/<job>/egress.jsonl`) up to date where it is kept
    /// elsewhere (a remote engine's proxy writes it there).
    async fn refresh_egress_log(&self, record: &JobRecord) -> Result<(), RuntimeError>;

    /// Makes sure the job networks' range (`egress::ranges`) is unreachable from the host,
    /// adding its route when missing, with `image` for a helper container when not root:
    /// `Some(true)` when it was added now; `None` when this runtime's jobs need no route.
    async fn guard_job_ranges(&self, image: &str) -> Option<Result<bool, RuntimeError>>;

    /// Runs one command beside the job's sandbox, in a throwaway one with the same files,
    /// user and limits but the network `network` (setup commands with their own network).
    async fn exec_beside(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
        network: NetworkMode,
    ) -> Result<ExecOutcome, RuntimeError>;
}

/// Warm sandboxes started ahead of jobs (see `crate::pool`).
#[async_trait::async_trait]
pub trait Pool: Send + Sync {
    /// Why a job with `record`'s runtime cannot start in a slot of this pool, if it cannot.
    fn unsupported(&self) -> Option<&'static str>;

    /// Whether a slot's CPU, memory and pids are fixed when its sandbox starts (a VM's), so
    /// only a job asking for the same limits can claim it.
    fn fixed_limits(&self) -> bool;

    /// Starts a slot's sandbox; returns its id.
    async fn start_pool_slot(&self, slot: &PoolSlot) -> Result<String, RuntimeError>;

    /// The host binds that make `record`'s files appear in a slot's sandbox, or why the
    /// job cannot start in one.
    fn pool_binds(&self, record: &JobRecord) -> Result<Vec<HostBind>, String>;

    /// Makes a claimed slot's sandbox ready for the job: a local container sees its files by
    /// propagation (nothing to do), a VM's guest mounts its share; a remote slot's container
    /// is checked to still run (before the claim's fill writes its volumes).
    async fn pool_claimed(&self, record: &JobRecord, slot: &PoolSlot) -> Result<(), RuntimeError>;

    /// Hands a claimed slot's sandbox (the job's files already in it) to `record`: limits,
    /// name, file owners. Returns the sandbox's id.
    async fn adopt_pool_slot(
        &self,
        record: &JobRecord,
        slot: &PoolSlot,
    ) -> Result<String, RuntimeError>;

    /// Removes a slot's sandbox (under its waiting name, or `job_name` once claimed), after
    /// checking it carries this install's labels with the slot's id.
    async fn remove_pool_slot(
        &self,
        slot: &PoolSlot,
        job_name: Option<&str>,
    ) -> Result<(), RuntimeError>;
}

/// Ports of a job reached through its engine's API (a remote job's: the host accepts, the
/// engine carries), where the engine cannot publish them on this host.
#[async_trait::async_trait]
pub trait PortRelay: Send + Sync {
    /// Carries one connection the host accepted to `port` of the job, until both ways ended.
    async fn relay_port(
        &self,
        record: &JobRecord,
        port: u16,
        client: tokio::net::TcpStream,
    ) -> Result<(), RuntimeError>;
}

/// A job's files and caches in an engine's volumes (a remote engine's; no host path is
/// mounted there).
#[async_trait::async_trait]
pub trait EngineVolumes: Send + Sync {
    /// Fills the job's volumes with `tip` checked out, its git dir staged on the host at
    /// `staged_git` and the objects the engine's cache lacks.
    async fn fill_files(
        &self,
        record: &JobRecord,
        staged_git: &Path,
        tip: &str,
    ) -> Result<crate::engines::FillReport, RuntimeError>;

    /// The outbox volume's sync files brought to the host's outbox (capped).
    async fn collect_outbox(&self, record: &JobRecord) -> Result<(), RuntimeError>;

    /// Removes the job's volumes (labels checked).
    async fn remove_files(&self, record: &JobRecord) -> Result<(), RuntimeError>;

    /// This install's cache volumes on the engine.
    async fn cache_volumes(&self) -> Result<Vec<crate::engines::CacheVolume>, RuntimeError>;

    /// Removes the cache volume `name` when it still carries this install's labels as a
    /// cache (checked right before); false when it does not.
    async fn remove_cache_volume(&self, name: &str) -> Result<bool, RuntimeError>;

    /// The mode of `path` in the job's sandbox as the archive API reports it (Go's
    /// `os.FileMode`; a link as a link); `None` when it does not exist. Works whether the
    /// sandbox runs or not.
    async fn stat_path(&self, record: &JobRecord, path: &str) -> Result<Option<u32>, RuntimeError>;

    /// A tar of `path` in the job's sandbox, read up to `cap` bytes; `None` past the cap.
    async fn download_path(
        &self,
        record: &JobRecord,
        path: &str,
        cap: u64,
    ) -> Result<Option<Vec<u8>>, RuntimeError>;

    /// Unpacks `tar` into the directory `dir` of the job's sandbox.
    async fn upload_into(
        &self,
        record: &JobRecord,
        dir: &str,
        tar: Vec<u8>,
    ) -> Result<(), RuntimeError>;
}
