//! A job's checkout: made at create (`worktree`: `git read-tree` into the job's own
//! directory; `overlay`: an overlay mount of the commit's pristine checkout, see `overlay`)
//! and removed by `rm`, the create's rollback and the sweep. Either way the checkout is a
//! plain directory at `record.worktree` to everything else (container mounts, caches, sync,
//! the file API); an overlay is unmounted before anything under it is deleted. A job with a
//! disk limit (`record.disk`) has its overlay's layers in its own filesystem (`disk`), made
//! by the create before the git dir and unmounted after the overlay.

use super::failpoints::crash_point;
use super::{Error, Paddock, Result};
use crate::config::CheckoutMode;
use crate::git::GitRepo;
use crate::git::jobdir::JobGitDir;
use crate::job::JobRecord;
use crate::overlay::Pristines;

impl Paddock {
    /// Makes a local job's files (its `Place` on this host): the job's disk when it has one,
    /// its private git dir, its outbox, and `tip` checked out. Returns the git dir, where
    /// the create's copies and caches go next.
    pub(super) async fn fill_local(
        &self,
        repo: &GitRepo,
        record: &mut JobRecord,
        tip: &str,
    ) -> Result<JobGitDir> {
        // The job's disk before anything is written to it: its git dir and outbox (and an
        // overlay's layers) live there when the record names the git dir on it.
        if let Some(size) = record.disk.or(record.git_disk) {
            let started = std::time::Instant::now();
            crate::disk::make(&self.home.job_dir(&record.id), size).await?;
            tracing::debug!(job = %record.id, %size, elapsed = ?started.elapsed(), "job disk made");
            crash_point("disk");
        }
        let git_dir = record
            .git_dir
            .clone()
            .expect("create sets the job's git dir before building");
        let job_git = JobGitDir::create(&git_dir, repo, &record.branch, tip).await?;
        if self.runtime_of(record).layout().sandboxed()
            && let Some(outbox) = record.outbox()
        {
            std::fs::create_dir_all(&outbox).map_err(|source| crate::store::StoreError::Io {
                path: outbox.clone(),
                source,
            })?;
        }
        crash_point("recorded");
        self.check_out(repo, record, &job_git, tip).await?;
        Ok(job_git)
    }

    /// Checks `tip` out at the job's worktree with its `.git` link, before any agent runs.
    async fn check_out(
        &self,
        repo: &GitRepo,
        record: &mut JobRecord,
        job_git: &JobGitDir,
        tip: &str,
    ) -> Result<()> {
        let runtime = self.runtime_of(record);
        let layout = runtime.layout();
        let (link_target, _) = layout
            .git_paths(record)
            .expect("the record names its git dir");
        let owner = layout.files_owner(record);
        if record.checkout == CheckoutMode::Worktree {
            job_git
                .checkout(&record.worktree, &link_target, owner)
                .await?;
        } else {
            self.mount_overlay(repo, record, job_git, tip, &link_target, owner)
                .await?;
        }
        if let Some(objects) = layout.objects() {
            let view = self.make_object_view(record).await?;
            record.object_view = Some(view.clone());
            crate::git::objview::verify(&job_git.path, &view, tip).await?;
            job_git.point_alternates(&objects)?;
        }
        Ok(())
    }

    /// Makes the job's view of the repository's object store (`work/<id>/objects`, see
    /// `git::objview`), which its container mounts in place of the live store: the objects
    /// as they are now, before any agent runs, and none that land later. Beside the git
    /// dir, never inside anything the job can write.
    async fn make_object_view(&self, record: &JobRecord) -> Result<std::path::PathBuf> {
        let view = self.home().job_dir(&record.id).join("objects");
        let mut stores = crate::git::object_dirs(&record.git_common_dir);
        if stores.is_empty() {
            stores.push(record.git_common_dir.join("objects"));
        }
        let (store, nested) = (stores.remove(0), stores);
        let into = view.clone();
        let started = std::time::Instant::now();
        let stats = tokio::task::spawn_blocking(move || {
            crate::git::objview::make_view(&store, &nested, &into, false)
        })
        .await
        .expect("the object view task does not panic")
        .map_err(|source| crate::store::StoreError::Io {
            path: view.clone(),
            source,
        })?;
        tracing::debug!(
            job = %record.id,
            linked = stats.linked,
            copied = stats.copied,
            copied_bytes = stats.copied_bytes,
            ms = started.elapsed().as_millis(),
            "object view made"
        );
        Ok(view)
    }

    /// Where an overlay job's own layers are on this host (`upper`, `work`; see `overlay`):
    /// in the job's disk when it has a limit.
    pub(super) fn layers_of(&self, record: &JobRecord) -> std::path::PathBuf {
        let job_dir = self.home().job_dir(&record.id);
        match record.disk {
            Some(_) => crate::disk::layers_dir(&job_dir),
            None => crate::overlay::layers_dir(&job_dir),
        }
    }

    /// The overlay half of [`check_out`](Self::check_out).
    async fn mount_overlay(
        &self,
        repo: &GitRepo,
        record: &mut JobRecord,
        job_git: &JobGitDir,
        tip: &str,
        link_target: &std::path::Path,
        owner: Option<(u32, u32)>,
    ) -> Result<()> {
        let driver = crate::overlay::driver()?;
        // With a disk limit, the job's layers live in its own filesystem of that size (made
        // and mounted by the create before the git dir).
        let layers = self.layers_of(record);
        let pristines = Pristines::of(self.home());
        let (pristine, lock) = pristines.ensure(repo, &record.repo_key, tip, owner).await?;
        // Named in the record before the lock goes: from here the sweep sees it used.
        record.pristine = Some(pristine.clone());
        self.store().save(record)?;
        drop(lock);
        crash_point("pristine");
        crate::overlay::mount(
            driver,
            self.home(),
            &pristine.join("tree"),
            &layers,
            &record.worktree,
            owner,
            self.runtimes.in_engine(record.runtime),
        )
        .await?;
        crash_point("mounted");
        // Shared where the agent cannot write it: another uid, or no isolation to keep.
        let share = owner.is_some() || !self.runtime_of(record).layout().sandboxed();
        job_git.adopt_index(&pristine.join("index"), &record.worktree, owner, share)?;
        job_git.write_link(&record.worktree, link_target)?;
        if let Some((uid, gid)) = owner {
            let link = record.worktree.join(".git");
            std::os::unix::fs::chown(&link, Some(uid), Some(gid))
                .map_err(|source| crate::store::StoreError::Io { path: link, source })?;
        }
        if let Some(from) = record.forked_from.clone() {
            self.restore_fork_on_host(record, job_git, &from, owner)
                .await?;
        }
        Ok(())
    }

    /// Whether a fork's checkpoint went into its files on this host at its checkout (an
    /// overlay checkout here), so its sandbox restores nothing.
    pub(super) fn fork_restored_on_host(&self, record: &JobRecord) -> bool {
        record.checkout == CheckoutMode::Overlay
            && self.runtime_of(record).capabilities().volumes.is_none()
    }

    /// A fork's checkpoint, put into its overlay checkout by paddock before its sandbox
    /// exists (see `JobGitDir::restore_fresh`): its files land in the job's upper dir only,
    /// given to the agent's uid there, so a fork costs what the source changed, with no
    /// exec into its sandbox. Other forks restore inside their sandbox (`restore_fork`).
    async fn restore_fork_on_host(
        &self,
        record: &JobRecord,
        job_git: &JobGitDir,
        from: &crate::job::ForkedFrom,
        owner: Option<(u32, u32)>,
    ) -> Result<()> {
        let stored = self.load_checkpoint(&from.job, &from.checkpoint)?;
        if stored.repo_key != record.repo_key {
            return Err(Error::CheckpointRepo {
                checkpoint: format!("{}:{}", from.job, from.checkpoint),
                repo: stored.repo,
            });
        }
        job_git
            .restore_fresh(
                &record.worktree,
                &stored.view.wip_store,
                &stored.view.refname,
                &stored.view.commit,
            )
            .await
            .map_err(|error| Error::Restore {
                id: record.id.clone(),
                message: error.to_string(),
            })?;
        if let Some(owner) = owner {
            let upper = self.layers_of(record).join("upper");
            tokio::task::spawn_blocking(move || crate::git::jobdir::give_tree(&upper, owner))
                .await
                .expect("giving files does not panic")?;
        }
        crash_point("restored");
        Ok(())
    }

    /// Removes a job's checkout and its private git dir and scratch repository; idempotent.
    /// The checkout is deleted only after checking it is ours (under our root, our marker).
    pub(super) async fn remove_checkout(&self, repo: &GitRepo, record: &JobRecord) -> Result<()> {
        // A warm-started job's files are mounted into its pool slot too: those go first.
        self.release_pool_slot(record).await?;
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
            // An overlay (of this job, or left by a killed create) goes before its files:
            // deleting through it would only write whiteouts into the upper dir.
            crate::overlay::unmount(&record.worktree).await?;
            remove_tree(&record.worktree)
                .await
                .map_err(|source| Error::RemoveDir {
                    path: record.worktree.clone(),
                    source,
                })?;
        }
        if record.is_legacy() {
            repo.prune_worktrees().await?;
            return Ok(());
        }
        // Everything under the job's own dir in $PADDOCK_HOME is paddock's by construction
        // (the removal follows no symlink an agent may have left in its git dir, and does not
        // recurse on the chains it may have made).
        let job_dir = self.home.job_dir(&record.id);
        // The job's disk (or one a killed create left), now that no overlay stands on it:
        // deleting through it would only empty it.
        crate::disk::unmount(&job_dir)?;
        match remove_tree(&job_dir).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::RemoveDir {
                path: job_dir,
                source,
            }),
        }
    }
}

/// Deletes a directory tree an agent may have made: never following symlinks, without
/// recursion, on a blocking thread (see `tree`).
pub(super) async fn remove_tree(path: &std::path::Path) -> std::io::Result<()> {
    crate::tree::remove_tree_async(path).await
}
