//! The file API: read, write and list files of a job's workspace by the path the agent sees
//! (`/workspace/src/x.rs`) or relative to the workspace (`src/x.rs`). Paths outside the
//! workspace of a job with a sandbox are its sandbox's own (`files_inside`).
//!
//! The worktree is agent-writable, so any of its directories may become a symlink between two
//! calls. Paths are therefore never resolved by the host's path lookup on strings
//! (`canonicalize` then `open` is a race the agent can win): the worktree root is opened once
//! as a directory descriptor and the path is opened beneath it with `openat2(2)` and
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`, so the
//! kernel refuses every step that leaves it. On kernels without `openat2` (before 5.6) the
//! same is done one component at a time with `O_NOFOLLOW`, checking each is a directory.
//!
//! Invariants:
//! - `..` components and absolute paths outside the workspace are refused before any I/O.
//! - No symbolic link is followed, wherever it points (the listing shows each link and its
//!   target, so a caller can name the target). One rule for both kernels, and no link (made
//!   by the agent or not) can lead a read or a write out of the worktree.
//! - Only regular files with a single link are read or written (a hard link could name a
//!   file elsewhere on the same filesystem); a FIFO is opened non-blocking and refused.
//! - Writes never go into the job's `.git` link or into a cache paddock mounts or links into
//!   the workspace; a new file or directory is given the owner of the worktree root (the
//!   agent's uid, when paddock runs as root), so the checkout stays the agent's.
//! - Files are bytes (binary-safe) and capped at [`FILE_CAP`] either way.
//! - Reads and writes answer as the job's user would be answered in its sandbox: paddock as
//!   root (which the kernel lets read and write anything) checks the agent's permission
//!   bits on the file and every directory on the way first; as the agent's uid, the kernel
//!   does. A read-only file is not written, a file the agent cannot read is not read.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use super::Paddock;
use crate::cache::Strategy;
use crate::error::{Error, Result};
use crate::job::JobRecord;
use crate::place::{Place, WorkspacePath};
use crate::wire::{FileEntry, FileKind, FileList, FileWritten};

pub use crate::wire::FILE_CAP;

/// Every resolution step stays beneath the root, follows no link, crosses no mount.
const RESOLVE: u64 = libc::RESOLVE_BENEATH
    | libc::RESOLVE_NO_SYMLINKS
    | libc::RESOLVE_NO_MAGICLINKS
    | libc::RESOLVE_NO_XDEV;

/// Checks `input` against the job's workspace: relative to it, or absolute under the
/// workspace the agent sees (or the worktree's host path); `..` is refused outright.
fn workspace_path(workspace: &Path, worktree: &Path, input: &str) -> Result<WorkspacePath> {
    let escapes = || Error::PathEscapes {
        path: input.to_string(),
    };
    if input.contains('\0') {
        return Err(escapes());
    }
    let path = Path::new(input);
    let relative = if path.is_absolute() {
        path.strip_prefix(workspace)
            .or_else(|_| path.strip_prefix(worktree))
            .map_err(|_| escapes())?
    } else {
        path
    };
    let mut parts = Vec::new();
    for component in relative.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_os_string()),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(escapes());
            }
        }
    }
    let shown = parts
        .iter()
        .map(|p| p.to_string_lossy())
        .collect::<Vec<_>>()
        .join("/");
    Ok(WorkspacePath { shown, parts })
}

/// The error of a failed open of `path`, by what the kernel said.
fn open_error(path: &WorkspacePath, action: &'static str, error: std::io::Error) -> Error {
    let path = path.shown.clone();
    match error.raw_os_error() {
        Some(libc::ELOOP) => Error::PathSymlink { path },
        Some(libc::EXDEV) => Error::PathEscapes { path },
        Some(libc::ENOENT) => Error::FileNotFound { path },
        Some(libc::ENOTDIR) => Error::FileKind {
            path,
            what: "not a directory (or a part of its path is not)",
        },
        Some(libc::EISDIR) => Error::FileKind {
            path,
            what: "a directory",
        },
        Some(libc::EACCES | libc::EPERM) => Error::FilePermission { path, action },
        _ => Error::FileIo {
            action,
            path,
            source: error,
        },
    }
}

/// Opens `parts` beneath `root` (see the module docs); never follows a link.
fn open_beneath(
    root: BorrowedFd<'_>,
    parts: &[OsString],
    flags: i32,
    mode: u32,
) -> std::io::Result<OwnedFd> {
    let relative: PathBuf = if parts.is_empty() {
        PathBuf::from(".")
    } else {
        parts.iter().collect()
    };
    let opened = match crate::sys::openat2(root, &relative, flags | libc::O_NOFOLLOW, mode, RESOLVE)
    {
        Err(error) if error.kind() == std::io::ErrorKind::Unsupported => {
            walk_beneath(root, parts, flags, mode)
        }
        other => other,
    };
    match opened {
        // `O_DIRECTORY | O_NOFOLLOW` on a link says "not a directory": say it is a link.
        Err(error) if error.raw_os_error() == Some(libc::ENOTDIR) && is_link(root, parts) => {
            Err(std::io::Error::from_raw_os_error(libc::ELOOP))
        }
        other => other,
    }
}

/// Whether the last part of `parts` (beneath `root`) is a symbolic link.
fn is_link(root: BorrowedFd<'_>, parts: &[OsString]) -> bool {
    let Some((last, dirs)) = parts.split_last() else {
        return false;
    };
    let Ok(parent) = open_beneath(root, dirs, libc::O_PATH | libc::O_DIRECTORY, 0) else {
        return false;
    };
    crate::sys::openat(parent.as_fd(), last, libc::O_PATH | libc::O_NOFOLLOW, 0)
        .and_then(|link| std::fs::File::from(link).metadata())
        .is_ok_and(|meta| meta.file_type().is_symlink())
}

/// [`open_beneath`] without `openat2`: each directory on the way opened with `O_NOFOLLOW`
/// and checked to be a directory (a link is `ELOOP`, as `openat2` says it).
fn walk_beneath(
    root: BorrowedFd<'_>,
    parts: &[OsString],
    flags: i32,
    mode: u32,
) -> std::io::Result<OwnedFd> {
    let Some((last, dirs)) = parts.split_last() else {
        return crate::sys::openat(root, ".".as_ref(), flags | libc::O_NOFOLLOW, mode);
    };
    let mut dir = root.try_clone_to_owned()?;
    for part in dirs {
        let next = crate::sys::openat(dir.as_fd(), part, libc::O_PATH | libc::O_NOFOLLOW, 0)?;
        let meta = std::fs::File::from(next.try_clone()?).metadata()?;
        if meta.file_type().is_symlink() {
            return Err(std::io::Error::from_raw_os_error(libc::ELOOP));
        }
        if !meta.is_dir() {
            return Err(std::io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        dir = next;
    }
    crate::sys::openat(dir.as_fd(), last, flags | libc::O_NOFOLLOW, mode)
}

/// The worktree root as a directory descriptor (it is paddock's, not the agent's: the mount
/// point of `/workspace`, so the agent cannot replace it).
fn open_root(record: &JobRecord) -> Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(&record.worktree)
        .map(OwnedFd::from)
        .map_err(|source| Error::FileIo {
            action: "open the workspace",
            path: record.worktree.display().to_string(),
            source,
        })
}

/// A regular file with one link, or the error saying what it is instead.
fn check_regular(path: &WorkspacePath, meta: &std::fs::Metadata) -> Result<()> {
    if meta.is_dir() {
        return Err(Error::FileKind {
            path: path.shown.clone(),
            what: "a directory",
        });
    }
    if !meta.is_file() {
        return Err(Error::FileKind {
            path: path.shown.clone(),
            what: "not a regular file",
        });
    }
    if meta.nlink() > 1 {
        return Err(Error::PathRefused {
            path: path.shown.clone(),
            reason: "it has other hard links, which may name a file outside the workspace",
        });
    }
    Ok(())
}

pub(crate) fn too_large(path: &WorkspacePath, size: u64) -> Error {
    Error::FileTooLarge {
        path: path.shown.clone(),
        size,
        cap: FILE_CAP,
    }
}

/// Permission bits: read, write, search.
pub(crate) const READ: u32 = 4;
pub(crate) const WRITE: u32 = 2;
const SEARCH: u32 = 1;

/// Whether the job's user `who` (uid, gid; no other groups, no capabilities, as in its
/// sandbox) may `want` the file of `meta`, by its mode bits as the kernel decides.
fn may(meta: &std::fs::Metadata, who: (u32, u32), want: u32) -> bool {
    may_mode(meta.mode(), (meta.uid(), meta.gid()), who, want)
}

/// [`may`] of a file's mode bits and owner (uid, gid).
pub(crate) fn may_mode(mode: u32, owner: (u32, u32), (uid, gid): (u32, u32), want: u32) -> bool {
    let (file_uid, file_gid) = owner;
    let bits = if file_uid == uid {
        mode >> 6
    } else if file_gid == gid {
        mode >> 3
    } else {
        mode
    };
    bits & want == want
}

pub(crate) fn denied(path: &WorkspacePath, action: &'static str) -> Error {
    Error::FilePermission {
        path: path.shown.clone(),
        action,
    }
}

/// Checks that `who` may search every directory on the way to `path` (the workspace's
/// own root first), as its sandbox would before opening the file; a directory not there
/// yet ends the walk (a write makes it).
fn check_way(
    root: &OwnedFd,
    path: &WorkspacePath,
    who: (u32, u32),
    action: &'static str,
) -> Result<()> {
    let io = |source| Error::FileIo {
        action: "look at the directories of",
        path: path.shown.clone(),
        source,
    };
    let searchable = |dir: &OwnedFd| -> Result<()> {
        let meta = std::fs::File::from(dir.try_clone().map_err(io)?)
            .metadata()
            .map_err(io)?;
        if may(&meta, who, SEARCH) {
            Ok(())
        } else {
            Err(denied(path, action))
        }
    };
    let mut dir = root.try_clone().map_err(io)?;
    searchable(&dir)?;
    for part in &path.parts[..path.parts.len().saturating_sub(1)] {
        let one = std::slice::from_ref(part);
        dir = match open_beneath(dir.as_fd(), one, libc::O_PATH | libc::O_DIRECTORY, 0) {
            Ok(next) => next,
            Err(error) if error.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            Err(error) => return Err(open_error(path, "open", error)),
        };
        searchable(&dir)?;
    }
    Ok(())
}

/// Reads a file as the job's user `who` would be let (`None`: paddock's own identity,
/// which the kernel checks, is the job's).
fn read_blocking(
    record: &JobRecord,
    path: &WorkspacePath,
    who: Option<(u32, u32)>,
) -> Result<Vec<u8>> {
    let root = open_root(record)?;
    if let Some(who) = who {
        check_way(&root, path, who, "read")?;
    }
    let fd = open_beneath(
        root.as_fd(),
        &path.parts,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
        0,
    )
    .map_err(|e| open_error(path, "open", e))?;
    let mut file = std::fs::File::from(fd);
    let io = |source| Error::FileIo {
        action: "read",
        path: path.shown.clone(),
        source,
    };
    let meta = file.metadata().map_err(io)?;
    check_regular(path, &meta)?;
    if who.is_some_and(|who| !may(&meta, who, READ)) {
        return Err(denied(path, "read"));
    }
    // By size and by allocated blocks, before a byte is read: the job may have made it a
    // sparse terabyte.
    if super::outbox::over_cap(&meta, FILE_CAP) {
        return Err(too_large(path, super::outbox::stored_size(&meta)));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or_default());
    // One byte past the cap tells a file that grew while we read it.
    (&mut file)
        .take(FILE_CAP + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > FILE_CAP {
        return Err(too_large(path, bytes.len() as u64));
    }
    Ok(bytes)
}

/// Refuses writes into the `.git` link and into caches paddock mounts or links there.
fn check_writable(record: &JobRecord, path: &WorkspacePath) -> Result<()> {
    let refused = |reason| {
        Err(Error::PathRefused {
            path: path.shown.clone(),
            reason,
        })
    };
    if path.parts.is_empty() {
        return refused("it is the workspace itself");
    }
    if path.parts[0] == ".git" {
        return refused("the job's `.git` link belongs to paddock");
    }
    let relative: PathBuf = path.parts.iter().collect();
    for cache in &record.caches {
        let placed = matches!(cache.strategy, Strategy::Mount | Strategy::Symlink);
        if let (true, Some(at)) = (placed, &cache.path)
            && relative.starts_with(at)
        {
            return refused("a shared cache is mounted or linked there");
        }
    }
    Ok(())
}

/// The directory that will hold `path`, made (with the root's owner) where missing.
fn parent_dir(root: &OwnedFd, path: &WorkspacePath, owner: Option<(u32, u32)>) -> Result<OwnedFd> {
    let dir_flags = libc::O_RDONLY | libc::O_DIRECTORY;
    let mut dir = root.try_clone().map_err(|source| Error::FileIo {
        action: "open the workspace for",
        path: path.shown.clone(),
        source,
    })?;
    let parents = &path.parts[..path.parts.len() - 1];
    for (at, part) in parents.iter().enumerate() {
        let step = WorkspacePath {
            shown: parents[..=at]
                .iter()
                .map(|p| p.to_string_lossy())
                .collect::<Vec<_>>()
                .join("/"),
            parts: parents[..=at].to_vec(),
        };
        let one = std::slice::from_ref(part);
        let next = match open_beneath(dir.as_fd(), one, dir_flags, 0) {
            Err(error) if error.raw_os_error() == Some(libc::ENOENT) => {
                if owner.is_some_and(|who| !may_fd(&dir, who, WRITE | SEARCH)) {
                    return Err(denied(&step, "make a directory in the parent of"));
                }
                match crate::sys::mkdirat(dir.as_fd(), part, 0o755) {
                    Err(e) if e.raw_os_error() != Some(libc::EEXIST) => {
                        return Err(open_error(&step, "make the directory", e));
                    }
                    _ => {}
                }
                let made = open_beneath(dir.as_fd(), one, dir_flags, 0)
                    .map_err(|e| open_error(&step, "open", e))?;
                give(&made, owner, &step)?;
                made
            }
            other => other.map_err(|e| open_error(&step, "open", e))?,
        };
        dir = next;
    }
    Ok(dir)
}

/// [`may`] of the file a descriptor names (false when it cannot be looked at).
fn may_fd(fd: &OwnedFd, who: (u32, u32), want: u32) -> bool {
    fd.try_clone()
        .and_then(|fd| std::fs::File::from(fd).metadata())
        .is_ok_and(|meta| may(&meta, who, want))
}

/// Gives a file paddock made to `owner` (root making files for the agent's uid).
fn give(fd: &OwnedFd, owner: Option<(u32, u32)>, path: &WorkspacePath) -> Result<()> {
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::fchown(fd, Some(uid), Some(gid)).map_err(|source| Error::FileIo {
            action: "give the agent",
            path: path.shown.clone(),
            source,
        })?;
    }
    Ok(())
}

/// The agent may replace an existing file it may write, or make one in a directory it
/// may write; a link or a missing file here is left to the open, which says what it is.
fn check_write_here(
    dir: &OwnedFd,
    name: &[OsString],
    path: &WorkspacePath,
    who: (u32, u32),
) -> Result<()> {
    match open_beneath(dir.as_fd(), name, libc::O_PATH, 0) {
        Ok(existing) => {
            let meta =
                std::fs::File::from(existing)
                    .metadata()
                    .map_err(|source| Error::FileIo {
                        action: "look at",
                        path: path.shown.clone(),
                        source,
                    })?;
            if meta.is_file() && !may(&meta, who, WRITE) {
                return Err(denied(path, "write"));
            }
            Ok(())
        }
        Err(error) if error.raw_os_error() == Some(libc::ENOENT) => {
            if may_fd(dir, who, WRITE | SEARCH) {
                Ok(())
            } else {
                Err(denied(path, "create"))
            }
        }
        Err(_) => Ok(()),
    }
}

fn write_blocking(
    record: &JobRecord,
    path: &WorkspacePath,
    bytes: &[u8],
    owner: Option<(u32, u32)>,
) -> Result<FileWritten> {
    let root = open_root(record)?;
    // As root, paddock writes as the agent would be let: `owner` is the agent. Otherwise
    // paddock is the agent's uid and the kernel says.
    if let Some(who) = owner {
        check_way(&root, path, who, "write")?;
    }
    let dir = parent_dir(&root, path, owner)?;
    let name = std::slice::from_ref(path.parts.last().expect("checked: not the workspace"));
    let flags = libc::O_WRONLY | libc::O_NONBLOCK | libc::O_NOCTTY;
    if let Some(who) = owner {
        check_write_here(&dir, name, path, who)?;
    }
    let (fd, created) = match open_beneath(
        dir.as_fd(),
        name,
        flags | libc::O_CREAT | libc::O_EXCL,
        0o644,
    ) {
        Ok(fd) => {
            give(&fd, owner, path)?;
            (fd, true)
        }
        Err(error) if error.raw_os_error() == Some(libc::EEXIST) => (
            open_beneath(dir.as_fd(), name, flags, 0).map_err(|e| open_error(path, "open", e))?,
            false,
        ),
        Err(error) => return Err(open_error(path, "create", error)),
    };
    let mut file = std::fs::File::from(fd);
    let io = |source| Error::FileIo {
        action: "write",
        path: path.shown.clone(),
        source,
    };
    // Checked before a byte changes: an existing file must be a regular file of its own.
    check_regular(path, &file.metadata().map_err(io)?)?;
    file.set_len(0).map_err(io)?;
    file.write_all(bytes).map_err(io)?;
    Ok(FileWritten {
        path: path.shown.clone(),
        size: bytes.len() as u64,
        created,
    })
}

fn list_blocking(record: &JobRecord, path: &WorkspacePath) -> Result<FileList> {
    let root = open_root(record)?;
    let dir = open_beneath(
        root.as_fd(),
        &path.parts,
        libc::O_RDONLY | libc::O_DIRECTORY,
        0,
    )
    .map_err(|e| open_error(path, "open", e))?;
    let io = |source| Error::FileIo {
        action: "list",
        path: path.shown.clone(),
        source,
    };
    // The directory is named through our own descriptor of it: whatever the agent renames
    // or relinks meanwhile, this reads the directory we opened beneath the root.
    let here = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(&here).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        let Ok(meta) = std::fs::symlink_metadata(here.join(&name)) else {
            continue; // gone meanwhile
        };
        let kind = if meta.file_type().is_symlink() {
            FileKind::Symlink
        } else if meta.is_dir() {
            FileKind::Dir
        } else if meta.is_file() {
            FileKind::File
        } else {
            FileKind::Other
        };
        let target = (kind == FileKind::Symlink)
            .then(|| std::fs::read_link(here.join(&name)).ok())
            .flatten()
            .map(|t| t.to_string_lossy().into_owned());
        entries.push(FileEntry {
            name: name.to_string_lossy().into_owned(),
            kind,
            size: if kind == FileKind::File {
                meta.len()
            } else {
                0
            },
            target,
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(FileList {
        path: path.shown.clone(),
        entries,
    })
}

/// Runs blocking file work off the async threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|join| Error::FileIo {
            action: "finish the file operation on",
            path: String::new(),
            source: std::io::Error::other(join.to_string()),
        })?
}

/// Where a file API path is answered: by the job's sandbox (outside the workspace of a job
/// that has one: see `files_inside`), or in its workspace.
enum Target {
    Sandbox(JobRecord),
    Workspace(JobRecord, WorkspacePath),
}

impl Paddock {
    /// The job (loaded once) and where `path` is answered.
    fn target(&self, id: &str, path: &str) -> Result<Target> {
        let record = self.load(id)?;
        if self.runtime_of(&record).layout().sandboxed()
            && super::files_inside::is_inside_path(&record, path)
        {
            return Ok(Target::Sandbox(record));
        }
        let path = workspace_path(
            Path::new(&record.limits.workspace_dir),
            &record.worktree,
            path,
        )?;
        Ok(Target::Workspace(record, path))
    }

    /// The bytes of a file of the job (see the module docs for what is refused).
    pub async fn read_file(&self, id: &str, path: &str) -> Result<Vec<u8>> {
        match self.target(id, path)? {
            Target::Sandbox(record) => self.read_inside(&record, path).await,
            Target::Workspace(record, path) => {
                // As root paddock could read what the agent cannot: it reads as the agent would.
                let who = self.runtime_of(&record).layout().files_owner(&record);
                self.place_of(&record).read_file(&record, &path, who).await
            }
        }
    }

    /// Writes (creates or replaces) a file of the job, making missing directories.
    pub async fn write_file(&self, id: &str, path: &str, bytes: Vec<u8>) -> Result<FileWritten> {
        let size = bytes.len() as u64;
        match self.target(id, path)? {
            Target::Sandbox(_) if size > FILE_CAP => Err(Error::FileTooLarge {
                path: path.to_string(),
                size,
                cap: FILE_CAP,
            }),
            Target::Sandbox(record) => self.write_inside(&record, path, bytes).await,
            Target::Workspace(record, path) => {
                // Wherever the files live: no write into `.git` or a cache, nothing over the cap.
                check_writable(&record, &path)?;
                if size > FILE_CAP {
                    return Err(too_large(&path, size));
                }
                let owner = self.runtime_of(&record).layout().files_owner(&record);
                self.place_of(&record)
                    .write_file(&record, &path, bytes, owner)
                    .await
            }
        }
    }

    /// The entries of a directory of the job.
    pub async fn list_files(&self, id: &str, path: &str) -> Result<FileList> {
        match self.target(id, path)? {
            Target::Sandbox(record) => self.list_inside(&record, path).await,
            Target::Workspace(record, path) => {
                self.place_of(&record).list_dir(&record, &path).await
            }
        }
    }
}

/// A local job's files: its worktree on this host (see the module docs).
pub(super) struct HostDir;

#[async_trait::async_trait]
impl Place for HostDir {
    async fn read_file(
        &self,
        record: &JobRecord,
        path: &WorkspacePath,
        who: Option<(u32, u32)>,
    ) -> Result<Vec<u8>> {
        let (record, path) = (record.clone(), path.clone());
        blocking(move || read_blocking(&record, &path, who)).await
    }

    async fn write_file(
        &self,
        record: &JobRecord,
        path: &WorkspacePath,
        bytes: Vec<u8>,
        owner: Option<(u32, u32)>,
    ) -> Result<FileWritten> {
        let (record, path) = (record.clone(), path.clone());
        blocking(move || write_blocking(&record, &path, &bytes, owner)).await
    }

    async fn list_dir(&self, record: &JobRecord, path: &WorkspacePath) -> Result<FileList> {
        let (record, path) = (record.clone(), path.clone());
        blocking(move || list_blocking(&record, &path)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_relative_to_the_workspace_and_never_climb() {
        let (workspace, worktree) = (Path::new("/workspace"), Path::new("/home/u/wt/j"));
        let check = |p: &str| workspace_path(workspace, worktree, p);
        let shown = |p: &str| check(p).map(|w| w.shown);
        assert_eq!(shown("src/x.rs").unwrap(), "src/x.rs");
        assert_eq!(shown("/workspace/src/./x.rs").unwrap(), "src/x.rs");
        assert_eq!(shown("/home/u/wt/j/a").unwrap(), "a");
        assert_eq!(shown("/workspace").unwrap(), "");
        assert_eq!(shown(".").unwrap(), "");
        for bad in [
            "../x",
            "a/../../x",
            "a/..",
            "/etc/passwd",
            "/workspacefoo/x",
            "a\0b",
        ] {
            assert!(
                matches!(check(bad), Err(Error::PathEscapes { .. })),
                "{bad}"
            );
        }
    }

    /// The agent's permission, as its sandbox's kernel decides it: owner bits for its own
    /// files, group bits for its group's, other bits for the rest; no capability.
    #[test]
    fn permission_bits_decide_as_for_the_agent_without_capabilities() {
        let agent = (1000, 1000);
        assert!(may_mode(0o644, agent, agent, READ | WRITE));
        assert!(
            !may_mode(0o444, agent, agent, WRITE),
            "a read-only file of its own"
        );
        assert!(
            !may_mode(0o200, agent, agent, READ),
            "a write-only file of its own"
        );
        assert!(may_mode(0o640, (0, 1000), agent, READ), "its group's");
        assert!(
            !may_mode(0o640, (0, 0), agent, READ),
            "root's, not for others"
        );
        assert!(
            !may_mode(0o077, agent, agent, READ),
            "owner bits, even if others may"
        );
        assert!(may_mode(0o755, (0, 0), agent, SEARCH));
    }

    /// The walk for kernels without `openat2` refuses links where `openat2` does.
    #[test]
    fn the_walk_without_openat2_follows_no_link() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join("a")).expect("mkdir");
        std::fs::write(dir.path().join("a/f"), "inside").expect("write");
        std::os::unix::fs::symlink("a", dir.path().join("l")).expect("link");
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("a/out")).expect("link");
        let root = std::fs::File::open(dir.path()).expect("open the root");
        let parts = |p: &str| p.split('/').map(OsString::from).collect::<Vec<_>>();
        let open = |p: &str, flags| walk_beneath(root.as_fd(), &parts(p), flags, 0);
        let mut text = String::new();
        std::fs::File::from(open("a/f", libc::O_RDONLY).expect("a file inside"))
            .read_to_string(&mut text)
            .expect("read");
        assert_eq!(text, "inside");
        let errno = |p: &str, flags| open(p, flags).expect_err(p).raw_os_error();
        assert_eq!(errno("l/f", libc::O_RDONLY), Some(libc::ELOOP));
        assert_eq!(errno("a/out", libc::O_RDONLY), Some(libc::ELOOP));
        assert_eq!(
            errno("a/out", libc::O_WRONLY | libc::O_TRUNC),
            Some(libc::ELOOP)
        );
        assert_eq!(errno("a/f/x", libc::O_RDONLY), Some(libc::ENOTDIR));
    }
}
