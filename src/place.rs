//! Where a job's files live, as the file API sees them: a directory on this host (a local
//! job's worktree, opened beneath a descriptor that follows no link; `engine::files`) or
//! volumes of a remote engine, reached through that engine's archive API
//! (`runtime::docker::archive`). A pod's filesystem is the next kind.
//!
//! The checks that do not depend on where the files are (a path beneath the workspace, no
//! writes into `.git` or a cache) are made once, by the engine, before a `Place` is asked;
//! each `Place` keeps the rest of the file API's promise: no link followed, only regular
//! files read or written, everything capped at `engine::FILE_CAP`.

use std::ffi::OsString;

use crate::error::Result;
use crate::job::JobRecord;
use crate::wire::{FileList, FileWritten};

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
    /// The bytes of a regular file of the workspace.
    async fn read_file(&self, record: &JobRecord, path: &WorkspacePath) -> Result<Vec<u8>>;

    /// Writes (creates or replaces) a regular file of the workspace, making missing
    /// directories, owned by `owner` (uid, gid) when given.
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
