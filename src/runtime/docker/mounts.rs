//! What a job container sees: the mounts (see the module docs of `docker` for why each one
//! is there) and, when paddock runs as root, handing the job's own files to the agent's uid.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use bollard::models::{Mount, MountTypeEnum};

use super::{CONTAINER_GIT_DIR, CONTAINER_OBJECTS, CONTAINER_OUTBOX, io_error};
use crate::cache::Strategy;
use crate::job::JobRecord;
use crate::runtime::RuntimeError;

pub(super) fn bind(source: &Path, target: &Path, read_only: bool) -> Mount {
    Mount {
        target: Some(target.display().to_string()),
        source: Some(source.display().to_string()),
        typ: Some(MountTypeEnum::BIND),
        read_only: Some(read_only),
        ..Default::default()
    }
}

/// The mounts of a job container (see the module docs for why each one is there).
pub(super) fn job_mounts(record: &JobRecord) -> Result<Vec<Mount>, RuntimeError> {
    let git_dir = record.git_dir.as_ref().ok_or_else(|| RuntimeError::Io {
        path: record.worktree.clone(),
        source: std::io::Error::other("the job has no git dir yet"),
    })?;
    let workspace = Path::new(&record.limits.workspace_dir);
    let inside_git = Path::new(CONTAINER_GIT_DIR);
    let mut mounts = vec![
        bind(&record.worktree, workspace, false),
        bind(&record.worktree.join(".git"), &workspace.join(".git"), true),
        bind(git_dir, inside_git, false),
    ];
    for name in crate::git::jobdir::PROTECTED {
        mounts.push(bind(&git_dir.join(name), &inside_git.join(name), true));
    }
    if let Some(outbox) = outbox_of(record) {
        mounts.push(bind(&outbox, Path::new(CONTAINER_OUTBOX), false));
    }
    mounts.extend(object_mounts(record));
    // Caches: a symlinked entry is mounted at its own path so the link resolves inside as
    // outside; an env entry likewise; a mount entry at its place in the workspace.
    for cache in &record.caches {
        match (cache.strategy, &cache.path) {
            (Strategy::Symlink | Strategy::Env, _) => {
                mounts.push(bind(&cache.entry, &cache.entry, false));
            }
            (Strategy::Mount, Some(path)) => {
                mounts.push(bind(&cache.entry, &workspace.join(path), cache.readonly));
            }
            _ => {}
        }
    }
    Ok(mounts)
}

/// The read-only mounts of a job's object stores: at [`CONTAINER_OBJECTS`], where its git
/// dir's alternates point, its view of the repository's store fixed at create (a job made
/// before views: the live store), then [`nested_object_mounts`].
pub(super) fn object_mounts(record: &JobRecord) -> Vec<Mount> {
    let own = match &record.object_view {
        Some(view) => view.clone(),
        None => crate::git::object_dirs(&record.git_common_dir)
            .into_iter()
            .next()
            .unwrap_or_else(|| record.git_common_dir.join("objects")),
    };
    let mut mounts = vec![bind(&own, Path::new(CONTAINER_OBJECTS), true)];
    mounts.extend(nested_object_mounts(&record.git_common_dir));
    mounts
}

/// The stores a repository's object store borrows from (its `info/alternates`, recursively),
/// read-only at their own paths, where the alternates name them. paddock never writes them.
pub(super) fn nested_object_mounts(common_dir: &Path) -> Vec<Mount> {
    crate::git::object_dirs(common_dir)
        .into_iter()
        .skip(1)
        .map(|objects| bind(&objects, &objects, true))
        .collect()
}

/// The job's outbox on the host ([`JobRecord::outbox`]), when it has one.
fn outbox_of(record: &JobRecord) -> Option<PathBuf> {
    record.outbox().filter(|outbox| outbox.is_dir())
}

/// When paddock runs as root the agent runs as an unprivileged uid: give that uid the job's
/// worktree and private git dir (except the parts that stay read-only and paddock's) and
/// the shared cache entries it uses. Ownership rather than ACLs, because gVisor checks mode
/// bits and ignores ACLs. Runs once, when the job's first container is made and before any
/// agent has run, so no agent can race the walk; nothing of the user's repository is touched.
pub(crate) fn grant_agent_access(record: &JobRecord, uid: u32) -> Result<(), RuntimeError> {
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
