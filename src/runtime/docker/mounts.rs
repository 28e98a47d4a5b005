//! What a job container sees: the mounts (see the module docs of `docker` for why each one
//! is there) and, when paddock runs as root, handing the job's own files to the agent's uid.

use std::path::Path;

use bollard::models::{Mount, MountTypeEnum};

use super::{CONTAINER_GIT_DIR, CONTAINER_OBJECTS, CONTAINER_OUTBOX};
use crate::cache::Strategy;
use crate::job::JobRecord;
use crate::runtime::RuntimeError;
use crate::runtime::access::outbox_of;

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
