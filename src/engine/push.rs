//! `push`: a job's branch to a remote of the user's repository, with the user's own git
//! credentials on the host (see `git/push.rs` for what is read and what is refused).
//!
//! The job is synced first (its branch only, fsck'd by the host as every sync is), so what
//! leaves is the job's latest branch as the user's repository now has it, never anything
//! read from the job's own git dir. `push: on-sync` (a profile's `push`, `record.push`) runs
//! the same push after each exec whose sync moved the branch: at most one push per job is in
//! flight in a process, an exec arriving while one runs only asks it to go once more
//! (coalesced), and a failure is an event and a line on the job's record, never the exec's.

use serde_json::json;

use super::merge::require_branch;
use super::{EventKind, Paddock, Result, SyncScope};
use crate::git::push::pull_request_url;
use crate::job::{JobId, JobRecord};
use crate::wire::{PushReport, PushRequest};

impl Paddock {
    /// Pushes a job's branch (see the module docs).
    pub async fn push(&self, id: &str, request: PushRequest) -> Result<PushReport> {
        let record = self.load(id)?;
        require_branch(&record)?;
        self.sync_job(&record, SyncScope::Branch).await?;
        self.push_synced(&record, &request).await
    }

    /// The push itself, of the branch as the user's repository has it now.
    async fn push_synced(&self, record: &JobRecord, request: &PushRequest) -> Result<PushReport> {
        let repo = self.repo_of(record);
        let tip = repo
            .ref_target(&format!("refs/heads/{}", record.branch))
            .await?
            .ok_or_else(|| crate::git::GitError::NoSuchBranch {
                branch: record.branch.clone(),
                repo: repo.root.clone(),
            })?;
        let target = repo
            .push_target(&record.branch, request.remote.as_deref())
            .await?;
        if !request.include_local_history {
            self.refuse_local_history(record, &repo, &tip, &target.remote)
                .await?;
        }
        let pushed = repo
            .push_branch(&target, &tip, request.force_with_lease)
            .await?;
        let report = PushReport {
            id: record.id.clone(),
            branch: record.branch.clone(),
            pull_request_url: pull_request_url(&target.url, &target.dest),
            remote: target.remote,
            url: target.url,
            dest_ref: format!("refs/heads/{}", target.dest),
            old: pushed.old,
            new: pushed.new,
            updated: pushed.updated,
            forced: pushed.forced,
        };
        if report.updated {
            self.emit(
                EventKind::JobPushed,
                Some(&record.id),
                None,
                json!({
                    "remote": report.remote,
                    "ref": report.dest_ref,
                    "old": report.old,
                    "new": report.new,
                    "forced": report.forced,
                }),
            );
        }
        Ok(report)
    }

    /// `push: on-sync`, after an exec's sync that moved the branch (see the module docs).
    /// Returns once this process has no push of the job left to do, or at once when another
    /// caller's push is in flight (that one goes again for this sync).
    pub(super) async fn push_after_sync(&self, record: &JobRecord) {
        if !self.claim_push(&record.id) {
            return;
        }
        loop {
            let outcome = self.push_synced(record, &PushRequest::default()).await;
            let error = outcome.err().map(|e| e.to_string());
            if let Some(error) = &error {
                tracing::warn!(job = %record.id, %error, "push after sync failed");
                self.emit(
                    EventKind::PushFailed,
                    Some(&record.id),
                    None,
                    json!({ "error": error }),
                );
            }
            // Written only when it changes: most pushes work, and a record write is an fsync.
            let noted = self.load(record.id.as_str()).ok().map(|r| r.push_error);
            if noted.as_ref() != Some(&error) {
                let _ = self
                    .store()
                    .update(&record.id, |r| r.push_error.clone_from(&error));
            }
            if !self.release_push(&record.id) {
                break;
            }
        }
    }

    /// Marks a push of `id` in flight; false (with a request to go again noted) when one is.
    fn claim_push(&self, id: &JobId) -> bool {
        let mut pushes = self
            .pushes
            .lock()
            .expect("the push table is never poisoned");
        match pushes.get_mut(id) {
            Some(again) => {
                *again = true;
                false
            }
            None => {
                pushes.insert(id.clone(), false);
                true
            }
        }
    }

    /// Ends a push of `id`; true when another sync asked for one meanwhile (go again).
    fn release_push(&self, id: &JobId) -> bool {
        let mut pushes = self
            .pushes
            .lock()
            .expect("the push table is never poisoned");
        match pushes.get_mut(id) {
            Some(again) if *again => {
                *again = false;
                true
            }
            _ => {
                pushes.remove(id);
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn pushes_of_a_job_coalesce_into_one_in_flight_and_one_more() {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let env = BTreeMap::from([(
            "PADDOCK_HOME".to_string(),
            tmp.path().join("home").display().to_string(),
        )]);
        let paddock = Paddock::with_env(Box::new(env)).expect("an engine");
        let (a, b) = (
            JobId::parse("a").expect("an id"),
            JobId::parse("b").expect("an id"),
        );
        assert!(paddock.claim_push(&a), "the first push of a goes");
        assert!(paddock.claim_push(&b), "b's push is its own");
        // Three syncs while a's push runs: one more push, not three.
        assert!(!paddock.claim_push(&a));
        assert!(!paddock.claim_push(&a));
        assert!(!paddock.claim_push(&a));
        assert!(paddock.release_push(&a), "go once more");
        assert!(!paddock.release_push(&a), "then done");
        assert!(paddock.claim_push(&a), "free again");
        assert!(!paddock.release_push(&a));
        assert!(!paddock.release_push(&b));
    }
}
