//! The engine's side of admission (see `crate::admission`): reserving a job's id either as
//! admitted (`creating`) or as `queued`, waiting for its turn, cancelling a queued job, taking
//! an exec slot, and a daemon adopting the queued creates of a daemon that died.
//!
//! The job's record is written under the admission lock in the same decision that admits or
//! queues it, so what another process counts always includes it. A queued job has nothing but
//! its record and its ticket: cancelling it, or dropping it when its process is gone, removes
//! those two and touches no branch, checkout or container.

use std::time::{Duration, Instant};

use chrono::Utc;

use super::{CreateRequest, Error, Paddock, Result};
use crate::admission::{Admission, Budget, Demand, Entry, ExecSlot, HostCapacity, Ledger};
use crate::job::{JobId, JobRecord, JobState, ProcessId};
use crate::store::StoreError;
use crate::wire::EventKind;

/// How often a waiter that is not first looks at everything (to notice a dead owner ahead).
const FULL_LOOK: Duration = Duration::from_secs(2);

impl Paddock {
    /// The install's admission queue with the budget of the user config.
    pub fn admission(&self) -> Result<Admission> {
        let config = self.config(None)?;
        let budget = Budget::new(&config.admission, HostCapacity::read());
        Ok(Admission::open(&self.home, budget)?)
    }

    fn records(&self) -> std::result::Result<Vec<JobRecord>, StoreError> {
        Ok(self.store.list()?.0)
    }

    /// Reserves `record`'s id, admitted (state `creating`) or queued; when queued, waits for
    /// its turn. Returns the record as it stands once admitted.
    pub(super) async fn admit_create(
        &self,
        mut record: JobRecord,
        request: &CreateRequest,
    ) -> Result<JobRecord> {
        let admission = self.admission()?;
        let demand = Demand::of_job(&record.limits);
        let entry = admission.with_ledger(
            || self.records(),
            |ledger| -> Result<Entry> {
                self.drop_abandoned(ledger);
                let entry = ledger
                    .enter(&record.id, demand, request.no_wait, self.adopts_queue)
                    .map_err(Error::from)?;
                if let Entry::Queued { seq, .. } = entry {
                    record.state = JobState::Queued;
                    record.queue_seq = Some(seq);
                }
                // The exclusive write reserves the id: of two creators of one id, one fails
                // here before touching git.
                if let Err(error) = self.store.create(&record) {
                    if let Entry::Queued { seq, .. } = entry {
                        admission.remove_ticket(seq);
                    }
                    return Err(error.into());
                }
                Ok(entry)
            },
        )??;
        if let Entry::Queued { seq, position } = entry {
            self.emit(
                EventKind::JobState,
                Some(&record.id),
                Some(JobState::Queued),
                serde_json::json!({"position": position}),
            );
            self.wait_for_turn(&admission, &record.id, seq).await?;
            record = self.store.load(record.id.as_str())?;
            self.emit(
                EventKind::JobState,
                Some(&record.id),
                Some(JobState::Creating),
                serde_json::json!({"waited_ms": (Utc::now() - record.created_at).num_milliseconds()}),
            );
        }
        Ok(record)
    }

    /// Waits until ticket `seq` is first of its kind and fits, then moves the job to
    /// `creating` in the same decision. Dropping the future (a client that went away)
    /// cancels: the ticket and the queued record are removed.
    async fn wait_for_turn(&self, admission: &Admission, id: &JobId, seq: u64) -> Result<()> {
        let mut guard = QueuedGuard {
            paddock: self,
            admission,
            id,
            seq,
            armed: true,
        };
        let mut last_full = Instant::now();
        loop {
            // Cheap look first: someone of the same kind is ahead by number, and it is not
            // yet time to check that they are all alive.
            if !admission.any_before(seq) || last_full.elapsed() >= FULL_LOOK {
                last_full = Instant::now();
                let granted = admission.with_ledger(
                    || self.records(),
                    |ledger| -> Result<bool> {
                        self.drop_abandoned(ledger);
                        match ledger.may_go(seq) {
                            None => Err(Error::Cancelled { id: id.clone() }),
                            Some(false) => Ok(false),
                            Some(true) => {
                                self.store
                                    .update(id, |r| {
                                        r.queue_seq = None;
                                        r.owner = ProcessId::current();
                                        r.transition(JobState::Creating, Utc::now())
                                    })?
                                    .1?;
                                admission.remove_ticket(seq);
                                Ok(true)
                            }
                        }
                    },
                )??;
                if granted {
                    guard.armed = false;
                    return Ok(());
                }
            }
            tokio::time::sleep(crate::admission::poll_interval()).await;
        }
    }

    /// Drops tickets whose process is gone (and no daemon adopts), with their queued records.
    fn drop_abandoned(&self, ledger: &Ledger<'_>) {
        for ticket in ledger.abandoned() {
            self.forget_queued(&ticket.job, ticket.seq, ledger.admission());
        }
    }

    /// Removes a queued job's ticket and record (never anything else: it has nothing else).
    fn forget_queued(&self, id: &JobId, seq: u64, admission: &Admission) {
        admission.remove_ticket(seq);
        if self
            .store
            .load(id.as_str())
            .is_ok_and(|r| r.state == JobState::Queued && r.queue_seq == Some(seq))
        {
            let _ = self.store.remove(id);
        }
    }

    /// Cancels a queued job (`rm` of a queued job): its waiter gets [`Error::Cancelled`].
    pub(super) fn cancel_queued(&self, record: &JobRecord) -> Result<()> {
        let admission = self.admission()?;
        admission.with_ledger(
            || Ok(Vec::new()),
            |ledger| {
                if let Some(seq) = record.queue_seq {
                    self.forget_queued(&record.id, seq, ledger.admission());
                }
            },
        )?;
        self.emit(
            EventKind::JobRemoved,
            Some(&record.id),
            Some(JobState::Removed),
            serde_json::json!({"queued": true}),
        );
        Ok(())
    }

    /// Takes an exec slot when the budget limits running execs (waiting until one is free,
    /// or refusing at once with `no_wait`), or nothing when it does not limit them.
    pub(super) async fn admit_exec(&self, id: &JobId, no_wait: bool) -> Result<Option<ExecSlot>> {
        let admission = self.admission()?;
        if admission.budget().max_running_execs.is_none() {
            return Ok(None);
        }
        loop {
            let slot = admission.with_ledger(
                || Ok(Vec::new()),
                |ledger| -> Result<Option<ExecSlot>> {
                    if ledger.exec_fits(id, no_wait)? {
                        Ok(Some(admission.take_exec_slot(id)?))
                    } else {
                        Ok(None)
                    }
                },
            )??;
            if slot.is_some() {
                return Ok(slot);
            }
            tokio::time::sleep(crate::admission::poll_interval()).await;
        }
    }

    /// Positions of queued jobs (1-based), for `ls` and `show`.
    pub fn queue_positions(&self) -> Vec<(JobId, usize)> {
        self.admission()
            .and_then(|admission| {
                Ok(admission.with_ledger(|| Ok(Vec::new()), |ledger| ledger.positions())?)
            })
            .unwrap_or_default()
    }

    /// A daemon starting: takes over the queued creates of a daemon that died, in their
    /// order, and finishes each in the background. Returns how many it adopted.
    pub fn adopt_queued(self: &std::sync::Arc<Self>) -> Result<usize> {
        let admission = self.admission()?;
        let adopted = admission.with_ledger(
            || self.records(),
            |ledger| -> Result<Vec<crate::admission::Ticket>> {
                let mut adopted = Vec::new();
                for ticket in ledger.orphaned_adoptable() {
                    if !self.store.exists(&ticket.job) {
                        ledger.admission().remove_ticket(ticket.seq);
                        continue;
                    }
                    let ticket = ledger.adopt(&ticket)?;
                    self.store.update(&ticket.job, |r| {
                        r.owner = ProcessId::current();
                    })?;
                    adopted.push(ticket);
                }
                Ok(adopted)
            },
        )??;
        let count = adopted.len();
        for ticket in adopted {
            let paddock = self.clone();
            tokio::spawn(async move {
                if let Err(error) = paddock.resume_queued(ticket).await {
                    tracing::warn!(%error, "an adopted queued create failed");
                }
            });
        }
        Ok(count)
    }

    /// Finishes an adopted queued create: waits for its turn, then builds the job (the
    /// record holds everything the build needs).
    async fn resume_queued(&self, ticket: crate::admission::Ticket) -> Result<()> {
        let admission = self.admission()?;
        self.wait_for_turn(&admission, &ticket.job, ticket.seq)
            .await?;
        let record = self.store.load(ticket.job.as_str())?;
        self.finish_create(record, None).await.map(drop)
    }
}

/// Cancels a wait that did not end in a grant (its future was dropped, or it failed).
struct QueuedGuard<'a> {
    paddock: &'a Paddock,
    admission: &'a Admission,
    id: &'a JobId,
    seq: u64,
    armed: bool,
}

impl Drop for QueuedGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.admission.with_ledger(
                || Ok(Vec::new()),
                |_| {
                    self.paddock
                        .forget_queued(self.id, self.seq, self.admission)
                },
            );
        }
    }
}
