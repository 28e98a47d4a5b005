//! Jobs made before private git dirs (record schema 1): their worktree is a linked worktree
//! of the user's repository. Kept only so they can be removed without losing work (and their
//! leftover worktree entries pruned); nothing new is made this way.

use std::path::{Path, PathBuf};

use super::{CHECKOUT_TIMEOUT, GitCall, GitError, GitRepo};

/// A job made by paddock before 0.2, whose worktree was a linked worktree of the user's
/// repository (admin dir in `<common>/worktrees/`). Kept only so such jobs can be removed
/// without losing work.
#[derive(Debug, Clone)]
pub struct JobWorktree {
    pub path: PathBuf,
    pub git_dir: PathBuf,
}

/// Identity for commits paddock itself writes (snapshots), so they work without a user config.
const PADDOCK_IDENTITY: [(&str, &str); 4] = [
    ("GIT_AUTHOR_NAME", "paddock"),
    ("GIT_AUTHOR_EMAIL", "paddock@localhost"),
    ("GIT_COMMITTER_NAME", "paddock"),
    ("GIT_COMMITTER_EMAIL", "paddock@localhost"),
];

impl GitRepo {
    /// `git worktree list --porcelain` as `(path, locked)` pairs.
    async fn worktree_entries(&self) -> Result<Vec<(PathBuf, bool)>, GitError> {
        let listing = self
            .call(&["worktree", "list", "--porcelain"])
            .run()
            .await?;
        Ok(listing
            .split("\n\n")
            .filter_map(|block| {
                let path = block.lines().find_map(|l| l.strip_prefix("worktree "))?;
                let locked = block.lines().any(|l| l.starts_with("locked"));
                Some((PathBuf::from(path), locked))
            })
            .collect())
    }

    /// Registered worktrees under `root` whose directory is gone.
    pub async fn missing_worktrees_under(&self, root: &Path) -> Result<Vec<PathBuf>, GitError> {
        Ok(self
            .worktree_entries()
            .await?
            .into_iter()
            .filter(|(path, _)| path.starts_with(root) && !path.exists())
            .map(|(path, _)| path)
            .collect())
    }

    /// Unlocks and prunes admin entries whose worktree directory is gone, including entries a
    /// killed `git worktree add` left locked ("initializing"). Only entries whose directory is
    /// under `root` are unlocked.
    pub async fn prune_missing_under(&self, root: &Path) -> Result<Vec<PathBuf>, GitError> {
        let _lock = self.lock().await?;
        let mut pruned = Vec::new();
        for (path, locked) in self.worktree_entries().await? {
            if !path.starts_with(root) || path.exists() {
                continue;
            }
            if locked {
                self.call(&["worktree", "unlock"]).arg(&path).run().await?;
            }
            pruned.push(path);
        }
        if !pruned.is_empty() {
            self.call(&["worktree", "prune"]).run().await?;
        }
        Ok(pruned)
    }

    /// Removes a worktree and its admin dir. Succeeds when it is already gone.
    pub async fn remove_worktree(&self, path: &Path) -> Result<(), GitError> {
        let _lock = self.lock().await?;
        if path.exists() {
            // When this fails (not, or no longer, a registered worktree) the caller removes
            // the directory itself after its ownership check.
            self.call(&["worktree", "remove", "--force", "--force"])
                .arg(path)
                .timeout(CHECKOUT_TIMEOUT)
                .run()
                .await?;
        }
        self.call(&["worktree", "prune"]).run().await?;
        Ok(())
    }

    /// Drops admin entries of worktrees whose directory is gone.
    pub async fn prune_worktrees(&self) -> Result<(), GitError> {
        let _lock = self.lock().await?;
        self.call(&["worktree", "prune"]).run().await.map(drop)
    }

    /// Legacy jobs only (see [`JobWorktree`]): commits any uncommitted work (tracked and
    /// untracked, not ignored) of `worktree` to
    /// `refname`, as a commit whose parent is the worktree's HEAD. The worktree's index and
    /// branch are not touched. Returns the snapshot commit, or `None` when nothing was
    /// uncommitted.
    pub async fn snapshot(
        &self,
        worktree: &JobWorktree,
        refname: &str,
        message: &str,
    ) -> Result<Option<String>, GitError> {
        let tmp_index = std::env::temp_dir().join(format!(
            "paddock-snapshot-{}.index",
            crate::job::random_hex(12)
        ));
        // Starting from a copy of the real index reuses its stat cache (fast on big trees);
        // without one, read HEAD's tree into the temporary index.
        let seeded = std::fs::copy(worktree.git_dir.join("index"), &tmp_index).is_ok();
        let result = async {
            let call = |args: &[&str]| {
                GitCall::new(&worktree.path, args)
                    .git_dir(&worktree.git_dir)
                    .work_tree(&worktree.path)
                    .env("GIT_INDEX_FILE", &tmp_index)
                    .timeout(CHECKOUT_TIMEOUT)
            };
            if !seeded {
                call(&["read-tree", "HEAD"]).run().await?;
            }
            call(&["add", "-A", "--", "."]).run().await?;
            let tree = call(&["write-tree"]).run().await?;
            let head_tree = call(&["rev-parse", "HEAD^{tree}"]).run().await?;
            if tree == head_tree {
                return Ok(None);
            }
            let mut commit_tree = call(&["commit-tree", &tree, "-p", "HEAD", "-m", message]);
            for (key, value) in PADDOCK_IDENTITY {
                commit_tree = commit_tree.env(key, value);
            }
            let commit = commit_tree.run().await?;
            let _lock = self.lock().await?;
            self.call(&["update-ref", refname, &commit]).run().await?;
            Ok(Some(commit))
        }
        .await;
        let _ = std::fs::remove_file(&tmp_index);
        result
    }
}
