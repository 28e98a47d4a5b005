//! The file API's answers: a directory listing and what a write did.

use schemars::JsonSchema;

/// The largest file read or written whole in one JSON answer (MCP's `file_read` and
/// `file_write`, a remote engine's archive): 16 MiB. The CLI and the HTTP API stream a file
/// of any size ([`FileBytes`]), up to a read limit the caller may set.
pub const FILE_CAP: u64 = 16 * 1024 * 1024;
use serde::{Deserialize, Serialize};

/// A reader of a file's bytes.
pub type FileReader = std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>;

/// A file's bytes as they stream, with their count known before the first byte: a read
/// answers it up front (an HTTP `Content-Length`), and a write checks it at the end, so a
/// transfer cut midway is told from a whole one (and leaves nothing under the target's
/// name). A reader that ends early or fails is a cut transfer.
pub struct FileBytes {
    pub size: u64,
    pub reader: FileReader,
}

impl std::fmt::Debug for FileBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FileBytes({} bytes)", self.size)
    }
}

impl FileBytes {
    /// Bytes in memory.
    pub fn from_vec(bytes: Vec<u8>) -> FileBytes {
        FileBytes {
            size: bytes.len() as u64,
            reader: Box::pin(std::io::Cursor::new(bytes)),
        }
    }

    /// All of it in memory (callers that answer in one JSON value set a read limit first).
    pub async fn into_vec(mut self) -> std::io::Result<Vec<u8>> {
        use tokio::io::AsyncReadExt as _;
        let mut bytes = Vec::with_capacity(usize::try_from(self.size).unwrap_or_default());
        (&mut self.reader)
            .take(self.size)
            .read_to_end(&mut bytes)
            .await?;
        if bytes.len() as u64 != self.size {
            return Err(cut_short(self.size, bytes.len() as u64));
        }
        Ok(bytes)
    }
}

/// The error of a transfer that ended before its announced size.
pub fn cut_short(size: u64, got: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!("the transfer was cut short: {got} of {size} bytes"),
    )
}

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
