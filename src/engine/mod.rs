//! The job manager: the operations the CLI, the daemon and library users call.
//!
//! Each operation here is the single code path for what it does. `create` validates every
//! input before it creates anything, reserves the id with an exclusive record write, and rolls
//! back everything it made if a later step fails. `remove` snapshots uncommitted work before
//! anything is deleted and removes the record last, so a crash at any point leaves a record
//! that a later `rm` or sweep can finish.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::Serialize;

pub use crate::config::BranchPolicy;
use crate::config::{Config, EnvLookup, ProcessEnv, ProfileLayer};
use crate::git::jobdir::JobGitDir;
use crate::git::{self, ChangeSummary, CommitInfo, GitRepo, JobWorktree};
use crate::job::{JobId, JobRecord, JobState, Limits, RECORD_SCHEMA};
use crate::runtime::exec::{DEFAULT_OUTPUT_CAP, StreamKind};
use crate::runtime::{self, ExecRequest, ExecResult, OutputSink, RuntimeError};
use crate::store::{JobStore, PaddockHome, StoreError};

mod sync;
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

/// One line of `$PADDOCK_HOME/logs/<job>/exec.jsonl`.
#[derive(Debug, Clone, Serialize)]
struct AuditEntry<'a> {
    command: &'a [String],
    started_at: DateTime<Utc>,
    duration_ms: u64,
    exit_code: Option<i64>,
    timed_out: bool,
    oom_killed: bool,
    truncated: bool,
    error: Option<String>,
    /// How long bringing the job's branch into the user's repository took after the command.
    sync_ms: Option<u64>,
}

/// Passes output on to the caller's sink and appends it to the job's output log, so
/// `paddock logs --follow` sees it as it comes.
struct TeeSink<'a> {
    inner: &'a mut dyn OutputSink,
    log: Option<std::fs::File>,
}

impl OutputSink for TeeSink<'_> {
    fn write(&mut self, stream: StreamKind, bytes: &[u8]) {
        use std::io::Write;
        self.inner.write(stream, bytes);
        if let Some(log) = &mut self.log
            && log.write_all(bytes).is_err()
        {
            self.log = None;
        }
    }
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

    /// Creates a job: branch, worktree, and (with a container runtime) its container.
    pub async fn create(&self, request: CreateRequest) -> Result<Created> {
        let repo = GitRepo::open(&request.repo, &self.home.locks_dir()).await?;
        let config = self.config(Some(&repo.root))?;
        let agent = request.agent.clone().unwrap_or_else(|| "agent".to_string());
        let (profile_name, mut profile) =
            config.select_profile(request.profile.as_deref(), &agent, request.task.as_deref())?;
        profile.apply(
            &request.overrides,
            &crate::config::Source::Flag("create".into()),
        );

        let id = match &request.id {
            Some(id) => JobId::parse(id)?,
            None => JobId::generate(request.task.as_deref().unwrap_or(&agent)),
        };
        let template = &config.branch_template.value;
        let branch = render_branch(template, &agent, request.task.as_deref(), &id);
        if !git::is_valid_branch_name(&branch) {
            return Err(Error::InvalidBranch {
                branch,
                template: template.clone(),
            });
        }
        let base = request
            .base
            .clone()
            .or_else(|| config.base.as_ref().map(|b| b.value.clone()))
            .unwrap_or_else(|| "HEAD".to_string());
        let base_commit = repo.resolve_commit(&base).await?;
        let branch_exists = repo.branch_exists(&branch).await?;
        if branch_exists && !request.reuse_branch {
            return Err(Error::BranchExists {
                branch,
                repo: repo.root.clone(),
            });
        }
        if self.store.exists(&id) {
            return Err(StoreError::Exists { id }.into());
        }
        let repo_key = repo.key();
        let worktree = self.home.worktree_path(&repo_key, &id);
        if worktree.exists() {
            return Err(Error::WorktreeExists { path: worktree });
        }
        let runtime = runtime::resolve(profile.runtime.value, &profile.image.value).await?;

        let now = Utc::now();
        let mut record = JobRecord {
            schema: RECORD_SCHEMA,
            id: id.clone(),
            repo: repo.root.clone(),
            git_common_dir: repo.common_dir.clone(),
            git_dir: Some(self.home.job_git_dir(&id)),
            repo_key: repo_key.clone(),
            branch: branch.clone(),
            branch_created: !branch_exists,
            base,
            base_commit: base_commit.clone(),
            worktree: worktree.clone(),
            agent,
            task: request.task.clone(),
            profile: profile_name,
            runtime: runtime.kind,
            limits: Limits::from(&profile),
            container_id: None,
            state: JobState::Creating,
            created_at: now,
            last_activity_at: now,
            finished_at: None,
            exit_code: None,
            oom_killed: false,
            oom_kills: 0,
            owner: crate::job::ProcessId::current(),
            caches: Vec::new(),
            sync_error: None,
            synced_at: None,
        };
        let cache_specs: Vec<crate::cache::CacheSpec> = config
            .caches
            .value
            .iter()
            .chain(profile.caches.value.iter())
            .cloned()
            .collect();
        // The exclusive write reserves the id: of two creators of one id, one fails here
        // before touching git.
        self.store.create(&record)?;
        match self.build(&repo, &mut record, &cache_specs).await {
            Ok(()) => {
                self.emit(
                    "job.created",
                    Some(&record.id),
                    Some(record.state),
                    serde_json::json!({
                        "branch": record.branch,
                        "runtime": record.runtime.to_string(),
                    }),
                );
                Ok(Created {
                    record,
                    warning: runtime.warning,
                })
            }
            Err(error) => {
                if let Err(cleanup) = self.rollback(&repo, &record).await {
                    tracing::warn!(job = %record.id, error = %cleanup, "rollback after a failed create was incomplete");
                }
                Err(error)
            }
        }
    }

    /// The steps of `create` after the id is reserved; any error here is rolled back.
    async fn build(
        &self,
        repo: &GitRepo,
        record: &mut JobRecord,
        cache_specs: &[crate::cache::CacheSpec],
    ) -> Result<()> {
        crash_point("reserved");
        self.home
            .register_repo(&record.repo_key, &repo.root, &repo.common_dir)?;
        self.home.mark_worktree(&record.repo_key, &record.id)?;
        crash_point("marked");
        let tip = if record.branch_created {
            repo.create_branch(&record.branch, &record.base_commit)
                .await?;
            record.base_commit.clone()
        } else {
            repo.resolve_commit(&format!("refs/heads/{}", record.branch))
                .await?
        };
        crash_point("registered");
        let git_dir = record
            .git_dir
            .clone()
            .expect("create sets the job's git dir before building");
        let job_git = JobGitDir::create(&git_dir, repo, &record.branch, &tip).await?;
        crash_point("recorded");
        let (link_target, _) =
            runtime::sandbox_git_paths(record).expect("the record names its git dir");
        job_git.checkout(&record.worktree, &link_target).await?;
        crash_point("checked-out");
        if !cache_specs.is_empty() {
            record.caches = crate::cache::place(
                &self.home.caches_dir(),
                &record.repo_key,
                &record.worktree,
                cache_specs,
                record.runtime.uses_docker(),
            )?;
            job_git.add_excludes(&crate::cache::exclude_patterns(&record.caches))?;
            self.store.save(record)?;
        }
        record.container_id = runtime::start(&self.home, record).await?;
        crash_point("started");
        record.transition(JobState::Ready, Utc::now())?;
        record.owner = None;
        self.store.save(record)?;
        Ok(())
    }

    /// Undoes a partial create: container, worktree, branch (if we made it), marker, record.
    async fn rollback(&self, repo: &GitRepo, record: &JobRecord) -> Result<()> {
        runtime::destroy(&self.home, record).await?;
        self.remove_checkout(repo, record).await?;
        if record.branch_created {
            repo.delete_branch(&record.branch).await?;
        }
        let _ = std::fs::remove_file(self.home.worktree_marker(&record.repo_key, &record.id));
        self.store.remove(&record.id)?;
        Ok(())
    }

    /// Removes a job's checkout and its private git dir and scratch repository; idempotent.
    /// The checkout is deleted only after checking it is ours (under our root, our marker).
    async fn remove_checkout(&self, repo: &GitRepo, record: &JobRecord) -> Result<()> {
        if record.is_legacy() {
            // A linked worktree of the user's repository: git removes it and its admin dir.
            if repo.remove_worktree(&record.worktree).await.is_ok() || !record.worktree.exists() {
                return Ok(());
            }
        }
        if std::fs::symlink_metadata(&record.worktree).is_ok() {
            if !self.home.owns_worktree(&record.worktree) {
                return Err(Error::NotOurs {
                    path: record.worktree.clone(),
                });
            }
            std::fs::remove_dir_all(&record.worktree).map_err(|source| Error::RemoveDir {
                path: record.worktree.clone(),
                source,
            })?;
        }
        if record.is_legacy() {
            repo.prune_worktrees().await?;
            return Ok(());
        }
        // Everything under the job's own dir in $PADDOCK_HOME is paddock's by construction
        // (remove_dir_all does not follow the symlinks an agent may have left in its git dir).
        let job_dir = self.home.job_dir(&record.id);
        match std::fs::remove_dir_all(&job_dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::RemoveDir {
                path: job_dir,
                source,
            }),
        }
    }

    /// All jobs, optionally only those of one repository.
    pub async fn list(&self, repo: Option<&Path>) -> Result<Vec<JobRecord>> {
        let (mut records, bad) = self.store.list()?;
        for error in bad {
            tracing::warn!(%error, "skipping an unreadable job record");
        }
        if let Some(repo) = repo {
            let repo = GitRepo::open(repo, &self.home.locks_dir()).await?;
            records.retain(|r| r.git_common_dir == repo.common_dir);
        }
        Ok(records)
    }

    /// A job with its commits ahead and changed files, as of a sync made for this call. When
    /// the sync fails, the changes are those of the last good sync and `changes_error` says
    /// why they may be stale.
    pub async fn show(&self, id: &str) -> Result<JobDetails> {
        let record = self.load(id)?;
        let (changes, changes_error) = match self.fresh_changes(&record).await {
            Ok((changes, stale)) => (Some(changes), stale),
            Err(e) => (None, Some(e.to_string())),
        };
        let record = self.load(id).unwrap_or(record);
        Ok(JobDetails {
            view: JobView::from(&record),
            changes,
            changes_error,
            isolation: runtime::isolation_note(record.runtime).to_string(),
        })
    }

    async fn fresh_changes(&self, record: &JobRecord) -> Result<(ChangeSummary, Option<String>)> {
        if record.state == JobState::Creating {
            return Err(Error::NotRunnable {
                id: record.id.clone(),
                state: record.state,
            });
        }
        let (untracked, stale) = match self.sync_job(record, SyncScope::BranchAndWork).await {
            Ok(synced) => (synced.untracked, None),
            Err(error @ Error::Legacy { .. }) => return Err(error),
            Err(error) => (Default::default(), Some(error.to_string())),
        };
        let changes = self
            .scratch_of(record)
            .changes(&record.base_commit, untracked)
            .await?;
        Ok((changes, stale))
    }

    /// The patch (or diffstat) of committed and uncommitted changes against the base.
    pub async fn diff(&self, id: &str, stat: bool) -> Result<String> {
        let record = self.load(id)?;
        self.sync_job(&record, SyncScope::BranchAndWork).await?;
        Ok(self
            .scratch_of(&record)
            .diff(&record.base_commit, stat)
            .await?)
    }

    /// Commits on the job's branch since its base, newest first.
    pub async fn log(&self, id: &str) -> Result<Vec<CommitInfo>> {
        let record = self.load(id)?;
        self.sync_job(&record, SyncScope::Branch).await?;
        Ok(self.scratch_of(&record).log(&record.base_commit).await?)
    }

    /// Removes a job without losing work: snapshot uncommitted work to
    /// `refs/paddock/wip/<id>`, stop the container, remove the worktree and its git metadata,
    /// delete the branch under `options.branch_policy`, and remove the record last.
    /// Every step tolerates having been done already, so a crashed `rm` can be repeated.
    pub async fn remove(&self, id: &str, options: RemoveOptions) -> Result<RemoveReport> {
        let record = self.load(id)?;
        let repo = self.repo_of(&record);
        let wip_ref = format!("refs/paddock/wip/{}", record.id);
        // Record the container's outcome and stop it first, so nothing writes to the
        // worktree while it is snapshotted.
        let record = runtime::stop_for_removal(&self.home, &self.store, record).await?;

        let mut wip_commit = None;
        // A job still `creating` never ran an agent: there is no work to save, and a partial
        // checkout would only snapshot noise.
        let has_work = record.state != JobState::Creating;
        if has_work && record.worktree.exists() {
            match self.save_work(&repo, &record, &wip_ref).await {
                Ok(commit) => wip_commit = commit,
                Err(source) if !options.force => {
                    return Err(Error::SnapshotFailed {
                        id: record.id.clone(),
                        source: Box::new(source),
                    });
                }
                Err(error) => {
                    tracing::warn!(job = %record.id, %error, "snapshot failed; removing anyway (--force)");
                }
            }
        }
        if wip_commit.is_none() {
            // A snapshot from an earlier, interrupted rm is still work to keep.
            wip_commit = repo.ref_target(&wip_ref).await?;
        }

        runtime::destroy(&self.home, &record).await?;
        promote_copied_caches(&record);
        self.remove_checkout(&repo, &record).await?;

        let tip = repo
            .ref_target(&format!("refs/heads/{}", record.branch))
            .await?;
        let commits_ahead = match &tip {
            Some(tip) => repo.count_ahead(&record.base_commit, tip).await?,
            None => 0,
        };
        let delete = match options.branch_policy {
            BranchPolicy::Keep => false,
            BranchPolicy::DeleteIfNoCommits => commits_ahead == 0,
            BranchPolicy::Delete => true,
        };
        // A reused branch that existed before the job is never deleted for having no commits.
        let delete =
            delete && (record.branch_created || options.branch_policy == BranchPolicy::Delete);
        if delete && tip.is_some() {
            repo.delete_branch(&record.branch).await?;
        }
        let _ = std::fs::remove_file(self.home.worktree_marker(&record.repo_key, &record.id));
        self.store.remove(&record.id)?;
        self.emit(
            "job.removed",
            Some(&record.id),
            Some(JobState::Removed),
            serde_json::json!({ "branch_kept": tip.is_some() && !delete, "wip_commit": wip_commit }),
        );
        Ok(RemoveReport {
            id: record.id.clone(),
            branch: record.branch.clone(),
            branch_kept: tip.is_some() && !delete,
            commits_ahead,
            wip_ref: wip_commit.as_ref().map(|_| wip_ref),
            wip_commit,
        })
    }
}

impl Paddock {
    /// Brings the job's branch and uncommitted work into the user's repository ahead of its
    /// removal; the work is saved as `wip_ref`. Returns the work's commit, if there was any.
    async fn save_work(
        &self,
        repo: &GitRepo,
        record: &JobRecord,
        wip_ref: &str,
    ) -> Result<Option<String>> {
        if !record.is_legacy() {
            let synced = self.sync_job(record, SyncScope::BranchAndWork).await?;
            return self.publish_wip(record, &synced).await;
        }
        // A legacy job's worktree is a linked worktree of the user's repository; it is
        // snapshotted as paddock did when it was made.
        let Some(git_dir) = record.git_dir.clone() else {
            return Ok(None);
        };
        let worktree = JobWorktree {
            path: record.worktree.clone(),
            git_dir,
            common_dir: record.git_common_dir.clone(),
        };
        let message = format!(
            "paddock: uncommitted work of job {} on {}",
            record.id, record.branch
        );
        Ok(repo.snapshot(&worktree, wip_ref, &message).await?)
    }

    /// Every cache entry with its size, last use and the jobs using it.
    pub fn cache_entries(&self) -> Result<Vec<crate::cache::EntryInfo>> {
        let (records, _) = self.store.list()?;
        let mut users: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
        for record in &records {
            for cache in &record.caches {
                users
                    .entry(cache.entry.clone())
                    .or_default()
                    .push(record.id.to_string());
            }
        }
        Ok(crate::cache::list_entries(&self.home.caches_dir(), &users))
    }

    /// Removes entries no live job uses and that were last used more than `unused_for` ago.
    pub fn cache_prune(
        &self,
        unused_for: std::time::Duration,
        dry_run: bool,
    ) -> Result<(Vec<crate::cache::EntryInfo>, Vec<crate::cache::EntryInfo>)> {
        let now = Utc::now();
        let (mut pruned, mut kept) = (Vec::new(), Vec::new());
        for entry in self.cache_entries()? {
            let idle = entry
                .last_used_at
                .map(|t| (now - t).to_std().unwrap_or_default())
                .unwrap_or(std::time::Duration::MAX);
            if entry.jobs.is_empty() && idle >= unused_for {
                if !dry_run {
                    crate::cache::remove_entry(&entry).map_err(|source| Error::RemoveDir {
                        path: entry.path.clone(),
                        source,
                    })?;
                }
                pruned.push(entry);
            } else {
                kept.push(entry);
            }
        }
        Ok((pruned, kept))
    }

    /// Runs a command in a job: the job becomes `running`, then `exited` or `timed-out` (or
    /// `failed` when paddock itself could not run it). Output goes to `sink` as it comes and
    /// to the job's output log; every exec is appended to the audit log.
    pub async fn exec(
        &self,
        id: &str,
        options: ExecOptions,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecResult> {
        let record = self.load(id)?;
        if record.is_legacy() {
            return Err(Error::Legacy { id: record.id });
        }
        if matches!(record.state, JobState::Creating | JobState::Removed) {
            return Err(Error::NotRunnable {
                id: record.id,
                state: record.state,
            });
        }
        let request = ExecRequest {
            cmd: options.cmd.clone(),
            env: options.env,
            workdir: options.workdir,
            timeout: options.timeout.unwrap_or(record.limits.timeout.0),
            kill_policy: record.limits.kill_policy,
            grace: record.limits.grace.0,
            output_cap: options.output_cap.unwrap_or(DEFAULT_OUTPUT_CAP),
        };
        let started_at = Utc::now();
        let (record, moved) = self
            .store
            .update(&record.id, |r| r.transition(JobState::Running, started_at))?;
        moved?;
        self.emit(
            "job.state",
            Some(&record.id),
            Some(JobState::Running),
            serde_json::Value::Null,
        );
        let log_dir = self.home.logs_dir(&record.id);
        let output_log = log_dir.join("output.log");
        let log = std::fs::create_dir_all(&log_dir)
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&output_log)
            })
            .ok();
        let mut tee = TeeSink { inner: sink, log };
        if let Some(log) = &mut tee.log {
            use std::io::Write;
            let _ = writeln!(
                log,
                "==> {} $ {}",
                started_at.to_rfc3339(),
                shell_words(&options.cmd)
            );
        }
        let mut outcome = runtime::exec(&self.home, &record, &request, &mut tee).await;
        // The command's commits reach the user's repository before exec returns.
        let mut sync_ms = None;
        if let Ok(done) = &mut outcome {
            let sync_started = std::time::Instant::now();
            if let Err(error) = self.sync_job(&record, SyncScope::Branch).await {
                done.result.sync_error = Some(error.to_string());
            }
            sync_ms = Some(sync_started.elapsed().as_millis() as u64);
        }
        let finished = Utc::now();
        let (state, exit_code, oom_killed) = match &outcome {
            Ok(o) if o.result.timed_out => (
                JobState::TimedOut,
                Some(o.result.exit_code),
                o.result.oom_killed,
            ),
            Ok(o) => (
                JobState::Exited,
                Some(o.result.exit_code),
                o.result.oom_killed,
            ),
            Err(_) => (JobState::Failed, None, false),
        };
        if let Some(log) = &mut tee.log {
            use std::io::Write;
            let summary = match &outcome {
                Ok(o) => format!(
                    "exit {}{}{} after {}ms",
                    o.result.exit_code,
                    if o.result.timed_out {
                        " (timed out)"
                    } else {
                        ""
                    },
                    if o.result.oom_killed {
                        " (out of memory)"
                    } else {
                        ""
                    },
                    o.result.duration_ms
                ),
                Err(e) => format!("failed: {e}"),
            };
            let _ = writeln!(log, "\n<== {summary}");
        }
        let (container_id, oom_kills) = match &outcome {
            Ok(o) => (o.container_id.clone(), o.oom_kills),
            Err(_) => (None, None),
        };
        self.store.update(&record.id, |r| {
            // A concurrent rm may have moved the job on; the exec result still gets recorded.
            let _ = r.transition(state, finished);
            r.exit_code = exit_code.or(r.exit_code);
            r.oom_killed = oom_killed;
            if let Some(id) = container_id {
                r.container_id = Some(id);
            }
            if let Some(count) = oom_kills {
                r.oom_kills = count;
            }
        })?;
        let entry = AuditEntry {
            command: &options.cmd,
            started_at,
            duration_ms: (finished - started_at).num_milliseconds().max(0) as u64,
            exit_code,
            timed_out: state == JobState::TimedOut,
            oom_killed,
            truncated: outcome
                .as_ref()
                .map(|o| o.result.truncated)
                .unwrap_or(false),
            error: outcome.as_ref().err().map(ToString::to_string),
            sync_ms,
        };
        self.append_audit(&record.id, &entry)?;
        self.emit(
            "exec.finished",
            Some(&record.id),
            Some(state),
            serde_json::json!({
                "command": options.cmd,
                "exit_code": exit_code,
                "timed_out": entry.timed_out,
                "oom_killed": oom_killed,
                "duration_ms": entry.duration_ms,
                "sync_error": outcome.as_ref().ok().and_then(|o| o.result.sync_error.clone()),
            }),
        );
        Ok(outcome?.result)
    }

    fn append_audit(&self, id: &JobId, entry: &AuditEntry<'_>) -> Result<()> {
        use std::io::Write;
        let path = self.home.logs_dir(id).join("exec.jsonl");
        let mut line = serde_json::to_vec(entry).expect("audit entries serialize");
        line.push(b'\n');
        std::fs::create_dir_all(self.home.logs_dir(id))
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
            })
            .and_then(|mut file| file.write_all(&line))
            .map_err(|source| Error::Log {
                id: id.clone(),
                path,
                source,
            })
    }

    /// The orchestrator's one-shot: create, exec, then remove exactly as `rm` does (work is
    /// never lost; the branch stays when it has commits). With `keep`, the job stays.
    pub async fn run(
        &self,
        create: CreateRequest,
        exec: ExecOptions,
        keep: bool,
        sink: &mut dyn OutputSink,
    ) -> Result<(RunReport, Option<String>)> {
        let created = self.create(create).await?;
        let id = created.record.id.to_string();
        let result = self.exec(&id, exec, sink).await;
        let record = self.load(&id).unwrap_or(created.record);
        let branch_kept = if keep {
            true
        } else {
            self.remove(&id, RemoveOptions::default())
                .await?
                .branch_kept
        };
        Ok((
            RunReport {
                job: JobView::from(&record),
                result: result?,
                branch_kept,
            },
            created.warning,
        ))
    }

    /// Stops what runs in a job (its container) with a bounded grace; true when something was
    /// running. The job stays; the next exec starts the container again.
    pub async fn stop(&self, id: &str, grace: Option<std::time::Duration>) -> Result<bool> {
        let record = self.load(id)?;
        let grace = grace.unwrap_or(record.limits.grace.0);
        let stopped = runtime::stop(&self.home, &record, grace).await?;
        if record.state == JobState::Running {
            self.store
                .update(&record.id, |r| r.transition(JobState::Failed, Utc::now()))?
                .1?;
        }
        // What the stopped processes committed, up to their last moment, reaches the
        // repository (a failure is recorded on the job, and the stop still stands).
        if stopped && !record.is_legacy() {
            let _ = self.sync_job(&record, SyncScope::Branch).await;
        }
        Ok(stopped)
    }

    /// An interactive shell in the job: in its container (started if needed) or, for the
    /// process runtime, in its worktree. Returns the shell's exit code.
    pub async fn shell(&self, id: &str) -> Result<i32> {
        let record = self.load(id)?;
        let mut command = match record.runtime {
            crate::job::RuntimeKind::Process => {
                let shell = std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".into());
                let mut command = tokio::process::Command::new(shell);
                command.current_dir(&record.worktree);
                command
            }
            _ => {
                runtime::docker::ensure_running(&self.home, &record).await?;
                runtime::docker::interactive_shell(&record)
            }
        };
        let status = command
            .status()
            .await
            .map_err(|source| RuntimeError::Spawn {
                program: "shell".into(),
                dir: record.worktree.clone(),
                source,
            })?;
        self.store
            .update(&record.id, |r| r.last_activity_at = Utc::now())?;
        if !record.is_legacy()
            && let Err(error) = self.sync_job(&record, SyncScope::Branch).await
        {
            eprintln!("paddock: {error}");
        }
        Ok(status.code().unwrap_or(1))
    }

    /// The job's output log: every exec's command, output and exit.
    pub fn output_log(&self, id: &str) -> Result<PathBuf> {
        let record = self.load(id)?;
        Ok(self.home.logs_dir(&record.id).join("output.log"))
    }
}

/// A `copy` cache whose entry is still empty is filled from the first job that populated its
/// copy, so later jobs start from it. (A rename when on one filesystem.)
fn promote_copied_caches(record: &JobRecord) {
    for cache in &record.caches {
        let (crate::cache::Strategy::Copy, Some(path)) = (cache.strategy, &cache.path) else {
            continue;
        };
        let copy = record.worktree.join(path);
        let entry_empty = std::fs::read_dir(&cache.entry).is_ok_and(|mut d| d.next().is_none());
        let copy_has_content = std::fs::symlink_metadata(&copy).is_ok_and(|m| m.is_dir())
            && std::fs::read_dir(&copy).is_ok_and(|mut d| d.next().is_some());
        if entry_empty && copy_has_content {
            let staging = cache
                .entry
                .with_extension(format!("promote-{}", crate::job::random_hex(6)));
            let moved = std::fs::rename(&copy, &staging)
                .or_else(|_| crate::cache::copy_tree(&copy, &staging));
            if moved.is_ok() && std::fs::remove_dir(&cache.entry).is_ok() {
                let _ = std::fs::rename(&staging, &cache.entry);
            } else {
                let _ = std::fs::remove_dir_all(&staging);
            }
        }
    }
}

/// A command line for logs: words with spaces are quoted.
fn shell_words(cmd: &[String]) -> String {
    cmd.iter()
        .map(|w| {
            if w.is_empty() || w.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
                format!("'{}'", w.replace('\'', "'\\''"))
            } else {
                w.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A test-only failpoint: when `PADDOCK_CRASH_AT` names this point, the process SIGKILLs
/// itself there, so tests can prove that every interruption of `create` is cleaned up by a
/// sweep. Costs one environment lookup per point otherwise.
fn crash_point(name: &str) {
    if std::env::var("PADDOCK_CRASH_AT").as_deref() == Ok(name) {
        // SAFETY: sending a signal to ourselves has no memory effects.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
    }
}

/// The points `PADDOCK_CRASH_AT` accepts, in the order `create` passes them.
pub const CRASH_POINTS: &[&str] = &[
    "reserved",
    "marked",
    "registered",
    "recorded",
    "checked-out",
    "started",
];

/// Fills a branch template. Without a task, `{task}` becomes the job id.
pub fn render_branch(template: &str, agent: &str, task: Option<&str>, id: &JobId) -> String {
    let values = BTreeMap::from([
        ("{agent}", agent),
        ("{task}", task.unwrap_or(id.as_str())),
        ("{id}", id.as_str()),
    ]);
    values
        .iter()
        .fold(template.to_string(), |acc, (key, value)| {
            acc.replace(key, value)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn branch_template_defaults_task_to_id() {
        let id = JobId::parse("j1").unwrap();
        assert_eq!(
            render_branch("agent/{agent}/{task}", "claude", Some("FR-1"), &id),
            "agent/claude/FR-1"
        );
        assert_eq!(
            render_branch("agent/{agent}/{task}", "agent", None, &id),
            "agent/agent/j1"
        );
    }
}
