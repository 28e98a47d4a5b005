//! The job model: ids, the lifecycle state machine and the persisted record.
//!
//! Every state change goes through [`JobRecord::transition`], the one place that knows which
//! moves are allowed. The record is versioned (`schema`) so a newer paddock can refuse or
//! migrate an older file instead of misreading it.

use std::fmt;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::config::{KillPolicy, NetworkMode};
pub use crate::ids::random_hex;
use crate::units::{ByteSize, Cpus, HumanDuration};

/// The record layout this build writes and reads.
pub const RECORD_SCHEMA: u32 = 2;
/// Records of schema 1 are jobs whose worktree was a linked worktree of the user's repository
/// (before private git dirs); they are still read, so they can be removed without losing work.
pub const LEGACY_RECORD_SCHEMA: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(
        "invalid job id `{id}`: use 1 to 63 lowercase letters, digits, `.`, `_` or `-`, starting with a letter or digit"
    )]
    InvalidId { id: String },
    #[error("job `{id}` cannot go from {from} to {to}")]
    Transition {
        id: String,
        from: JobState,
        to: JobState,
    },
}

/// A validated job id: `^[a-z0-9][a-z0-9._-]{0,62}$`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobId(String);

impl JobId {
    pub fn parse(id: &str) -> Result<JobId, JobError> {
        let mut chars = id.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let rest_ok = chars
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'));
        if first_ok && rest_ok && id.len() <= 63 {
            Ok(JobId(id.to_string()))
        } else {
            Err(JobError::InvalidId { id: id.to_string() })
        }
    }

    /// A fresh id: a slug of `hint` (the task, else the agent) and a short random suffix.
    pub fn generate(hint: &str) -> JobId {
        let mut slug = String::new();
        for c in hint.chars() {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                slug.push(c);
            } else if !slug.ends_with('-') && !slug.is_empty() {
                slug.push('-');
            }
        }
        slug.truncate(48);
        let slug = slug.trim_end_matches('-');
        let slug = if slug.is_empty() { "job" } else { slug };
        JobId(format!("{slug}-{}", random_hex(6)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for JobId {
    type Error = JobError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        JobId::parse(&value)
    }
}

impl From<JobId> for String {
    fn from(id: JobId) -> String {
        id.0
    }
}

/// A valid id reads as the `&str` the engine's operations take (their ids from outside are
/// parsed again there; see `store::JobStore::load`).
impl std::ops::Deref for JobId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a job is in its life.
///
/// ```text
/// queued → creating → ready → running → exited | failed | timed-out → removed
///                                ↑______________________|   (another exec)
/// ```
///
/// `queued`: waiting for room in the host budget (see `admission`); nothing but the record
/// exists yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, strum::Display)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum JobState {
    Queued,
    Creating,
    Ready,
    Running,
    Exited,
    Failed,
    TimedOut,
    Removed,
}

impl JobState {
    /// The one table of allowed moves. Staying in a state is always allowed (a repeated
    /// action after a crash must not fail on its own earlier success).
    pub fn can_become(self, to: JobState) -> bool {
        use JobState::*;
        if self == to {
            return true;
        }
        match self {
            Queued => matches!(to, Creating | Removed),
            Creating => matches!(to, Ready | Failed | Removed),
            Ready => matches!(to, Running | Failed | Removed),
            Running => matches!(to, Exited | Failed | TimedOut),
            Exited | Failed | TimedOut => matches!(to, Running | Failed | Removed),
            Removed => false,
        }
    }

    /// Finished states: the last command has ended and nothing runs.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            JobState::Exited | JobState::Failed | JobState::TimedOut
        )
    }
}

/// The execution runtime a job was given, after `auto` was resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::Display)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum RuntimeKind {
    Docker,
    Runsc,
    Process,
    /// One QEMU virtual machine per job, with a kernel of its own (`runtime::microvm`).
    Microvm,
}

/// The limits and settings a job was created with, frozen into its record so a container can
/// be recreated identically later.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub image: String,
    pub memory: ByteSize,
    pub cpus: Cpus,
    pub pids: u32,
    pub network: NetworkMode,
    /// With `network: allowlist`: what the job may reach (see `egress::policy`).
    #[serde(default)]
    pub allow: Vec<crate::egress::AllowEntry>,
    pub timeout: HumanDuration,
    pub kill_policy: KillPolicy,
    /// `writable`: the job's sandbox has a writable root layer of its own (runsc, microvm).
    #[serde(default, skip_serializing_if = "crate::config::RootFs::is_read_only")]
    pub rootfs: crate::config::RootFs,
    pub grace: HumanDuration,
    pub workspace_dir: String,
    pub uid: u32,
    pub env: std::collections::BTreeMap<String, String>,
    /// Ports inside the job served to the host (see `JobRecord::ports` for where).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    /// Secrets the job's proxy holds (placeholders and sources, never values).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<crate::secrets::JobSecrets>,
}

impl From<&crate::config::Profile> for Limits {
    fn from(profile: &crate::config::Profile) -> Limits {
        Limits {
            image: profile.image.value.clone(),
            memory: profile.memory.value,
            cpus: profile.cpus.value,
            pids: profile.pids.value,
            network: profile.network.value,
            allow: profile.allow.value.clone(),
            timeout: profile.timeout.value,
            kill_policy: profile.kill_policy.value,
            rootfs: profile.rootfs.value,
            grace: profile.grace.value,
            workspace_dir: profile.workspace_dir.value.clone(),
            uid: profile.uid.value,
            env: profile
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.value.clone()))
                .collect(),
            ports: profile.ports.value.clone(),
            secrets: None,
        }
    }
}

/// The persisted record of one job: `$PADDOCK_HOME/jobs/<id>.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRecord {
    pub schema: u32,
    pub id: JobId,
    /// The main checkout's root (or the bare repository's path).
    pub repo: PathBuf,
    /// The repository's git common dir: where refs, objects and the lock live.
    pub git_common_dir: PathBuf,
    /// The job's private git dir: on the job's own disk (`work/<id>/overlay/layers/git`, see
    /// `disk`) when it has one, else `$PADDOCK_HOME/work/<id>/git`; for a legacy record, the
    /// worktree's admin dir in the user's repository. Its outbox is beside it ([`Self::outbox`]).
    pub git_dir: Option<PathBuf>,
    pub repo_key: String,
    pub branch: String,
    /// Whether paddock created the branch (false with `--reuse-branch` of an existing one).
    pub branch_created: bool,
    pub base: String,
    pub base_commit: String,
    pub worktree: PathBuf,
    pub agent: String,
    pub task: Option<String>,
    pub profile: String,
    pub runtime: RuntimeKind,
    pub limits: Limits,
    /// What the job holds of the host budget while it exists (`reserve` of its profile).
    /// Records made before reserves have none and hold the default one (see
    /// [`JobRecord::reserve`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<crate::config::Reserve>,
    pub container_id: Option<String>,
    /// The name of the job's container, carrying the install's tag
    /// (`paddock-<install>-<job>`); its network and egress sidecar are named after it. `None`
    /// for process jobs and for records written before names carried the install, whose
    /// container is `paddock-<job>`.
    #[serde(default)]
    pub container_name: Option<String>,
    pub state: JobState,
    pub created_at: DateTime<Utc>,
    pub last_activity_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Since when the job's processes are frozen (`pause`); `None`: they run. A paused job
    /// takes no exec and is never swept as idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_at: Option<DateTime<Utc>>,
    /// Set with `paused_at` while a checkpoint freezes the job for a moment: the process
    /// doing it. A sweep thaws a job whose freezer is gone (killed mid-checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frozen_by: Option<ProcessId>,
    pub exit_code: Option<i64>,
    pub oom_killed: bool,
    /// The container cgroup's OOM-kill count last seen, so a new kill can be told apart.
    #[serde(default)]
    pub oom_kills: u64,
    /// While `creating`: the creating process, so a sweep can tell a create in progress from
    /// one that was killed.
    #[serde(default)]
    pub owner: Option<ProcessId>,
    /// While `queued`: the job's ticket number in the admission queue.
    #[serde(default)]
    pub queue_seq: Option<u64>,
    /// The job's dependency caches and their entries.
    #[serde(default)]
    pub caches: Vec<crate::cache::JobCache>,
    /// Why the last sync of the job's work into the user's repository failed; cleared by the
    /// next one that succeeds.
    #[serde(default)]
    pub sync_error: Option<String>,
    /// When the job's work last reached the user's repository.
    #[serde(default)]
    pub synced_at: Option<DateTime<Utc>>,
    /// The labels given at create.
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    /// Where each of `limits.ports` is served on the host, chosen at create and kept, so a
    /// restarted job serves on the same address.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<PublishedPort>,
    /// The untracked files and directories copied from the user's checkout at create
    /// (`copy`), as paths relative to the checkout.
    #[serde(default)]
    pub copied: Vec<String>,
    /// The setup commands run at create, in order, and what each did.
    #[serde(default)]
    pub setup: Vec<SetupRun>,
    /// How the checkout is made: its own files (`worktree`) or an overlay mount of a
    /// pristine checkout (`overlay`).
    #[serde(
        default,
        skip_serializing_if = "crate::config::CheckoutMode::is_worktree"
    )]
    pub checkout: crate::config::CheckoutMode,
    /// With `checkout: overlay`: the pristine checkout the overlay's lower layer is. The
    /// records that name one are its reference count (nothing to drift).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pristine: Option<PathBuf>,
    /// How the job's container started: from a warm pool slot (its id, also the
    /// container's job label) or cold, and why cold when a pool was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<PoolStart>,
    /// The job's disk limit (`disk`): its overlay's layers (and, in records that name their
    /// git dir on it, the git dir and outbox) live in a filesystem of this size (see `disk`).
    /// Unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<ByteSize>,
    /// Without a disk limit: the size of the job's own small filesystem holding only its git
    /// dir and outbox (`git_disk`, container jobs made as root). Unset: none (the git dir and
    /// outbox are plain host directories).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_disk: Option<ByteSize>,
    /// A container job's view of the repository's object store, fixed at create
    /// (`work/<id>/objects`, see `git::objview`), mounted where the live store would be.
    /// Unset: a process job, or a job made before views (its container mounts the live store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_view: Option<PathBuf>,
    /// `on-sync`: the branch is pushed after each exec that moved it (`engine/push.rs`).
    #[serde(default, skip_serializing_if = "is_manual")]
    pub push: crate::config::PushPolicy,
    /// Why the last `push: on-sync` push failed (cleared by one that worked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push_error: Option<String>,
    /// What the repository's devcontainer.json gave the job (read from its base commit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub devcontainer: Option<crate::devcontainer::DevcontainerReport>,
    /// The Docker engine of `engines:` the job lives on; `None`: the local one, with its
    /// files on this host (see `engines`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// What the create sent to the remote engine for the repository's objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_fill: Option<crate::engines::FillReport>,
    /// `checkpoint: {before_exec: true}` of its profile: a checkpoint before each exec, the
    /// newest this many kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_checkpoints: Option<u32>,
    /// The job and checkpoint this job started from (`fork`, `create --from-checkpoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkedFrom>,
}

/// What a job was forked from: a checkpoint of another job (`JobView::forked_from`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ForkedFrom {
    pub job: String,
    pub checkpoint: String,
}

fn is_manual(push: &crate::config::PushPolicy) -> bool {
    *push == crate::config::PushPolicy::Manual
}

/// A job's container start when its profile has a pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "start", rename_all = "snake_case")]
pub enum PoolStart {
    /// Claimed the pool slot `slot`: its container (labelled with the slot's id) is the
    /// job's, and the job's files are mounted into the slot's directory.
    Warm { slot: String },
    /// Started cold, for `reason`.
    Cold { reason: String },
}

impl JobRecord {
    /// The job's outbox on the host: the directory beside its git dir (on the job's disk
    /// when the git dir is), mounted into its container at `/paddock/outbox`. The one place
    /// its path is derived, so the mounts, the create and the sync's reader agree for every
    /// record layout.
    pub fn outbox(&self) -> Option<PathBuf> {
        Some(self.git_dir.as_ref()?.parent()?.join("outbox"))
    }

    /// What the job holds of the host budget: its recorded reserve, or (a record made
    /// before reserves) the default one within its limits.
    pub fn reserve(&self) -> crate::config::Reserve {
        self.reserve.unwrap_or_else(|| {
            crate::config::Reserve::DEFAULT.within(self.limits.cpus, self.limits.memory)
        })
    }

    /// Whether the job lives on engine `name` of `engines:`: for counting and listing an
    /// engine's jobs. What serves the job (its runtime, where its files are) is never
    /// decided from it but by `Runtimes::of_job`, once.
    pub fn is_on_engine(&self, name: &str) -> bool {
        self.engine.as_deref() == Some(name)
    }

    /// The pool slot whose container and mounts the job holds, if it started warm.
    pub fn pool_slot(&self) -> Option<&str> {
        match &self.pool {
            Some(PoolStart::Warm { slot }) => Some(slot),
            _ => None,
        }
    }

    /// The job label its container carries: the pool slot's id for a warm start (labels
    /// cannot change after a container is made), else the job's id.
    pub fn container_label(&self) -> &str {
        self.pool_slot().unwrap_or(self.id.as_str())
    }
}

/// A port of the job served to the host: `host_ip:host_port` reaches `port` inside the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedPort {
    pub port: u16,
    pub host_ip: std::net::Ipv4Addr,
    pub host_port: u16,
}

impl PublishedPort {
    /// `127.0.0.1:49213`.
    pub fn address(&self) -> std::net::SocketAddrV4 {
        std::net::SocketAddrV4::new(self.host_ip, self.host_port)
    }
}

/// One setup command of a job and what it did. Its whole output stays readable as the exec
/// `result.exec_id` (`paddock execs JOB EXEC`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetupRun {
    pub command: String,
    /// It ran to the end within its deadline and exited 0.
    pub ok: bool,
    /// What the exec did (its output capped at [`SETUP_OUTPUT_CAP`] per stream); null when it
    /// did not run.
    pub result: Option<crate::output::ExecResult>,
    /// Why paddock could not run it, or why it was skipped (an earlier command failed).
    pub error: Option<String>,
}

impl SetupRun {
    /// How it ended, in words: `exit 0`, `exit 1`, `timed out`, `paddock could not run it: ...`.
    pub fn outcome(&self) -> String {
        match (&self.result, &self.error) {
            (Some(result), _) if result.timed_out => "timed out".to_string(),
            (Some(result), _) if result.oom_killed => {
                format!("exit {}, out of memory", result.exit_code)
            }
            (Some(result), _) => format!("exit {}", result.exit_code),
            (None, Some(error)) if error.starts_with("not run") => error.clone(),
            (None, Some(error)) => format!("paddock could not run it: {error}"),
            (None, None) => "not run".to_string(),
        }
    }
}

/// The bytes of each stream a setup command keeps in the record (head and tail).
pub const SETUP_OUTPUT_CAP: usize = 8 << 10;

/// A process, identified by pid and start time so a reused pid is not mistaken for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessId {
    pub pid: u32,
    /// Clock ticks after boot at which the process started (`/proc/<pid>/stat` field 22).
    pub start: u64,
}

impl ProcessId {
    pub fn current() -> Option<ProcessId> {
        let pid = std::process::id();
        Some(ProcessId {
            pid,
            start: process_start(pid)?,
        })
    }

    /// Whether this very process still runs.
    pub fn is_alive(&self) -> bool {
        process_start(self.pid) == Some(self.start)
    }
}

fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields after it are plain.
    let after_name = &stat[stat.rfind(')')? + 2..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

impl JobRecord {
    /// A job made before private git dirs (see [`LEGACY_RECORD_SCHEMA`]).
    pub fn is_legacy(&self) -> bool {
        self.schema == LEGACY_RECORD_SCHEMA
    }

    /// Moves the job to `to`, keeping the timestamps that go with states in step.
    pub fn transition(&mut self, to: JobState, now: DateTime<Utc>) -> Result<(), JobError> {
        if !self.state.can_become(to) {
            return Err(JobError::Transition {
                id: self.id.to_string(),
                from: self.state,
                to,
            });
        }
        if to == JobState::Running {
            self.finished_at = None;
        }
        if to.is_finished() && !self.state.is_finished() {
            self.finished_at = Some(now);
        }
        self.state = to;
        self.last_activity_at = self.last_activity_at.max(now);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record written before reserves (schema 2, no `reserve`) loads, and holds the
    /// default reserve within its limits.
    #[test]
    fn a_record_without_a_reserve_holds_the_default_one_within_its_limits() {
        let mut record = serde_json::json!({
            "schema": 2, "id": "old", "repo": "/r", "git_common_dir": "/r/.git",
            "git_dir": "/h/jobs/old/git", "repo_key": "r-1", "branch": "agent/a/old",
            "branch_created": true, "base": "HEAD", "base_commit": "0".repeat(40),
            "worktree": "/h/worktrees/r-1/old", "agent": "a", "task": null,
            "profile": "default", "runtime": "process",
            "limits": {
                "image": "paddock-agent:latest", "memory": "2g", "cpus": "2", "pids": 512,
                "network": "none", "timeout": "10m", "kill_policy": "graceful",
                "grace": "5s", "workspace_dir": "/workspace", "uid": 1000, "env": {}
            },
            "container_id": null, "state": "ready",
            "created_at": "2026-01-01T00:00:00Z", "last_activity_at": "2026-01-01T00:00:00Z",
            "finished_at": null, "exit_code": null, "oom_killed": false
        });
        let old: JobRecord = serde_json::from_value(record.clone()).expect("an old record loads");
        assert_eq!(old.reserve, None);
        assert_eq!(old.reserve(), crate::config::Reserve::DEFAULT);
        record["limits"]["memory"] = "128m".into();
        record["limits"]["cpus"] = "0.05".into();
        let small: JobRecord = serde_json::from_value(record).expect("loads");
        assert_eq!(
            small.reserve(),
            crate::config::Reserve {
                cpus: Cpus(0.05),
                memory: ByteSize(128 << 20),
            }
        );
        // Written back, a record without a reserve stays without one.
        assert!(serde_json::to_value(&old).unwrap().get("reserve").is_none());
    }

    #[test]
    fn ids_are_validated() {
        for good in ["a", "job-1", "fr-054.x_y", &"a".repeat(63)] {
            assert!(JobId::parse(good).is_ok(), "{good}");
        }
        for bad in ["", "-a", "A", "a b", "a/b", &"a".repeat(64), ".x"] {
            assert!(JobId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn generated_ids_are_valid_slugs() {
        let id = JobId::generate("Fix the LOGIN bug!");
        assert!(id.as_str().starts_with("fix-the-login-bug-"), "{id}");
        assert!(JobId::parse(id.as_str()).is_ok());
        assert_ne!(JobId::generate("x"), JobId::generate("x"));
        assert!(JobId::generate("///").as_str().starts_with("job-"));
    }

    #[test]
    fn the_current_process_is_alive_and_a_made_up_one_is_not() {
        let me = ProcessId::current().unwrap();
        assert!(me.is_alive());
        let other = ProcessId {
            pid: me.pid,
            start: me.start + 1,
        };
        assert!(!other.is_alive(), "a reused pid is not the same process");
    }

    #[test]
    fn lifecycle_allows_only_listed_moves() {
        use JobState::*;
        assert!(Creating.can_become(Ready));
        assert!(Ready.can_become(Running));
        assert!(Running.can_become(TimedOut));
        assert!(Exited.can_become(Running));
        assert!(Exited.can_become(Removed));
        assert!(!Removed.can_become(Ready));
        assert!(!Creating.can_become(Running));
        assert!(!Running.can_become(Removed));
    }
}
