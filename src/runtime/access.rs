//! Giving a job's files to the agent's uid, for every runtime whose sandbox runs the agent
//! as a uid of its own over host files (a container's bind mounts, a VM's shares): which
//! paths are the agent's (its checkout, its git dir but the parts that stay paddock's, the
//! shared cache entries it writes) and which never are (a file of the git dir with another
//! name elsewhere). It runs before any agent has, so no agent can race its walk.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use crate::cache::Strategy;
use crate::job::JobRecord;
use crate::runtime::RuntimeError;

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> RuntimeError + '_ {
    move |source| RuntimeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The job's outbox on the host ([`JobRecord::outbox`]), when it has one.
pub(crate) fn outbox_of(record: &JobRecord) -> Option<PathBuf> {
    record.outbox().filter(|outbox| outbox.is_dir())
}

/// When paddock runs as root the agent runs as an unprivileged uid: give that uid the job's
/// worktree and private git dir (except the parts that stay read-only and paddock's) and
/// the shared cache entries it uses. Ownership rather than ACLs, because gVisor checks mode
/// bits and ignores ACLs. Runs once, when the job's first container is made and before any
/// agent has run, so no agent can race the walk; nothing of the user's repository is touched.
pub fn grant_agent_access(record: &JobRecord, uid: u32) -> Result<(), RuntimeError> {
    if !crate::sys::is_root() {
        return Ok(());
    }
    let git_dir = record.git_dir.as_ref().ok_or_else(|| RuntimeError::Io {
        path: record.worktree.clone(),
        source: std::io::Error::other("the job has no git dir yet"),
    })?;
    // The checkout itself was written by the agent's uid (see `JobGitDir::checkout`); what
    // paddock added to it afterwards (cache copies and links) and its git dir were not.
    let mut paths = vec![record.worktree.clone()];
    for cache in &record.caches {
        if let Some(path) = &cache.path {
            // Directories paddock made on the way to a cache's place are its, too.
            for parent in Path::new(path).ancestors().skip(1) {
                let dir = record.worktree.join(parent);
                if dir != record.worktree && !paths.contains(&dir) {
                    paths.push(dir);
                }
            }
            let placed = record.worktree.join(path);
            if std::fs::symlink_metadata(&placed).is_ok() {
                collect_tree(&placed, false, &mut paths)?;
            }
        }
    }
    collect_tree(git_dir, false, &mut paths)?;
    if let Some(outbox) = outbox_of(record) {
        paths.push(outbox);
    }
    let kept: Vec<PathBuf> = crate::git::jobdir::PROTECTED
        .iter()
        .map(|name| git_dir.join(name))
        .chain([record.worktree.join(".git")])
        .collect();
    paths.retain(|p| !kept.iter().any(|k| p.starts_with(k)));
    for cache in &record.caches {
        let shared = matches!(
            cache.strategy,
            Strategy::Symlink | Strategy::Env | Strategy::Mount
        );
        let owner = std::os::unix::fs::MetadataExt::uid(
            &std::fs::symlink_metadata(&cache.entry).map_err(io_error(&cache.entry))?,
        );
        if shared && owner != uid {
            collect_tree(&cache.entry, false, &mut paths)?;
        }
    }
    for path in paths {
        // A file of the git dir with another name elsewhere (an overlay job's index, a hard
        // link to its pristine checkout's) is not the job's to give: owned by the agent, it
        // could be chmodded and written in place under every job sharing it. git needs only
        // to read it and rename a new index over it, which the git dir's owner may do.
        let meta = std::fs::symlink_metadata(&path).map_err(io_error(&path))?;
        if meta.is_file() && meta.nlink() > 1 && path.starts_with(git_dir) {
            continue;
        }
        std::os::unix::fs::lchown(&path, Some(uid), Some(uid)).map_err(io_error(&path))?;
    }
    Ok(())
}

/// Paths under `root` (itself included): directories only, or everything.
fn collect_tree(root: &Path, dirs_only: bool, out: &mut Vec<PathBuf>) -> Result<(), RuntimeError> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).map_err(io_error(&path))?;
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(io_error(&path))? {
                stack.push(entry.map_err(io_error(&path))?.path());
            }
            out.push(path);
        } else if !dirs_only && meta.is_file() {
            out.push(path);
        }
    }
    Ok(())
}
