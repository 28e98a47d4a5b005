//! The job manager: the operations the CLI, the daemon and library users call.
//!
//! Each operation here is the single code path for what it does. `create` validates every
//! input before it creates anything, reserves the id with an exclusive record write, and rolls
//! back everything it made if a later step fails. `remove` snapshots uncommitted work before
//! anything is deleted and removes the record last, so a crash at any point leaves a record
//! that a later `rm` or sweep can finish.
//!
//! One file per operation: `create`, `exec` (with `run`, `stop`, `shell`), `execs` (each
//! exec's kept status and output), `events` (reading the event history), `remove`, `inspect`
//! (`list`, `show`, `diff`, `log`), `sync` (with `piggyback`, the sync in an exec's own
//! session), `caches`, `setup` (a new job's `copy` and `setup`, the last steps of `create`),
//! `files` (the file API), `places` (a job's `Place`: where its files live, made, read back
//! and removed), `conflicts` (conflicts and the merged mark), `merge` (with
//! `apply`); this file holds the engine itself, `emit` (every event goes to the install's
//! event log), and the shapes its operations take and return.

use std::path::Path;

use chrono::Utc;

pub use crate::config::BranchPolicy;
use crate::config::{Config, EnvLookup, ProcessEnv};
use crate::eventlog::EventLog;
use crate::job::{JobId, JobRecord, JobState};
use crate::runtime::{Runtime, Runtimes};
use crate::store::{JobStore, PaddockHome};

mod admit;
pub use admit::ClientGone;
mod caches;
mod checkout;
mod checkpoint;
mod conflicts;
mod create;
pub mod devcontainer;
mod events;
mod exec;
mod execs;
mod files;
mod files_inside;
mod fork;
mod freeze;
mod history;
mod inspect;
mod merge;
mod network;
mod outbox;
mod output_log;
mod piggyback;
mod placement;
mod places;
mod pool;
mod pool_remote;
pub use pool::PoolKey;
#[cfg(test)]
mod checkpoint_tests;
mod failpoints;
mod files_remote;
pub(crate) mod port_relay;
mod ports;
mod push;
mod remote;
mod remote_prep;
mod remove;
mod restore;
mod setup;
mod stage_clock;
mod sync;
#[cfg(test)]
mod tests;
pub use create::render_branch;
pub use events::EventFeed;
pub use execs::{ExecOutput, OUTPUT_LIMIT};
pub use failpoints::{CHECKPOINT_CRASH_POINTS, CRASH_POINTS, FAIL_POINTS};
pub use files::FILE_CAP;
pub use inspect::LiveStatus;
pub use sync::{SyncScope, Synced};

pub use crate::error::{Error, Result};

pub use crate::wire::{
    CreateRequest, Event, EventKind, EventQuery, ExecInfo, ExecOptions, ExecState, JobDetails,
    JobView, NetworkChange, RemoveOptions, RemoveReport, RunReport,
};

/// A new job, and the warning to show when `auto` fell back to the process runtime.
#[derive(Debug, Clone)]
pub struct Created {
    pub record: JobRecord,
    pub warning: Option<String>,
}

/// The engine over one state root.
pub struct Paddock {
    home: PaddockHome,
    store: JobStore,
    env: Box<dyn EnvLookup + Send + Sync>,
    events: Option<tokio::sync::broadcast::Sender<Event>>,
    event_log: EventLog,
    runtimes: Runtimes,
    /// A daemon: its queued creates outlive it (a restarted daemon adopts them).
    adopts_queue: bool,
    /// Bounds the creates built at once (checkouts are CPU and disk bound); admitted
    /// creates beyond it wait here, after the admission queue.
    build_slots: Option<std::sync::Arc<tokio::sync::Semaphore>>,
    /// Set when a daemon stops: its queued creates keep their places for the next one.
    stopping: std::sync::atomic::AtomicBool,
    /// A daemon's refill task: pools to refill after a claim (a CLI process starts a
    /// detached `paddock pool fill` instead).
    pool_refills: Option<tokio::sync::mpsc::UnboundedSender<PoolKey>>,
    /// `push: on-sync` pushes in flight, each with whether another sync asked for one more
    /// (`engine/push.rs`).
    pushes: std::sync::Mutex<std::collections::HashMap<JobId, bool>>,
}

impl Paddock {
    /// Opens the install named by the process environment (`PADDOCK_HOME`, ...).
    pub fn from_env() -> Result<Paddock> {
        Self::with_env(Box::new(ProcessEnv))
    }

    pub fn with_env(env: Box<dyn EnvLookup + Send + Sync>) -> Result<Paddock> {
        let home = PaddockHome::open(env.as_ref())?;
        let store = home.store();
        let runtimes = Runtimes::new(&home);
        Ok(Paddock {
            event_log: EventLog::new(home.events_dir()),
            home,
            store,
            env,
            events: None,
            runtimes,
            adopts_queue: false,
            build_slots: None,
            stopping: std::sync::atomic::AtomicBool::new(false),
            pool_refills: None,
            pushes: std::sync::Mutex::default(),
        })
    }

    /// Sends the pools to refill after each claim to `refills` (the daemon's refill task).
    pub fn with_pool_refills(
        mut self,
        refills: tokio::sync::mpsc::UnboundedSender<PoolKey>,
    ) -> Paddock {
        self.pool_refills = Some(refills);
        self
    }

    /// Publishes events of every operation to `events` (the daemon's event stream).
    pub fn with_events(mut self, events: tokio::sync::broadcast::Sender<Event>) -> Paddock {
        self.events = Some(events);
        self
    }

    /// Makes this engine a daemon's: its queued creates are kept for the next daemon when it
    /// dies, instead of being dropped with it (see [`Paddock::adopt_queued`]).
    pub fn as_daemon(mut self) -> Paddock {
        self.adopts_queue = true;
        self
    }

    /// A daemon stopping: its queued creates stop waiting and keep their places (ticket and
    /// record) for the next daemon, instead of being cancelled with their requests.
    pub fn stop_queue(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Builds at most `slots` admitted creates at once (the daemon's
    /// `--max-concurrent-creates`).
    pub fn with_build_limit(mut self, slots: usize) -> Paddock {
        self.build_slots = Some(std::sync::Arc::new(tokio::sync::Semaphore::new(
            slots.max(1),
        )));
        self
    }

    /// Runs jobs with `runtimes` instead of the real ones (a test double, say).
    pub fn with_runtimes(mut self, runtimes: Runtimes) -> Paddock {
        self.runtimes = runtimes;
        self
    }

    /// The runtimes this engine runs jobs with.
    pub fn runtimes(&self) -> &Runtimes {
        &self.runtimes
    }

    /// The runtime of `record`'s job.
    pub(crate) fn runtime_of(&self, record: &JobRecord) -> std::sync::Arc<dyn Runtime> {
        self.runtimes.of_job(record)
    }

    /// Records an event in the install's event log (which gives it its id) and publishes it
    /// to the daemon's subscribers, in id order. A log that cannot be written costs the
    /// event, never the operation.
    pub fn emit(
        &self,
        kind: EventKind,
        job: Option<&JobId>,
        state: Option<JobState>,
        detail: serde_json::Value,
    ) {
        let detail = crate::eventlog::bounded_detail(detail);
        let written = self.event_log.append(
            |id| Event {
                id,
                kind,
                job: job.map(ToString::to_string),
                state,
                at: Utc::now(),
                detail,
            },
            |event| {
                if let Some(events) = &self.events {
                    let _ = events.send(event.clone());
                }
            },
        );
        if let Err(error) = written {
            tracing::warn!(%error, kind = kind.name(), "event not recorded");
        }
    }

    /// The install's event log.
    pub fn event_log(&self) -> &EventLog {
        &self.event_log
    }

    pub fn home(&self) -> &PaddockHome {
        &self.home
    }

    pub fn store(&self) -> &JobStore {
        &self.store
    }

    /// The effective configuration for a repository (or for none).
    pub fn config(&self, repo_root: Option<&Path>) -> Result<Config> {
        Ok(Config::load(repo_root, self.env.as_ref())?)
    }

    pub fn load(&self, id: &str) -> Result<JobRecord> {
        Ok(self.store.load(id)?)
    }
}
