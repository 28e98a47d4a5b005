//! Checkpoints, restore and fork (issue 43): the requests (clap's args, the API's bodies,
//! the engine's inputs) and what each answers.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::JobView;

/// The inputs of `checkpoint`: `paddock checkpoint` flags, the body of
/// `POST /v1/jobs/{id}/checkpoints`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, clap::Args, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointRequest {
    /// The checkpoint's name: letters, digits, `.`, `_` and `-`, at most 64, not starting
    /// with `.` or `-` (default: `cp-` and the time, e.g. `cp-20261202-142501`).
    #[arg(long)]
    #[serde(default)]
    pub name: Option<String>,
}

/// A saved checkpoint of a job (`checkpoint`, `checkpoints`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointView {
    pub job: String,
    pub name: String,
    pub created_at: DateTime<Utc>,
    /// The job's branch when it was taken.
    pub branch: String,
    /// The branch's commit then (published to the user's repository).
    pub tip: Option<String>,
    /// The commit HEAD named then (the branch's, unless the agent detached HEAD).
    pub head: String,
    /// The checkpoint commit: its tree is the workspace, its parents HEAD and the index.
    pub commit: String,
    /// The ref holding it, in `wip_store`.
    #[serde(rename = "ref")]
    pub refname: String,
    /// paddock's wip store of the repository (never mounted into a job).
    pub wip_store: PathBuf,
    /// Files that differ from HEAD (changed, added, staged or untracked), and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// The job's processes were frozen while it was taken; false: taken live (a microVM,
    /// or no sandbox was running).
    #[serde(default)]
    pub frozen: bool,
}

impl CheckpointView {
    /// The command that brings the checkpoint into the user's repository.
    pub fn fetch_command(&self) -> String {
        format!("git fetch {} {}", self.wip_store.display(), self.refname)
    }
}

/// What `checkpoints JOB` lists, oldest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CheckpointList {
    pub job: String,
    pub checkpoints: Vec<CheckpointView>,
}

/// What `checkpoint rm` did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CheckpointRemoved {
    pub job: String,
    pub name: String,
    /// False when there was no such checkpoint (nothing to do).
    pub removed: bool,
}

/// The inputs of `restore`: `paddock restore` args, the body of `POST /v1/jobs/{id}/restore`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, clap::Args, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreRequest {
    /// The checkpoint to put back.
    pub checkpoint: String,
    /// Move the job's branch back to the checkpoint's commit too (a forced update of that
    /// branch alone); without it the branch stays where it is.
    #[arg(long)]
    #[serde(default)]
    pub branch: bool,
}

/// What `restore` did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RestoreAnswer {
    pub job: String,
    pub checkpoint: String,
    /// The branch moved to the checkpoint's commit (`--branch`).
    pub branch_moved: bool,
    /// The branch's commit now.
    pub tip: Option<String>,
    /// A running exec was stopped first.
    pub stopped: bool,
}

/// The most forks one request makes.
pub const MAX_FORKS: u32 = 64;

/// The inputs of `fork`: `paddock fork` flags, the body of `POST /v1/jobs/{id}/fork`.
#[derive(Debug, Clone, Serialize, Deserialize, clap::Args, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// The checkpoint to start from (default: a new checkpoint of the job now, named
    /// `fork-` and the time).
    #[arg(long, value_name = "CHECKPOINT")]
    #[serde(default)]
    pub from: Option<String>,
    /// How many jobs to make (1 to 64); each waits for room in the host budget as a create
    /// does.
    #[arg(short = 'n', long = "count", default_value_t = 1)]
    #[serde(default = "one")]
    pub count: u32,
    /// The new jobs' task (default: the source job's).
    #[arg(long)]
    #[serde(default)]
    pub task: Option<String>,
    /// Fail at once instead of waiting in the queue when the host budget has no room.
    #[arg(long)]
    #[serde(default)]
    pub no_wait: bool,
    /// The CLI's queue tag (see `CreateRequest::waiter`).
    #[arg(skip)]
    #[serde(skip)]
    #[schemars(skip)]
    pub waiter: Option<String>,
}

fn one() -> u32 {
    1
}

impl Default for ForkRequest {
    fn default() -> Self {
        ForkRequest {
            from: None,
            count: 1,
            task: None,
            no_wait: false,
            waiter: None,
        }
    }
}

/// What `fork` made.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForkAnswer {
    pub source: String,
    pub checkpoint: CheckpointView,
    pub jobs: Vec<JobView>,
}
