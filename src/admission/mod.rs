//! Admission: a host-aware budget and two FIFO queues that every paddock process of an
//! install shares (the CLI without a daemon, the daemon, library users), so none of them can
//! start more than the host holds and none double-books what another admitted.
//!
//! Two things are bounded, because agents use a host in two ways: a job *exists* for hours
//! (its sandbox mostly idle while the agent waits on its model), and now and then it *runs*
//! a command. A job holds its reserve (a small share, `reserve` of its profile; its limits
//! are caps, not reservations) from the moment it is admitted until it is removed; a running
//! exec holds one of a few exec slots (derived from the host's cores) while it runs. What is
//! held is read from the records themselves (every state but `queued` and `removed`) and
//! from the exec slot files, never from a counter that a crash could leave wrong.
//!
//! A request that does not fit, or that finds others waiting, gets a ticket in its lane's
//! queue: a file `queue/<seq>.json` for a create (written under `locks/admission.lock`
//! together with the job's `queued` record), `exec-queue/<seq>.json` for an exec. The number
//! orders the queue. Every decision (grant, enqueue, drop) is made under that lock, so two
//! processes never admit against the same free room. A ticket whose owner process is gone no
//! longer holds its place: the next process that looks drops it (a create's with its queued
//! record), unless it is an adoptable create (made by a daemon), which a restarted daemon
//! takes over with its number, so the order survives the restart. Every wait ends by
//! `max_wait`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

mod budget;
mod ledger;
pub mod placing;
mod view;

pub use crate::config::AdmissionSettings;
use crate::job::{JobId, JobRecord, ProcessId};
use crate::store::{FileLock, PaddockHome, StoreError, io_err};
pub use budget::{Budget, Demand, Held, HostCapacity, cpus, holds_share};
pub use ledger::{Entry, ExecEntry, Ledger, Turn};
pub use view::{AdmissionView, WaitKind, Waiter};

/// The ticket layout this build writes and reads.
const TICKET_SCHEMA: u32 = 1;
/// How long one decision may wait for the admission lock.
const LOCK_WAIT: Duration = Duration::from_secs(30);
/// How often a waiting request looks at the queue again (other processes free room without
/// telling this one).
const POLL: Duration = Duration::from_millis(150);

#[derive(Debug, thiserror::Error)]
pub enum AdmissionError {
    #[error(
        "the host budget has no room for job `{job}` now (it needs {needs}; {reason}; {waiting} waiting)"
    )]
    NoRoom {
        job: JobId,
        needs: String,
        /// Why not, as a waiting request's line says it.
        reason: String,
        waiting: usize,
    },
    #[error("job `{job}` can never fit the host budget: it needs {needs}, the budget is {budget}")]
    TooBig {
        job: JobId,
        needs: String,
        budget: String,
    },
    #[error(
        "the {what} of job `{job}` gave up waiting for room after {waited} (admission.max_wait): {reason}"
    )]
    WaitedTooLong {
        job: JobId,
        what: WaitKind,
        waited: crate::units::HumanDuration,
        reason: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Which queue a ticket waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Creates, waiting for room for a job's reserve.
    Create,
    /// Execs, waiting for an exec slot.
    Exec,
}

/// A place in a queue, persisted as `queue/<seq>.json` or `exec-queue/<seq>.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ticket {
    pub schema: u32,
    pub seq: u64,
    pub job: JobId,
    pub demand: Demand,
    pub owner: Option<ProcessId>,
    /// Made by a daemon: a restarted daemon takes it over instead of dropping it.
    pub adoptable: bool,
    pub queued_at: DateTime<Utc>,
    /// The caller's tag (`CreateRequest::waiter`), by which it finds its place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiter: Option<String>,
}

impl Ticket {
    fn is_live(&self) -> bool {
        self.owner.is_some_and(|owner| owner.is_alive())
    }

    /// When its wait ends without room: `max_wait` after it was queued (so an adopted
    /// create keeps its deadline across a daemon restart).
    pub fn gives_up_at(&self, budget: &Budget) -> DateTime<Utc> {
        self.queued_at
            + chrono::Duration::from_std(budget.max_wait()).unwrap_or(chrono::Duration::MAX)
    }
}

/// The install's queues and budget.
#[derive(Debug, Clone)]
pub struct Admission {
    dir: PathBuf,
    exec_dir: PathBuf,
    execs_dir: PathBuf,
    /// Creates waiting for an engine with room (`placing`).
    placing_dir: PathBuf,
    lock_path: PathBuf,
    budget: Budget,
    host: HostCapacity,
}

impl Admission {
    pub fn open(
        home: &PaddockHome,
        settings: &AdmissionSettings,
        host: HostCapacity,
    ) -> Result<Admission, StoreError> {
        let budget = Budget::new(settings, host);
        let dir = home.root().join("queue");
        let exec_dir = home.root().join("exec-queue");
        let execs_dir = home.root().join("execs-running");
        for d in [&dir, &exec_dir, &execs_dir] {
            std::fs::create_dir_all(d).map_err(io_err(d))?;
        }
        Ok(Admission {
            dir,
            exec_dir,
            execs_dir,
            placing_dir: placing::dir(home),
            lock_path: home.locks_dir().join("admission.lock"),
            budget,
            host,
        })
    }

    pub fn budget(&self) -> &Budget {
        &self.budget
    }

    pub fn host(&self) -> &HostCapacity {
        &self.host
    }

    /// Runs `decide` under the admission lock with the queues and what is held now.
    /// `records` lists the install's job records (read under the lock, so a grant another
    /// process just made is counted). Exec tickets whose process is gone are dropped first.
    pub fn with_ledger<T>(
        &self,
        records: impl FnOnce() -> Result<Vec<JobRecord>, StoreError>,
        decide: impl FnOnce(&mut Ledger<'_>) -> T,
    ) -> Result<T, StoreError> {
        let _lock = FileLock::acquire(&self.lock_path, LOCK_WAIT)?;
        let creates = self.tickets(Lane::Create);
        let mut execs = self.tickets(Lane::Exec);
        execs.retain(|ticket| {
            let live = ticket.is_live();
            if !live {
                self.remove_ticket(Lane::Exec, ticket.seq);
            }
            live
        });
        self.drop_dead_slots();
        let records = records()?;
        let held = Held::of(&records, self.running_execs().len());
        let mut ledger = Ledger::new(self, creates, execs, held);
        Ok(decide(&mut ledger))
    }

    /// What is held and who waits, read without the lock (every file is written whole, so
    /// a look sees each as it was or as it is): `doctor`, `ls`, and a waiter's own place.
    pub fn view(&self, records: &[JobRecord]) -> AdmissionView {
        let held = Held::of(records, self.running_execs().len());
        let mut view = AdmissionView::new(
            self,
            held,
            &self.tickets(Lane::Create),
            &self.tickets(Lane::Exec),
            self.running_execs(),
        );
        view.waiting.extend(placing::waiters(&self.placing_dir));
        view
    }

    fn lane_dir(&self, lane: Lane) -> &Path {
        match lane {
            Lane::Create => &self.dir,
            Lane::Exec => &self.exec_dir,
        }
    }

    /// The tickets of `lane` on disk, in queue order.
    pub fn tickets(&self, lane: Lane) -> Vec<Ticket> {
        let mut tickets: Vec<Ticket> = read_json_dir(self.lane_dir(lane));
        tickets.sort_by_key(|t| t.seq);
        tickets
    }

    fn ticket_path(&self, lane: Lane, seq: u64) -> PathBuf {
        self.lane_dir(lane).join(format!("{seq:016}.json"))
    }

    /// Whether a ticket of `lane` numbered below `seq` exists (file names only: the cheap
    /// look).
    pub fn any_before(&self, lane: Lane, seq: u64) -> bool {
        let Ok(entries) = std::fs::read_dir(self.lane_dir(lane)) else {
            return false;
        };
        entries.flatten().any(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n < seq)
        })
    }

    /// Drops ticket `seq` of `lane` (granted, cancelled, given up, or its owner gone).
    pub fn remove_ticket(&self, lane: Lane, seq: u64) {
        let _ = std::fs::remove_file(self.ticket_path(lane, seq));
    }

    fn next_seq(&self, lane: Lane) -> Result<u64, StoreError> {
        let path = self.lane_dir(lane).join("next-seq");
        let last: u64 = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        // A lost or damaged counter must not hand out a number a waiting ticket holds.
        let highest = self.tickets(lane).last().map_or(0, |t| t.seq);
        let next = last.max(highest) + 1;
        crate::atomic::write_atomic(&path, next.to_string().as_bytes(), false)
            .map_err(io_err(&path))?;
        Ok(next)
    }

    /// The jobs whose execs hold a slot now (one entry per exec; slots of processes that are
    /// gone are not counted).
    fn running_execs(&self) -> Vec<JobId> {
        read_json_dir::<ExecSlotFile>(&self.execs_dir)
            .into_iter()
            .filter(|slot| slot.owner.is_alive())
            .map(|slot| slot.job)
            .collect()
    }

    /// Removes the slot files of execs whose process is gone (killed before its guard ran):
    /// they hold nothing already, this keeps the directory from growing.
    fn drop_dead_slots(&self) {
        let Ok(entries) = std::fs::read_dir(&self.execs_dir) else {
            return;
        };
        for entry in entries.flatten() {
            let dead = std::fs::read(entry.path())
                .ok()
                .and_then(|bytes| serde_json::from_slice::<ExecSlotFile>(&bytes).ok())
                .is_some_and(|slot| !slot.owner.is_alive());
            if dead {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }

    /// Takes an exec slot (call only with a grant); released when the guard drops.
    fn take_exec_slot(&self, job: &JobId) -> Result<ExecSlot, StoreError> {
        let owner = ProcessId::current().ok_or_else(|| StoreError::Io {
            path: PathBuf::from("/proc/self/stat"),
            source: std::io::Error::other("cannot read this process's start time"),
        })?;
        let path = self
            .execs_dir
            .join(format!("{job}.{}.json", crate::ids::random_hex(8)));
        let file = ExecSlotFile {
            job: job.clone(),
            owner,
        };
        let text = serde_json::to_vec(&file).expect("a slot serializes");
        crate::atomic::write_atomic(&path, &text, true).map_err(io_err(&path))?;
        Ok(ExecSlot { path })
    }

    /// Writes `ticket` into `lane`; a `new` one refuses to replace a ticket that holds its
    /// number.
    fn write_ticket(&self, lane: Lane, ticket: &Ticket, new: bool) -> Result<(), StoreError> {
        let path = self.ticket_path(lane, ticket.seq);
        let text = serde_json::to_vec_pretty(ticket).expect("a ticket serializes");
        crate::atomic::write_atomic(&path, &text, new).map_err(io_err(&path))
    }
}

/// An exec slot file: which job's exec holds it and which process runs it.
#[derive(Debug, Serialize, Deserialize)]
struct ExecSlotFile {
    job: JobId,
    owner: ProcessId,
}

/// A held exec slot; dropping it frees the slot.
#[derive(Debug)]
pub struct ExecSlot {
    path: PathBuf,
}

impl Drop for ExecSlot {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        slot_freed().notify_waiters();
    }
}

/// Rung when this process frees an exec slot. The queue is shared with other processes
/// through files, which a waiter still looks at every [`POLL`]; but a daemon holds most
/// slots and most waiters itself, and a slot it frees should not sit idle for a poll (100
/// concurrent execs on a 4-slot budget waited a poll per slot: 4.8 s against Docker's 2.2).
pub fn slot_freed() -> &'static tokio::sync::Notify {
    static FREED: std::sync::OnceLock<tokio::sync::Notify> = std::sync::OnceLock::new();
    FREED.get_or_init(tokio::sync::Notify::new)
}

/// Every `*.json` file of `dir` that parses as `T` (a file being replaced or removed is
/// skipped: the next look sees it).
fn read_json_dir<T: serde::de::DeserializeOwned>(dir: &Path) -> Vec<T> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|bytes| serde_json::from_slice(&bytes).ok())
        .collect()
}

/// The pause between two looks at the queue.
pub fn poll_interval() -> Duration {
    POLL
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waiting exec of this process, armed before it looks at the queue, is woken when a
    /// slot of this process is freed: it takes the slot without waiting for a poll.
    #[tokio::test]
    async fn freeing_a_slot_wakes_the_waiting_execs_of_this_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("slot.json");
        std::fs::write(&path, "{}").unwrap();
        let freed = slot_freed().notified();
        tokio::pin!(freed);
        freed.as_mut().enable();
        drop(ExecSlot { path: path.clone() });
        assert!(!path.exists(), "the slot's file is gone");
        tokio::time::timeout(Duration::from_secs(5), freed)
            .await
            .expect("the waiter is woken");
    }

    /// Exec slots and exec tickets of processes that are gone hold nothing and are removed
    /// at the next decision; a live exec's slot holds one of the slots.
    #[test]
    fn slots_and_exec_tickets_of_dead_processes_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let home = PaddockHome::open_at(dir.path()).unwrap();
        let settings = AdmissionSettings {
            max_running_execs: Some(1),
            ..AdmissionSettings::default()
        };
        let host = HostCapacity {
            cores: 2,
            memory: 8 << 30,
        };
        let admission = Admission::open(&home, &settings, host).unwrap();
        let me = ProcessId::current().unwrap();
        let gone = ProcessId {
            start: me.start + 1,
            ..me
        };
        let job = JobId::parse("j").unwrap();
        let dead = ExecSlotFile {
            job: job.clone(),
            owner: gone,
        };
        let dead_path = admission.execs_dir.join("j.dead.json");
        std::fs::write(&dead_path, serde_json::to_vec(&dead).unwrap()).unwrap();
        let ticket = Ticket {
            schema: TICKET_SCHEMA,
            seq: 1,
            job: job.clone(),
            demand: Demand::Exec,
            owner: Some(gone),
            adoptable: false,
            queued_at: Utc::now(),
            waiter: None,
        };
        admission.write_ticket(Lane::Exec, &ticket, true).unwrap();
        let slot = admission
            .with_ledger(
                || Ok(Vec::new()),
                |ledger| {
                    assert_eq!(ledger.held().execs, 0, "a dead exec holds no slot");
                    ledger.enter_exec(&job, true, None)
                },
            )
            .unwrap()
            .expect("the one slot is free");
        assert!(matches!(slot, ExecEntry::Slot(_)));
        assert!(!dead_path.exists(), "the dead slot's file went");
        assert!(
            admission.tickets(Lane::Exec).is_empty(),
            "the dead ticket went"
        );
        let full = admission
            .with_ledger(
                || Ok(Vec::new()),
                |ledger| ledger.enter_exec(&job, true, None),
            )
            .unwrap();
        assert!(
            matches!(full, Err(AdmissionError::NoRoom { .. })),
            "{full:?}"
        );
        drop(slot);
        assert_eq!(admission.view(&[]).held.execs, 0, "a dropped slot frees it");
    }
}
