//! Whose commits a job's branch carries (see `git::history`): each sync notes the job's own
//! commits in `work/<id>/own-commits`; the rest of the branch since its base is *outside
//! history*, which `show` and `diff` report and `push` refuses where the remote lacks it.
//!
//! Invariant: the file only grows, and anything that goes wrong (a failed walk, the file at
//! its cap) leaves a commit un-noted, so it counts as outside: a push then asks for more
//! (`--include-local-history`), never less. A job with no file at all (made before the file
//! existed, or whose every note failed) counts as outside only what the user's other
//! branches and tags reach, as before.

use std::collections::HashSet;

use super::{Paddock, Result};
use crate::git::GitRepo;
use crate::git::scratch::ScratchRepo;
use crate::job::{JobId, JobRecord};
use crate::wire::OutsideHistory;

/// The most that file holds (about 100,000 commits): an agent's commits are its to make
/// without end, a file in the state root is not.
const MAX_ORIGIN_FILE: u64 = 4 << 20;

/// How many outside commits a report names (the count is of all).
const NAMED: usize = 3;

fn origin_file(home: &crate::store::PaddockHome, id: &JobId) -> std::path::PathBuf {
    home.job_dir(id).join("own-commits")
}

impl Paddock {
    /// The job's own commits among those a sync is bringing to `tip` (after `current`, the
    /// branch's tip before it): the commits `tip` reaches that neither the job's base nor
    /// `current` reaches, less those the user's object store already held (a deleted
    /// branch's commit, say, which the agent could read and merge). Read before the sync
    /// hands the store anything; `None` when it cannot be told (then nothing is noted, and
    /// the commits count as outside: a push asks for more, never less).
    ///
    /// Why no walk over the user's other refs (as `rev-list --all` would make): every ref
    /// of the user's repository reaches only commits its store holds, and a commit the store
    /// lacked before this sync is none of those. So "held before" covers "reached by another
    /// ref", and the sync costs one walk, in this process, instead of two git processes.
    pub(super) async fn own_commits_of_sync(
        &self,
        record: &JobRecord,
        scratch: &ScratchRepo,
        tip: &str,
        current: Option<&str>,
    ) -> Option<Vec<String>> {
        let mut known = vec![record.base_commit.clone()];
        known.extend(current.map(str::to_string));
        let brought = match scratch.brought(tip, known).await {
            Ok(brought) => brought,
            Err(error) => {
                tracing::warn!(job = %record.id, %error, "cannot tell which commits the sync brings");
                return None;
            }
        };
        match self.repo_of(record).existing(brought.clone()).await {
            Ok(held) => Some(
                brought
                    .into_iter()
                    .filter(|commit| !held.contains(commit))
                    .collect(),
            ),
            Err(error) => {
                tracing::warn!(job = %record.id, %error, "cannot tell which commits the store held");
                None
            }
        }
    }

    /// Notes `own` (from [`own_commits_of_sync`](Self::own_commits_of_sync), after the
    /// sync moved the branch): the job's own commits, which `push` publishes without asking.
    /// `None` (they could not be told) notes none, but still makes the file, so what this
    /// sync brought counts as outside rather than falling back to the weaker reading of a
    /// job with no file.
    pub(super) fn note_own_commits(&self, record: &JobRecord, own: Option<Vec<String>>) {
        let own = own.unwrap_or_default();
        let path = origin_file(&self.home, &record.id);
        if std::fs::metadata(&path).is_ok_and(|m| m.len() >= MAX_ORIGIN_FILE) {
            tracing::warn!(file = %path.display(), "the job's own commits are no longer noted: the file is full");
            return;
        }
        // Made even when empty: its presence says the job's commits are noted.
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| {
                use std::io::Write;
                if own.is_empty() {
                    return Ok(());
                }
                file.write_all(format!("{}\n", own.join("\n")).as_bytes())
            });
        if let Err(error) = appended {
            tracing::warn!(file = %path.display(), %error, "cannot note the job's own commits");
        }
    }

    /// The commits of `tip` beyond the job's base (and, with `remote`, that the remote
    /// lacks) that the job did not make; `None` when there are none.
    pub(super) async fn outside_history(
        &self,
        record: &JobRecord,
        repo: &GitRepo,
        tip: &str,
        remote: Option<&str>,
    ) -> Result<Option<OutsideHistory>> {
        let noted = std::fs::read_to_string(origin_file(&self.home, &record.id)).ok();
        let own: HashSet<&str> = noted.as_deref().unwrap_or_default().lines().collect();
        let mut outside: Vec<String> = repo
            .commits_beyond(tip, &record.base_commit, remote)
            .await?
            .into_iter()
            .filter(|commit| !own.contains(commit.as_str()))
            .collect();
        if noted.is_none() && !outside.is_empty() {
            let elsewhere = repo
                .reached_elsewhere(&record.branch, &record.base_commit)
                .await?;
            outside.retain(|commit| elsewhere.contains(commit));
        }
        if outside.is_empty() {
            return Ok(None);
        }
        let mut refs = std::collections::BTreeSet::new();
        for commit in outside.iter().take(NAMED) {
            refs.extend(repo.refs_containing(commit, &record.branch).await?);
        }
        let named = outside.iter().take(NAMED).cloned().collect();
        Ok(Some(OutsideHistory {
            count: outside.len(),
            refs: refs.into_iter().collect(),
            commits: repo.commit_infos(named).await?,
        }))
    }

    /// Refuses a push whose branch carries commits `remote` lacks that the job did not make.
    pub(super) async fn refuse_local_history(
        &self,
        record: &JobRecord,
        repo: &GitRepo,
        tip: &str,
        remote: &str,
    ) -> Result<()> {
        let Some(outside) = self
            .outside_history(record, repo, tip, Some(remote))
            .await?
        else {
            return Ok(());
        };
        Err(crate::error::Error::LocalHistory {
            id: record.id.clone(),
            count: outside.count,
            refs: if outside.refs.is_empty() {
                "no branch or tag of yours; the object store".into()
            } else {
                outside.refs.join(", ")
            },
            examples: outside.described(),
        })
    }
}
