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
use crate::admission::{
    Admission, AdmissionSettings, Demand, Entry, ExecSlot, HostCapacity, Ledger,
};
use crate::job::{JobId, JobRecord, JobState, ProcessId};
use crate::store::StoreError;
use crate::wire::EventKind;

/// How often a waiter that is not first looks at everything (to notice a dead owner ahead).
const FULL_LOOK: Duration = Duration::from_secs(2);

impl Paddock {
    /// The install's admission queue with the budget of the user config.
    pub fn admission(&self) -> Result<Admission> {
        self.admission_with(&self.config(None)?.admission)
    }

    /// The queue with `settings` (from a configuration the caller has already loaded).
    fn admission_with(&self, settings: &AdmissionSettings) -> Result<Admission> {
        Ok(Admission::open(&self.home, settings, HostCapacity::read())?)
    }

    fn records(&self) -> std::result::Result<Vec<JobRecord>, StoreError> {
        Ok(self.store.list()?.0)
    }

    /// Reserves `record`'s id, admitted (state `creating`) or queued; when queued, waits for
    /// its turn (or until `client` says its client went away: then the place is given up).
    /// Returns the record as it stands once admitted.
    pub(super) async fn admit_create(
        &self,
        mut record: JobRecord,
        request: &CreateRequest,
        settings: &AdmissionSettings,
        client: Option<ClientGone>,
    ) -> Result<JobRecord> {
        let admission = self.admission_with(settings)?;
        let demand = Demand::of_job(&record.limits, admission.host());
        let entry = blocking(|| {
            admission.with_ledger(
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
                    // The exclusive write reserves the id: of two creators of one id, one
                    // fails here before touching git.
                    if let Err(error) = self.store.create(&record) {
                        if let Entry::Queued { seq, .. } = entry {
                            admission.remove_ticket(seq);
                        }
                        return Err(error.into());
                    }
                    Ok(entry)
                },
            )
        })??;
        if let Entry::Queued { seq, position } = entry {
            self.emit(
                EventKind::JobState,
                Some(&record.id),
                Some(JobState::Queued),
                serde_json::json!({"position": position}),
            );
            let queued_at = record.created_at;
            self.wait_for_turn(&admission, &record.id, seq, client)
                .await?;
            record = self.store.load(record.id.as_str())?;
            self.emit(
                EventKind::JobState,
                Some(&record.id),
                Some(JobState::Creating),
                serde_json::json!({"waited_ms": (record.created_at - queued_at).num_milliseconds()}),
            );
        }
        Ok(record)
    }

    /// Waits until ticket `seq` is first and fits, then moves the job to
    /// `creating` in the same decision. Dropping the future, or its client going away,
    /// cancels: the queued record and the ticket are removed. A daemon that is stopping
    /// keeps them instead, for the next daemon to adopt.
    async fn wait_for_turn(
        &self,
        admission: &Admission,
        id: &JobId,
        seq: u64,
        mut client: Option<ClientGone>,
    ) -> Result<()> {
        let mut guard = QueuedGuard {
            paddock: self,
            admission,
            id,
            seq,
            armed: true,
        };
        let mut last_full = Instant::now();
        loop {
            if self.adopts_queue && self.stopping.load(std::sync::atomic::Ordering::SeqCst) {
                guard.armed = false;
                return Err(Error::Serve {
                    message: format!(
                        "stopping: queued job `{id}` keeps its place for the next daemon"
                    ),
                });
            }
            // Cheap look first: someone is ahead by number, and it is not yet time to check
            // that they are all alive.
            if !admission.any_before(seq) || last_full.elapsed() >= FULL_LOOK {
                last_full = Instant::now();
                if blocking(|| self.try_grant(admission, id, seq))?? {
                    guard.armed = false;
                    return Ok(());
                }
            }
            let pause = tokio::time::sleep(crate::admission::poll_interval());
            match &mut client {
                Some(gone) => {
                    tokio::select! {
                        () = pause => {}
                        _ = gone.changed() => return Err(Error::Cancelled { id: id.clone() }),
                    }
                }
                None => pause.await,
            }
        }
    }

    /// One decision for ticket `seq`: granted (the record moved to `creating`, its age
    /// counted from now, the ticket removed), not yet, or cancelled meanwhile.
    fn try_grant(
        &self,
        admission: &Admission,
        id: &JobId,
        seq: u64,
    ) -> std::result::Result<Result<bool>, StoreError> {
        admission.with_ledger(
            || self.records(),
            |ledger| -> Result<bool> {
                self.drop_abandoned(ledger);
                match ledger.may_go(seq) {
                    None => Err(Error::Cancelled { id: id.clone() }),
                    Some(false) => Ok(false),
                    Some(true) => {
                        self.store
                            .update(id, |r| {
                                if r.state != JobState::Queued || r.queue_seq != Some(seq) {
                                    return Err(Error::Cancelled { id: id.clone() });
                                }
                                let now = Utc::now();
                                r.queue_seq = None;
                                r.owner = ProcessId::current();
                                // Its age (and the sweep's create deadline) starts at admission.
                                r.created_at = now;
                                r.last_activity_at = now;
                                Ok(r.transition(JobState::Creating, now)?)
                            })?
                            .1?;
                        admission.remove_ticket(seq);
                        Ok(true)
                    }
                }
            },
        )
    }

    /// Drops tickets whose process is gone (and no daemon adopts), with their queued records.
    fn drop_abandoned(&self, ledger: &Ledger<'_>) {
        for ticket in ledger.abandoned() {
            self.forget_queued(&ticket.job, ticket.seq, ledger.admission());
        }
    }

    /// Removes a queued job's record and ticket (never anything else: it has nothing else).
    /// The record goes first: a ticket without a record is dropped by the next look, a
    /// record without a ticket only by a sweep.
    fn forget_queued(&self, id: &JobId, seq: u64, admission: &Admission) {
        if self
            .store
            .load(id.as_str())
            .is_ok_and(|r| r.state == JobState::Queued && r.queue_seq == Some(seq))
        {
            let _ = self.store.remove(id);
        }
        admission.remove_ticket(seq);
    }

    /// Cancels a queued job (`rm` of a queued job): its waiter gets [`Error::Cancelled`].
    /// Refused when the job was admitted meanwhile (it is being built: `rm` it once ready).
    pub(super) fn cancel_queued(&self, record: &JobRecord) -> Result<()> {
        let admission = self.admission()?;
        let cancelled = blocking(|| {
            admission.with_ledger(
                || Ok(Vec::new()),
                |ledger| {
                    let current = self.store.load(record.id.as_str()).ok();
                    let still_queued = current.as_ref().is_some_and(|r| {
                        r.state == JobState::Queued && r.queue_seq == record.queue_seq
                    });
                    if let (true, Some(seq)) = (still_queued, record.queue_seq) {
                        self.forget_queued(&record.id, seq, ledger.admission());
                    }
                    still_queued
                },
            )
        })?;
        if !cancelled {
            return Err(Error::Admitted {
                id: record.id.clone(),
            });
        }
        self.emit(
            EventKind::JobRemoved,
            Some(&record.id),
            Some(JobState::Removed),
            serde_json::json!({"queued": true}),
        );
        Ok(())
    }

    /// A sweep's look at a queued record: removes it when no ticket holds its place (its
    /// process died between the two writes). Returns whether it was removed.
    pub(crate) fn drop_if_ticketless(&self, record: &JobRecord) -> Result<bool> {
        let admission = self.admission()?;
        Ok(blocking(|| {
            admission.with_ledger(
                || Ok(Vec::new()),
                |ledger| {
                    let current = self.store.load(record.id.as_str()).ok();
                    let orphan = current.is_some_and(|r| {
                        r.state == JobState::Queued
                            && !ledger.has_ticket(r.queue_seq.unwrap_or_default())
                    });
                    if orphan {
                        let _ = self.store.remove(&record.id);
                    }
                    orphan
                },
            )
        })?)
    }

    /// Takes an exec slot when the budget limits running execs (waiting until one is free,
    /// or refusing at once with `no_wait`), or nothing when it does not limit them.
    pub(super) async fn admit_exec(&self, id: &JobId, no_wait: bool) -> Result<Option<ExecSlot>> {
        // Most installs set no exec limit: then an exec opens nothing of the queue's.
        let settings = self.config(None)?.admission;
        if settings.max_running_execs.is_none() {
            return Ok(None);
        }
        let admission = self.admission_with(&settings)?;
        loop {
            let slot = blocking(|| {
                admission.with_ledger(
                    || Ok(Vec::new()),
                    |ledger| -> Result<Option<ExecSlot>> {
                        if ledger.exec_fits(id, no_wait)? {
                            Ok(Some(admission.take_exec_slot(id)?))
                        } else {
                            Ok(None)
                        }
                    },
                )
            })??;
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
                Ok(blocking(|| {
                    admission.with_ledger(|| Ok(Vec::new()), |ledger| ledger.positions())
                })?)
            })
            .unwrap_or_default()
    }

    /// A daemon: takes over the queued creates of a daemon that died, in their order, and
    /// finishes each in the background. Tickets whose record is gone or no longer queued are
    /// dropped; a ticket that cannot be taken over is left for the next look, never half
    /// taken. Returns how many it adopted.
    pub fn adopt_queued(self: &std::sync::Arc<Self>) -> Result<usize> {
        let admission = self.admission()?;
        let adopted = blocking(|| {
            admission.with_ledger(
                || self.records(),
                |ledger| {
                    let mut adopted = Vec::new();
                    for ticket in ledger.orphaned_adoptable() {
                        let queued = self.store.load(ticket.job.as_str()).is_ok_and(|r| {
                            r.state == JobState::Queued && r.queue_seq == Some(ticket.seq)
                        });
                        if !queued {
                            ledger.admission().remove_ticket(ticket.seq);
                            continue;
                        }
                        let taken = ledger.adopt(&ticket).and_then(|ticket| {
                            self.store
                                .update(&ticket.job, |r| r.owner = ProcessId::current())
                                .map(|_| ticket)
                        });
                        match taken {
                            Ok(ticket) => adopted.push(ticket),
                            Err(error) => {
                                tracing::warn!(job = %ticket.job, %error, "could not adopt a queued create");
                            }
                        }
                    }
                    adopted
                },
            )
        })?;
        let count = adopted.len();
        for ticket in adopted {
            let paddock = self.clone();
            let admission = admission.clone();
            tokio::spawn(async move {
                if let Err(error) = paddock.resume_queued(&admission, ticket).await {
                    tracing::warn!(%error, "an adopted queued create failed");
                }
            });
        }
        Ok(count)
    }

    /// Finishes an adopted queued create: waits for its turn, then builds the job (the
    /// record holds everything the build needs).
    async fn resume_queued(
        &self,
        admission: &Admission,
        ticket: crate::admission::Ticket,
    ) -> Result<()> {
        self.wait_for_turn(admission, &ticket.job, ticket.seq, None)
            .await?;
        let record = self.store.load(ticket.job.as_str())?;
        self.finish_create(record, None).await.map(drop)
    }
}

/// Tells a queued create that its client went away (the sender is dropped with the request).
pub type ClientGone = tokio::sync::watch::Receiver<()>;

/// Runs a short decision under a file lock without stalling the runtime's other tasks: on a
/// multi-threaded runtime the worker hands its other tasks off while it waits.
pub(super) fn blocking<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
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
        if !self.armed {
            return;
        }
        if self.paddock.adopts_queue
            && self
                .paddock
                .stopping
                .load(std::sync::atomic::Ordering::SeqCst)
        {
            // A stopping daemon leaves its queue to the next one.
            return;
        }
        let forgot = self.admission.with_ledger(
            || Ok(Vec::new()),
            |_| {
                self.paddock
                    .forget_queued(self.id, self.seq, self.admission)
            },
        );
        if forgot.is_err() {
            // The lock is busy: give the place up anyway (removing only frees room).
            self.paddock
                .forget_queued(self.id, self.seq, self.admission);
        }
    }
}
