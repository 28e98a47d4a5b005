//! The library's one error type and its kinds.
//!
//! Every operation returns [`Error`], which keeps the failing input in its variant (or in the
//! module error it wraps). Front ends never match on variants: they ask for the
//! [`ErrorKind`] and, where a user can fix something, the [`Error::hint`]. The CLI's exit codes
//! (`cli::exit`) and the HTTP API's statuses (`api`) are each one table over the kind, so a new
//! error needs a kind here and nothing in either front end.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::admission::AdmissionError;
use crate::cache::CacheError;
use crate::config::ConfigError;
use crate::copy_files::CopyError;
use crate::disk::DiskError;
pub use crate::git::GitError;
use crate::job::{JobError, JobId, JobState};
use crate::overlay::OverlayError;
use crate::pool::PoolError;
use crate::runtime::RuntimeError;
use crate::store::StoreError;

/// What kind of failure an [`Error`] is, for exit codes, HTTP statuses and clients. The
/// serialized names are the API's stable `error.code` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The command line is incomplete (no command to run, say).
    Usage,
    /// The configuration files or environment are wrong.
    Config,
    /// An argument or request field is wrong.
    InvalidInput,
    /// The job (or what it names) does not exist.
    NotFound,
    /// The thing exists already, is busy, or is in a state that forbids the operation.
    Conflict,
    /// paddock refused to act to protect work or something that is not its own.
    Refused,
    /// A git operation failed.
    Git,
    /// The Docker daemon, the image or an OCI runtime is missing or does not answer.
    RuntimeUnavailable,
    /// The host budget has no room now and the request asked not to wait (`--no-wait`).
    QueueFull,
    /// A new job's `setup` command failed (and `setup_optional` was not set): the create was
    /// rolled back.
    SetupFailed,
    /// A file is over the file API's size cap.
    TooLarge,
    /// The job's own user may not read or write that file (the file API answers as the
    /// sandbox would).
    PermissionDenied,
    /// Anything else: a bug, an I/O error, a daemon failure without a kind.
    Internal,
}

impl ErrorKind {
    /// The API's `error.code` for this kind.
    pub fn code(self) -> &'static str {
        match self {
            ErrorKind::Usage | ErrorKind::Config | ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::NotFound => "not_found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Refused => "refused",
            ErrorKind::Git => "git_failed",
            ErrorKind::RuntimeUnavailable => "runtime_unavailable",
            ErrorKind::QueueFull => "queue_full",
            ErrorKind::SetupFailed => "setup_failed",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::PermissionDenied => "permission_denied",
            ErrorKind::Internal => "internal",
        }
    }

    /// The kind behind an API `error.code` (what a client of the daemon gets back).
    pub fn from_code(code: &str) -> ErrorKind {
        match code {
            "invalid_input" => ErrorKind::InvalidInput,
            "not_found" => ErrorKind::NotFound,
            "conflict" | "busy" => ErrorKind::Conflict,
            "refused" => ErrorKind::Refused,
            "git_failed" => ErrorKind::Git,
            "runtime_unavailable" => ErrorKind::RuntimeUnavailable,
            "queue_full" => ErrorKind::QueueFull,
            "setup_failed" => ErrorKind::SetupFailed,
            "too_large" => ErrorKind::TooLarge,
            "permission_denied" => ErrorKind::PermissionDenied,
            _ => ErrorKind::Internal,
        }
    }
}

/// Everything that can go wrong in a paddock operation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Job(#[from] JobError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Admission(#[from] AdmissionError),
    #[error(transparent)]
    Copy(#[from] CopyError),
    #[error(transparent)]
    Devcontainer(#[from] crate::devcontainer::DevcontainerError),
    #[error(transparent)]
    Engine(#[from] crate::engines::EngineError),
    #[error(transparent)]
    Overlay(#[from] OverlayError),
    #[error(transparent)]
    Pool(#[from] PoolError),
    #[error(transparent)]
    Disk(#[from] DiskError),
    /// A setup command failed; `output` is its stderr and stdout (capped), `log` the file
    /// that keeps all of it.
    #[error(
        "setup command `{command}` of job `{id}` failed ({outcome}); the job was not created{output}"
    )]
    SetupFailed {
        id: JobId,
        command: String,
        outcome: String,
        output: String,
        log: PathBuf,
    },
    #[error("job `{id}` was cancelled while it waited in the queue")]
    Cancelled { id: JobId },
    #[error("job `{id}` left the queue and is being created: remove it once it is ready")]
    Admitted { id: JobId },
    #[error("invalid branch name `{branch}` (from template `{template}`)")]
    InvalidBranch { branch: String, template: String },
    #[error("branch `{branch}` already exists in `{repo}`")]
    BranchExists { branch: String, repo: PathBuf },
    #[error("branch `{branch}` is held by job `{job}`")]
    BranchHeld { branch: String, job: JobId },
    #[error(
        "refusing to push job `{id}`: its branch carries {count} commit(s) the remote lacks that the job did not make (from {refs}), e.g. {examples}"
    )]
    LocalHistory {
        id: JobId,
        count: usize,
        refs: String,
        examples: String,
    },
    #[error("worktree path `{path}` already exists")]
    WorktreeExists { path: PathBuf },
    #[error("refusing to remove job `{id}`: failed to save its uncommitted work")]
    SnapshotFailed {
        id: JobId,
        #[source]
        source: Box<Error>,
    },
    #[error("refusing to delete `{path}`: it is not a worktree owned by this paddock install")]
    NotOurs { path: PathBuf },
    #[error("job `{id}` is {state}: it cannot run commands")]
    NotRunnable { id: JobId, state: JobState },
    #[error("job `{id}` is paused (since {since}): its processes are frozen")]
    Paused {
        id: JobId,
        since: chrono::DateTime<chrono::Utc>,
    },
    #[error("invalid checkpoint name `{name}`: {why}")]
    CheckpointName { name: String, why: &'static str },
    #[error("job `{job}` has no checkpoint `{name}`")]
    NoCheckpoint { job: String, name: String },
    #[error("job `{job}` already has a checkpoint `{name}`")]
    CheckpointExists { job: String, name: String },
    #[error("checkpoint of job `{id}` refused: {message}")]
    Checkpoint { id: JobId, message: String },
    #[error("checkpoint `{checkpoint}` is of another repository (`{repo}`)")]
    CheckpointRepo { checkpoint: String, repo: PathBuf },
    #[error("restore of job `{id}` failed: {message}")]
    Restore { id: JobId, message: String },
    #[error(
        "a fork makes 1 to {most} jobs here (at most 64, and no more than admission.max_jobs), not {count}"
    )]
    ForkCount { count: u32, most: u32 },
    #[error(
        "job `{id}` cannot run a command as `{user}`: its runtime ({runtime}) runs only the agent's own user, where another user would be that uid of the host's kernel (another user needs runsc on this host, or microvm)"
    )]
    UserNotContained {
        id: JobId,
        user: crate::wire::ExecUser,
        runtime: crate::job::RuntimeKind,
    },
    #[error(
        "`rootfs: writable` needs a runtime whose kernel contains root, and this job's is {runtime}"
    )]
    WritableRootNotContained { runtime: crate::job::RuntimeKind },
    #[error(
        "`rootfs: writable` with a disk limit ({limit}): a {runtime} job's root layer is kept in the engine's storage, which the limit does not hold"
    )]
    WritableRootUnbounded {
        runtime: crate::job::RuntimeKind,
        limit: crate::units::ByteSize,
    },
    #[error("failed to write the log of job `{id}` at `{path}`")]
    Log {
        id: JobId,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("paddock serve: {message}")]
    Serve { message: String },
    /// An error the daemon reported (the CLI went through its API).
    #[error("{message}")]
    Daemon { kind: ErrorKind, message: String },
    #[error("failed to sync job `{id}` into the repository: {message}")]
    Sync { id: JobId, message: String },
    #[error(
        "job `{id}` was made by an older paddock (its worktree shares the repository's git metadata)"
    )]
    Legacy { id: JobId },
    #[error("cannot give the job network `{network}`: {reason}")]
    Network {
        network: crate::config::NetworkMode,
        reason: String,
    },
    #[error("cannot serve port {port} of the job: {reason}")]
    Port { port: u16, reason: String },
    #[error("failure injected at `{point}` (PADDOCK_FAIL_AT)")]
    Injected { point: &'static str },
    #[error("job `{job}` has no exec `{exec}`")]
    NoExec { job: JobId, exec: String },
    #[error("unreadable exec record `{path}`: {message}")]
    ExecFiles { path: PathBuf, message: String },
    #[error(transparent)]
    EventLog(#[from] crate::eventlog::EventLogError),
    #[error("path escapes the workspace: `{path}`")]
    PathEscapes { path: String },
    #[error("the exec cannot be run as asked: {reason}")]
    BadExec { reason: String },
    #[error("path goes through a symbolic link: `{path}`")]
    PathSymlink { path: String },
    #[error("refusing to touch `{path}` in the job: {reason}")]
    PathRefused { path: String, reason: &'static str },
    #[error("no such file or directory in the job: `{path}`")]
    FileNotFound { path: String },
    #[error("`{path}` in the job is {what}")]
    FileKind { path: String, what: &'static str },
    #[error("`{path}` is {size} bytes, over the limit of {cap} bytes")]
    FileTooLarge { path: String, size: u64, cap: u64 },
    #[error("permission denied: the job's user may not {action} `{path}`")]
    FilePermission { path: String, action: &'static str },
    #[error("failed to {action} `{path}` in the job")]
    FileIo {
        action: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to {action} `{path}`")]
    LocalFile {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("job `{id}` does not merge cleanly into `{into}`: conflicts in {}", files.join(", "))]
    MergeConflict {
        id: JobId,
        into: String,
        /// `path (type)` of each conflicting file.
        files: Vec<String>,
    },
    #[error("job `{id}` has no branch to merge into: its base `{base}` is not a branch")]
    NoTargetBranch { id: JobId, base: String },
    #[error("job `{id}`'s branch has merge commits: --rebase replays only plain commits")]
    RebaseMerges { id: JobId },
    #[error("failed to remove `{path}`")]
    RemoveDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The error with each of its causes it does not already quote, joined by `: `: the
    /// one line a command or a helper prints for it.
    pub fn with_causes(&self) -> String {
        let mut message = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(cause) = source {
            let text = cause.to_string();
            if !message.contains(&text) {
                message.push_str(&format!(": {text}"));
            }
            source = cause.source();
        }
        message
    }

    /// The kind of this error (see [`ErrorKind`]).
    #[expect(clippy::too_many_lines, reason = "one table: every error's kind")]
    pub fn kind(&self) -> ErrorKind {
        use ErrorKind as K;
        match self {
            Error::Config(ConfigError::UnknownProfile { .. }) => K::InvalidInput,
            Error::Config(_) => K::Config,
            Error::Store(StoreError::NotFound { .. }) => K::NotFound,
            Error::Store(StoreError::Exists { .. } | StoreError::LockTimeout { .. }) => K::Conflict,
            Error::Store(StoreError::NoHome) => K::Config,
            Error::Store(StoreError::InvalidId(_)) => K::InvalidInput,
            Error::Store(_) => K::Internal,
            Error::Job(_) => K::InvalidInput,
            Error::Git(
                GitError::NotARepo { .. }
                | GitError::UnknownRevision { .. }
                | GitError::InvalidBranch { .. },
            ) => K::InvalidInput,
            Error::Git(GitError::BranchExists { .. } | GitError::Lock { .. }) => K::Conflict,
            Error::Git(
                GitError::DirtyCheckout { .. }
                | GitError::InTheWay { .. }
                | GitError::JobCheckout { .. },
            ) => K::Refused,
            Error::Git(
                GitError::NoCheckout { .. }
                | GitError::NoSuchBranch { .. }
                | GitError::NoRemote { .. },
            ) => K::InvalidInput,
            Error::Git(GitError::NotFastForward { .. }) => K::Conflict,
            Error::MergeConflict { .. } => K::Conflict,
            Error::NoTargetBranch { .. } | Error::RebaseMerges { .. } => K::InvalidInput,
            Error::Git(_) | Error::Sync { .. } => K::Git,
            Error::InvalidBranch { .. } | Error::Serve { .. } => K::InvalidInput,
            Error::BranchExists { .. }
            | Error::BranchHeld { .. }
            | Error::WorktreeExists { .. }
            | Error::NotRunnable { .. }
            | Error::Paused { .. }
            | Error::CheckpointExists { .. } => K::Conflict,
            Error::CheckpointName { .. }
            | Error::CheckpointRepo { .. }
            | Error::ForkCount { .. }
            | Error::UserNotContained { .. }
            | Error::WritableRootNotContained { .. }
            | Error::WritableRootUnbounded { .. } => K::InvalidInput,
            Error::NoCheckpoint { .. } => K::NotFound,
            Error::Checkpoint { .. } => K::Refused,
            Error::Restore { .. } => K::Git,
            Error::SnapshotFailed { .. }
            | Error::NotOurs { .. }
            | Error::Legacy { .. }
            | Error::LocalHistory { .. } => K::Refused,
            Error::RemoveDir { .. }
            | Error::Log { .. }
            | Error::Injected { .. }
            | Error::ExecFiles { .. }
            | Error::EventLog(_) => K::Internal,
            Error::NoExec { .. } | Error::FileNotFound { .. } => K::NotFound,
            Error::BadExec { .. } => K::InvalidInput,
            Error::PathEscapes { .. } | Error::PathSymlink { .. } | Error::PathRefused { .. } => {
                K::Refused
            }
            Error::FileKind { .. } | Error::LocalFile { .. } => K::InvalidInput,
            Error::FileTooLarge { .. } => K::TooLarge,
            Error::FilePermission { .. } => K::PermissionDenied,
            Error::FileIo { .. } => K::Internal,
            Error::Network { .. } | Error::Port { .. } => K::InvalidInput,
            Error::Daemon { kind, .. } => *kind,
            Error::Admission(
                AdmissionError::NoRoom { .. } | AdmissionError::WaitedTooLong { .. },
            ) => K::QueueFull,
            Error::Admission(AdmissionError::TooBig { .. }) => K::InvalidInput,
            Error::Admission(AdmissionError::Store(_)) => K::Internal,
            Error::Cancelled { .. } | Error::Admitted { .. } => K::Conflict,
            Error::Cache(CacheError::Io { .. }) => K::Internal,
            Error::Cache(_) => K::Refused,
            Error::Copy(CopyError::Io { .. }) => K::Internal,
            Error::Copy(CopyError::Missing { .. } | CopyError::Special { .. }) => K::InvalidInput,
            Error::Copy(_) => K::Refused,
            Error::Devcontainer(crate::devcontainer::DevcontainerError::ImageRefused {
                ..
            }) => K::Refused,
            Error::Devcontainer(_) => K::Config,
            Error::Engine(crate::engines::EngineError::NoRoom { .. }) => K::QueueFull,
            Error::Engine(_) => K::Config,
            Error::SetupFailed { .. } => K::SetupFailed,
            Error::Overlay(OverlayError::Unavailable { .. }) => K::InvalidInput,
            Error::Overlay(OverlayError::Store(StoreError::LockTimeout { .. })) => K::Conflict,
            Error::Overlay(OverlayError::Git(_)) => K::Git,
            Error::Overlay(_) => K::Internal,
            Error::Pool(PoolError::NotRoot) => K::InvalidInput,
            Error::Pool(PoolError::Store(StoreError::LockTimeout { .. })) => K::Conflict,
            Error::Pool(_) => K::Internal,
            Error::Disk(
                DiskError::Unavailable { .. }
                | DiskError::NeedsOverlay { .. }
                | DiskError::TooSmall { .. },
            ) => K::InvalidInput,
            Error::Disk(_) => K::Internal,
            Error::Runtime(
                RuntimeError::DockerUnavailable { .. }
                | RuntimeError::DockerTimeout { .. }
                | RuntimeError::ImageMissing { .. }
                | RuntimeError::OciRuntimeMissing { .. }
                | RuntimeError::OciRuntimeMisconfigured { .. },
            ) => K::RuntimeUnavailable,
            Error::Runtime(RuntimeError::EmptyCommand) => K::Usage,
            Error::Runtime(RuntimeError::NoWorkdir { .. }) => K::InvalidInput,
            Error::Runtime(RuntimeError::Unsupported { .. } | RuntimeError::Secret { .. }) => {
                K::InvalidInput
            }
            Error::Runtime(
                RuntimeError::NotOurContainer { .. }
                | RuntimeError::NotOurImage { .. }
                | RuntimeError::BuildUncapped { .. },
            ) => K::Refused,
            Error::Runtime(RuntimeError::NameInUse { .. }) => K::Conflict,
            Error::Runtime(RuntimeError::Microvm(error)) => match **error {
                crate::runtime::microvm::MicrovmError::Missing { .. }
                | crate::runtime::microvm::MicrovmError::NotRoot => K::RuntimeUnavailable,
                crate::runtime::microvm::MicrovmError::Config { .. }
                | crate::runtime::microvm::MicrovmError::Path { .. } => K::InvalidInput,
                _ => K::Internal,
            },
            Error::Runtime(_) => K::Internal,
        }
    }

    /// What the user can do about it, where there is something.
    #[expect(clippy::too_many_lines, reason = "one table: every error's hint")]
    pub fn hint(&self) -> Option<String> {
        let hint = match self {
            Error::Config(ConfigError::UnknownProfile { .. }) => {
                "see `paddock config show` for the profiles"
            }
            Error::Store(StoreError::NotFound { .. }) => "see `paddock ls` for the jobs",
            Error::Store(StoreError::Exists { .. }) => {
                "choose another --id, or remove the old job with `paddock rm`"
            }
            Error::Git(GitError::NotARepo { .. }) => {
                "pass --repo with the path of a git repository"
            }
            Error::Git(GitError::UnknownRevision { .. }) => {
                "--base takes a branch, tag or commit of the repository"
            }
            Error::InvalidBranch { .. } => {
                "branch names follow git's rules: see `git help check-ref-format`"
            }
            Error::BranchExists { .. } => {
                "pass --reuse-branch to work on it, or choose another --task or --id"
            }
            Error::SnapshotFailed { .. } => {
                "fix the worktree, or pass --force to remove it without saving"
            }
            Error::LocalHistory { .. } => {
                "pass --include-local-history to publish those commits too (the agent may have merged them in: `paddock log JOB` shows them)"
            }
            Error::Legacy { .. } => "`paddock doctor` says how to move it to this version",
            Error::Overlay(OverlayError::Unavailable { .. }) => {
                "use `--checkout worktree`, or see `paddock doctor` (as root: a kernel with overlayfs; otherwise install fuse-overlayfs)"
            }
            Error::Disk(DiskError::Unavailable { .. }) => {
                "create without --disk, or see `paddock doctor` (a disk limit needs paddock as root, loop devices, ext4 and mkfs.ext4)"
            }
            Error::Disk(DiskError::NeedsOverlay { .. }) => {
                "a disk limit needs `--checkout overlay` (or leave `checkout` unset: a disk limit implies it)"
            }
            Error::PathEscapes { .. } => {
                "name a path inside the workspace: relative to it, or absolute under it, without `..`"
            }
            Error::PathSymlink { .. } => {
                "the file API follows no symbolic links: name the link's target (`file_list` shows it)"
            }
            Error::FileTooLarge { .. } => {
                "raise the read limit (`--max`, the API's `max`), or read it through the CLI or the HTTP API, which stream a file of any size (MCP's `file_read` holds 16 MiB)"
            }
            Error::MergeConflict { .. } => {
                "bring the base into the job's branch inside the job (`paddock exec`), or merge with git and resolve by hand"
            }
            Error::NoTargetBranch { .. } => "pass --into BRANCH",
            Error::Git(GitError::NoRemote { .. }) => {
                "add the remote to the repository first (`git remote add NAME URL`), or pass --remote NAME"
            }
            Error::Git(GitError::NotFastForward { .. }) => {
                "bring the remote branch into the job's branch inside the job, or pass --force-with-lease to replace it"
            }
            Error::RebaseMerges { .. } => "use --merge or --squash",
            Error::Git(GitError::InTheWay { .. }) => {
                "move those files aside (or delete them) in that checkout, then merge again"
            }
            Error::Git(GitError::DirtyCheckout { .. }) => {
                "commit or stash the changes in that checkout, then merge again"
            }
            Error::Git(GitError::TooOld { .. }) => {
                "install git 2.38 or newer first on PATH (`paddock doctor` shows the git in use)"
            }
            Error::Admission(AdmissionError::NoRoom { .. }) => {
                "retry later, or wait in the queue (without --no-wait); `admission:` in the user config sets the budget (`paddock doctor` shows what holds it)"
            }
            Error::Admission(AdmissionError::WaitedTooLong { .. }) => {
                "remove jobs you no longer need (`paddock ls`), or raise `admission.max_wait` or the budget in the user config (`paddock doctor` shows what holds it)"
            }
            Error::Admission(AdmissionError::TooBig { .. }) => {
                "ask for a smaller reserve (`--reserve-cpus`, `--reserve-memory`, `reserve:` of the profile), or raise `admission:` in the user config"
            }
            Error::Cache(CacheError::Io { .. }) | Error::Copy(CopyError::Io { .. }) => return None,
            Error::Copy(_) => {
                "check `copy` in .paddock.yaml: untracked files and directories of the repository, without links out of it"
            }
            Error::UserNotContained { .. } | Error::WritableRootNotContained { .. } => {
                "another user than the agent, and a writable root, need `--runtime runsc` (gVisor) or `--runtime microvm` at create"
            }
            Error::WritableRootUnbounded { .. } => {
                "drop the disk limit (`--disk`, `disk:`) for this job, or use `--runtime microvm`, whose root layer is in the VM's memory"
            }
            Error::Paused { id, .. } => {
                return Some(format!("`paddock resume {id}` thaws it first"));
            }
            Error::NoCheckpoint { job, .. } => {
                return Some(format!("`paddock checkpoints {job}` lists them"));
            }
            Error::CheckpointExists { .. } => {
                "choose another name (--name), or `paddock checkpoint rm` the old one"
            }
            Error::SetupFailed { log, .. } => {
                return Some(format!(
                    "fix the command in `setup` (.paddock.yaml), or set `setup_optional: true` to keep the job anyway; its whole output: {}",
                    log.display()
                ));
            }
            Error::Cache(_) => {
                "check the `caches` in .paddock.yaml against what the repository tracks"
            }
            Error::Runtime(
                RuntimeError::DockerUnavailable { .. } | RuntimeError::DockerTimeout { .. },
            ) => "is the Docker daemon running? try `paddock doctor`",
            Error::Runtime(RuntimeError::ImageMissing { image }) => {
                return Some(format!("build it with `paddock image build --tag {image}`"));
            }
            Error::Runtime(RuntimeError::NameInUse { name }) => {
                return Some(format!(
                    "remove or rename the container `{name}` (`docker rm {name}`), or choose another --id"
                ));
            }
            Error::Runtime(RuntimeError::OciRuntimeMissing { .. }) => {
                "register it in /etc/docker/daemon.json (see docs/gvisor.md) and reload dockerd"
            }
            Error::Runtime(RuntimeError::OciRuntimeMisconfigured { runtime, flag, .. }) => {
                return Some(format!(
                    "remove `{flag}` from the runtimeArgs of `{runtime}` in /etc/docker/daemon.json (docs/gvisor.md has a working entry), then reload dockerd (pkill -HUP dockerd)"
                ));
            }
            _ => return None,
        };
        Some(hint.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_codes_round_trip_through_kinds() {
        for kind in [
            ErrorKind::InvalidInput,
            ErrorKind::NotFound,
            ErrorKind::Conflict,
            ErrorKind::Refused,
            ErrorKind::Git,
            ErrorKind::RuntimeUnavailable,
            ErrorKind::QueueFull,
            ErrorKind::SetupFailed,
            ErrorKind::TooLarge,
            ErrorKind::Internal,
        ] {
            assert_eq!(ErrorKind::from_code(kind.code()), kind);
        }
        assert_eq!(ErrorKind::from_code("busy"), ErrorKind::Conflict);
        assert_eq!(ErrorKind::from_code("something new"), ErrorKind::Internal);
    }
}
