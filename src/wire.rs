//! The request and response types of paddock's operations, in one place: what the CLI's
//! `--json` prints, what the HTTP API takes and returns, what the daemon client sends, what
//! `docs/openapi.yaml` describes. A field is added here (and used by the engine), and every
//! front end has it.
//!
//! [`CreateRequest`] is at once clap's arguments of `paddock create`, the JSON body of
//! `POST /v1/jobs` and the engine's input. The JSON shapes are stable: fields are only added.

use std::collections::BTreeMap;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::{
    BranchPolicy, CheckoutMode, NetworkMode, ProfileLayer, Reserve, ReserveLayer, RuntimeChoice,
};
pub use crate::disk::DiskUsage;
use crate::egress::AllowEntry;
pub use crate::git::ChangeSummary;
pub use crate::job::PublishedPort;
use crate::job::{JobId, JobRecord, JobState, Limits};
use crate::units::{ByteSize, Cpus, HumanDuration};

pub use crate::git::merge::ConflictFile;
pub use crate::job::ForkedFrom;
pub use checkpoint::{
    CheckpointList, CheckpointRemoved, CheckpointRequest, CheckpointView, ForkAnswer, ForkRequest,
    MAX_FORKS, RestoreAnswer, RestoreRequest,
};
pub use dashboard::{DashboardLease, DashboardRequest};
pub use files::{
    FILE_CAP, FileBytes, FileEntry, FileKind, FileList, FileReader, FileWritten, cut_short,
};
pub use inspect::{JobDetails, JobDiff, OutsideHistory};
pub use merges::{
    ApplyReport, ConflictsQuery, ConflictsReport, JobConflicts, JobPair, MergeReport, MergeRequest,
    MergeStatus, MergeStrategy, PushReport, PushRequest,
};
pub use remove::RemoveReport;
pub use users::{EXEC_SERVER_ID, ExecUser, UnknownUser};

mod checkpoint;
mod dashboard;
mod files;
mod inspect;
mod labels;
mod merges;
mod pool;
mod remove;
mod users;
pub use crate::admission::{AdmissionView, Budget, Held, HostCapacity, WaitKind, Waiter};
pub use crate::git::sync::WorkState;
pub use crate::git::{CommitInfo, FileChange};
pub use crate::runtime::exec::ExecResult;
pub use labels::Label;
use labels::label_map;
pub use pool::{PoolChange, PoolSlotView};

/// The request header of `POST /v1/jobs` and `POST /v1/jobs/{id}/exec` that carries the
/// caller's waiter tag ([`CreateRequest::waiter`], [`ExecOptions::waiter`]).
pub const WAITER_HEADER: &str = "x-paddock-waiter";

/// The inputs of `create`: `paddock create` flags, the body of `POST /v1/jobs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, clap::Args, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRequest {
    /// The repository to branch from.
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// The ref to branch from (default: the repo file's `base`, else HEAD).
    #[arg(long)]
    #[serde(default)]
    pub base: Option<String>,
    /// The agent's name (goes into the branch name and routing).
    #[arg(long)]
    #[serde(default)]
    pub agent: Option<String>,
    /// The task id (goes into the branch name and routing).
    #[arg(long)]
    #[serde(default)]
    pub task: Option<String>,
    /// The job id (default: a slug of the task and a random suffix).
    #[arg(long)]
    #[serde(default)]
    pub id: Option<String>,
    /// The profile to use (default: routing, then `default_profile`).
    #[arg(long)]
    #[serde(default)]
    pub profile: Option<String>,
    /// Check out the branch if it already exists instead of failing.
    #[arg(long)]
    #[serde(default)]
    pub reuse_branch: bool,
    /// auto | docker | runc | runsc | process | microvm.
    #[arg(long)]
    #[serde(default, with = "by_text")]
    #[schemars(with = "Option<String>")]
    pub runtime: Option<RuntimeChoice>,
    /// worktree | overlay: the job's own checkout, or an overlay mount of a shared
    /// read-only checkout of the commit (Linux; kernel overlayfs as root, fuse-overlayfs
    /// otherwise).
    #[arg(long)]
    #[serde(default, with = "by_text")]
    #[schemars(with = "Option<String>")]
    pub checkout: Option<CheckoutMode>,
    #[arg(long)]
    #[serde(default)]
    pub image: Option<String>,
    /// Memory limit, e.g. 512m or 2g.
    #[arg(long)]
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub memory: Option<ByteSize>,
    /// The most the job may write on the host (its checkout's changes, git dir and outbox),
    /// e.g. 10g: writing past it fails inside the job with "No space left on device".
    /// Implies `--checkout overlay` (root only; a loop-mounted ext4 image per job).
    #[arg(long)]
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub disk: Option<ByteSize>,
    /// CPU limit, e.g. 1.5.
    #[arg(long)]
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub cpus: Option<Cpus>,
    /// CPUs the job holds of the host budget while it exists, e.g. 0.25 (default: the
    /// profile's `reserve.cpus`; at most `--cpus`). A reserve, not a cap.
    #[arg(long, value_name = "CPUS")]
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub reserve_cpus: Option<Cpus>,
    /// Memory the job holds of the host budget while it exists, e.g. 512m (default: the
    /// profile's `reserve.memory`; at most `--memory`). A reserve, not a cap.
    #[arg(long, value_name = "SIZE")]
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub reserve_memory: Option<ByteSize>,
    /// Process count limit.
    #[arg(long)]
    #[serde(default)]
    pub pids: Option<u32>,
    /// none | allowlist | open (`bridge` is accepted for open).
    #[arg(long)]
    #[serde(default, with = "by_text")]
    #[schemars(with = "Option<String>")]
    pub network: Option<NetworkMode>,
    /// With `--network allowlist`: a destination the job may reach, HOST[:PORT], *.DOMAIN,
    /// IP or CIDR (repeatable; ports 80 and 443 when none is given). Implies allowlist.
    #[arg(long = "allow", value_name = "HOST[:PORT]")]
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub allow: Vec<AllowEntry>,
    /// A port inside the job to serve to the host on a free loopback port paddock chooses
    /// (repeatable; `paddock port JOB PORT` prints the address). The job's server must listen
    /// on all its addresses (0.0.0.0), as with `docker run -p`.
    #[arg(long = "port", value_name = "PORT")]
    #[serde(default)]
    pub ports: Vec<u16>,
    /// A secret of the user config (repeatable): the job sees a placeholder. Implies allowlist.
    #[arg(long = "secret", value_name = "NAME")]
    #[serde(default)]
    pub secrets: Vec<String>,
    /// An engine of the user config's `engines:` to run the job on (its files live there, in
    /// its volumes), or `auto`: the one with the most free budget; default: the local engine.
    #[arg(long, value_name = "NAME")]
    #[serde(default)]
    pub engine: Option<String>,
    /// The job's per-exec deadline default, e.g. 10m.
    #[arg(long)]
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub timeout: Option<HumanDuration>,
    /// A label for the orchestrator's bookkeeping, KEY=VALUE (repeatable); shown by `ls`
    /// and `show`, kept with the job.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    #[serde(default, with = "label_map")]
    #[schemars(with = "BTreeMap<String, String>")]
    pub labels: Vec<Label>,
    /// Start from a checkpoint of a job, JOB:CHECKPOINT (its files, index and commits; the
    /// base defaults to the checkpoint's HEAD): what `paddock fork` does for each new job.
    #[arg(long, value_name = "JOB:CHECKPOINT")]
    #[serde(default)]
    pub from_checkpoint: Option<String>,
    /// Fail at once (exit 10; HTTP 429) instead of waiting in the queue when the host budget
    /// has no room for the job.
    #[arg(long)]
    #[serde(default)]
    pub no_wait: bool,
    /// A tag the caller finds its place in the queue by (`AdmissionView::waiting`): the
    /// CLI's, to say on a terminal that it waits. Not in the body (the daemon takes it from
    /// the `X-Paddock-Waiter` header), so it never changes what an idempotency key names.
    #[arg(skip)]
    #[serde(skip)]
    #[schemars(skip)]
    pub waiter: Option<String>,
}

impl CreateRequest {
    /// The profile settings this request gives; they win over every other layer.
    pub fn overrides(&self) -> ProfileLayer {
        ProfileLayer {
            image: self.image.clone(),
            runtime: self.runtime,
            checkout: self.checkout,
            memory: self.memory,
            disk: self.disk,
            cpus: self.cpus,
            reserve: (self.reserve_cpus.is_some() || self.reserve_memory.is_some()).then_some(
                ReserveLayer {
                    cpus: self.reserve_cpus,
                    memory: self.reserve_memory,
                },
            ),
            pids: self.pids,
            // `--allow` alone means allowlist.
            network: self
                .network
                .or((!self.allow.is_empty()).then_some(NetworkMode::Allowlist)),
            allow: (!self.allow.is_empty()).then(|| self.allow.clone()),
            ports: (!self.ports.is_empty()).then(|| self.ports.clone()),
            timeout: self.timeout,
            ..ProfileLayer::default()
        }
    }
}

/// Enums whose JSON form is their text form (`"runc"` is accepted as `docker`, as on the
/// command line).
mod by_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<T: std::fmt::Display, S: Serializer>(
        value: &Option<T>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(value) => serializer.collect_str(value),
            None => serializer.serialize_none(),
        }
    }

    pub fn deserialize<'de, T, D>(deserializer: D) -> Result<Option<T>, D::Error>
    where
        T: std::str::FromStr,
        T::Err: std::fmt::Display,
        D: Deserializer<'de>,
    {
        Option::<String>::deserialize(deserializer)?
            .map(|text| text.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// A change to a live `allowlist` job's network: the body of `POST /v1/jobs/{id}/network`
/// and the flags of `paddock net`. Entries are removed (`deny`, matching entry and port;
/// without a port every port of it), then added (`allow`); `network: none` first removes
/// every entry (the job keeps its proxy and reaches nothing).
#[derive(Debug, Clone, Default, Serialize, Deserialize, clap::Args)]
pub struct NetworkChange {
    /// Add an allow-list entry, HOST[:PORT], *.DOMAIN, IP or CIDR (repeatable).
    #[arg(long = "allow", value_name = "HOST[:PORT]")]
    #[serde(default)]
    pub allow: Vec<AllowEntry>,
    /// Remove an entry (repeatable).
    #[arg(long = "deny", value_name = "HOST[:PORT]")]
    #[serde(default)]
    pub deny: Vec<AllowEntry>,
    /// `none` removes every entry first.
    #[arg(long)]
    #[serde(default, with = "by_text")]
    pub network: Option<NetworkMode>,
}

/// The content type of an exec whose standard input streams in the request's body: the
/// body's first line is the exec's [`ExecOptions`] as JSON, and every byte after that
/// line's `\n` is the command's standard input, fed to it as it arrives (the end of the
/// body is the end of the input).
pub const STDIN_STREAM_TYPE: &str = "application/x-paddock-exec-stdin";

/// The inputs of `exec` beyond the job id: the body of `POST /v1/jobs/{id}/exec`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecOptions {
    pub cmd: Vec<String>,
    /// Overrides the profile's timeout for this exec, e.g. `30s`.
    #[serde(default)]
    pub timeout: Option<HumanDuration>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub workdir: Option<String>,
    /// Fail at once instead of waiting when every exec slot is busy
    /// (`admission.max_running_execs`).
    #[serde(default)]
    pub no_wait: bool,
    /// A paused job is resumed first (else the exec is refused).
    #[serde(default)]
    pub resume: bool,
    /// The command's standard input, as text (at most the body limit, 1 MiB; larger input
    /// is streamed: see [`STDIN_STREAM_TYPE`]). Without it the command reads end-of-file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// The command's standard input as base64, for bytes that are not text (not with
    /// `stdin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin_base64: Option<String>,
    /// Who the command runs as: `agent` (the default), `root` or `UID[:GID]`; other than
    /// the agent only where the runtime contains root (gVisor, the microVM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<ExecUser>,
    /// A standard input streamed as it comes (the CLI's `-i`, the API's streamed body);
    /// not on the wire as a field.
    #[serde(skip)]
    pub stdin_stream: crate::runtime::exec::ExecStdin,
    /// Per-stream cap on the output kept in the result (default 1 MiB); not on the wire.
    #[serde(skip)]
    pub output_cap: Option<usize>,
    /// The caller's tag for its place in the exec queue (see `CreateRequest::waiter`); the
    /// daemon takes it from the `X-Paddock-Waiter` header.
    #[serde(skip)]
    pub waiter: Option<String>,
}

/// The inputs of `rm` beyond the job id.
#[derive(Debug, Clone, Copy, Default)]
pub struct RemoveOptions {
    pub branch_policy: BranchPolicy,
    /// Remove even when the snapshot of uncommitted work fails.
    pub force: bool,
}

impl RemoveOptions {
    /// The options of `rm`'s flags (and the same fields of the API, MCP and dashboard):
    /// `--delete-branch` and `--keep-branch` win over a policy named, which wins over the
    /// default (delete only a branch without commits).
    pub fn from_flags(
        delete_branch: bool,
        keep_branch: bool,
        policy: Option<BranchPolicy>,
        force: bool,
    ) -> RemoveOptions {
        let branch_policy = if delete_branch {
            BranchPolicy::Delete
        } else if keep_branch {
            BranchPolicy::Keep
        } else {
            policy.unwrap_or_default()
        };
        RemoveOptions {
            branch_policy,
            force,
        }
    }
}

/// The JSON object of a job, printed by `create --json`, `ls --json` and `show --json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// The job's container's name (`paddock-<install>-<job>`; `paddock-<job>` for jobs made
    /// before names carried the install); null for process jobs.
    #[serde(default)]
    pub container_name: Option<String>,
    pub state: JobState,
    pub created_at: DateTime<Utc>,
    pub last_activity_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub exit_code: Option<i64>,
    pub oom_killed: bool,
    pub limits: Limits,
    /// What the job holds of the host budget while it exists (its limits are caps).
    #[serde(default)]
    pub reserve: Reserve,
    pub caches: Vec<crate::cache::JobCache>,
    /// Why the last sync into the user's repository failed (null when it worked).
    pub sync_error: Option<String>,
    /// Why the last `push: on-sync` push failed (absent when it worked, or none ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_error: Option<String>,
    /// What the repository's devcontainer.json gave the job: read, ignored, unsupported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devcontainer: Option<crate::devcontainer::DevcontainerReport>,
    /// The labels given at create.
    pub labels: BTreeMap<String, String>,
    /// While `queued`: the job's place in the admission queue (1 = next).
    #[serde(default)]
    pub queue_position: Option<usize>,
    /// Where the job's ports are served on the host (`limits.ports` asked for them).
    #[serde(default)]
    pub ports: Vec<PublishedPort>,
    /// The untracked files copied in from the user's checkout at create (`copy`).
    #[serde(default)]
    pub copied: Vec<String>,
    /// The setup commands run at create and what each did (`setup`).
    #[serde(default)]
    pub setup: Vec<crate::job::SetupRun>,
    /// Whether the job's branch has commits and all their changes are in its base branch
    /// (also after a squash or rebase merge); null when unknown (`ls`, `show`).
    #[serde(default)]
    pub merged: Option<bool>,
    /// Whether the job's branch would conflict with its base branch now; null when unknown
    /// (`ls`, `show`; `paddock conflicts` lists the files).
    #[serde(default)]
    pub conflicts: Option<bool>,
    /// With a profile that has a warm pool: `{"start": "warm", "slot": ID}` when the job's
    /// container came from the pool, `{"start": "cold", "reason": TEXT}` when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<crate::job::PoolStart>,
    /// The job's disk limit and what the job holds of it (checkout changes, git dir and
    /// outbox); null without a limit.
    #[serde(default)]
    pub disk: Option<DiskUsage>,
    /// Without a limit: the size of the job's git disk (its git dir and outbox, a container
    /// job made as root) and what they hold of it; absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_disk: Option<DiskUsage>,
    /// The engine of `engines:` the job lives on; absent: the local one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// With an engine: `reachable`, or `unreachable` when it did not answer now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_status: Option<String>,
    /// With an engine and ports: `running` when this host's relay of the job's ports runs,
    /// else `not running` (the next exec starts it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_relay: Option<String>,
    /// Since when the job's processes are frozen (`pause`); absent while they run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at: Option<DateTime<Utc>>,
    /// The job and checkpoint this job was forked from (`fork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkedFrom>,
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
            container_name: record.container_name.clone(),
            state: record.state,
            created_at: record.created_at,
            last_activity_at: record.last_activity_at,
            finished_at: record.finished_at,
            exit_code: record.exit_code,
            oom_killed: record.oom_killed,
            limits: record.limits.clone(),
            reserve: record.reserve(),
            caches: record.caches.clone(),
            sync_error: record.sync_error.clone(),
            push_error: record.push_error.clone(),
            devcontainer: record.devcontainer.clone(),
            labels: record.labels.clone(),
            queue_position: None,
            ports: record.ports.clone(),
            copied: record.copied.clone(),
            setup: record.setup.clone(),
            merged: None,
            conflicts: None,
            pool: record.pool.clone(),
            disk: record.disk.map(DiskUsage::unmounted),
            git_disk: record.git_disk.map(DiskUsage::unmounted),
            engine: record.engine.clone(),
            engine_status: None,
            port_relay: None,
            paused_at: record.paused_at,
            forked_from: record.forked_from.clone(),
        }
    }
}

/// What `pause` and `resume` left: whether the job's processes are frozen, and since when.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PauseAnswer {
    pub id: String,
    pub paused: bool,
    /// When the job was paused; absent once it runs again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
}

/// What `paddock run` did: the job it made, the command's result and the branch's fate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    pub job: JobView,
    pub result: ExecResult,
    pub branch_kept: bool,
}

/// What an event is about. The JSON names (`job.created`, ...) are stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    #[serde(rename = "job.created")]
    JobCreated,
    #[serde(rename = "job.state")]
    JobState,
    #[serde(rename = "exec.finished")]
    ExecFinished,
    #[serde(rename = "job.removed")]
    JobRemoved,
    #[serde(rename = "job.sync_failed")]
    SyncFailed,
    #[serde(rename = "job.branch_rewritten")]
    BranchRewritten,
    #[serde(rename = "sweep.done")]
    SweepDone,
    /// The egress proxy of an `allowlist` job refused a connection (host, port, reason).
    #[serde(rename = "egress.denied")]
    EgressDenied,
    /// A job's branch started to conflict with its base branch (`detail.files`).
    #[serde(rename = "job.conflict")]
    JobConflict,
    /// A job's branch that conflicted with its base merges cleanly again.
    #[serde(rename = "job.conflict_resolved")]
    JobConflictResolved,
    /// A job's branch was pushed (`detail.remote`, `ref`, `old`, `new`, `forced`).
    #[serde(rename = "job.pushed")]
    JobPushed,
    /// A `push: on-sync` push failed (`detail.error`).
    #[serde(rename = "job.push_failed")]
    PushFailed,
    /// Not a happening: the first event of a replay that asked for events older than the
    /// oldest kept one (`detail.oldest`); the ones before it are gone.
    #[serde(rename = "reset")]
    Reset,
    /// A checkpoint of a job was saved (`checkpoint`, or the one a `fork` takes).
    #[serde(rename = "job.checkpointed")]
    JobCheckpointed,
    /// A job's workspace was put back to a checkpoint (`restore`).
    #[serde(rename = "job.restored")]
    JobRestored,
    /// New jobs were made from a checkpoint of a job (`fork`; the event is the source's).
    #[serde(rename = "job.forked")]
    JobForked,
    /// A job's processes were frozen (`pause`).
    #[serde(rename = "job.paused")]
    JobPaused,
    /// A paused job's processes were thawed (`resume`).
    #[serde(rename = "job.resumed")]
    JobResumed,
}

impl EventKind {
    /// The event's stable name (`job.created`, ...), as in its JSON and the SSE `event:` line.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::JobCreated => "job.created",
            EventKind::JobState => "job.state",
            EventKind::ExecFinished => "exec.finished",
            EventKind::JobRemoved => "job.removed",
            EventKind::SyncFailed => "job.sync_failed",
            EventKind::BranchRewritten => "job.branch_rewritten",
            EventKind::SweepDone => "sweep.done",
            EventKind::EgressDenied => "egress.denied",
            EventKind::JobConflict => "job.conflict",
            EventKind::JobConflictResolved => "job.conflict_resolved",
            EventKind::JobPushed => "job.pushed",
            EventKind::PushFailed => "job.push_failed",
            EventKind::Reset => "reset",
            EventKind::JobCheckpointed => "job.checkpointed",
            EventKind::JobRestored => "job.restored",
            EventKind::JobForked => "job.forked",
            EventKind::JobPaused => "job.paused",
            EventKind::JobResumed => "job.resumed",
        }
    }
}

/// Something that happened, for subscribers (`GET /v1/events`, `paddock events`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Event {
    /// Increases by one with every event of this install, never reused (the SSE `id:`).
    /// A `reset` carries the id just before the oldest kept event.
    pub id: u64,
    #[serde(rename = "type")]
    pub kind: EventKind,
    pub job: Option<String>,
    pub state: Option<JobState>,
    pub at: DateTime<Utc>,
    /// Kind-specific details (the exec's exit code, the sweep's counts).
    pub detail: serde_json::Value,
}

/// Which events to read: `GET /v1/events` and `paddock events`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EventQuery {
    /// Events with a larger id. Unset: from now on when following, else every kept event.
    /// Older than the oldest kept event: a `reset` event comes first.
    #[serde(default)]
    pub since: Option<u64>,
    /// Only the events of this job (a `reset` always comes).
    #[serde(default)]
    pub job: Option<String>,
    /// Keep waiting for new events after the replay.
    #[serde(default)]
    pub follow: bool,
}

/// Whether an exec still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecState {
    Running,
    Finished,
    /// The process that ran it ended without recording a result (a killed daemon).
    Lost,
}

/// One exec of a job, as persisted in `logs/<job>/execs/<exec>.json`: `GET
/// /v1/jobs/{id}/execs[/{exec}]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecInfo {
    pub schema: u32,
    /// `x-` and 12 hex digits.
    pub id: String,
    pub job: String,
    pub command: Vec<String>,
    pub state: ExecState,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// The result once finished (null while running, or when paddock could not run it).
    pub result: Option<ExecResult>,
    /// Why paddock could not run it.
    pub error: Option<String>,
    /// Bytes of the output log (`.../output`) so far.
    #[serde(default)]
    pub output_bytes: u64,
    /// The process that runs it (to tell a lost exec from a running one).
    pub pid: u32,
    /// Its deadline after `started_at` (timeout plus grace), in milliseconds.
    pub deadline_ms: u64,
}
