//! The git adapter: the only module that runs git or touches git2.
//!
//! Mutations of the user's repository (creating the job's branch, publishing a sync,
//! deleting a branch) go through the git CLI; reads go through git2 inside
//! `spawn_blocking`. A job never shares git metadata with the user's repository: it has a
//! private git dir ([`jobdir`]) that borrows the user's objects read-only, and its work comes
//! back only through the sync protocol ([`sync`]).
//!
//! Invariants:
//! - Host-side git never runs anything the agent could have written: every command runs with
//!   hooks and fsmonitor disabled, and no host-side git process uses a job's git dir or
//!   worktree as its repository once an agent has run there.
//! - paddock writes nothing into the user's repository but the job's branch and its own
//!   `refs/paddock/*` (plus, on the user's explicit `merge` or `apply`, the target branch,
//!   its checkouts and the main checkout: `land`; on `push`, git's own remote-tracking
//!   ref of the branch pushed), and changes no owner or mode there.
//!   Read-only merges write their objects into a quarantine (`merge`). Its lock lives
//!   under `$PADDOCK_HOME/locks`, not in the repository.
//! - Metadata mutations on one repository hold that lock, so parallel `paddock` processes
//!   never race on `packed-refs.lock`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::store::FileLock;

mod adopt;
mod call;
pub mod checkpoint;
mod history;
pub mod jobdir;
mod land;
mod legacy;
pub mod marks;
pub mod merge;
mod merge_parse;
pub mod objview;
pub mod pristine;
pub mod push;
mod reads;
pub mod remote;
pub mod scratch;
mod snapshot;
pub mod sync;
#[cfg(test)]
mod test_git;

use call::{CHECKOUT_TIMEOUT, GitCall};
pub use legacy::JobWorktree;
use reads::{commits_between, file_changes, render_diff};

/// How long to wait for another paddock process to release a repository's lock.
const LOCK_WAIT: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("`{path}` is not a git repository")]
    NotARepo { path: PathBuf },
    #[error("unknown revision `{rev}` in `{repo}`")]
    UnknownRevision { rev: String, repo: PathBuf },
    #[error("invalid branch name `{name}`")]
    InvalidBranch { name: String },
    #[error("branch `{branch}` already exists in `{repo}`")]
    BranchExists { branch: String, repo: PathBuf },
    #[error("branch `{branch}` does not exist in `{repo}`")]
    NoSuchBranch { branch: String, repo: PathBuf },
    #[error("failed to run git: {source}")]
    Spawn {
        #[source]
        source: std::io::Error,
    },
    #[error("`git {args}` failed in `{dir}`: {stderr}")]
    Command {
        args: String,
        dir: PathBuf,
        stderr: String,
    },
    #[error("`git {args}` timed out after {after:?} in `{dir}`")]
    Timeout {
        args: String,
        dir: PathBuf,
        after: Duration,
    },
    #[error("failed to lock repository `{repo}`: {message}")]
    Lock { repo: PathBuf, message: String },
    #[error("reading the base commit: {what}")]
    Snapshot { what: String },
    #[error("failed to read `{path}`: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: git2::Error,
    },
    #[error("refused the job's sync stream `{path}`: {message}")]
    BadSync { path: PathBuf, message: String },
    #[error("git {found} is too old: `git merge-tree --write-tree` needs git {needed} or newer")]
    TooOld { found: String, needed: String },
    #[error(
        "refusing to update branch `{branch}`: its checkout `{path}` has uncommitted changes ({})",
        files.join(", ")
    )]
    DirtyCheckout {
        branch: String,
        path: PathBuf,
        files: Vec<String>,
    },
    #[error(
        "checkout `{path}` of `{branch}` has files the merge would overwrite (untracked or ignored, or a link on the way): {}",
        files.join(", ")
    )]
    InTheWay {
        branch: String,
        path: PathBuf,
        files: Vec<String>,
    },
    #[error("checkout `{path}` of `{branch}` is a job's worktree (paddock never runs git there)")]
    JobCheckout { branch: String, path: PathBuf },
    #[error("`{repo}` is a bare repository: there is no working tree to apply to")]
    NoCheckout { repo: PathBuf },
    #[error(
        "`{remote}` is not a remote of `{repo}` (paddock pushes only to remotes the repository's config names)"
    )]
    NoRemote { remote: String, repo: PathBuf },
    #[error(
        "`{dest}` on `{remote}` is at {remote_tip}, which the job's branch does not contain: pushing would rewrite it"
    )]
    NotFastForward {
        remote: String,
        dest: String,
        remote_tip: String,
    },
    #[error("git read task failed: {0}")]
    Join(String),
    #[error("failed to write `{path}`: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A repository that jobs are created from.
#[derive(Debug, Clone)]
pub struct GitRepo {
    /// The main checkout's top level, or the repository itself when it is bare.
    pub root: PathBuf,
    /// Where refs and objects live.
    pub common_dir: PathBuf,
    /// paddock's lock for this repository (under `$PADDOCK_HOME/locks`).
    pub lock_path: PathBuf,
}

/// One commit, for `log` and `show`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct CommitInfo {
    pub sha: String,
    pub summary: String,
    pub author: String,
    pub time: chrono::DateTime<chrono::Utc>,
}

/// One changed path and how it changed (`added`, `modified`, `deleted`, `renamed`, `untracked`, ...).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct FileChange {
    pub path: String,
    pub status: String,
}

/// What a job changed relative to its base.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ChangeSummary {
    pub branch_tip: Option<String>,
    pub commits_ahead: usize,
    /// Files changed by the commits on the branch since the base.
    pub committed: Vec<FileChange>,
    /// Files changed in the worktree and not committed (staged, unstaged or untracked).
    pub uncommitted: Vec<FileChange>,
    pub insertions: usize,
    pub deletions: usize,
}

/// Runs git2 work off the async runtime.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, GitError> + Send + 'static,
) -> Result<T, GitError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| GitError::Join(e.to_string()))?
}

fn read_err(path: &Path) -> impl FnOnce(git2::Error) -> GitError + '_ {
    move |source| GitError::Read {
        path: path.to_path_buf(),
        source,
    }
}

impl GitRepo {
    /// Finds the repository containing `path`; its lock lives in `locks_dir`.
    pub async fn open(path: &Path, locks_dir: &Path) -> Result<GitRepo, GitError> {
        let path = path.to_path_buf();
        let locks_dir = locks_dir.to_path_buf();
        blocking(move || {
            let not_a_repo = || GitError::NotARepo { path: path.clone() };
            if !path.exists() {
                return Err(not_a_repo());
            }
            let repo = git2::Repository::discover(&path).map_err(|_| not_a_repo())?;
            let common_dir = std::fs::canonicalize(repo.commondir()).map_err(|_| not_a_repo())?;
            let root = match repo.workdir() {
                // A linked worktree given as --repo: jobs still hang off the main repository.
                Some(_) if repo.is_worktree() => common_dir
                    .parent()
                    .map_or_else(|| common_dir.clone(), Path::to_path_buf),
                Some(workdir) => std::fs::canonicalize(workdir).map_err(|_| not_a_repo())?,
                None => common_dir.clone(),
            };
            Ok(GitRepo::known(root, common_dir, &locks_dir))
        })
        .await
    }

    /// A repository paddock already resolved (from a job record or its registry).
    pub fn known(root: PathBuf, common_dir: PathBuf, locks_dir: &Path) -> GitRepo {
        let mut repo = GitRepo {
            root,
            common_dir,
            lock_path: PathBuf::new(),
        };
        repo.lock_path = locks_dir.join(format!("{}.lock", repo.key()));
        repo
    }

    /// A stable, readable key for this repository: `<dir name>-<hash of the common dir>`.
    pub fn key(&self) -> String {
        let name: String = self
            .root
            .file_name()
            .map_or_else(|| "repo".into(), |n| n.to_string_lossy().into_owned())
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .take(40)
            .collect();
        let digest = Sha256::digest(self.common_dir.as_os_str().as_encoded_bytes());
        let hash = crate::ids::hex(&digest[..4]);
        format!("{name}-{hash}")
    }

    fn open_git2(&self) -> Result<git2::Repository, GitError> {
        git2::Repository::open(&self.common_dir).map_err(read_err(&self.common_dir))
    }

    /// Resolves a revision to a full commit SHA.
    pub async fn resolve_commit(&self, rev: &str) -> Result<String, GitError> {
        let this = self.clone();
        let rev = rev.to_string();
        blocking(move || {
            let repo = this.open_git2()?;
            let unknown = || GitError::UnknownRevision {
                rev: rev.clone(),
                repo: this.root.clone(),
            };
            let object = repo.revparse_single(&rev).map_err(|_| unknown())?;
            let commit = object.peel_to_commit().map_err(|_| unknown())?;
            Ok(commit.id().to_string())
        })
        .await
    }

    /// Whether `refs/heads/<branch>` exists.
    pub async fn branch_exists(&self, branch: &str) -> Result<bool, GitError> {
        let this = self.clone();
        let refname = format!("refs/heads/{branch}");
        blocking(move || {
            let repo = this.open_git2()?;
            Ok(repo.find_reference(&refname).is_ok())
        })
        .await
    }

    /// The commit a ref points at, if the ref exists.
    pub async fn ref_target(&self, refname: &str) -> Result<Option<String>, GitError> {
        let this = self.clone();
        let refname = refname.to_string();
        blocking(move || {
            let repo = this.open_git2()?;
            Ok(repo
                .find_reference(&refname)
                .ok()
                .and_then(|r| r.peel_to_commit().ok())
                .map(|c| c.id().to_string()))
        })
        .await
    }

    /// Takes this repository's metadata lock (blocking wait, bounded).
    async fn lock(&self) -> Result<FileLock, GitError> {
        let path = self.lock_path.clone();
        let repo = self.root.clone();
        blocking(move || {
            FileLock::acquire(&path, LOCK_WAIT).map_err(|e| GitError::Lock {
                repo,
                message: e.to_string(),
            })
        })
        .await
    }

    fn call<'a>(&'a self, args: &[&str]) -> GitCall<'a> {
        GitCall::new(&self.root, args).git_dir(&self.common_dir)
    }

    /// Creates `refs/heads/<branch>` at `commit`; fails when the branch exists (git checks
    /// that atomically, so of two creators one wins).
    pub async fn create_branch(&self, branch: &str, commit: &str) -> Result<(), GitError> {
        let _lock = self.lock().await?;
        let refname = format!("refs/heads/{branch}");
        let result = self
            .call(&["update-ref", "-m", "paddock: job branch", &refname, commit])
            .arg(self.null_oid().await?)
            .run()
            .await;
        match result {
            Err(GitError::Command { .. }) if self.branch_exists(branch).await? => {
                Err(GitError::BranchExists {
                    branch: branch.to_string(),
                    repo: self.root.clone(),
                })
            }
            other => other.map(drop),
        }
    }

    /// The all-zero object id of this repository's hash (git's "must not exist").
    async fn null_oid(&self) -> Result<String, GitError> {
        let len = match self.object_format().await?.as_deref() {
            Some("sha256") => 64,
            _ => 40,
        };
        Ok("0".repeat(len))
    }

    /// `extensions.objectFormat` when the repository sets it (`sha256`).
    pub async fn object_format(&self) -> Result<Option<String>, GitError> {
        let this = self.clone();
        blocking(move || {
            let repo = this.open_git2()?;
            let config = repo.config().map_err(read_err(&this.common_dir))?;
            Ok(config
                .get_string("extensions.objectformat")
                .ok()
                .filter(|f| f != "sha1"))
        })
        .await
    }

    /// Fetches `mappings` (`(scratch ref, ref here)`) from a job's scratch repository into
    /// this repository with fsck, forcing each update. Only the refs named are written.
    pub async fn publish(
        &self,
        scratch: &Path,
        mappings: &[(&str, String)],
    ) -> Result<(), GitError> {
        if mappings.is_empty() {
            return Ok(());
        }
        let _lock = self.lock().await?;
        let mut fetch = self
            .call(&["-c", "transfer.fsckObjects=true", "fetch"])
            .arg("--no-tags")
            .arg("--no-write-fetch-head")
            .arg("--no-auto-maintenance")
            .arg("--quiet")
            .arg(scratch)
            .timeout(CHECKOUT_TIMEOUT);
        for (from, to) in mappings {
            fetch = fetch.arg(format!("+{from}:{to}"));
        }
        fetch.run().await.map(drop)
    }

    /// Deletes a branch; succeeds when it does not exist.
    pub async fn delete_branch(&self, branch: &str) -> Result<(), GitError> {
        let _lock = self.lock().await?;
        if !self.branch_exists(branch).await? {
            return Ok(());
        }
        // update-ref rather than `branch -D`, which may rewrite the repository's config.
        self.call(&["update-ref", "-d", &format!("refs/heads/{branch}")])
            .run()
            .await
            .map(drop)
    }

    /// Number of commits reachable from `tip` and not from `base`.
    pub async fn count_ahead(&self, base: &str, tip: &str) -> Result<usize, GitError> {
        let this = self.clone();
        let (base, tip) = (base.to_string(), tip.to_string());
        blocking(move || {
            let repo = this.open_git2()?;
            commits_between(&repo, &base, &tip, &this.common_dir).map(|c| c.len())
        })
        .await
    }
}

/// The repository's object store and every store it borrows from through
/// `objects/info/alternates` (recursively, as git reads them): what a job's sandbox must
/// see, read-only, for its git to find every object.
pub fn object_dirs(common_dir: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let mut pending = vec![common_dir.join("objects")];
    while let Some(dir) = pending.pop() {
        let Ok(dir) = std::fs::canonicalize(&dir) else {
            continue;
        };
        if dirs.contains(&dir) || dirs.len() > 8 {
            continue;
        }
        let listed = std::fs::read_to_string(dir.join("info/alternates")).unwrap_or_default();
        for line in listed.lines().map(str::trim) {
            if !line.is_empty() && !line.starts_with('#') {
                pending.push(dir.join(line));
            }
        }
        dirs.push(dir);
    }
    dirs
}

/// Whether `name` is a valid branch name by git's ref-name rules.
pub fn is_valid_branch_name(name: &str) -> bool {
    !name.starts_with('-')
        && name != "HEAD"
        && git2::Reference::is_valid_name(&format!("refs/heads/{name}"))
}
