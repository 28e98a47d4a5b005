//! Whose commits a job's branch carries. A job's agent can read the user's whole object
//! store (its history at create, `docs/privacy.md`), so it can merge a commit of the user's
//! that was never meant to leave this machine (an unpushed branch) into its own branch; a
//! `push` of the branch would then publish it. So each sync notes the commits it brought in
//! that no other ref of the user's repository reached then ([`GitRepo::commits_only_on`]:
//! the job's own), and `push` refuses the commits the remote lacks that other local refs
//! reach and the job did not make ([`GitRepo::local_history`]).
//!
//! What the remote has is read from its remote-tracking refs (`refs/remotes/<remote>/*`), not
//! asked over the network: a stale tracking ref makes the check refuse more, never less.

use std::time::Duration;

use super::{GitError, GitRepo};

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
    /// The commits `tip` reaches that no ref but `branch` (its short name) reaches, nor
    /// `before` (the branch's tip before the sync, whose commits an earlier sync noted):
    /// after a sync moved `branch` to `tip`, what the job made since.
    pub async fn commits_only_on(
        &self,
        tip: &str,
        before: Option<&str>,
        branch: &str,
    ) -> Result<Vec<String>, GitError> {
        let mut call = self.call(&["rev-list", tip, "--not"]);
        if let Some(before) = before {
            call = call.arg(before);
        }
        let out = call
            .arg(format!("--exclude=refs/heads/{branch}"))
            .arg("--all")
            .timeout(WALK_TIMEOUT)
            .run()
            .await?;
        Ok(lines(&out))
    }

    /// The commits of `tip` that `remote` lacks (as its tracking refs say) and that another
    /// local branch or tag (any but `branch`) reaches, newest first; not those `base` (the
    /// job's base commit, the user's own choice at create) reaches.
    pub async fn local_history(
        &self,
        tip: &str,
        base: &str,
        branch: &str,
        remote: &str,
    ) -> Result<Vec<String>, GitError> {
        let remotes = format!("--remotes={remote}/*");
        let lacking = self
            .call(&["rev-list", tip, "--not", base])
            .arg(&remotes)
            .timeout(WALK_TIMEOUT)
            .run()
            .await?;
        let elsewhere = self
            .call(&["rev-list"])
            .arg(format!("--exclude={branch}"))
            .arg("--branches")
            .arg("--tags")
            .arg("--not")
            .arg(&remotes)
            .timeout(WALK_TIMEOUT)
            .run()
            .await?;
        let elsewhere: std::collections::HashSet<String> = lines(&elsewhere).into_iter().collect();
        Ok(lines(&lacking)
            .into_iter()
            .filter(|commit| elsewhere.contains(commit))
            .collect())
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

    /// `commit`'s subject line (for naming it).
    pub async fn subject_of(&self, commit: &str) -> Result<String, GitError> {
        self.call(&["log", "-1", "--format=%s"])
            .arg(commit)
            .timeout(WALK_TIMEOUT)
            .run()
            .await
    }
}
