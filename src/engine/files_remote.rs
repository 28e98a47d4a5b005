//! The file API of a job on a remote engine: its `Place` is volumes of that engine, read,
//! written and listed through the archive API on the job's container
//! (`runtime::docker::archive`), whether it runs or not. Nothing of the job's is ever a
//! path on this host.
//!
//! The file API's promise holds as for a local job: before any byte moves, every component
//! of the path is looked at and a link anywhere, or a last component that is not a regular
//! file (or, to list, a directory), is refused; what comes back is a tar read under a cap,
//! and only a regular file entry with the asked name is taken. A job that swaps a directory
//! for a link between the look and the transfer can only redirect it within its own
//! container's filesystem (Docker resolves archive paths inside the container's root),
//! never to this host's or another job's files. Written files belong to the agent's uid.

use std::collections::BTreeMap;
use std::ffi::OsString;

use super::files::denied;
use crate::error::{Error, Result};
use crate::job::JobRecord;
use crate::place::WorkspacePath;
use crate::runtime::capabilities::EngineVolumes;
use crate::runtime::{Runtime, agent_user};
use crate::wire::{FileEntry, FileKind, FileList, FileWritten};

/// Go's `os.FileMode` type bits, as the archive API reports a path's mode.
const MODE_DIR: u32 = 1 << 31;
const MODE_SYMLINK: u32 = 1 << 27;
/// Every type bit (dir, symlink, device, pipe, socket, char device, irregular).
const MODE_TYPE: u32 =
    MODE_DIR | MODE_SYMLINK | (1 << 26) | (1 << 25) | (1 << 24) | (1 << 21) | (1 << 19);
/// The most a directory listing reads through the engine (the tar of the whole directory).
const LIST_CAP: u64 = 64 * 1024 * 1024;

/// A remote job's files: volumes of its engine, seen through its job container by its
/// runtime's [`EngineVolumes`].
pub struct EngineFiles {
    runtime: std::sync::Arc<dyn Runtime>,
}

impl EngineFiles {
    pub fn new(runtime: std::sync::Arc<dyn Runtime>) -> EngineFiles {
        EngineFiles { runtime }
    }

    fn volumes(&self) -> Result<&dyn EngineVolumes> {
        self.runtime.capabilities().volumes.ok_or_else(|| {
            Error::Runtime(crate::runtime::lacks(
                self.runtime.as_ref(),
                "keep a job's files in volumes",
            ))
        })
    }
}

/// The container path of `parts` beneath the job's workspace.
fn container_path(record: &JobRecord, parts: &[OsString]) -> String {
    let mut path = record
        .limits
        .workspace_dir
        .trim_end_matches('/')
        .to_string();
    for part in parts {
        path.push('/');
        path.push_str(&part.to_string_lossy());
    }
    path
}

/// Looks at each component of `path` (the workspace's own directories first): a link is
/// refused, and so is a component before the last that is not a directory. Returns the
/// last component's mode, and how many components exist (a missing one ends the walk).
async fn walk(
    volumes: &dyn EngineVolumes,
    record: &JobRecord,
    path: &WorkspacePath,
) -> Result<(Option<u32>, usize)> {
    let mut mode = volumes
        .stat_path(record, &container_path(record, &[]))
        .await?;
    for depth in 1..=path.parts.len() {
        if mode.is_some_and(|m| m & MODE_DIR == 0) {
            return Err(Error::FileKind {
                path: path.shown.clone(),
                what: "not a directory (or a part of its path is not)",
            });
        }
        mode = volumes
            .stat_path(record, &container_path(record, &path.parts[..depth]))
            .await?;
        match mode {
            None => return Ok((None, depth - 1)),
            Some(m) if m & MODE_SYMLINK != 0 => {
                return Err(Error::PathSymlink {
                    path: path.shown.clone(),
                });
            }
            Some(_) => {}
        }
    }
    Ok((mode, path.parts.len()))
}

fn io_error(action: &'static str, path: &WorkspacePath) -> impl Fn(std::io::Error) -> Error {
    let path = path.shown.clone();
    move |source| Error::FileIo {
        action,
        path: path.clone(),
        source,
    }
}

/// Not a [`Place`] of its own: `OnEngine` streams the file API through the sandbox and
/// uses these for what the archive API does whole (a restore's bundle, a listing).
impl EngineFiles {
    /// Refuses `path` when a component is a link (or one before the last is not a
    /// directory), as a local job's file API does, before its bytes stream through the
    /// sandbox. A job that swaps a link in afterwards redirects only its own sandbox's read.
    pub(super) async fn check_path(&self, record: &JobRecord, path: &WorkspacePath) -> Result<()> {
        walk(self.volumes()?, record, path).await.map(|_| ())
    }

    pub(super) async fn write_file(
        &self,
        record: &JobRecord,
        path: &WorkspacePath,
        bytes: Vec<u8>,
        _owner: Option<(u32, u32)>,
    ) -> Result<FileWritten> {
        let volumes = self.volumes()?;
        let (mode, existing) = walk(volumes, record, path).await?;
        let created = existing < path.parts.len();
        if let Some(mode) = mode.filter(|_| !created) {
            if mode & MODE_DIR != 0 {
                return Err(Error::FileKind {
                    path: path.shown.clone(),
                    what: "a directory",
                });
            }
            if mode & MODE_TYPE != 0 {
                return Err(Error::FileKind {
                    path: path.shown.clone(),
                    what: "not a regular file",
                });
            }
            // The engine writes as root; the workspace's files are the agent's, so a file
            // its owner may not write (one the agent made read-only) is not written.
            if mode & 0o200 == 0 {
                return Err(denied(path, "write"));
            }
        }
        // The engine's container runs the agent as this uid, whoever runs paddock here.
        let (uid, gid) = agent_user(record.limits.uid);
        // The tar holds the missing directories and the file, relative to the deepest
        // directory that exists, so no existing directory's owner or mode is touched.
        let base = existing.min(path.parts.len() - 1);
        let mut builder = tar::Builder::new(Vec::new());
        let write = io_error("write", path);
        for depth in base + 1..path.parts.len() {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_uid(u64::from(uid));
            header.set_gid(u64::from(gid));
            header.set_size(0);
            let relative: std::path::PathBuf = path.parts[base..depth].iter().collect();
            builder
                .append_data(&mut header, relative, std::io::empty())
                .map_err(&write)?;
        }
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o644);
        header.set_uid(u64::from(uid));
        header.set_gid(u64::from(gid));
        header.set_size(bytes.len() as u64);
        let relative: std::path::PathBuf = path.parts[base..].iter().collect();
        builder
            .append_data(&mut header, relative, bytes.as_slice())
            .map_err(&write)?;
        let tar = builder.into_inner().map_err(&write)?;
        volumes
            .upload_into(record, &container_path(record, &path.parts[..base]), tar)
            .await?;
        Ok(FileWritten {
            path: path.shown.clone(),
            size: bytes.len() as u64,
            created,
        })
    }

    pub(super) async fn list_dir(
        &self,
        record: &JobRecord,
        path: &WorkspacePath,
    ) -> Result<FileList> {
        let volumes = self.volumes()?;
        match walk(volumes, record, path).await?.0 {
            None => {
                return Err(Error::FileNotFound {
                    path: path.shown.clone(),
                });
            }
            Some(mode) if mode & MODE_DIR == 0 => {
                return Err(Error::FileKind {
                    path: path.shown.clone(),
                    what: "not a directory (or a part of its path is not)",
                });
            }
            Some(_) => {}
        }
        let target = container_path(record, &path.parts);
        let Some(tar) = volumes.download_path(record, &target, LIST_CAP).await? else {
            return Err(Error::FileKind {
                path: path.shown.clone(),
                what: "a directory holding more than 64 MiB, too much to list through the engine (list a directory below it)",
            });
        };
        let read = io_error("list", path);
        let mut archive = tar::Archive::new(tar.as_slice());
        let mut entries: BTreeMap<String, FileEntry> = BTreeMap::new();
        for entry in archive.entries().map_err(&read)? {
            let entry = entry.map_err(&read)?;
            let name = entry.path().map_err(&read)?.into_owned();
            // `DIR/child` only: the directory itself and deeper entries are not listed.
            let mut components = name.components();
            let (Some(_), Some(child), None) =
                (components.next(), components.next(), components.next())
            else {
                continue;
            };
            let child = child.as_os_str().to_string_lossy().into_owned();
            let header = entry.header();
            let (kind, size, target) = match header.entry_type() {
                tar::EntryType::Directory => (FileKind::Dir, 0, None),
                tar::EntryType::Symlink => (
                    FileKind::Symlink,
                    0,
                    entry
                        .link_name()
                        .ok()
                        .flatten()
                        .map(|t| t.to_string_lossy().into_owned()),
                ),
                tar::EntryType::Regular => (FileKind::File, header.size().unwrap_or(0), None),
                _ => (FileKind::Other, 0, None),
            };
            entries.insert(
                child.clone(),
                FileEntry {
                    name: child,
                    kind,
                    size,
                    target,
                },
            );
        }
        Ok(FileList {
            path: path.shown.clone(),
            entries: entries.into_values().collect(),
        })
    }
}
