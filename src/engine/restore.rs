//! Restoring a checkpoint (issue 43): the job's workspace becomes the checkpoint's exactly
//! (bytes, modes, links, the index; files made since, untracked and not ignored, are
//! removed; ignored files such as caches stay), and with `--branch` its branch moves back
//! too, published as a forced update of that branch alone (as a rewrite inside would be).
//!
//! The host packs the checkpoint from its wip store as a bundle of what the job lacks (all
//! past the job's base commit), writes it into the workspace through the job's `Place` (no
//! link followed), and `restore.sh` unpacks and checks it out inside the job's sandbox, as
//! the agent's user: nothing of the agent's files is touched by git on the host. A running
//! exec is stopped first, and the job's sync lock is held throughout, so no sync reads a
//! workspace half restored. A fork (`create --from-checkpoint`) restores the same way into
//! its new job before its setup commands.

use std::time::Duration;

use super::checkpoint::{Stored, made};
use super::failpoints::crash_point;
use super::sync::SyncScope;
use super::{Error, Paddock, Result};
use crate::config::KillPolicy;
use crate::git::checkpoint::RESTORE_SCRIPT;
use crate::job::{JobRecord, JobState};
use crate::place::WorkspacePath;
use crate::runtime::ExecRequest;
use crate::runtime::exec::Discard;
use crate::wire::{EventKind, RestoreAnswer, RestoreRequest};

/// How long the sandbox half of a restore may take.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a restore waits for another sync of the job.
const LOCK_WAIT: Duration = Duration::from_secs(120);
/// The most a checkpoint's bundle may take to be restored (it is held in memory once).
pub const MAX_RESTORE_BUNDLE: u64 = 512 << 20;

impl Paddock {
    /// Puts checkpoint `request.checkpoint` back into the job (see the module docs).
    pub async fn restore(&self, id: &str, request: &RestoreRequest) -> Result<RestoreAnswer> {
        let record = self.load(id)?;
        made(&record)?;
        let stored = self.load_checkpoint(record.id.as_str(), &request.checkpoint)?;
        if let Some(since) = record.paused_at {
            return Err(Error::Paused {
                id: record.id.clone(),
                since,
            });
        }
        let stopped = record.state == JobState::Running && self.stop(id, None).await?;
        let record = self.load(id)?;
        let lock = self.sync_lock_for(&record, LOCK_WAIT).await?;
        self.restore_into(
            &record,
            &stored,
            request.branch,
            std::slice::from_ref(&record.base_commit),
            false,
        )
        .await?;
        drop(lock);
        let tip = if request.branch {
            // The branch moved back inside: published as the forced update it is.
            self.sync_job(&record, SyncScope::Branch).await?.tip
        } else {
            self.repo_of(&record)
                .ref_target(&format!("refs/heads/{}", record.branch))
                .await?
        };
        let _ = self.store.update(&record.id, |r| {
            r.last_activity_at = r.last_activity_at.max(chrono::Utc::now());
        });
        self.emit(
            EventKind::JobRestored,
            Some(&record.id),
            None,
            serde_json::json!({
                "checkpoint": stored.view.name,
                "branch_moved": request.branch,
            }),
        );
        Ok(RestoreAnswer {
            job: record.id.to_string(),
            checkpoint: stored.view.name,
            branch_moved: request.branch,
            tip,
            stopped,
        })
    }

    /// Writes checkpoint `stored` into `record`'s workspace: the bundle of what the job
    /// lacks (everything past `have`, commits it surely has) written through its place,
    /// then `restore.sh` in its sandbox. The caller holds the job's sync lock, or the job is
    /// still `creating` (a fork).
    pub(super) async fn restore_into(
        &self,
        record: &JobRecord,
        stored: &Stored,
        move_branch: bool,
        have: &[String],
        fresh: bool,
    ) -> Result<()> {
        if stored.repo_key != record.repo_key {
            return Err(Error::CheckpointRepo {
                checkpoint: format!("{}:{}", stored.view.job, stored.view.name),
                repo: stored.repo.clone(),
            });
        }
        let failed = |message: String| Error::Restore {
            id: record.id.clone(),
            message,
        };
        let bundle = stored
            .store(self.home())
            .bundle_of(&stored.view.refname, have, MAX_RESTORE_BUNDLE)
            .await?;
        let runtime = self.runtime_of(record);
        let layout = runtime.layout();
        let (git_dir, work_tree) = layout
            .git_paths(record)
            .ok_or_else(|| failed("the job has no git dir".into()))?;
        // Read before the bundle lands in the workspace (nothing of the job runs now).
        let hint = if fresh {
            None
        } else {
            self.changed_hint(record).await
        };
        let file = format!(".paddock-restore-{}.bundle", crate::job::random_hex(8));
        let path = WorkspacePath {
            shown: file.clone(),
            parts: vec![file.clone().into()],
        };
        self.place_of(record)
            .write_file(record, &path, bundle, layout.files_owner(record))
            .await?;
        crash_point("restore-bundled");
        let mut request = ExecRequest {
            cmd: vec![
                "sh".into(),
                "-c".into(),
                RESTORE_SCRIPT.into(),
                "paddock-restore".into(),
                work_tree.join(&file).display().to_string(),
                stored.view.commit.clone(),
                record.branch.clone(),
                if move_branch { "1" } else { "0" }.into(),
                if fresh { "1" } else { "0" }.into(),
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
            timeout: RESTORE_TIMEOUT,
            kill_policy: KillPolicy::Hard,
            grace: Duration::ZERO,
            output_cap: 16 << 10,
            after: None,
            stdin: Default::default(),
            user: None,
        };
        if let Some(hint) = hint {
            hint.apply(&mut request);
        }
        let result = runtime
            .exec_in_sandbox(record, &request, &mut Discard)
            .await
            .map_err(|error| failed(format!("the sandbox could not run it: {error}")))?;
        if result.stderr.contains(crate::git::sync::LOOKED_AT_CHANGES) {
            tracing::debug!(job = %record.id, "the sandbox looked only at the changed paths");
        }
        if result.timed_out {
            return Err(failed(format!(
                "it did not finish within {}",
                crate::units::HumanDuration(RESTORE_TIMEOUT)
            )));
        }
        if result.exit_code != 0 {
            let last = result.stderr.trim().lines().last().unwrap_or_default();
            return Err(failed(format!(
                "exit {}: {}",
                result.exit_code,
                crate::text::short_line(last, 300)
            )));
        }
        Ok(())
    }
}
