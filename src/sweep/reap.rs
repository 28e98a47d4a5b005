//! What the sweep removes besides stale jobs: containers, sync containers and checkouts
//! without a record, git worktree entries of pre-0.2 jobs, stale index locks. Each is
//! checked to be ours right before it goes, and a checkout's work is saved first.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use chrono::Utc;

use super::{SweepOptions, SweepReport, age};
use crate::engine::{Paddock, Result, SyncScope};
use crate::git::GitRepo;
use crate::job::{JobRecord, JobState};
use crate::runtime::{self, SandboxRole};

/// Longer than any sync may take (its own deadline is ten minutes).
const SYNC_CONTAINER_MAX_AGE: Duration = Duration::from_secs(3600);

impl Paddock {
    pub(super) async fn reap_orphan_containers(
        &self,
        options: &SweepOptions,
        report: &mut SweepReport,
    ) {
        let local = self.runtimes().with_sandboxes();
        self.reap_orphans_on(local, options, report).await;
    }

    /// Removes the install's containers on `runtime`'s engine whose job has no record (and
    /// helpers that outlived their job): a local or a remote engine alike.
    pub(super) async fn reap_orphans_on(
        &self,
        runtime: &dyn runtime::Runtime,
        options: &SweepOptions,
        report: &mut SweepReport,
    ) {
        let Ok(containers) = crate::runtime::list_sandboxes(runtime).await else {
            return;
        };
        for container in containers {
            if container.role == SandboxRole::Pool {
                self.reap_orphan_pool_container(runtime, options, container, report)
                    .await;
                continue;
            }
            if container.role != SandboxRole::Job {
                self.reap_helper_container(runtime, options, container, report)
                    .await;
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
            // A remote orphan's work is in its volumes: saved first (its container may run
            // the sync), its volumes removed once its container is gone.
            let saved = match runtime.describe().engine {
                Some(engine) => Some(self.save_engine_orphan(engine, &container, &id).await),
                None => None,
            };
            match crate::runtime::remove_sandbox(runtime, &container).await {
                Ok(()) => {
                    report.removed("container", container.name.clone(), reason);
                    if let (Some(saved), Some(engine)) = (saved, runtime.describe().engine) {
                        self.reap_engine_orphan_files(engine, &container, saved, report)
                            .await;
                    }
                }
                Err(error) => report.error("container", container.name, reason, error),
            }
        }
    }

    /// A throwaway sync container is removed once its job is gone or it has outlived any
    /// sync (a paddock killed mid-sync leaves one behind); an egress sidecar (and its
    /// network) once its job is gone.
    pub(super) async fn reap_helper_container(
        &self,
        runtime: &dyn runtime::Runtime,
        options: &SweepOptions,
        container: runtime::Sandbox,
        report: &mut SweepReport,
    ) {
        // A setup container beside a job still being created by a live process is at work,
        // however long its setup takes (`setup_timeout` may exceed an hour).
        let creating = self.store().load(&container.job).is_ok_and(|record| {
            record.state == JobState::Creating
                && record
                    .owner
                    .as_ref()
                    .is_some_and(crate::job::ProcessId::is_alive)
        });
        let outlived = container.role == SandboxRole::Sync
            && !creating
            && container
                .created
                .is_some_and(|created| age(options.now, created) > SYNC_CONTAINER_MAX_AGE);
        if self.store().exists_str(&container.job) && !outlived {
            return;
        }
        let reason = if container.role == SandboxRole::Sync {
            "sync container of a job that is gone, or older than any sync"
        } else {
            "egress proxy or port relay of a job that is gone"
        };
        self.remove_listed_sandbox(runtime, options, container, reason, report)
            .await;
    }

    /// Removes a sandbox the sweep listed (or, on a dry run, says it would), into `report`.
    pub(super) async fn remove_listed_sandbox(
        &self,
        runtime: &dyn runtime::Runtime,
        options: &SweepOptions,
        container: runtime::Sandbox,
        reason: &str,
        report: &mut SweepReport,
    ) {
        if options.dry_run {
            report.removed("container", container.name, reason);
            return;
        }
        match crate::runtime::remove_sandbox(runtime, &container).await {
            Ok(()) => report.removed("container", container.name, reason),
            Err(error) => report.error("container", container.name, reason, error),
        }
    }

    pub(super) async fn reap_orphan_worktrees(
        &self,
        options: &SweepOptions,
        report: &mut SweepReport,
    ) {
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
                            Some(fetch) => format!("{reason}; uncommitted work saved: {fetch}"),
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
    pub(super) async fn remove_orphan_worktree(
        &self,
        repo: Option<&GitRepo>,
        path: &Path,
        id: &str,
    ) -> Result<Option<String>> {
        let job_id = crate::job::JobId::parse(id)?;
        let git_dir = self.orphan_git_dir(&job_id);
        let mut saved = None;
        if let Some(repo) = repo
            && git_dir.is_dir()
        {
            let record = self.orphan_record(repo, job_id.clone(), path, None).await?;
            let synced = self.sync_job(&record, SyncScope::BranchAndWork).await?;
            if self.publish_wip(&record, &synced).await?.is_some() {
                saved = Some(format!(
                    "git fetch {} refs/paddock/wip/{id}",
                    self.wip_store_of(&record).display()
                ));
            }
        }
        // Re-check ownership right before deleting.
        if !self.home().owns_worktree(path) {
            return Err(crate::engine::Error::NotOurs {
                path: path.to_path_buf(),
            });
        }
        // A killed create's overlay: its upper dir goes with the job dir below.
        crate::overlay::unmount(path).await?;
        crate::tree::remove_tree_async(path)
            .await
            .map_err(|source| crate::engine::Error::RemoveDir {
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
        crate::disk::unmount(&job_dir)?;
        match crate::tree::remove_tree_async(&job_dir).await {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(crate::engine::Error::RemoveDir {
                    path: job_dir,
                    source: e,
                });
            }
            _ => {}
        }
        Ok(saved)
    }

    /// Where the git dir of a job whose record is gone is: on its disk when one holds it
    /// (still mounted: a killed create), else at `work/<id>/git`.
    fn orphan_git_dir(&self, id: &crate::job::JobId) -> std::path::PathBuf {
        let on_disk = crate::disk::git_dir(&self.home().job_dir(id));
        if on_disk.is_dir() {
            return on_disk;
        }
        self.home().job_git_dir(id)
    }

    /// A stand-in record for a checkout whose record is gone, enough to run a sync of its
    /// uncommitted work in a throwaway container with the default profile's image and
    /// limits. Refused when Docker cannot run it: running git on the host in an agent's
    /// checkout is what the sandbox exists to avoid.
    pub(super) async fn orphan_record(
        &self,
        repo: &GitRepo,
        id: crate::job::JobId,
        path: &Path,
        engine: Option<&str>,
    ) -> Result<JobRecord> {
        let config = self.config(Some(&repo.root))?;
        let (profile_name, profile) = config.select_profile(None, "agent", None)?;
        self.runtimes()
            .engine(engine)
            .check_ready(&profile.image.value, profile.network.value)
            .await?;
        let now = Utc::now();
        let container_name = self.runtimes().with_sandboxes().layout().sandbox_name(&id);
        // Its create's object view, when it got that far (no agent ran before it existed).
        let object_view =
            Some(self.home().job_dir(&id).join("objects")).filter(|view| view.is_dir());
        Ok(JobRecord {
            schema: crate::job::RECORD_SCHEMA,
            git_dir: Some(self.orphan_git_dir(&id)),
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
            runtime: self.runtimes().engine_kind(),
            limits: crate::job::Limits::from(&profile),
            reserve: None,
            container_id: None,
            container_name,
            state: JobState::Exited,
            created_at: now,
            last_activity_at: now,
            finished_at: None,
            paused_at: None,
            frozen_by: None,
            exit_code: None,
            oom_killed: false,
            oom_kills: 0,
            owner: None,
            caches: Vec::new(),
            labels: Default::default(),
            sync_error: None,
            synced_at: None,
            copied: Vec::new(),
            setup: Vec::new(),
            queue_seq: None,
            ports: Vec::new(),
            checkout: crate::config::CheckoutMode::Worktree,
            pristine: None,
            pool: None,
            disk: None,
            git_disk: None,
            object_view,
            push: crate::config::PushPolicy::Manual,
            push_error: None,
            devcontainer: None,
            engine: engine.map(str::to_string),
            engine_fill: None,
            forked_from: None,
            auto_checkpoints: None,
        })
    }

    pub(super) async fn prune_git_worktrees(
        &self,
        options: &SweepOptions,
        report: &mut SweepReport,
    ) {
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

    pub(super) fn clear_stale_index_locks(&self, options: &SweepOptions, report: &mut SweepReport) {
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
