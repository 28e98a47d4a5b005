//! Admission: a host-aware budget and one FIFO queue that every paddock process of an install
//! shares (the CLI without a daemon, the daemon, library users), so none of them can start
//! more jobs than the host holds and none double-books what another admitted.
//!
//! A job holds its share of the budget (its memory limit and CPUs) from the moment it is
//! admitted until it is removed; a running exec holds an exec slot while it runs. What is held
//! is read from the records themselves (every state but `queued` and `removed`) and from the
//! exec slot files, never from a counter that a crash could leave wrong.
//!
//! A create that does not fit, or that finds others waiting, gets a ticket: a file
//! `queue/<seq>.json` whose number orders the queue, written under `locks/admission.lock`
//! together with the job's `queued` record (execs wait for a slot without a ticket). Every decision (grant,
//! enqueue, drop) is made under that lock, so two processes never admit against the same free
//! room. A ticket whose owner process is gone no longer holds its place: the next process that
//! looks drops it (and its queued record), unless it is adoptable (made by a daemon), in which
//! case a restarted daemon takes it over with its number, so the order survives the restart.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

mod budget;

pub use crate::config::AdmissionSettings;
use crate::job::{JobId, JobRecord, ProcessId};
use crate::store::{FileLock, PaddockHome, StoreError, io_err};
pub use budget::{Budget, Demand, Held, HostCapacity, holds_share};

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
        "the host budget has no room for job `{job}` now ({needs}; {held} held of {budget}; {waiting} waiting)"
    )]
    NoRoom {
        job: JobId,
        needs: String,
        held: String,
        budget: String,
        waiting: usize,
    },
    #[error("job `{job}` can never fit the host budget: it needs {needs}, the budget is {budget}")]
    TooBig {
        job: JobId,
        needs: String,
        budget: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A place in the queue, persisted as `queue/<seq>.json`.
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
}

impl Ticket {
    fn is_live(&self) -> bool {
        self.owner.is_some_and(|owner| owner.is_alive())
    }
}

/// How a request entered: admitted at once, or queued with a ticket number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Admitted,
    Queued { seq: u64, position: usize },
}

/// The install's queue and budget.
#[derive(Debug, Clone)]
pub struct Admission {
    dir: PathBuf,
    execs_dir: PathBuf,
    lock_path: PathBuf,
    budget: Budget,
    host: HostCapacity,
}

/// What a decision under the lock sees.
pub struct Ledger<'a> {
    admission: &'a Admission,
    tickets: Vec<Ticket>,
    held: Held,
}

impl Admission {
    pub fn open(
        home: &PaddockHome,
        settings: &AdmissionSettings,
        host: HostCapacity,
    ) -> Result<Admission, StoreError> {
        let budget = Budget::new(settings, host);
        let dir = home.root().join("queue");
        let execs_dir = home.root().join("execs-running");
        for d in [&dir, &execs_dir] {
            std::fs::create_dir_all(d).map_err(io_err(d))?;
        }
        Ok(Admission {
            dir,
            execs_dir,
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

    /// Runs `decide` under the admission lock with the queue and what is held now.
    /// `records` lists the install's job records (read under the lock, so a grant another
    /// process just made is counted).
    pub fn with_ledger<T>(
        &self,
        records: impl FnOnce() -> Result<Vec<JobRecord>, StoreError>,
        decide: impl FnOnce(&mut Ledger<'_>) -> T,
    ) -> Result<T, StoreError> {
        let _lock = FileLock::acquire(&self.lock_path, LOCK_WAIT)?;
        let tickets = self.tickets();
        let records = records()?;
        let held = Held::of(&records, self.running_execs(), &self.host);
        let mut ledger = Ledger {
            admission: self,
            tickets,
            held,
        };
        Ok(decide(&mut ledger))
    }

    /// The tickets on disk, in queue order.
    pub fn tickets(&self) -> Vec<Ticket> {
        let mut tickets: Vec<Ticket> = read_json_dir(&self.dir);
        tickets.sort_by_key(|t| t.seq);
        tickets
    }

    fn ticket_path(&self, seq: u64) -> PathBuf {
        self.dir.join(format!("{seq:016}.json"))
    }

    /// Whether a ticket numbered below `seq` exists (file names only: the cheap look).
    pub fn any_before(&self, seq: u64) -> bool {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
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

    /// Drops ticket `seq` (granted, cancelled, or its owner gone).
    pub fn remove_ticket(&self, seq: u64) {
        let _ = std::fs::remove_file(self.ticket_path(seq));
    }

    fn next_seq(&self) -> Result<u64, StoreError> {
        let path = self.dir.join("next-seq");
        let last: u64 = std::fs::read_to_string(&path)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        // A lost or damaged counter must not hand out a number a waiting ticket holds.
        let highest = self.tickets().last().map_or(0, |t| t.seq);
        let next = last.max(highest) + 1;
        crate::atomic::write_atomic(&path, next.to_string().as_bytes(), false)
            .map_err(io_err(&path))?;
        Ok(next)
    }

    fn running_execs(&self) -> usize {
        read_json_dir::<ExecSlotFile>(&self.execs_dir)
            .iter()
            .filter(|slot| slot.owner.is_alive())
            .count()
    }

    /// Takes an exec slot (call only with a grant); released when the guard drops.
    pub fn take_exec_slot(&self, job: &JobId) -> Result<ExecSlot, StoreError> {
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
}

impl Ledger<'_> {
    pub fn held(&self) -> Held {
        self.held
    }

    pub fn admission(&self) -> &Admission {
        self.admission
    }

    /// An exec: whether a slot is free now; with `no_wait`, a refusal when not.
    pub fn exec_fits(&self, job: &JobId, no_wait: bool) -> Result<bool, AdmissionError> {
        if !Held::default().fits(&Demand::Exec, &self.admission.budget) {
            return Err(AdmissionError::TooBig {
                job: job.clone(),
                needs: Demand::Exec.describe(),
                budget: format!(
                    "max_running_execs: {}",
                    self.admission.budget.max_running_execs.unwrap_or(0)
                ),
            });
        }
        let fits = self.held.fits(&Demand::Exec, &self.admission.budget);
        if !fits && no_wait {
            return Err(self.no_room(job, &Demand::Exec, 0));
        }
        Ok(fits)
    }

    fn no_room(&self, job: &JobId, demand: &Demand, waiting: usize) -> AdmissionError {
        AdmissionError::NoRoom {
            job: job.clone(),
            needs: demand.describe(),
            held: self.held.describe(demand),
            budget: self.admission.budget.describe(),
            waiting,
        }
    }

    /// Live tickets ahead of `seq` (all of them for a new request). Only creates hold
    /// tickets; execs wait for a slot without one.
    fn ahead(&self, seq: Option<u64>) -> usize {
        self.tickets
            .iter()
            .filter(|t| t.is_live())
            .filter(|t| seq.is_none_or(|seq| t.seq < seq))
            .count()
    }

    /// Tickets whose owner is gone and that no daemon will adopt: the caller drops them and
    /// their queued records.
    pub fn abandoned(&self) -> Vec<Ticket> {
        self.tickets
            .iter()
            .filter(|t| !t.is_live() && !t.adoptable)
            .cloned()
            .collect()
    }

    /// Tickets a restarted daemon takes over: adoptable ones whose owner is gone.
    pub fn orphaned_adoptable(&self) -> Vec<Ticket> {
        self.tickets
            .iter()
            .filter(|t| !t.is_live() && t.adoptable)
            .cloned()
            .collect()
    }

    /// Rewrites `ticket` with this process as its owner (same number, same place).
    pub fn adopt(&mut self, ticket: &Ticket) -> Result<Ticket, StoreError> {
        let mut adopted = ticket.clone();
        adopted.owner = ProcessId::current();
        self.write_ticket(&adopted, false)?;
        Ok(adopted)
    }

    /// Writes `ticket`; a `new` one refuses to replace a ticket that holds its number.
    fn write_ticket(&self, ticket: &Ticket, new: bool) -> Result<(), StoreError> {
        let path = self.admission.ticket_path(ticket.seq);
        let text = serde_json::to_vec_pretty(ticket).expect("a ticket serializes");
        crate::atomic::write_atomic(&path, &text, new).map_err(io_err(&path))
    }

    /// A new create: admitted when nobody waits and it fits, else (unless
    /// `no_wait`) queued with a new ticket. Refused when it could never fit.
    pub fn enter(
        &mut self,
        job: &JobId,
        demand: Demand,
        no_wait: bool,
        adoptable: bool,
    ) -> Result<Entry, AdmissionError> {
        let budget = self.admission.budget;
        if !Held::default().fits(&demand, &budget) {
            return Err(AdmissionError::TooBig {
                job: job.clone(),
                needs: demand.describe(),
                budget: budget.describe(),
            });
        }
        let waiting = self.ahead(None);
        if waiting == 0 && self.held.fits(&demand, &budget) {
            return Ok(Entry::Admitted);
        }
        if no_wait {
            return Err(self.no_room(job, &demand, waiting));
        }
        let ticket = Ticket {
            schema: TICKET_SCHEMA,
            seq: self.admission.next_seq()?,
            job: job.clone(),
            demand,
            owner: ProcessId::current(),
            adoptable,
            queued_at: Utc::now(),
        };
        self.write_ticket(&ticket, true)?;
        Ok(Entry::Queued {
            seq: ticket.seq,
            position: waiting + 1,
        })
    }

    /// Whether ticket `seq` may go now: first among live tickets, and it fits.
    /// `None` when the ticket is gone (cancelled by someone else).
    pub fn may_go(&self, seq: u64) -> Option<bool> {
        let ticket = self.tickets.iter().find(|t| t.seq == seq)?;
        Some(self.ahead(Some(seq)) == 0 && self.held.fits(&ticket.demand, &self.admission.budget))
    }

    /// Whether ticket `seq` exists.
    pub fn has_ticket(&self, seq: u64) -> bool {
        self.tickets.iter().any(|t| t.seq == seq)
    }

    /// 1-based places of the live tickets, by job (for `ls` and `show`).
    pub fn positions(&self) -> Vec<(JobId, usize)> {
        // The same tickets `ahead` counts, so a position is the number of places to go.
        self.tickets
            .iter()
            .filter(|t| t.is_live())
            .zip(1..)
            .map(|(t, place)| (t.job.clone(), place))
            .collect()
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
    }
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
