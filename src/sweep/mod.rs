//! The sweeper: reconciles job records, git worktree metadata and labelled containers, and
//! removes what is stale or orphaned — without losing work or touching what is not ours.
//!
//! Truth comes from three sources: records (`$PADDOCK_HOME/jobs`), `git worktree list` of
//! every repository that ever had a job (`$PADDOCK_HOME/repos`), and Docker containers with
//! this install's `dev.paddock.home` label. Each mismatch has one action:
//!
//! | found | action |
//! |---|---|
//! | record still `creating` whose creating process is dead | remove the job (nothing ran in it) |
//! | record whose worktree is gone | remove the job (branch under the policy) |
//! | stale record (finished, idle, or too old; a paused job only when too old) | remove the job exactly as `rm` does |
//! | with `merged`: a job whose branch is merged into its base branch | remove it as `rm` does, the branch too if still merged after the last sync |
//! | record whose container is gone | keep; the next exec recreates it |
//! | container with our labels and no record | remove it (both labels checked first) |
//! | directory under our worktree root with no record | snapshot what it holds, then remove it, if it carries our marker |
//! | git worktree entry under our root whose directory is gone (even if locked) | unlock and prune |
//! | `index.lock` in a job's git dir older than the threshold and open by no process | remove it |
//! | a merge quarantine (`tmp/merge-*`) older than an hour | remove it |
//! | an overlay mounted at a checkout being removed (the job's, or one a killed create left) | unmount it first |
//! | a job's disk (`disk`) mounted under a job dir being removed | unmount it after the overlay, before deleting |
//! | a job's disk mounted with no record and no checkout | unmount it, remove the job dir |
//! | a pristine checkout no record names, unused for `pristine_max_age`, or a partial one | remove it under its lock |
//! | a devcontainer image (paddock's label) no job names, unused for a week | remove it, never forced (see `images`) |
//!
//! One lock per install (`sweep.lock`) keeps a cron sweep and the daemon's sweeper from acting
//! at once: the second waits for the first, then finds nothing left to do.

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::BranchPolicy;
use crate::engine::SyncScope;
use crate::engine::{Paddock, RemoveOptions, Result};
use crate::job::{JobRecord, JobState};
use crate::runtime;
use crate::store::FileLock;
use crate::units::format_age;

mod engines;
mod images;
mod pool;
mod pristine;
mod reap;
mod vms;
use crate::wire::EventKind;

/// How long a second sweep waits for the first to finish.
const LOCK_WAIT: Duration = Duration::from_secs(600);
/// A `creating` record older than this is abandoned even if its process seems alive.
const CREATE_DEADLINE: Duration = Duration::from_secs(3600);

/// When a job is stale, and how the sweep behaves.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    pub dry_run: bool,
    pub idle: Duration,
    pub keep_finished: Duration,
    pub max_age: Option<Duration>,
    pub branch_policy: BranchPolicy,
    /// "Now", settable for tests of staleness.
    pub now: DateTime<Utc>,
    /// Check that each running container answers (the daemon's sweeper does).
    pub health_check: bool,
    /// An `index.lock` older than this, held by no process, is removed.
    pub index_lock_age: Duration,
    /// Jobs whose branch is merged into their base branch are removed, with the branch.
    pub merged: bool,
    /// A pristine checkout no record names is removed once unused for this long.
    pub pristine_max_age: Duration,
    /// A job paused this long is stale (`None`: a paused job is kept but for `max_age`).
    pub paused_max_age: Option<Duration>,
}

/// One thing the sweep found.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SweepItem {
    /// `job`, `container`, `worktree`, `git-worktree`, `index-lock`, `pristine`, `disk` or
    /// `image`.
    pub kind: String,
    pub name: String,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What a sweep did: removed (or, with `dry_run`, would remove), kept, and failed to handle.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct SweepReport {
    pub dry_run: bool,
    pub removed: Vec<SweepItem>,
    pub kept: Vec<SweepItem>,
    pub errors: Vec<SweepItem>,
}

impl SweepReport {
    fn removed(&mut self, kind: &'static str, name: impl Into<String>, reason: impl Into<String>) {
        self.removed.push(SweepItem {
            kind: kind.into(),
            name: name.into(),
            reason: reason.into(),
            error: None,
        });
    }

    fn kept(&mut self, kind: &'static str, name: impl Into<String>, reason: impl Into<String>) {
        self.kept.push(SweepItem {
            kind: kind.into(),
            name: name.into(),
            reason: reason.into(),
            error: None,
        });
    }

    fn error(
        &mut self,
        kind: &'static str,
        name: impl Into<String>,
        reason: impl Into<String>,
        error: impl std::fmt::Display,
    ) {
        self.errors.push(SweepItem {
            kind: kind.into(),
            name: name.into(),
            reason: reason.into(),
            error: Some(format!("{error}")),
        });
    }
}

pub(super) fn age(now: DateTime<Utc>, then: DateTime<Utc>) -> Duration {
    (now - then).to_std().unwrap_or_default()
}

/// Why a job is stale, or `None` when it is not.
fn staleness(record: &JobRecord, options: &SweepOptions) -> Option<String> {
    let now = options.now;
    if let Some(max_age) = options.max_age {
        let lived = age(now, record.created_at);
        if lived > max_age {
            return Some(format!(
                "older than max_age ({} old)",
                format_age(now - record.created_at)
            ));
        }
    }
    // A paused job was parked on purpose, its processes kept where they were: neither idle
    // nor finished for long makes it stale (`max_age` above still does, and
    // `paused_max_age` when set).
    if let Some(since) = record.paused_at {
        return options
            .paused_max_age
            .filter(|most| age(now, since) > *most)
            .map(|most| {
                format!(
                    "paused {} ago (paused_max_age {})",
                    format_age(now - since),
                    crate::units::HumanDuration(most)
                )
            });
    }
    if record.state.is_finished()
        && let Some(finished) = record.finished_at
        && age(now, finished) > options.keep_finished
    {
        return Some(format!(
            "{} {} ago (keep_finished {})",
            record.state,
            format_age(now - finished),
            crate::units::HumanDuration(options.keep_finished)
        ));
    }
    // A `running` job is idle only once its exec is surely dead (past its deadline).
    let idle_limit = if record.state == JobState::Running {
        options
            .idle
            .max(record.limits.timeout.0 + record.limits.grace.0 + Duration::from_secs(60))
    } else {
        options.idle
    };
    // Idle is judged from what paddock saw (execs, shells, API use, the daemon's file
    // watcher, all stamped with paddock's own clock), never from file times: an agent sets
    // those as it likes (`touch -d 2099-01-01` would keep a job alive for ever).
    if age(now, record.last_activity_at) > idle_limit {
        return Some(format!(
            "idle for {} (idle {})",
            format_age(now - record.last_activity_at),
            crate::units::HumanDuration(idle_limit)
        ));
    }
    None
}

impl Paddock {
    /// Reconciles and cleans up (see the module docs). Holds the install's sweep lock.
    pub async fn sweep(&self, options: &SweepOptions) -> Result<SweepReport> {
        self.sweep_with_progress(options, &mut |_, _, _| {}).await
    }

    /// [`Paddock::sweep`], telling `progress` `(jobs done, jobs in all, job)` before each
    /// recorded job is looked at (the CLI draws a bar from it).
    pub async fn sweep_with_progress(
        &self,
        options: &SweepOptions,
        progress: &mut (dyn for<'job> FnMut(usize, usize, &'job str) + Send),
    ) -> Result<SweepReport> {
        let lock_path = self.home().root().join("sweep.lock");
        let _lock = tokio::task::spawn_blocking(move || FileLock::acquire(&lock_path, LOCK_WAIT))
            .await
            .map_err(|e| crate::store::StoreError::Io {
                path: PathBuf::from("sweep.lock"),
                source: std::io::Error::other(e.to_string()),
            })??;
        let mut report = SweepReport {
            dry_run: options.dry_run,
            ..SweepReport::default()
        };
        let (records, bad) = self.store().list()?;
        for error in bad {
            report.error("record", "?", "unreadable job record", error);
        }
        let containers =
            match crate::runtime::list_sandboxes(self.runtimes().with_sandboxes()).await {
                Ok(containers) => Some(containers),
                Err(error) => {
                    if records.iter().any(|r| self.runtimes().in_engine(r.runtime)) {
                        report.error("container", "*", "cannot list containers", error);
                    }
                    None
                }
            };

        for (done, record) in records.iter().enumerate() {
            let name = record.id.to_string();
            progress(done, records.len(), &name);
            let thawed;
            let record = match self.thaw_if_abandoned(record, options, &mut report).await {
                Some(now) => {
                    thawed = now;
                    &thawed
                }
                None => record,
            };
            let reason = self
                .job_verdict(record, options, containers.as_deref(), &mut report)
                .await;
            let Some((reason, merged)) = reason else {
                continue;
            };
            if options.dry_run {
                report.removed("job", name, reason);
                continue;
            }
            let remove = RemoveOptions {
                branch_policy: if merged {
                    BranchPolicy::DeleteIfMerged
                } else {
                    options.branch_policy
                },
                force: false,
            };
            match self.remove(record.id.as_str(), remove).await {
                Ok(done) => {
                    let mut reason = reason;
                    if done.branch_kept {
                        reason.push_str(&format!(
                            "; kept branch {} ({} commits)",
                            done.branch, done.commits_ahead
                        ));
                    }
                    if let Some(fetch) = done.wip_fetch() {
                        reason.push_str(&format!("; uncommitted work saved: {fetch}"));
                    }
                    report.removed("job", name, reason);
                }
                Err(error) => report.error("job", name, reason, error),
            }
        }

        self.reap_pool_slots(options, &mut report).await;
        self.reap_orphan_containers(options, &mut report).await;
        self.reap_engine_orphans(options, &mut report).await;
        self.reap_orphan_vms(options, &mut report).await;
        self.reap_orphan_worktrees(options, &mut report).await;
        self.prune_git_worktrees(options, &mut report).await;
        self.clear_stale_index_locks(options, &mut report);
        self.reap_pristines(options, &mut report).await;
        self.reap_orphan_disks(options, &mut report).await;
        self.reap_devcontainer_images(options, &mut report).await;
        if !options.dry_run {
            self.clear_stale_quarantines();
        }
        self.emit(
            EventKind::SweepDone,
            None,
            None,
            serde_json::json!({
                "dry_run": options.dry_run,
                "removed": report.removed.len(),
                "kept": report.kept.len(),
                "errors": report.errors.len(),
            }),
        );
        Ok(report)
    }

    /// Decides what to do with one recorded job: `Some((reason, merged))` to remove it
    /// (`merged`: because its branch is merged); `None` to keep it (recorded in the report
    /// with why).
    /// A job a checkpoint froze for a moment, whose process was killed before it thawed it:
    /// thawed (see `Paddock::thaw_abandoned`); the record as it is now, when it changed.
    async fn thaw_if_abandoned(
        &self,
        record: &JobRecord,
        options: &SweepOptions,
        report: &mut SweepReport,
    ) -> Option<JobRecord> {
        if options.dry_run || record.frozen_by.is_none() {
            return None;
        }
        match self.thaw_abandoned(record).await {
            Ok(Some(now)) => {
                tracing::info!(job = %record.id, "thawed: a checkpoint froze it and was killed before thawing it");
                Some(now)
            }
            Ok(None) => None,
            Err(error) => {
                report.error(
                    "job",
                    record.id.to_string(),
                    "thawing after a killed checkpoint",
                    error,
                );
                None
            }
        }
    }

    async fn job_verdict(
        &self,
        record: &JobRecord,
        options: &SweepOptions,
        containers: Option<&[runtime::Sandbox]>,
        report: &mut SweepReport,
    ) -> Option<(String, bool)> {
        let verdict = self
            .stale_or_kept(record, options, containers, report)
            .await
            .map(|reason| (reason, false));
        // An exec in progress may be adding work: a running job is never taken as merged.
        if verdict.is_none()
            && options.merged
            && !matches!(
                record.state,
                JobState::Queued | JobState::Creating | JobState::Running
            )
            && let Ok(status) = self.merge_status(record).await
            && status.merged
        {
            report.kept.retain(|item| item.name != record.id.as_str());
            return Some((format!("merged into {}", status.base), true));
        }
        verdict
    }

    async fn stale_or_kept(
        &self,
        record: &JobRecord,
        options: &SweepOptions,
        containers: Option<&[runtime::Sandbox]>,
        report: &mut SweepReport,
    ) -> Option<String> {
        let name = record.id.to_string();
        if record.state == JobState::Queued {
            // Waiting for room: its waiter (or the admission queue, when the waiter is gone)
            // decides. Only a record whose ticket is gone (its process died between the two
            // writes) is dropped here, alone: a queued job has nothing else.
            if !options.dry_run && self.drop_if_ticketless(record).unwrap_or(false) {
                report.kept("job", name, "dropped: queued without a place in the queue");
            } else {
                report.kept("job", name, "queued");
            }
            return None;
        }
        if record.state == JobState::Creating {
            let owner_alive = record.owner.is_some_and(|o| o.is_alive());
            if !owner_alive {
                return Some("create was interrupted (its process is gone)".into());
            }
            if age(options.now, record.created_at) > CREATE_DEADLINE {
                return Some("create has not finished in an hour".into());
            }
            report.kept("job", name, "being created");
            return None;
        }
        let on_engine;
        let runtime = self.runtime_of(record);
        let containers = match runtime.describe().engine {
            None => containers,
            Some(engine) => match self.engine_sandboxes(runtime.as_ref()).await {
                Ok(listed) => {
                    on_engine = listed;
                    Some(on_engine.as_slice())
                }
                Err(why) => {
                    report.kept(
                        "job",
                        name,
                        format!("unreachable: engine `{engine}`: {why}"),
                    );
                    return None;
                }
            },
        };
        // A remote job's files are volumes of its engine: its place says they are not gone.
        if self.place_of(record).files_gone(record) {
            return Some("its worktree is gone".into());
        }
        if let Some(reason) = staleness(record, options) {
            return Some(reason);
        }
        let container = containers.and_then(|all| {
            all.iter().find(|c| {
                c.job == record.container_label()
                    && matches!(
                        c.role,
                        runtime::SandboxRole::Job | runtime::SandboxRole::Pool
                    )
            })
        });
        if self.runtimes().in_engine(record.runtime) && containers.is_some() && container.is_none()
        {
            report.kept(
                "job",
                name,
                "active; its container is gone, the next exec recreates it",
            );
            return None;
        }
        if options.health_check
            && container.is_some_and(|c| c.running)
            && let Err(error) = crate::runtime::health_check(runtime.as_ref(), record).await
        {
            if !options.dry_run {
                // The kill policy's stop: SIGTERM, the grace period, SIGKILL.
                if let Err(stop_error) = self.stop(record.id.as_str(), None).await {
                    report.error("job", name.clone(), "unresponsive container", stop_error);
                }
                let _ = self
                    .store()
                    .update(&record.id, |r| r.transition(JobState::Failed, options.now));
            }
            report.kept(
                "job",
                name,
                format!("marked failed: its container did not answer ({error})"),
            );
            return None;
        }
        // A live job's background work (commits made outside any exec) reaches the
        // repository at each sweep; a failure is recorded on the job.
        if !options.dry_run
            && !record.is_legacy()
            && (!self.runtime_of(record).layout().sandboxed()
                || container.is_some_and(|c| c.running))
        {
            let _ = self.sync_job(record, SyncScope::Branch).await;
        }
        report.kept(
            "job",
            name,
            format!(
                "active ({} since last activity)",
                format_age(options.now - record.last_activity_at)
            ),
        );
        None
    }
}
