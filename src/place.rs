//! Where a job's files live: a directory on this host (a local job's worktree, opened
//! beneath a descriptor that follows no link; `engine::files`) or volumes of a remote
//! engine, reached through that engine's API (`runtime::docker::archive`, `remote::fill`,
//! `remote`). A pod's filesystem is the next kind. `Place` is how the file API sees them;
//! `JobFiles` their life around it: made at create, the sync's outbox brought back, removed
//! with the job. The engine picks one per job (`engine/places.rs`); `Runtime` says how the
//! job runs, a `Place` where its files are.
//!
//! The checks that do not depend on where the files are (a path beneath the workspace, no
//! writes into `.git` or a cache) are made once, by the engine, before a `Place` is asked;
//! each `Place` keeps the rest of the file API's promise: no link followed, only regular
//! files read or written, everything capped at `engine::FILE_CAP`.

use std::ffi::OsString;

use crate::error::Result;
use crate::git::GitRepo;
use crate::job::JobRecord;
use crate::runtime::RuntimeError;
use crate::wire::{FileBytes, FileList, FileWritten};

/// A caller's path, checked: its components beneath the workspace.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkspacePath {
    /// Relative to the workspace, `/`-separated (`""` for the workspace itself).
    pub shown: String,
    pub parts: Vec<OsString>,
}

/// The files of a job, wherever they live.
#[async_trait::async_trait]
pub trait Place: Send + Sync {
    /// The bytes of a regular file of the workspace, streamed, as the job's user `who`
    /// (uid, gid) would be let read it, when given (paddock as root reading for the agent);
    /// refused (too large) over `limit`.
    async fn open_file(
        &self,
        record: &JobRecord,
        path: &WorkspacePath,
        who: Option<(u32, u32)>,
        limit: Option<u64>,
    ) -> Result<FileBytes>;

    /// Writes (creates or replaces) a regular file of the workspace from a stream, whole
    /// or not at all, making missing directories, owned by `owner` (uid, gid) when given,
    /// and only where `owner` may write (the job's user: a read-only file is not written).
    async fn put_file(
        &self,
        record: &JobRecord,
        path: &WorkspacePath,
        bytes: FileBytes,
        owner: Option<(u32, u32)>,
    ) -> Result<FileWritten>;

    /// [`Place::put_file`] of bytes in memory (paddock's own: a restore's bundle).
    async fn write_file(
        &self,
        record: &JobRecord,
        path: &WorkspacePath,
        bytes: Vec<u8>,
        owner: Option<(u32, u32)>,
    ) -> Result<FileWritten>;

    /// The entries of a directory of the workspace, sorted by name.
    async fn list_dir(&self, record: &JobRecord, path: &WorkspacePath) -> Result<FileList>;
}

/// The life of a job's files around the file API (crate-private: it names paddock's git
/// types). Every method is safe to run again after a crash part way.
#[async_trait::async_trait]
pub(crate) trait JobFiles: Place {
    /// Makes the job's files from the repository at `tip`, with `setup`'s `copy` files and
    /// the job's `caches`, before any agent runs.
    async fn fill(
        &self,
        repo: &GitRepo,
        record: &mut JobRecord,
        tip: &str,
        caches: &[crate::cache::CacheSpec],
        setup: &crate::config::JobSetup,
    ) -> Result<()>;

    /// Brings the files a piggybacked sync left in the job's outbox to its outbox on this
    /// host (`JobRecord::outbox`), where they are read under their caps like a local job's.
    async fn collect_outbox(&self, record: &JobRecord) -> std::result::Result<(), RuntimeError>;

    /// Whether the job's files are gone from under it (a checkout deleted by hand): the
    /// sweep then removes the job.
    fn files_gone(&self, record: &JobRecord) -> bool;

    /// Whether the job has a checkout whose uncommitted work `rm` must save first: a host
    /// checkout that exists, or a remote job's volumes (asked through the sync itself, which
    /// fails, and so stops the removal, when the engine does not answer).
    fn holds_work(&self, record: &JobRecord) -> bool;

    /// Removes the job's files, once its sandbox is gone; each thing is checked to be ours
    /// right before it goes.
    async fn remove(&self, repo: &GitRepo, record: &JobRecord) -> Result<()>;
}
