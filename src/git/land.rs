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

    /// The paths `to` adds to `from`'s tree.
    async fn added_paths(&self, from: &str, to: &str) -> Result<Vec<String>, GitError> {
        let (_, out) = self
            .call(&["diff-tree", "-r", "-z", "--name-only", "--no-renames"])
            .arg("--diff-filter=A")
            .arg(from)
            .arg(to)
            .output(&[0])
            .await?;
        Ok(out
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect())
    }

    /// Moves `refs/heads/<branch>` from `old` to `new`, each checkout of the branch (the
    /// main one or a linked worktree) following: refused, with nothing changed, when one has
    /// uncommitted changes to tracked files, or an untracked or ignored file (a `.env`)
    /// where the merge adds one, or a link or file on the way to one (git would overwrite
    /// ignored files), or is under `jobs_root` (a pre-0.2 job's worktree, whose `.git` the
    /// agent could write).
    pub async fn land(
        &self,
        branch: &str,
        old: &str,
        new: &str,
        jobs_root: &Path,
    ) -> Result<(), GitError> {
        let _lock = self.lock().await?;
        let checkouts = self.checkouts_of(branch).await?;
        let added = if checkouts.is_empty() {
            Vec::new()
        } else {
            self.added_paths(old, new).await?
        };
        for checkout in &checkouts {
            if checkout.starts_with(jobs_root) {
                return Err(GitError::JobCheckout {
                    branch: branch.to_string(),
                    path: checkout.clone(),
                });
            }
            let dirty = self.dirty_files(checkout).await?;
            if !dirty.is_empty() {
                return Err(GitError::DirtyCheckout {
                    branch: branch.to_string(),
                    path: checkout.clone(),
                    files: dirty,
                });
            }
            let in_the_way: Vec<String> = added
                .iter()
                .filter(|path| in_the_way(checkout, path))
                .cloned()
                .collect();
            if !in_the_way.is_empty() {
                return Err(GitError::InTheWay {
                    branch: branch.to_string(),
                    path: checkout.clone(),
                    files: in_the_way,
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
    /// --squash`): staged, HEAD unchanged. `commit` must be in the repository. Git refuses,
    /// changing nothing, when the user's uncommitted changes are in the way (no autostash:
    /// their work is never moved aside), and paddock has it overwrite no ignored file.
    pub async fn squash_into_checkout(&self, commit: &str) -> Result<(), GitError> {
        let _lock = self.lock().await?;
        let Some(checkout) = self.checkout_dir().await? else {
            return Err(GitError::NoCheckout {
                repo: self.root.clone(),
            });
        };
        GitCall::new(&checkout, &["-c", "merge.ff=true", "merge"])
            .arg("--squash")
            .arg("--no-overwrite-ignore")
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

/// Whether adding `path` in `checkout` would write over something there: the path exists
/// (an untracked or ignored file, or a link), or one of its parents is not a plain
/// directory (a file or a link, which would lead the write elsewhere).
fn in_the_way(checkout: &Path, path: &str) -> bool {
    let mut at = checkout.to_path_buf();
    let parts: Vec<&str> = path.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Err(_) => return false,
            Ok(meta) if i + 1 < parts.len() && meta.file_type().is_dir() => {}
            Ok(_) => return true,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::in_the_way;

    #[test]
    fn added_paths_are_in_the_way_of_files_and_links_but_not_of_directories() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join(".env"), "mine").unwrap();
        std::fs::write(root.join("file"), "x").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("link")).unwrap();
        assert!(!in_the_way(root, "src/new.rs"));
        assert!(!in_the_way(root, "new/deep/file"));
        assert!(in_the_way(root, ".env"));
        assert!(in_the_way(root, "file/below"));
        assert!(in_the_way(root, "link/passwd"));
        assert!(in_the_way(root, "link"));
    }
}
