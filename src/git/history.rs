//! Whose commits a job's branch carries. A job's agent can read the user's whole object
//! store (its history at create, `docs/privacy.md`), so it can merge a commit of the user's
//! that was never meant to leave this machine (an unpushed branch, or a deleted branch's
//! commit still in the store) into its own branch; a `push` of the branch would then publish
//! it. So each sync notes the commits it brought in that the user's object store did not
//! hold before the sync ([`GitRepo::existing`] over [`ScratchRepo::brought`]): the job's
//! own (no other ref of the user's repository can reach a commit its store lacked). Everything else on the branch since its base is outside history: `show` and
//! `diff` say so, and `push` refuses what of it the remote lacks.
//!
//! What the remote has is read from its remote-tracking refs (`refs/remotes/<remote>/*`), not
//! asked over the network: a stale tracking ref makes the check refuse more, never less.

use std::time::Duration;

use std::collections::HashSet;

use super::scratch::ScratchRepo;
use super::{CommitInfo, GitError, GitRepo, blocking, read_err};

/// How long one of these walks may take.
const WALK_TIMEOUT: Duration = Duration::from_secs(60);

fn lines(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

impl GitRepo {
    /// The commits of `tip` not reachable from `base` (the job's base commit, the user's own
    /// choice at create), nor, with `remote`, from what that remote has (its tracking refs),
    /// newest first.
    pub async fn commits_beyond(
        &self,
        tip: &str,
        base: &str,
        remote: Option<&str>,
    ) -> Result<Vec<String>, GitError> {
        let mut call = self.call(&["rev-list", tip, "--not", base]);
        if let Some(remote) = remote {
            call = call.arg(format!("--remotes={remote}/*"));
        }
        Ok(lines(&call.timeout(WALK_TIMEOUT).run().await?))
    }

    /// The commits beyond `base` that another local branch or tag (any but `branch`)
    /// reaches: the user's other history, as far as a job's branch could carry it.
    pub async fn reached_elsewhere(
        &self,
        branch: &str,
        base: &str,
    ) -> Result<HashSet<String>, GitError> {
        let out = self
            .call(&["rev-list"])
            .arg(format!("--exclude={branch}"))
            .arg("--branches")
            .arg("--tags")
            .arg("--not")
            .arg(base)
            .timeout(WALK_TIMEOUT)
            .run()
            .await?;
        Ok(lines(&out).into_iter().collect())
    }

    /// Which of `commits` the repository's object store (with its alternates) holds.
    pub async fn existing(&self, commits: Vec<String>) -> Result<HashSet<String>, GitError> {
        let path = self.common_dir.clone();
        blocking(move || {
            let repo = git2::Repository::open(&path).map_err(read_err(&path))?;
            let odb = repo.odb().map_err(read_err(&path))?;
            Ok(commits
                .into_iter()
                .filter(|commit| git2::Oid::from_str(commit).is_ok_and(|oid| odb.exists(oid)))
                .collect())
        })
        .await
    }

    /// `commits` as [`CommitInfo`]s (a commit the store lacks is left out).
    pub async fn commit_infos(&self, commits: Vec<String>) -> Result<Vec<CommitInfo>, GitError> {
        let path = self.common_dir.clone();
        blocking(move || {
            let repo = git2::Repository::open(&path).map_err(read_err(&path))?;
            Ok(commits
                .iter()
                .filter_map(|commit| git2::Oid::from_str(commit).ok())
                .filter_map(|oid| repo.find_commit(oid).ok())
                .map(|commit| CommitInfo {
                    sha: commit.id().to_string(),
                    summary: commit.summary().unwrap_or_default().to_string(),
                    author: commit.author().name().unwrap_or_default().to_string(),
                    time: chrono::DateTime::from_timestamp(commit.time().seconds(), 0)
                        .unwrap_or_default(),
                })
                .collect())
        })
        .await
    }

    /// The local branches and tags (but `branch`) that contain `commit`, by short name.
    pub async fn refs_containing(
        &self,
        commit: &str,
        branch: &str,
    ) -> Result<Vec<String>, GitError> {
        let out = self
            .call(&["for-each-ref", "--format=%(refname:short)", "--contains"])
            .arg(commit)
            .arg("refs/heads")
            .arg("refs/tags")
            .timeout(WALK_TIMEOUT)
            .run()
            .await?;
        Ok(lines(&out).into_iter().filter(|r| r != branch).collect())
    }
}

impl ScratchRepo {
    /// The commits `tip` reaches that none of `known` does: what a sync brings (before the
    /// user's repository gets it), newest first. A walk in this process (a sync's host
    /// half runs it on every exec that moved the branch; a git process was a few ms), bounded
    /// by [`MAX_BROUGHT`] commits rather than by a clock: past it, an error.
    pub async fn brought(&self, tip: &str, known: Vec<String>) -> Result<Vec<String>, GitError> {
        let path = self.path.clone();
        let tip = tip.to_string();
        blocking(move || {
            let repo = git2::Repository::open_bare(&path).map_err(read_err(&path))?;
            let oid = |s: &str| git2::Oid::from_str(s).map_err(read_err(&path));
            let mut walk = repo.revwalk().map_err(read_err(&path))?;
            walk.push(oid(&tip)?).map_err(read_err(&path))?;
            for commit in &known {
                walk.hide(oid(commit)?).map_err(read_err(&path))?;
            }
            let mut brought = Vec::new();
            for commit in walk {
                if brought.len() == MAX_BROUGHT {
                    return Err(GitError::Command {
                        args: format!("rev-list {tip} --not {} (in process)", known.join(" ")),
                        dir: path.clone(),
                        stderr: format!("over {MAX_BROUGHT} commits"),
                    });
                }
                brought.push(commit.map_err(read_err(&path))?.to_string());
            }
            Ok(brought)
        })
        .await
    }
}

/// The most commits one sync's walk lists (`brought`): the job's own-commits file holds
/// about 100,000 at most, and a walk of this many takes well under a second.
const MAX_BROUGHT: usize = 250_000;
