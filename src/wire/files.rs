//! The file API's answers: a directory listing and what a write did.

use schemars::JsonSchema;

/// The largest file the file API reads or writes: 16 MiB.
pub const FILE_CAP: u64 = 16 * 1024 * 1024;
use serde::{Deserialize, Serialize};

/// What an entry of a job's workspace is (`file_list`, `GET /v1/jobs/{id}/files?list=true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    File,
    Dir,
    /// Listed with its target, never followed by the file API.
    Symlink,
    /// A socket, FIFO or device.
    Other,
}

/// One entry of a directory of a job's workspace.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FileEntry {
    pub name: String,
    pub kind: FileKind,
    /// Bytes (of a file; 0 for the others).
    pub size: u64,
    /// A symlink's target, as written in the link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// A directory of a job's workspace, its entries sorted by name.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FileList {
    /// The directory, relative to the workspace (`""` for the workspace itself).
    pub path: String,
    pub entries: Vec<FileEntry>,
}

/// What a write to a job's workspace did: `PUT /v1/jobs/{id}/files`, `file_write`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FileWritten {
    /// The file, relative to the workspace.
    pub path: String,
    /// Bytes written.
    pub size: u64,
    /// True when the file did not exist before.
    pub created: bool,
}
