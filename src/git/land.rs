//! Landing work in the user's repository: moving a target branch to a commit `merge` made,
//! with every checkout of that branch following as `git merge` would update it, and
//! `apply`'s squash of a job's work into the user's checkout, uncommitted.
//!
//! These run git in the user's own checkouts, which no agent can write (hooks and fsmonitor
//! off through `GitCall`), under paddock's lock for the repository. A checkout with
//! uncommitted changes to tracked files is refused before anything changes; the ref moves
//! last, with its old value checked, and a failure after a checkout was updated puts that
//! checkout back.

use std::path::{Path, PathBuf};

use super::{GitCall, GitError, GitRepo};

impl GitRepo {
    /// The tracked files with uncommitted changes in `checkout` (staged or not).
    async fn dirty_files(&self, checkout: &Path) -> Result<Vec<String>, GitError> {
        let (_, out) = GitCall::new(checkout, &["status", "--porcelain=v1", "-z"])
            .arg("--untracked-files=no")
            .arg("--ignore-submodules=all")
            .output(&[0])
            .await?;
        Ok(out
            .split(|&b| b == 0)
            .filter(|entry| entry.len() > 3)
            .map(|entry| String::from_utf8_lossy(&entry[3..]).into_owned())
            .collect())
    }

    /// Updates a checkout's index and files from `from` to `to` (two-tree `read-tree -m -u`,
    /// which refuses to overwrite local changes or untracked files in the way).
    async fn move_checkout(&self, checkout: &Path, from: &str, to: &str) -> Result<(), GitError> {
        GitCall::new(checkout, &["read-tree", "-m", "-u", from, to])
            .timeout(super::CHECKOUT_TIMEOUT)
            .run()
            .await
            .map(drop)
    }

    /// Moves `refs/heads/<branch>` from `old` to `new`, each checkout of the branch (the
    /// main one or a linked worktree) following: refused, with nothing changed, when one has
    /// uncommitted changes to tracked files.
    pub async fn land(&self, branch: &str, old: &str, new: &str) -> Result<(), GitError> {
        let _lock = self.lock().await?;
        let checkouts = self.checkouts_of(branch).await?;
        for checkout in &checkouts {
            let dirty = self.dirty_files(checkout).await?;
            if !dirty.is_empty() {
                return Err(GitError::DirtyCheckout {
                    branch: branch.to_string(),
                    path: checkout.clone(),
                    files: dirty,
                });
            }
        }
        let mut moved: Vec<&PathBuf> = Vec::new();
        let mut outcome = Ok(());
        for checkout in &checkouts {
            match self.move_checkout(checkout, old, new).await {
                Ok(()) => moved.push(checkout),
                Err(error) => {
                    outcome = Err(error);
                    break;
                }
            }
        }
        if outcome.is_ok() {
            let refname = format!("refs/heads/{branch}");
            outcome = self
                .call(&["update-ref", "-m", "paddock: merge", &refname, new, old])
                .run()
                .await
                .map(drop);
        }
        if outcome.is_err() {
            for checkout in moved {
                if let Err(error) = self.move_checkout(checkout, new, old).await {
                    tracing::warn!(checkout = %checkout.display(), %error, "could not put a checkout back");
                }
            }
        }
        outcome
    }

    /// Applies `commit`'s changes to the main checkout without committing (`git merge
    /// --squash --autostash`): staged, HEAD unchanged. `commit` must be in the repository.
    pub async fn squash_into_checkout(&self, commit: &str) -> Result<(), GitError> {
        let _lock = self.lock().await?;
        let Some(checkout) = self.checkout_dir().await? else {
            return Err(GitError::NoCheckout {
                repo: self.root.clone(),
            });
        };
        GitCall::new(&checkout, &["-c", "merge.ff=true", "merge"])
            .arg("--squash")
            .arg("--autostash")
            .arg("--no-progress")
            .arg("--quiet")
            .arg(commit)
            .timeout(super::CHECKOUT_TIMEOUT)
            .run()
            .await
            .map(drop)
    }

    /// The main checkout's directory (`None` for a bare repository).
    pub async fn checkout_dir(&self) -> Result<Option<PathBuf>, GitError> {
        let this = self.clone();
        // Without git2's trailing slash.
        super::blocking(move || {
            Ok(this
                .open_git2()?
                .workdir()
                .map(|w| w.components().collect()))
        })
        .await
    }

    /// Deletes one of paddock's own refs (`refs/paddock/...`); succeeds when it is gone.
    pub async fn delete_paddock_ref(&self, refname: &str) -> Result<(), GitError> {
        debug_assert!(refname.starts_with("refs/paddock/"));
        let _lock = self.lock().await?;
        if self.ref_target(refname).await?.is_none() {
            return Ok(());
        }
        self.call(&["update-ref", "-d", refname])
            .run()
            .await
            .map(drop)
    }
}
