//! The git half of a pristine checkout (`checkout: overlay`): the files of one commit and
//! the index that describes them, made once per (repository, commit, owner) and shared,
//! read-only, as the lower layer of every overlay job of that commit.
//!
//! It is made exactly as a job's checkout is (`git read-tree --reset -u` with a throwaway
//! private git dir borrowing the user's objects), before any agent exists, so host-side git
//! runs only on paddock's own files here. The index's stat data is what makes an overlay
//! job's first `git status` cheap: the overlay shows the lower files with their own size and
//! mtime, and the job's git dir compares only those (`core.checkStat=minimal`,
//! `core.trustctime=false`), so no file is read again, provided no entry is "racily clean"
//! (an mtime in the index's own second). So the index is given an mtime in a later second
//! than every file it describes.

use std::path::Path;
use std::time::{Duration, SystemTime};

use super::jobdir::{JobGitDir, io};
use super::{GitError, GitRepo};

/// Writes `dir/tree` (the files of `commit`, owned by `owner` when given) and `dir/index`;
/// `dir` must not exist. The caller renames `dir` into place (so a pristine checkout is
/// whole or absent) and holds the lock that makes it once.
pub async fn make(
    repo: &GitRepo,
    commit: &str,
    dir: &Path,
    owner: Option<(u32, u32)>,
) -> Result<(), GitError> {
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let git = JobGitDir::create(&dir.join("git"), repo, "paddock/pristine", commit).await?;
    let tree = dir.join("tree");
    git.check_out_files(&tree, owner).await?;
    // Every file was written before now; an index stamped in a later second makes none of
    // them racily clean.
    let now = SystemTime::now();
    let since_second = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| Duration::from_nanos(u64::from(d.subsec_nanos())))
        .unwrap_or_default();
    tokio::time::sleep(Duration::from_secs(1) - since_second + Duration::from_millis(5)).await;
    let index = dir.join("index");
    std::fs::rename(git.path.join("index"), &index).map_err(io(&index))?;
    std::fs::File::options()
        .write(true)
        .open(&index)
        .and_then(|file| file.set_modified(SystemTime::now()))
        .map_err(io(&index))?;
    // Paddock's and read-only: jobs of another uid share it through hard links.
    let (uid, gid) = crate::sys::effective_ids();
    std::os::unix::fs::chown(&index, Some(uid), Some(gid)).map_err(io(&index))?;
    std::fs::set_permissions(
        &index,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o444),
    )
    .map_err(io(&index))?;
    std::fs::remove_dir_all(&git.path).map_err(io(&git.path))
}
