//! A checkpoint's git side on the host, in paddock's wip store (whose objects all passed
//! fsck on their way in): reading what a checkpoint commit holds, checking it has the shape
//! the sandbox half promised (`sync.sh`, SNAPSHOT 2), and packing it as a bundle for a job
//! to restore (`restore.sh`). Nothing here reads a file a job can write.

use super::{GitError, GitRepo, blocking, read_err};

/// The script that restores a checkpoint inside a job's sandbox (arguments at its top).
pub const RESTORE_SCRIPT: &str = concat!(include_str!("changed.sh"), include_str!("restore.sh"));

/// What a checkpoint commit holds, read from the wip store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointFacts {
    /// HEAD when it was taken (the commit's first parent).
    pub head: String,
    /// Files that differ between HEAD and the workspace, and their bytes.
    pub files: u64,
    pub bytes: u64,
}

impl GitRepo {
    /// Reads a checkpoint commit and checks its shape: two parents, HEAD and a commit of
    /// the index whose own parent is HEAD. Anything else is refused (the sandbox made it).
    pub async fn checkpoint_facts(&self, commit: &str) -> Result<CheckpointFacts, GitError> {
        let this = self.clone();
        let commit = commit.to_string();
        blocking(move || {
            let repo = this.open_git2()?;
            let path = this.common_dir.clone();
            let bad = |what: &str| GitError::BadSync {
                path: path.clone(),
                message: format!("checkpoint `{commit}`: {what}"),
            };
            let oid = git2::Oid::from_str(&commit).map_err(|_| bad("not an object id"))?;
            let state = repo.find_commit(oid).map_err(read_err(&this.common_dir))?;
            if state.parent_count() != 2 {
                return Err(bad("not a checkpoint commit (it needs two parents)"));
            }
            let head = state.parent(0).map_err(read_err(&this.common_dir))?;
            let index = state.parent(1).map_err(read_err(&this.common_dir))?;
            if index.parent_count() != 1 || index.parent_id(0).ok() != Some(head.id()) {
                return Err(bad("its index commit does not follow HEAD"));
            }
            let (old, new) = (
                head.tree().map_err(read_err(&this.common_dir))?,
                state.tree().map_err(read_err(&this.common_dir))?,
            );
            let diff = repo
                .diff_tree_to_tree(Some(&old), Some(&new), None)
                .map_err(read_err(&this.common_dir))?;
            let odb = repo.odb().map_err(read_err(&this.common_dir))?;
            let (mut files, mut bytes) = (0u64, 0u64);
            for delta in diff.deltas() {
                files += 1;
                let blob = delta.new_file().id();
                if !blob.is_zero()
                    && let Ok((size, _)) = odb.read_header(blob)
                {
                    bytes += size as u64;
                }
            }
            Ok(CheckpointFacts {
                head: head.id().to_string(),
                files,
                bytes,
            })
        })
        .await
    }

    /// A bundle of `refname` without what `have` (commits the receiving job surely has)
    /// reach, at most `cap` bytes.
    pub async fn bundle_of(
        &self,
        refname: &str,
        have: &[String],
        cap: u64,
    ) -> Result<Vec<u8>, GitError> {
        let mut call = self
            .call(&["bundle", "create", "-q", "-", refname])
            .timeout(super::call::CHECKOUT_TIMEOUT);
        for commit in have {
            call = call.arg(format!("^{commit}"));
        }
        let (_, bytes) = call.output(&[0]).await?;
        if bytes.len() as u64 > cap {
            return Err(GitError::BadSync {
                path: self.common_dir.clone(),
                message: format!(
                    "checkpoint `{refname}` packs to {} (the most a restore takes is {})",
                    crate::units::format_size(bytes.len() as u64),
                    crate::units::format_size(cap)
                ),
            });
        }
        Ok(bytes)
    }
}
