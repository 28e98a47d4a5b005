//! The job manager: the operations the CLI, the daemon and library users call.
//!
//! Each operation here is the single code path for what it does. `create` validates every
//! input before it creates anything, reserves the id with an exclusive record write, and rolls
//! back everything it made if a later step fails. `remove` snapshots uncommitted work before
//! anything is deleted and removes the record last, so a crash at any point leaves a record
//! that a later `rm` or sweep can finish.
//!
//! One file per operation: `create`, `exec` (with `run`, `stop`, `shell`), `remove`,
//! `inspect` (`list`, `show`, `diff`, `log`), `sync`, `caches`; this file holds the engine
//! itself and the shapes its operations take and return.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::Serialize;

pub use crate::config::BranchPolicy;
use crate::config::{Config, EnvLookup, ProcessEnv, ProfileLayer};
use crate::git::ChangeSummary;
use crate::job::{JobId, JobRecord, JobState, Limits};
use crate::runtime::ExecResult;
use crate::store::{JobStore, PaddockHome};

mod caches;
mod create;
mod exec;
mod inspect;
mod remove;
mod sync;
pub use create::{CRASH_POINTS, render_branch};
pub use sync::{SyncScope, Synced};

pub use crate::error::{Error, Result};

/// The inputs of `paddock create`.
#[derive(Debug, Clone, Default)]
pub struct CreateRequest {
    pub repo: PathBuf,
    pub base: Option<String>,
    pub agent: Option<String>,
    pub task: Option<String>,
    pub id: Option<String>,
    pub profile: Option<String>,
    pub reuse_branch: bool,
    /// Profile settings given as flags; they win over every other layer.
    pub overrides: ProfileLayer,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct RemoveOptions {
    pub branch_policy: BranchPolicy,
    /// Remove even when the snapshot of uncommitted work fails.
    pub force: bool,
}

/// What `remove` did.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RemoveReport {
    pub id: JobId,
    pub branch: String,
    pub branch_kept: bool,
    pub commits_ahead: usize,
    /// The wip ref holding uncommitted work, when there was any.
    pub wip_ref: Option<String>,
    pub wip_commit: Option<String>,
}

/// The JSON object of a job, printed by `create --json`, `ls --json` and `show --json`.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct JobView {
    pub id: JobId,
    pub repo: PathBuf,
    pub branch: String,
    pub base: String,
    pub base_commit: String,
    pub worktree: PathBuf,
    pub agent: String,
    pub task: Option<String>,
    pub profile: String,
    pub runtime: String,
    pub container_id: Option<String>,
    pub state: JobState,
    pub created_at: DateTime<Utc>,
    pub last_activity_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub exit_code: Option<i64>,
    pub oom_killed: bool,
    pub limits: Limits,
    pub caches: Vec<crate::cache::JobCache>,
    /// Why the last sync into the user's repository failed (null when it worked).
    pub sync_error: Option<String>,
}

impl From<&JobRecord> for JobView {
    fn from(record: &JobRecord) -> Self {
        JobView {
            id: record.id.clone(),
            repo: record.repo.clone(),
            branch: record.branch.clone(),
            base: record.base.clone(),
            base_commit: record.base_commit.clone(),
            worktree: record.worktree.clone(),
            agent: record.agent.clone(),
            task: record.task.clone(),
            profile: record.profile.clone(),
            runtime: record.runtime.to_string(),
            container_id: record.container_id.clone(),
            state: record.state,
            created_at: record.created_at,
            last_activity_at: record.last_activity_at,
            finished_at: record.finished_at,
            exit_code: record.exit_code,
            oom_killed: record.oom_killed,
            limits: record.limits.clone(),
            caches: record.caches.clone(),
            sync_error: record.sync_error.clone(),
        }
    }
}

/// `show`: the job plus what it changed.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct JobDetails {
    #[serde(rename = "job")]
    pub view: JobView,
    pub changes: Option<ChangeSummary>,
    /// Set when the worktree could not be read (for example it was deleted by hand).
    pub changes_error: Option<String>,
    pub isolation: String,
}

/// The inputs of `paddock exec` beyond the job id.
#[derive(Debug, Clone, Default)]
pub struct ExecOptions {
    pub cmd: Vec<String>,
    /// Overrides the profile's timeout for this exec.
    pub timeout: Option<std::time::Duration>,
    pub env: BTreeMap<String, String>,
    pub workdir: Option<String>,
    /// Per-stream cap on the output kept in the result (default 1 MiB).
    pub output_cap: Option<usize>,
}

/// What `paddock run` did: the job it made, the command's result and the branch's fate.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct RunReport {
    pub job: JobView,
    pub result: ExecResult,
    pub branch_kept: bool,
}

/// A new job, and the warning to show when `auto` fell back to the process runtime.
#[derive(Debug, Clone)]
pub struct Created {
    pub record: JobRecord,
    pub warning: Option<String>,
}

/// Something that happened, for subscribers (`GET /v1/events`).
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// `job.created`, `job.state`, `exec.finished`, `job.removed` or `sweep.done`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub job: Option<String>,
    pub state: Option<JobState>,
    pub at: DateTime<Utc>,
    /// Kind-specific details (the exec's exit code, the sweep's counts).
    pub detail: serde_json::Value,
}

/// The engine over one state root.
pub struct Paddock {
    home: PaddockHome,
    store: JobStore,
    env: Box<dyn EnvLookup + Send + Sync>,
    events: Option<tokio::sync::broadcast::Sender<Event>>,
}

impl Paddock {
    /// Opens the install named by the process environment (`PADDOCK_HOME`, ...).
    pub fn from_env() -> Result<Paddock> {
        Self::with_env(Box::new(ProcessEnv))
    }

    pub fn with_env(env: Box<dyn EnvLookup + Send + Sync>) -> Result<Paddock> {
        let home = PaddockHome::open(env.as_ref())?;
        let store = home.store();
        Ok(Paddock {
            home,
            store,
            env,
            events: None,
        })
    }

    /// Publishes events of every operation to `events` (the daemon's event stream).
    pub fn with_events(mut self, events: tokio::sync::broadcast::Sender<Event>) -> Paddock {
        self.events = Some(events);
        self
    }

    /// Sends an event to subscribers, if anyone listens.
    pub fn emit(
        &self,
        kind: &'static str,
        job: Option<&JobId>,
        state: Option<JobState>,
        detail: serde_json::Value,
    ) {
        if let Some(events) = &self.events {
            let _ = events.send(Event {
                kind,
                job: job.map(ToString::to_string),
                state,
                at: Utc::now(),
                detail,
            });
        }
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

impl Paddock {}
