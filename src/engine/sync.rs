//! The sync operation: brings a job's branch, and when asked a snapshot of its uncommitted
//! work, out of its sandbox into the user's repository (see `git::sync` for the protocol).
//!
//! It runs after every exec and before `show`, `diff`, `log`, `rm` and each sweep removal.
//! A sync that fails leaves the user's refs where they were, records why on the job
//! (`sync_error`, shown by `show`) and emits `job.sync_failed`; the next good one clears it.
//! A history rewrite of the job's own branch inside (amend, rebase) is published as a forced
//! update of that branch only, and emits `job.branch_rewritten`.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::Utc;

use super::{Error, Paddock, Result};
use crate::config::KillPolicy;
use crate::git::GitRepo;
use crate::git::sync::{
    SCRATCH_BRANCH, SCRATCH_STATE, SYNC_SCRIPT, ScratchRepo, SyncCapture, WorkState,
};
use crate::job::JobRecord;
use crate::runtime::{self, ExecRequest};
use crate::store::FileLock;

/// How long the sandbox half of a sync may take (a snapshot hashes every changed file).
const SYNC_TIMEOUT: Duration = Duration::from_secs(600);
/// How long to wait for another sync of the same job.
const SYNC_LOCK_WAIT: Duration = Duration::from_secs(660);

/// What a sync brings out of the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncScope {
    /// The job's branch only (after an exec).
    Branch,
    /// The branch and a snapshot of uncommitted work (for reads and removal).
    BranchAndWork,
}

/// What a sync found.
#[derive(Debug, Clone)]
pub struct Synced {
    /// The branch's commit inside, if the branch exists there.
    pub tip: Option<String>,
    /// The uncommitted work (a snapshot commit in the scratch repository).
    pub work: WorkState,
    /// Paths that were untracked inside.
    pub untracked: BTreeSet<String>,
    /// The branch was rewritten (not a fast-forward of what the user's repository had).
    pub forced: bool,
}

impl Paddock {
    /// The scratch repository that receives a job's syncs.
    pub(crate) fn scratch_of(&self, record: &JobRecord) -> ScratchRepo {
        ScratchRepo {
            path: self.home().job_scratch_repo(&record.id),
        }
    }

    pub(crate) fn repo_of(&self, record: &JobRecord) -> GitRepo {
        GitRepo::known(
            record.repo.clone(),
            record.git_common_dir.clone(),
            &self.home().locks_dir(),
        )
    }

    /// Syncs a job (see the module docs), recording the outcome on the job.
    pub async fn sync_job(&self, record: &JobRecord, scope: SyncScope) -> Result<Synced> {
        if record.is_legacy() {
            return Err(Error::Legacy {
                id: record.id.clone(),
            });
        }
        let outcome = self.sync_unrecorded(record, scope).await;
        let now = Utc::now();
        let error = outcome.as_ref().err().map(ToString::to_string);
        let _ = self.store().update(&record.id, |r| {
            r.sync_error = error.clone();
            if error.is_none() {
                r.synced_at = Some(now);
            }
        });
        match &outcome {
            Ok(synced) if synced.forced => self.emit(
                "job.branch_rewritten",
                Some(&record.id),
                None,
                serde_json::json!({ "branch": record.branch, "tip": synced.tip }),
            ),
            Ok(_) => {}
            Err(error) => self.emit(
                "job.sync_failed",
                Some(&record.id),
                None,
                serde_json::json!({ "error": error.to_string() }),
            ),
        }
        outcome
    }

    async fn sync_unrecorded(&self, record: &JobRecord, scope: SyncScope) -> Result<Synced> {
        let failed = |message: String| Error::Sync {
            id: record.id.clone(),
            message,
        };
        let (git_dir, work_tree) = runtime::sandbox_git_paths(record)
            .ok_or_else(|| failed("the job has no git dir yet".into()))?;
        let job_dir = self.home().job_dir(&record.id);
        let lock_path = job_dir.join("sync.lock");
        let _lock =
            tokio::task::spawn_blocking(move || FileLock::acquire(&lock_path, SYNC_LOCK_WAIT))
                .await
                .map_err(|e| failed(e.to_string()))??;
        let scratch = self.scratch_of(record);
        let user_objects = crate::git::object_dirs(&record.git_common_dir)
            .into_iter()
            .next()
            .ok_or_else(|| failed("the repository's object store is gone".into()))?;
        scratch.ensure(&user_objects).await?;
        let (mut known_tip, known_state) = scratch.known().await?;
        let repo = self.repo_of(record);
        let branch_ref = format!("refs/heads/{}", record.branch);
        if known_tip.is_none()
            && let Some(tip) = repo.ref_target(&branch_ref).await?
        {
            // The first sync starts from what the user's repository has for the branch, so a
            // branch the sandbox cannot resolve still reads as the last good tip.
            scratch.set_branch(&tip).await?;
            known_tip = Some(tip);
        }
        let snapshot = scope == SyncScope::BranchAndWork;
        let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        let request = ExecRequest {
            cmd: vec![
                "sh".into(),
                "-c".into(),
                SYNC_SCRIPT.into(),
                "paddock-sync".into(),
                record.branch.clone(),
                dash(&known_tip),
                dash(&known_state),
                if snapshot { "1" } else { "0" }.into(),
                record.base_commit.clone(),
                user_objects.display().to_string(),
            ],
            env: [
                ("GIT_DIR", git_dir.display().to_string()),
                ("GIT_WORK_TREE", work_tree.display().to_string()),
                ("GIT_CONFIG_NOSYSTEM", "1".into()),
                ("GIT_CONFIG_GLOBAL", "/dev/null".into()),
                ("GIT_TERMINAL_PROMPT", "0".into()),
                ("LC_ALL", "C".into()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
            workdir: None,
            timeout: SYNC_TIMEOUT,
            kill_policy: KillPolicy::Hard,
            grace: Duration::ZERO,
            output_cap: 4096,
        };
        let bundle = job_dir.join("incoming.bundle");
        let mut capture = SyncCapture::new(bundle.clone());
        let ran = runtime::exec_in_sandbox(self.home(), record, &request, &mut capture).await;
        let received = match ran {
            Ok(result) if result.timed_out => Err(format!(
                "the sync did not finish within {}",
                crate::units::HumanDuration(SYNC_TIMEOUT)
            )),
            Ok(result) => capture.finish(result.exit_code),
            Err(error) => Err(format!("the sandbox could not run the sync: {error}")),
        };
        let outcome = async {
            let received = received.map_err(failed)?;
            scratch.receive(&received, &record.branch).await?;
            let mut forced = false;
            if let Some(tip) = &received.header.tip {
                let current = repo.ref_target(&branch_ref).await?;
                if current.as_ref() != Some(tip) {
                    if let Some(current) = &current {
                        forced = !scratch.is_fast_forward(current, tip).await?;
                    }
                    repo.publish(&scratch.path, &[(SCRATCH_BRANCH, branch_ref)])
                        .await?;
                }
            }
            Ok(Synced {
                tip: received.header.tip.clone(),
                work: received.header.state.clone(),
                untracked: received.untracked.clone(),
                forced,
            })
        }
        .await;
        let _ = std::fs::remove_file(&bundle);
        outcome
    }

    /// Saves the uncommitted work of the last snapshot sync as `refs/paddock/wip/<id>` in the
    /// user's repository; returns the commit, or `None` when there was none.
    pub(crate) async fn publish_wip(
        &self,
        record: &JobRecord,
        synced: &Synced,
    ) -> Result<Option<String>> {
        let WorkState::Snapshot(commit) = &synced.work else {
            return Ok(None);
        };
        let wip_ref = format!("refs/paddock/wip/{}", record.id);
        self.repo_of(record)
            .publish(&self.scratch_of(record).path, &[(SCRATCH_STATE, wip_ref)])
            .await?;
        Ok(Some(commit.clone()))
    }
}
