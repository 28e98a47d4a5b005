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
//! | stale record (finished, idle, or too old) | remove the job exactly as `rm` does |
//! | record whose container is gone | keep; the next exec recreates it |
//! | container with our labels and no record | remove it (both labels checked first) |
//! | directory under our worktree root with no record | snapshot what it holds, then remove it, if it carries our marker |
//! | git worktree entry under our root whose directory is gone (even if locked) | unlock and prune |
//! | `index.lock` in a job's git dir older than the threshold and open by no process | remove it |
//!
//! One lock per install (`sweep.lock`) keeps a cron sweep and the daemon's sweeper from acting
//! at once: the second waits for the first, then finds nothing left to do.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::BranchPolicy;
use crate::engine::SyncScope;
use crate::engine::{Paddock, RemoveOptions, Result};
use crate::git::GitRepo;
use crate::job::{JobRecord, JobState, RuntimeKind};
use crate::runtime::docker;
use crate::store::FileLock;
use crate::units::format_age;
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
}

/// One thing the sweep found.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SweepItem {
    /// `job`, `container`, `worktree`, `git-worktree` or `index-lock`.
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
        error: impl ToString,
    ) {
        self.errors.push(SweepItem {
            kind: kind.into(),
            name: name.into(),
            reason: reason.into(),
            error: Some(error.to_string()),
        });
    }
}

/// Longer than any sync may take (its own deadline is ten minutes).
const SYNC_CONTAINER_MAX_AGE: Duration = Duration::from_secs(3600);

fn age(now: DateTime<Utc>, then: DateTime<Utc>) -> Duration {
    (now - then).to_std().unwrap_or_default()
}

/// The newest modification time of anything in a worktree (symlinks not followed), used as
/// the job's file activity when no daemon watcher recorded it.
pub fn newest_mtime(root: &Path) -> Option<DateTime<Utc>> {
    let mut newest: Option<SystemTime> = None;
    let mut stack = vec![root.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > 500_000 {
                break;
            }
            let Ok(meta) = entry.metadata() else { continue };
            if let Ok(modified) = meta.modified() {
                newest = Some(newest.map_or(modified, |n| n.max(modified)));
            }
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    newest.map(DateTime::<Utc>::from)
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
    if age(now, record.last_activity_at) > idle_limit {
        let files = newest_mtime(&record.worktree).unwrap_or(record.last_activity_at);
        let last = record.last_activity_at.max(files);
        if age(now, last) > idle_limit {
            return Some(format!(
                "idle for {} (idle {})",
                format_age(now - last),
                crate::units::HumanDuration(idle_limit)
            ));
        }
    }
    None
}

impl Paddock {
    /// Reconciles and cleans up (see the module docs). Holds the install's sweep lock.
    pub async fn sweep(&self, options: &SweepOptions) -> Result<SweepReport> {
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
        let containers = match docker::list_job_containers(self.home()).await {
            Ok(containers) => Some(containers),
            Err(error) => {
                if records.iter().any(|r| r.runtime.uses_docker()) {
                    report.error("container", "*", "cannot list containers", error);
                }
                None
            }
        };

        for record in &records {
            let name = record.id.to_string();
            let reason = self
                .job_verdict(record, options, containers.as_deref(), &mut report)
                .await;
            let Some(reason) = reason else { continue };
            if options.dry_run {
                report.removed("job", name, reason);
                continue;
            }
            let remove = RemoveOptions {
                branch_policy: options.branch_policy,
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
                    if let Some(wip) = done.wip_ref {
                        reason.push_str(&format!("; uncommitted work in {wip}"));
                    }
                    report.removed("job", name, reason);
                }
                Err(error) => report.error("job", name, reason, error),
            }
        }

        self.reap_orphan_containers(options, &mut report).await;
        self.reap_orphan_worktrees(options, &mut report).await;
        self.prune_git_worktrees(options, &mut report).await;
        self.clear_stale_index_locks(options, &mut report);
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

    /// Decides what to do with one recorded job: `Some(reason)` to remove it; `None` to keep
    /// it (recorded in the report with why).
    async fn job_verdict(
        &self,
        record: &JobRecord,
        options: &SweepOptions,
        containers: Option<&[docker::LabelledContainer]>,
        report: &mut SweepReport,
    ) -> Option<String> {
        let name = record.id.to_string();
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
        if record.git_dir.is_some() && !record.worktree.exists() {
            return Some("its worktree is gone".into());
        }
        if let Some(reason) = staleness(record, options) {
            return Some(reason);
        }
        let container = containers.and_then(|all| all.iter().find(|c| c.job == record.id.as_str()));
        if record.runtime.uses_docker() && containers.is_some() && container.is_none() {
            report.kept(
                "job",
                name,
                "active; its container is gone, the next exec recreates it",
            );
            return None;
        }
        if options.health_check
            && container.is_some_and(|c| c.running)
            && let Err(error) = self.health_check(record).await
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
            && (record.runtime == RuntimeKind::Process || container.is_some_and(|c| c.running))
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

    /// An exec of `true` in the job's container within a few seconds.
    async fn health_check(&self, record: &JobRecord) -> std::result::Result<(), String> {
        let request = crate::runtime::ExecRequest {
            cmd: vec!["true".into()],
            env: Default::default(),
            workdir: None,
            timeout: Duration::from_secs(5),
            kill_policy: crate::config::KillPolicy::Hard,
            grace: Duration::ZERO,
            output_cap: 4096,
            after: None,
        };
        let outcome = tokio::time::timeout(
            Duration::from_secs(10),
            crate::runtime::docker::exec(
                self.home(),
                record,
                &request,
                &mut crate::runtime::exec::Discard,
            ),
        )
        .await;
        match outcome {
            Ok(Ok((result, _, _))) if result.exit_code == 0 && !result.timed_out => Ok(()),
            Ok(Ok((result, _, _))) => Err(format!(
                "`true` exited {} (timed out: {})",
                result.exit_code, result.timed_out
            )),
            Ok(Err(error)) => Err(error.to_string()),
            Err(_) => Err("no answer within 10s".into()),
        }
    }

    async fn reap_orphan_containers(&self, options: &SweepOptions, report: &mut SweepReport) {
        let Ok(containers) = docker::list_job_containers(self.home()).await else {
            return;
        };
        for container in containers {
            if container.sync {
                self.reap_sync_container(options, container, report).await;
                continue;
            }
            if self.store().exists_str(&container.job) {
                continue;
            }
            let reason = "labelled container with no job record";
            if options.dry_run {
                report.removed("container", container.name, reason);
                continue;
            }
            let Ok(id) = crate::job::JobId::parse(&container.job) else {
                report.kept("container", container.name, "its job label is not a job id");
                continue;
            };
            // A create may have reserved the record since we listed: check again.
            if self.store().exists(&id) {
                continue;
            }
            match docker::remove_job_container(self.home(), &id).await {
                Ok(()) => report.removed("container", container.name, reason),
                Err(error) => report.error("container", container.name, reason, error),
            }
        }
    }

    /// A throwaway sync container is removed once its job is gone or it has outlived any
    /// sync (a paddock killed mid-sync leaves one behind).
    async fn reap_sync_container(
        &self,
        options: &SweepOptions,
        container: docker::LabelledContainer,
        report: &mut SweepReport,
    ) {
        let outlived = container
            .created
            .is_some_and(|created| age(options.now, created) > SYNC_CONTAINER_MAX_AGE);
        if self.store().exists_str(&container.job) && !outlived {
            return;
        }
        let reason = "sync container of a job that is gone, or older than any sync";
        if options.dry_run {
            report.removed("container", container.name, reason);
            return;
        }
        match docker::remove_labelled_container(self.home(), &container.name, &container.job).await
        {
            Ok(()) => report.removed("container", container.name, reason),
            Err(error) => report.error("container", container.name, reason, error),
        }
    }

    async fn reap_orphan_worktrees(&self, options: &SweepOptions, report: &mut SweepReport) {
        let Ok((records, _)) = self.store().list() else {
            return;
        };
        let known: std::collections::BTreeSet<PathBuf> =
            records.iter().map(|r| r.worktree.clone()).collect();
        let repos = self.home().repos();
        let Ok(keys) = std::fs::read_dir(self.home().worktrees_dir()) else {
            return;
        };
        for key_dir in keys.flatten().filter(|e| e.path().is_dir()) {
            let key = key_dir.file_name().to_string_lossy().into_owned();
            let Ok(entries) = std::fs::read_dir(key_dir.path()) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let file_name = entry.file_name().to_string_lossy().into_owned();
                if let Some(id) = file_name
                    .strip_prefix('.')
                    .and_then(|n| n.strip_suffix(".paddock"))
                {
                    // A marker whose job and checkout are both gone.
                    let checkout = key_dir.path().join(id);
                    if !checkout.exists() && !self.store().exists_str(id) && !options.dry_run {
                        let _ = std::fs::remove_file(&path);
                    }
                    continue;
                }
                if !path.is_dir() || known.contains(&path) {
                    continue;
                }
                let name = path.display().to_string();
                // A create may be reserving this very id right now.
                if self.store().exists_str(&file_name) {
                    continue;
                }
                if !self.home().owns_worktree(&path) {
                    report.kept("worktree", name, "no paddock marker: not ours");
                    continue;
                }
                let reason = "directory under the worktree root with no job record";
                if options.dry_run {
                    report.removed("worktree", name, reason);
                    continue;
                }
                let repo = repos
                    .iter()
                    .find(|(k, _, _)| *k == key)
                    .map(|(_, root, common)| {
                        GitRepo::known(root.clone(), common.clone(), &self.home().locks_dir())
                    });
                match self
                    .remove_orphan_worktree(repo.as_ref(), &path, &file_name)
                    .await
                {
                    Ok(saved) => report.removed(
                        "worktree",
                        name,
                        match saved {
                            Some(wip) => format!("{reason}; uncommitted work in {wip}"),
                            None => reason.to_string(),
                        },
                    ),
                    Err(error) => report.error("worktree", name, reason, error),
                }
            }
        }
    }

    /// Saves an orphaned checkout's uncommitted work (through a throwaway container, never
    /// host-side git in the checkout) and removes it. A checkout whose work cannot be saved
    /// that way is kept.
    async fn remove_orphan_worktree(
        &self,
        repo: Option<&GitRepo>,
        path: &Path,
        id: &str,
    ) -> Result<Option<String>> {
        let job_id = crate::job::JobId::parse(id)?;
        let git_dir = self.home().job_git_dir(&job_id);
        let mut saved = None;
        if let Some(repo) = repo
            && git_dir.is_dir()
        {
            let record = self.orphan_record(repo, job_id.clone(), path).await?;
            let synced = self.sync_job(&record, SyncScope::BranchAndWork).await?;
            if self.publish_wip(&record, &synced).await?.is_some() {
                saved = Some(format!("refs/paddock/wip/{id}"));
            }
        }
        // Re-check ownership right before deleting.
        if !self.home().owns_worktree(path) {
            return Err(crate::engine::Error::NotOurs {
                path: path.to_path_buf(),
            });
        }
        std::fs::remove_dir_all(path).map_err(|source| crate::engine::Error::RemoveDir {
            path: path.to_path_buf(),
            source,
        })?;
        if let Some(parent) = path.parent()
            && let Some(name) = path.file_name()
        {
            let _ =
                std::fs::remove_file(parent.join(format!(".{}.paddock", name.to_string_lossy())));
        }
        let job_dir = self.home().job_dir(&job_id);
        if job_dir.exists() {
            std::fs::remove_dir_all(&job_dir).map_err(|source| {
                crate::engine::Error::RemoveDir {
                    path: job_dir.clone(),
                    source,
                }
            })?;
        }
        Ok(saved)
    }

    /// A stand-in record for a checkout whose record is gone, enough to run a sync of its
    /// uncommitted work in a throwaway container with the default profile's image and
    /// limits. Refused when Docker cannot run it: running git on the host in an agent's
    /// checkout is what the sandbox exists to avoid.
    async fn orphan_record(
        &self,
        repo: &GitRepo,
        id: crate::job::JobId,
        path: &Path,
    ) -> Result<JobRecord> {
        let config = self.config(Some(&repo.root))?;
        let (profile_name, profile) = config.select_profile(None, "agent", None)?;
        crate::runtime::docker::check_ready(RuntimeKind::Docker, &profile.image.value).await?;
        let now = Utc::now();
        Ok(JobRecord {
            schema: crate::job::RECORD_SCHEMA,
            git_dir: Some(self.home().job_git_dir(&id)),
            id,
            repo: repo.root.clone(),
            git_common_dir: repo.common_dir.clone(),
            repo_key: repo.key(),
            branch: "-".into(),
            branch_created: false,
            base: "-".into(),
            base_commit: "-".into(),
            worktree: path.to_path_buf(),
            agent: "orphan".into(),
            task: None,
            profile: profile_name,
            runtime: RuntimeKind::Docker,
            limits: crate::job::Limits::from(&profile),
            container_id: None,
            state: JobState::Exited,
            created_at: now,
            last_activity_at: now,
            finished_at: None,
            exit_code: None,
            oom_killed: false,
            oom_kills: 0,
            owner: None,
            caches: Vec::new(),
            sync_error: None,
            synced_at: None,
        })
    }

    async fn prune_git_worktrees(&self, options: &SweepOptions, report: &mut SweepReport) {
        let root = self.home().worktrees_dir();
        for (_, repo_root, common) in self.home().repos() {
            let repo = GitRepo::known(repo_root.clone(), common, &self.home().locks_dir());
            let found = if options.dry_run {
                repo.missing_worktrees_under(&root).await
            } else {
                repo.prune_missing_under(&root).await
            };
            match found {
                Ok(paths) => {
                    for path in paths {
                        report.removed(
                            "git-worktree",
                            path.display().to_string(),
                            "registered worktree whose directory is gone",
                        );
                    }
                }
                Err(error) => report.error(
                    "git-worktree",
                    repo_root.display().to_string(),
                    "cannot prune worktrees",
                    error,
                ),
            }
        }
    }

    fn clear_stale_index_locks(&self, options: &SweepOptions, report: &mut SweepReport) {
        let Ok((records, _)) = self.store().list() else {
            return;
        };
        for record in records {
            let Some(git_dir) = &record.git_dir else {
                continue;
            };
            let lock = git_dir.join("index.lock");
            let Ok(meta) = std::fs::symlink_metadata(&lock) else {
                continue;
            };
            let old = meta
                .modified()
                .ok()
                .and_then(|m| SystemTime::now().duration_since(m).ok())
                .is_some_and(|a| a > options.index_lock_age);
            let name = lock.display().to_string();
            if !old {
                report.kept("index-lock", name, "recent: git may be working");
                continue;
            }
            if file_is_open(&lock) {
                report.kept("index-lock", name, "held open by a live process");
                continue;
            }
            let reason = format!(
                "stale index.lock of job {} with no live git process",
                record.id
            );
            if options.dry_run {
                report.removed("index-lock", name, reason);
            } else {
                match std::fs::remove_file(&lock) {
                    Ok(()) => report.removed("index-lock", name, reason),
                    Err(error) => report.error("index-lock", name, reason, error),
                }
            }
        }
    }
}

/// Whether any process has `path` open (scans `/proc/*/fd`).
fn file_is_open(path: &Path) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    for proc_dir in procs.flatten() {
        let is_pid = proc_dir
            .file_name()
            .to_string_lossy()
            .bytes()
            .all(|b| b.is_ascii_digit());
        if !is_pid {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(proc_dir.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|target| target == path) {
                return true;
            }
        }
    }
    false
}
