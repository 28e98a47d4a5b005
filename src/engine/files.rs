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
//! - Files are bytes (binary-safe) and stream both ways with no cap but a read limit the
//!   caller sets; a write goes to a temporary file beside the target, renamed over it only
//!   when every byte came, so a transfer cut midway leaves nothing under the target's name.
//! - Reads and writes answer as the job's user would be answered in its sandbox: paddock as
//!   root (which the kernel lets read and write anything) checks the agent's permission
//!   bits on the file and every directory on the way first; as the agent's uid, the kernel
//!   does. A read-only file is not written, a file the agent cannot read is not read.

use std::ffi::OsString;

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use super::Paddock;
use super::files_inside::As;
use crate::cache::Strategy;
use crate::error::{Error, Result};
use crate::job::JobRecord;
use crate::place::{Place, WorkspacePath};
use crate::wire::{ExecUser, FileBytes, FileEntry, FileKind, FileList, FileReader, FileWritten};

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

pub(crate) fn too_large(path: &WorkspacePath, size: u64, cap: u64) -> Error {
    Error::FileTooLarge {
        path: path.shown.clone(),
        size,
        cap,
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

/// Opens a file for a streamed read as the job's user `who` would be let (`None`:
/// paddock's own identity, which the kernel checks, is the job's): the open file and the
/// size it has now, which is all a read sends (a file that grows meanwhile is cut there;
/// one that shrinks ends the transfer short, which the reader tells).
fn open_for_read(
    record: &JobRecord,
    path: &WorkspacePath,
    who: Option<(u32, u32)>,
    limit: Option<u64>,
) -> Result<(std::fs::File, u64)> {
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
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|source| Error::FileIo {
        action: "read",
        path: path.shown.clone(),
        source,
    })?;
    check_regular(path, &meta)?;
    if who.is_some_and(|who| !may(&meta, who, READ)) {
        return Err(denied(path, "read"));
    }
    // By size and by allocated blocks, before a byte is read: the job may have made it a
    // sparse terabyte.
    if let Some(limit) = limit
        && super::outbox::over_cap(&meta, limit)
    {
        // The size it claims when that is over; else the blocks it holds.
        let size = if meta.len() > limit {
            meta.len()
        } else {
            super::outbox::stored_size(&meta)
        };
        return Err(too_large(path, size, limit));
    }
    Ok((file, meta.len()))
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

/// A write in progress: a temporary file beside the target, renamed over it only when
/// every byte arrived, removed otherwise (also when dropped unfinished).
struct PendingWrite {
    dir: OwnedFd,
    temp: OsString,
    name: OsString,
    created: bool,
    done: bool,
}

impl Drop for PendingWrite {
    fn drop(&mut self) {
        if !self.done {
            let _ = rustix::fs::unlinkat(
                &self.dir,
                self.temp.as_os_str(),
                rustix::fs::AtFlags::empty(),
            );
        }
    }
}

/// Checks a write as `write_blocking` always did, then makes its temporary file (with the
/// mode and owner the file will have): the pending write and the file to fill.
fn prepare_write(
    record: &JobRecord,
    path: &WorkspacePath,
    owner: Option<(u32, u32)>,
) -> Result<(PendingWrite, std::fs::File)> {
    let root = open_root(record)?;
    // As root, paddock writes as the agent would be let: `owner` is the agent. Otherwise
    // paddock is the agent's uid and the kernel says.
    if let Some(who) = owner {
        check_way(&root, path, who, "write")?;
    }
    let dir = parent_dir(&root, path, owner)?;
    let name = path
        .parts
        .last()
        .expect("checked: not the workspace")
        .clone();
    if let Some(who) = owner {
        check_write_here(&dir, std::slice::from_ref(&name), path, who)?;
    }
    let io = |action, source| Error::FileIo {
        action,
        path: path.shown.clone(),
        source,
    };
    // Checked before a byte changes: an existing file must be a regular file of its own,
    // and its replacement keeps its mode.
    let existing = match open_beneath(dir.as_fd(), std::slice::from_ref(&name), libc::O_PATH, 0) {
        Ok(fd) => {
            let meta = std::fs::File::from(fd)
                .metadata()
                .map_err(|e| io("look at", e))?;
            if meta.file_type().is_symlink() {
                return Err(Error::PathSymlink {
                    path: path.shown.clone(),
                });
            }
            check_regular(path, &meta)?;
            Some(meta.mode() & 0o777)
        }
        Err(error) if error.raw_os_error() == Some(libc::ENOENT) => None,
        Err(error) => return Err(open_error(path, "open", error)),
    };
    let temp = OsString::from(format!(".paddock-put.{}", crate::ids::random_hex(12)));
    let fd = open_beneath(
        dir.as_fd(),
        std::slice::from_ref(&temp),
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY,
        0o600,
    )
    .map_err(|e| open_error(path, "create", e))?;
    let pending = PendingWrite {
        dir,
        temp,
        name,
        created: existing.is_none(),
        done: false,
    };
    give(&fd, owner, path)?;
    let file = std::fs::File::from(fd);
    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(
        existing.unwrap_or(0o644),
    ))
    .map_err(|e| io("write", e))?;
    Ok((pending, file))
}

/// Puts the filled temporary file under the target's name.
fn finish_write(mut pending: PendingWrite, path: &WorkspacePath) -> Result<bool> {
    rustix::fs::renameat(
        &pending.dir,
        pending.temp.as_os_str(),
        &pending.dir,
        pending.name.as_os_str(),
    )
    .map_err(|e| open_error(path, "replace", e.into()))?;
    pending.done = true;
    Ok(pending.created)
}

/// Writes `bytes` (exactly `bytes.size` of them) to a file of the workspace, whole or not
/// at all (see [`PendingWrite`]).
async fn write_streamed(
    record: &JobRecord,
    path: &WorkspacePath,
    bytes: FileBytes,
    owner: Option<(u32, u32)>,
) -> Result<FileWritten> {
    use tokio::io::AsyncWriteExt as _;
    let (record_c, path_c) = (record.clone(), path.clone());
    let (pending, file) = blocking(move || prepare_write(&record_c, &path_c, owner)).await?;
    let io = |source| Error::FileIo {
        action: "write",
        path: path.shown.clone(),
        source,
    };
    let mut file = tokio::fs::File::from_std(file);
    let mut reader = tokio::io::AsyncReadExt::take(bytes.reader, bytes.size);
    let copied = tokio::io::copy(&mut reader, &mut file).await.map_err(io)?;
    if copied != bytes.size {
        return Err(io(crate::wire::cut_short(bytes.size, copied)));
    }
    file.flush().await.map_err(io)?;
    drop(file);
    let path_c = path.clone();
    let created = blocking(move || finish_write(pending, &path_c)).await?;
    Ok(FileWritten {
        path: path.shown.clone(),
        size: bytes.size,
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
/// that has one, or anywhere as another user than the agent: see `files_inside`; the path
/// as the sandbox names it), or in its workspace.
enum Target {
    Sandbox(JobRecord, String, As),
    Workspace(JobRecord, WorkspacePath),
}

/// What a file API call does with its path.
#[derive(Clone, Copy)]
enum Access {
    Read,
    /// Writes one file.
    File,
    /// Unpacks a tree into a directory.
    Tree,
}

impl Paddock {
    /// The job (loaded once) and where `path` is answered for `user`. Another user than the
    /// agent is refused where the runtime does not contain it (as for `exec --user`), and
    /// is always answered inside the sandbox, whose kernel checks that user's permissions.
    async fn target(&self, id: &str, path: &str, user: ExecUser, access: Access) -> Result<Target> {
        let record = self.load(id)?;
        let other = self.other_user(&record, Some(user)).await?;
        // A runtime that contains another user has a sandbox of its own to answer.
        let sandboxed = self.runtime_of(&record).layout().sandboxed() || other.is_some();
        if sandboxed && super::files_inside::is_inside_path(&record, path) {
            return Ok(Target::Sandbox(record, path.to_string(), As(other)));
        }
        let relative = workspace_path(
            Path::new(&record.limits.workspace_dir),
            &record.worktree,
            path,
        )?;
        // Wherever the files live: no write into `.git` or a cache (nor over the workspace
        // itself, but a tree may be unpacked into it).
        match access {
            Access::File => check_writable(&record, &relative)?,
            Access::Tree if !relative.parts.is_empty() => check_writable(&record, &relative)?,
            Access::Read | Access::Tree => {}
        }
        if other.is_some() {
            let inside = super::files_inside::inside_path(&record, &relative);
            return Ok(Target::Sandbox(record, inside, As(other)));
        }
        Ok(Target::Workspace(record, relative))
    }

    /// After a write as another user: what it left in the job's host files is the agent's
    /// again (see `OtherUsers::settle`).
    async fn settle_files(&self, record: &JobRecord, user: As) -> Result<()> {
        if let (Some(ids), Some(users)) =
            (user.0, self.runtime_of(record).capabilities().other_users)
        {
            users.settle(record, ids).await?;
        }
        Ok(())
    }

    /// The bytes of a file of the job, streamed, refused when over `limit` (see the
    /// module docs for what else is refused).
    pub async fn read_file(
        &self,
        id: &str,
        path: &str,
        user: ExecUser,
        limit: Option<u64>,
    ) -> Result<FileBytes> {
        match self.target(id, path, user, Access::Read).await? {
            Target::Sandbox(record, inside, user) => {
                self.read_inside(&record, &inside, limit, user).await
            }
            Target::Workspace(record, path) => {
                // As root paddock could read what the agent cannot: it reads as the agent would.
                let who = self.runtime_of(&record).layout().files_owner(&record);
                self.place_of(&record)
                    .open_file(&record, &path, who, limit)
                    .await
            }
        }
    }

    /// Writes (creates or replaces) a file of the job, making missing directories, whole
    /// or not at all.
    pub async fn write_file(
        &self,
        id: &str,
        path: &str,
        bytes: FileBytes,
        user: ExecUser,
    ) -> Result<FileWritten> {
        match self.target(id, path, user, Access::File).await? {
            Target::Sandbox(record, inside, user) => {
                let written = self.write_inside(&record, &inside, bytes, user).await;
                self.settle_files(&record, user).await?;
                let mut written = written?;
                written.path = path.to_string();
                Ok(written)
            }
            Target::Workspace(record, path) => {
                let owner = self.runtime_of(&record).layout().files_owner(&record);
                self.place_of(&record)
                    .put_file(&record, &path, bytes, owner)
                    .await
            }
        }
    }

    /// Where a directory's tar is made or unpacked: inside the job's sandbox, as the job's
    /// user or `user` (a process job has none: refused). A workspace path is the sandbox's
    /// view of it; a write into `.git` or a cache is refused as for a file.
    async fn tar_target(
        &self,
        id: &str,
        path: &str,
        user: ExecUser,
        access: Access,
    ) -> Result<(JobRecord, String, As)> {
        let (record, inside, user) = match self.target(id, path, user, access).await? {
            Target::Sandbox(record, inside, user) => (record, inside, user),
            Target::Workspace(record, relative) => {
                let inside = super::files_inside::inside_path(&record, &relative);
                (record, inside, As::default())
            }
        };
        if !self.runtime_of(&record).layout().sandboxed() {
            return Err(Error::PathRefused {
                path: path.to_string(),
                reason: "a directory goes as a tar only through a job's sandbox, and a process job has none (copy its files one by one)",
            });
        }
        Ok((record, inside, user))
    }

    /// A directory of the job as a tar stream (`cp -r JOB:DIR LOCAL`).
    pub async fn read_tar(&self, id: &str, path: &str, user: ExecUser) -> Result<FileReader> {
        let (record, inside, user) = self.tar_target(id, path, user, Access::Read).await?;
        self.tar_inside(&record, &inside, user).await
    }

    /// Unpacks a tar stream into a directory of the job (made if missing), whole or not at
    /// all (`cp -r LOCAL JOB:DIR`).
    pub async fn write_tar(
        &self,
        id: &str,
        path: &str,
        tar: FileReader,
        user: ExecUser,
    ) -> Result<FileWritten> {
        let (record, inside, user) = self.tar_target(id, path, user, Access::Tree).await?;
        let written = self.untar_inside(&record, &inside, tar, user).await;
        self.settle_files(&record, user).await?;
        let mut written = written?;
        written.path = path.to_string();
        Ok(written)
    }

    /// The entries of a directory of the job.
    pub async fn list_files(&self, id: &str, path: &str, user: ExecUser) -> Result<FileList> {
        match self.target(id, path, user, Access::Read).await? {
            Target::Sandbox(record, inside, user) => {
                let mut list = self.list_inside(&record, &inside, user).await?;
                list.path = path.to_string();
                Ok(list)
            }
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
    async fn open_file(
        &self,
        record: &JobRecord,
        path: &WorkspacePath,
        who: Option<(u32, u32)>,
        limit: Option<u64>,
    ) -> Result<FileBytes> {
        let (record, path) = (record.clone(), path.clone());
        let (file, size) = blocking(move || open_for_read(&record, &path, who, limit)).await?;
        let reader = tokio::io::AsyncReadExt::take(tokio::fs::File::from_std(file), size);
        Ok(FileBytes {
            size,
            reader: Box::pin(reader),
        })
    }

    async fn put_file(
        &self,
        record: &JobRecord,
        path: &WorkspacePath,
        bytes: FileBytes,
        owner: Option<(u32, u32)>,
    ) -> Result<FileWritten> {
        write_streamed(record, path, bytes, owner).await
    }

    async fn write_file(
        &self,
        record: &JobRecord,
        path: &WorkspacePath,
        bytes: Vec<u8>,
        owner: Option<(u32, u32)>,
    ) -> Result<FileWritten> {
        write_streamed(record, path, FileBytes::from_vec(bytes), owner).await
    }

    async fn list_dir(&self, record: &JobRecord, path: &WorkspacePath) -> Result<FileList> {
        let (record, path) = (record.clone(), path.clone());
        blocking(move || list_blocking(&record, &path)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;

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
