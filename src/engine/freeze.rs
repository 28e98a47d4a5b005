//! Pausing a job (issue 43): its runtime freezes every process of its sandbox in place (the
//! cgroup freezer under Docker, runc and gVisor alike, on this host or an engine; a stopped
//! QEMU for a microVM) and the record says since when (`paused_at`). A paused job keeps its
//! memory and uses no CPU; it takes no exec (the error says how to resume it), and the sweep
//! never removes it as idle, since nothing of it has ended. `resume` thaws it. Both are
//! repeatable: pausing a paused job or resuming a running one changes nothing.
//!
//! The record is written before the freeze and cleared after the thaw, so a crash between
//! the two leaves a job that says it is paused (and `resume` mends it), never a frozen job
//! whose record says it runs. `stop` and `rm` thaw a paused job first: a frozen process
//! cannot act on the signal that asks it to end.

use chrono::Utc;

use super::{Error, Paddock, Result};
use crate::job::{JobRecord, JobState};
use crate::runtime::RuntimeError;
use crate::wire::{EventKind, PauseAnswer};

impl Paddock {
    /// Freezes the job's processes (see the module docs).
    pub async fn pause(&self, id: &str) -> Result<PauseAnswer> {
        let record = self.load(id)?;
        guard(&record)?;
        let runtime = self.runtime_of(&record);
        let freeze = runtime.capabilities().freeze.ok_or(RuntimeError::Unsupported {
            runtime: runtime.describe().name,
            what: "pause a job (its commands are paddock's own children: there is no sandbox to freeze)",
        })?;
        if let Some(since) = record.paused_at {
            // Frozen again all the same: a crash may have come between record and freeze.
            freeze.freeze(&record).await?;
            return Ok(answer(&record, since));
        }
        let now = Utc::now();
        let (record, ()) = self.store.update(&record.id, |r| {
            r.paused_at = Some(now);
            r.last_activity_at = r.last_activity_at.max(now);
        })?;
        if let Err(error) = freeze.freeze(&record).await {
            // Nothing was frozen: the record says so again.
            let _ = self.store.update(&record.id, |r| r.paused_at = None);
            return Err(error.into());
        }
        self.emit(
            EventKind::JobPaused,
            Some(&record.id),
            None,
            serde_json::json!({}),
        );
        Ok(answer(&record, now))
    }

    /// Thaws a paused job's processes (see the module docs).
    pub async fn resume(&self, id: &str) -> Result<PauseAnswer> {
        let record = self.load(id)?;
        let running = PauseAnswer {
            id: record.id.to_string(),
            paused: false,
            since: None,
        };
        if record.paused_at.is_none() {
            return Ok(running);
        }
        let record = self.thaw(record).await?;
        self.emit(
            EventKind::JobResumed,
            Some(&record.id),
            None,
            serde_json::json!({}),
        );
        Ok(running)
    }

    /// `exec --resume` on a paused job: thawed as `resume` does; the record as it is now.
    pub(super) async fn resume_for_exec(&self, record: JobRecord) -> Result<JobRecord> {
        let record = self.thaw(record).await?;
        self.emit(
            EventKind::JobResumed,
            Some(&record.id),
            None,
            serde_json::json!({}),
        );
        Ok(record)
    }

    /// Thaws `record`'s sandbox when its record says it is paused, then clears that; the
    /// record as it is now. `stop` and `rm` call it before they signal anything.
    pub(super) async fn thaw(&self, record: JobRecord) -> Result<JobRecord> {
        if record.paused_at.is_none() {
            return Ok(record);
        }
        let runtime = self.runtime_of(&record);
        if let Some(freeze) = runtime.capabilities().freeze {
            freeze.thaw(&record).await?;
        }
        let now = Utc::now();
        let (record, ()) = self.store.update(&record.id, |r| {
            r.paused_at = None;
            r.last_activity_at = r.last_activity_at.max(now);
        })?;
        Ok(record)
    }
}

/// Only a made job that is not being removed can be paused.
fn guard(record: &JobRecord) -> Result<()> {
    if matches!(
        record.state,
        JobState::Queued | JobState::Creating | JobState::Removed
    ) {
        return Err(Error::NotRunnable {
            id: record.id.clone(),
            state: record.state,
        });
    }
    Ok(())
}

fn answer(record: &JobRecord, since: chrono::DateTime<Utc>) -> PauseAnswer {
    PauseAnswer {
        id: record.id.to_string(),
        paused: true,
        since: Some(since),
    }
}
