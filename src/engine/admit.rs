//! The engine's side of admission (see `crate::admission`): reserving a job's id either as
//! admitted (`creating`) or as `queued`, waiting for its turn (until `max_wait`), cancelling
//! a queued job, taking an exec slot (`admit_exec`), and a daemon adopting the queued
//! creates of a daemon that died.
//!
//! The job's record is written under the admission lock in the same decision that admits or
//! queues it, so what another process counts always includes it. A queued job has nothing but
//! its record and its ticket: cancelling it, or dropping it when its process is gone, removes
//! those two and touches no branch, checkout or container.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::{CreateRequest, Error, Paddock, Result};
use crate::admission::{
    Admission, AdmissionError, AdmissionSettings, AdmissionView, Demand, Entry, ExecEntry,
    ExecSlot, HostCapacity, Lane, Ledger, Turn, WaitKind,
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

    /// The budget, what holds it and who waits (`GET /v1/admission`, `doctor`, `ls`).
    pub fn admission_view(&self) -> Result<AdmissionView> {
        let admission = self.admission()?;
        Ok(admission.view(&self.records()?))
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
        let demand = Demand::of_job(&record.reserve());
        let entry = blocking(|| {
            admission.with_ledger(
                || self.records(),
                |ledger| -> Result<Entry> {
                    self.drop_abandoned(ledger);
                    let entry = ledger
                        .enter(
                            &record.id,
                            demand,
                            request.no_wait,
                            self.adopts_queue,
                            request.waiter.as_deref(),
                        )
                        .map_err(Error::from)?;
                    if let Entry::Queued { seq, .. } = entry {
                        record.state = JobState::Queued;
                        record.queue_seq = Some(seq);
                    }
                    // The exclusive write reserves the id: of two creators of one id, one
                    // fails here before touching git.
                    if let Err(error) = self.store.create(&record) {
                        if let Entry::Queued { seq, .. } = entry {
                            admission.remove_ticket(Lane::Create, seq);
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
            let gives_up_at = queued_at + max_wait(&admission);
            self.wait_for_turn(&admission, &record.id, seq, gives_up_at, client)
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

    /// Waits until ticket `seq` is first and fits, then moves the job to `creating` in the
    /// same decision; fails at `gives_up_at`. Dropping the future, failing, or its client
    /// going away, cancels: the queued record and the ticket are removed. A daemon that is
    /// stopping keeps them instead, for the next daemon to adopt.
    async fn wait_for_turn(
        &self,
        admission: &Admission,
        id: &JobId,
        seq: u64,
        gives_up_at: DateTime<Utc>,
        mut client: Option<ClientGone>,
    ) -> Result<()> {
        let mut guard = QueuedGuard {
            paddock: self,
            admission,
            id,
            seq,
            armed: true,
        };
        // The first look is a full one, so a wait always knows why it waits.
        let mut last_full: Option<Instant> = None;
        let mut reason = String::new();
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
            if !admission.any_before(Lane::Create, seq)
                || last_full.is_none_or(|at| at.elapsed() >= FULL_LOOK)
            {
                last_full = Some(Instant::now());
                match blocking(|| self.try_grant(admission, id, seq))?? {
                    None => {
                        guard.armed = false;
                        return Ok(());
                    }
                    Some(why) => reason = why,
                }
            }
            give_up_at(gives_up_at, admission, id, WaitKind::Create, &reason)?;
            pause(&mut client, id).await?;
        }
    }

    /// One decision for ticket `seq`: granted (`None`: the record moved to `creating`, its
    /// age counted from now, the ticket removed), not yet (why), or cancelled meanwhile.
    fn try_grant(
        &self,
        admission: &Admission,
        id: &JobId,
        seq: u64,
    ) -> std::result::Result<Result<Option<String>>, StoreError> {
        admission.with_ledger(
            || self.records(),
            |ledger| -> Result<Option<String>> {
                self.drop_abandoned(ledger);
                match ledger.turn(Lane::Create, seq) {
                    None => Err(Error::Cancelled { id: id.clone() }),
                    Some(Turn::Wait { reason }) => Ok(Some(reason)),
                    Some(Turn::Go) => {
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
                        admission.remove_ticket(Lane::Create, seq);
                        Ok(None)
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
        admission.remove_ticket(Lane::Create, seq);
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

    /// Takes an exec slot: at once when one is free and no exec waits, else after waiting
    /// in the exec queue (until `max_wait`), or refused at once with `no_wait`. `waiter` is
    /// the caller's tag for its place (see `AdmissionView::waiter`).
    pub(super) async fn admit_exec(
        &self,
        id: &JobId,
        no_wait: bool,
        waiter: Option<&str>,
    ) -> Result<ExecSlot> {
        let admission = self.admission()?;
        let entry = blocking(|| {
            admission.with_ledger(
                || Ok(Vec::new()),
                |ledger| ledger.enter_exec(id, no_wait, waiter),
            )
        })??;
        let seq = match entry {
            ExecEntry::Slot(slot) => return Ok(slot),
            ExecEntry::Queued { seq } => seq,
        };
        // Removes the ticket on every way out but a grant (which removes it itself).
        let _ticket = ExecTicket {
            admission: &admission,
            seq,
        };
        let gives_up_at = Utc::now() + max_wait(&admission);
        // The first look is a full one, so a wait always knows why it waits.
        let mut last_full: Option<Instant> = None;
        let mut reason = String::new();
        loop {
            // Armed before the look: a slot freed in between still wakes this wait.
            let freed = crate::admission::slot_freed().notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if !admission.any_before(Lane::Exec, seq)
                || last_full.is_none_or(|at| at.elapsed() >= FULL_LOOK)
            {
                last_full = Some(Instant::now());
                let decided = blocking(|| {
                    admission.with_ledger(
                        || Ok(Vec::new()),
                        |ledger| -> Result<std::result::Result<ExecSlot, String>> {
                            match ledger.turn(Lane::Exec, seq) {
                                None => Err(Error::Cancelled { id: id.clone() }),
                                Some(Turn::Wait { reason }) => Ok(Err(reason)),
                                Some(Turn::Go) => Ok(Ok(ledger.grant_exec(id, seq)?)),
                            }
                        },
                    )
                })??;
                match decided {
                    Ok(slot) => return Ok(slot),
                    Err(why) => reason = why,
                }
            }
            give_up_at(gives_up_at, &admission, id, WaitKind::Exec, &reason)?;
            tokio::select! {
                () = tokio::time::sleep(crate::admission::poll_interval()) => {}
                () = &mut freed => {}
            }
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
                            ledger.admission().remove_ticket(Lane::Create, ticket.seq);
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
        let gives_up_at = ticket.gives_up_at(admission.budget());
        self.wait_for_turn(admission, &ticket.job, ticket.seq, gives_up_at, None)
            .await?;
        let record = self.store.load(ticket.job.as_str())?;
        let plan = self.plan_from_record(&record).await?;
        self.finish_create(record, plan).await.map(drop)
    }
}

/// Tells a queued create that its client went away (the sender is dropped with the request).
pub type ClientGone = tokio::sync::watch::Receiver<()>;

/// How long a request waits for room, as a span of wall-clock time.
fn max_wait(admission: &Admission) -> chrono::Duration {
    chrono::Duration::from_std(admission.budget().max_wait()).unwrap_or(chrono::Duration::MAX)
}

/// Fails a wait whose deadline has come, saying why it waited.
fn give_up_at(
    gives_up_at: DateTime<Utc>,
    admission: &Admission,
    id: &JobId,
    what: WaitKind,
    reason: &str,
) -> Result<()> {
    if Utc::now() < gives_up_at {
        return Ok(());
    }
    Err(AdmissionError::WaitedTooLong {
        job: id.clone(),
        what,
        waited: admission.budget().max_wait,
        reason: reason.to_string(),
    }
    .into())
}

/// The pause between two looks at the queue, cut short (as a cancel) when the client goes.
async fn pause(client: &mut Option<ClientGone>, id: &JobId) -> Result<()> {
    let pause = tokio::time::sleep(crate::admission::poll_interval());
    match client {
        Some(gone) => {
            tokio::select! {
                () = pause => Ok(()),
                _ = gone.changed() => Err(Error::Cancelled { id: id.clone() }),
            }
        }
        None => {
            pause.await;
            Ok(())
        }
    }
}

/// An exec's place in the exec queue; dropping it gives the place up (removing a ticket
/// only frees room, so it needs no lock).
struct ExecTicket<'a> {
    admission: &'a Admission,
    seq: u64,
}

impl Drop for ExecTicket<'_> {
    fn drop(&mut self) {
        self.admission.remove_ticket(Lane::Exec, self.seq);
    }
}

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
