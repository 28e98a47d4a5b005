//! The read operations: `list`, `show`, `diff` and `log`. Reads of a job's git state come
//! from its scratch repository after a sync, never from its git dir or checkout.

use std::path::Path;

use super::{Error, JobDetails, JobView, Paddock, Result, SyncScope};
use crate::git::{ChangeSummary, CommitInfo, GitRepo};
use crate::job::{JobRecord, JobState};
use crate::wire::{JobDiff, OutsideHistory};

impl Paddock {
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

    /// The views of `records` with the merged and conflicts marks of each (`ls`,
    /// `GET /v1/jobs`).
    pub async fn list_views(&self, repo: Option<&Path>) -> Result<Vec<JobView>> {
        let started = std::time::Instant::now();
        let records = self.list(repo).await?;
        let listed = started.elapsed();
        let marks = self.merge_marks(&records).await;
        let marked = started.elapsed();
        let mut views = self.views(&records);
        let viewed = started.elapsed();
        self.engine_statuses(&mut views).await;
        let total = started.elapsed();
        // An answer that should take milliseconds and did not says where its time went.
        if total > std::time::Duration::from_millis(300) {
            tracing::warn!(
                ?listed,
                ?marked,
                ?viewed,
                ?total,
                jobs = records.len(),
                "a slow job list"
            );
        }
        for view in &mut views {
            if let Some(&(merged, clean)) = marks.get(&view.id) {
                view.merged = Some(merged);
                view.conflicts = Some(!clean);
            }
        }
        Ok(views)
    }

    /// The views of `records`, with the queue positions of queued ones and the usage of the
    /// disks of those with a limit or a git disk.
    pub fn views(&self, records: &[JobRecord]) -> Vec<JobView> {
        let positions = if records.iter().any(|r| r.state == JobState::Queued) {
            self.queue_positions()
        } else {
            Vec::new()
        };
        records
            .iter()
            .map(|record| {
                let mut view = JobView::from(record);
                view.queue_position = positions
                    .iter()
                    .find(|(id, _)| *id == record.id)
                    .map(|(_, place)| *place);
                if let Some(limit) = record.disk {
                    view.disk = Some(crate::disk::usage(&self.home.job_dir(&record.id), limit));
                }
                if let Some(size) = record.git_disk {
                    view.git_disk = Some(crate::disk::usage(&self.home.job_dir(&record.id), size));
                }
                view
            })
            .collect()
    }

    /// The view of one record, as [`views`](Self::views) makes it.
    pub fn view_of(&self, record: &JobRecord) -> JobView {
        self.views(std::slice::from_ref(record))
            .pop()
            .expect("one view per record")
    }

    /// A job with its commits ahead and changed files, as of a sync made for this call. When
    /// the sync fails, the changes are those of the last good sync and `changes_error` says
    /// why they may be stale.
    pub async fn show(&self, id: &str) -> Result<JobDetails> {
        let record = self.load(id)?;
        let (changes, changes_error) = match self.fresh_changes(&record).await {
            Ok((changes, stale)) => (Some(changes), stale),
            // A job not made yet has no changes: nothing is unknown about that.
            Err(Error::NotRunnable { .. })
                if matches!(record.state, JobState::Queued | JobState::Creating) =>
            {
                (None, None)
            }
            Err(e) => (None, Some(e.to_string())),
        };
        let record = self.load(id).unwrap_or(record);
        let mut view = self.view_of(&record);
        self.engine_statuses(std::slice::from_mut(&mut view)).await;
        let merge = if matches!(record.state, JobState::Queued | JobState::Creating) {
            None
        } else {
            self.merge_status(&record).await.ok()
        };
        view.merged = merge.as_ref().map(|m| m.merged);
        view.conflicts = merge.as_ref().map(|m| !m.clean);
        let outside_history = if changes.is_some() {
            self.branch_outside_history(&record).await
        } else {
            None
        };
        let logs = self.home().logs_dir(&record.id);
        let logs_bytes = tokio::task::spawn_blocking(move || logs_size(&logs))
            .await
            .unwrap_or(0);
        let image_id = match self.runtime_of(&record).capabilities().images {
            Some(images) if record.container_id.is_some() => images.sandbox_image(&record).await,
            _ => None,
        };
        Ok(JobDetails {
            image_id,
            view,
            changes,
            changes_error,
            logs_bytes,
            isolation: self.runtime_of(&record).describe().isolation.to_string(),
            merge,
            outside_history,
        })
    }

    async fn fresh_changes(&self, record: &JobRecord) -> Result<(ChangeSummary, Option<String>)> {
        if matches!(record.state, JobState::Queued | JobState::Creating) {
            return Err(Error::NotRunnable {
                id: record.id.clone(),
                state: record.state,
            });
        }
        let (untracked, stale) = match self.sync_job(record, SyncScope::BranchAndWork).await {
            // The changes came through; only which of them are untracked is unknown.
            Ok(synced) if synced.untracked_cut => (
                synced.untracked,
                Some(format!(
                    "the job's untracked list was over its cap of {}: untracked files show as \
                     added, and the list of changes may be incomplete",
                    crate::units::format_size(crate::git::sync::MAX_UNTRACKED_BYTES)
                )),
            ),
            Ok(synced) => (synced.untracked, None),
            Err(error @ Error::Legacy { .. }) => return Err(error),
            // A frozen sandbox is not looked into: the last sync's changes, said so (none
            // when the job never synced).
            Err(error @ Error::Paused { .. }) => {
                let last = self
                    .scratch_of(record)
                    .changes(&record.base_commit, Default::default())
                    .await;
                return match last {
                    Ok(changes) => Ok((changes, Some(error.to_string()))),
                    Err(_) => Err(error),
                };
            }
            Err(error) => (Default::default(), Some(error.to_string())),
        };
        let changes = self
            .scratch_of(record)
            .changes(&record.base_commit, untracked)
            .await?;
        Ok((changes, stale))
    }

    /// The patch (or diffstat) of committed and uncommitted changes against the base, and
    /// the commits on the branch the job did not make.
    pub async fn diff(&self, id: &str, stat: bool) -> Result<JobDiff> {
        let record = self.load(id)?;
        match self.sync_job(&record, SyncScope::BranchAndWork).await {
            // A paused job's last synced changes stand.
            Ok(_) | Err(Error::Paused { .. }) => {}
            Err(error) => return Err(error),
        }
        let diff = self
            .scratch_of(&record)
            .diff(&record.base_commit, stat)
            .await?;
        Ok(JobDiff {
            id: record.id.to_string(),
            stat,
            diff,
            outside_history: self.branch_outside_history(&record).await,
        })
    }

    /// The branch's outside history as the user's repository has it now; a failed look is
    /// logged and reported as none known.
    async fn branch_outside_history(&self, record: &JobRecord) -> Option<OutsideHistory> {
        let repo = self.repo_of(record);
        let found = match repo
            .ref_target(&format!("refs/heads/{}", record.branch))
            .await
        {
            Ok(Some(tip)) => self.outside_history(record, &repo, &tip, None).await,
            Ok(None) => Ok(None),
            Err(error) => Err(error.into()),
        };
        found.unwrap_or_else(|error| {
            tracing::warn!(job = %record.id, %error, "cannot tell the branch's outside history");
            None
        })
    }

    /// Commits on the job's branch since its base, newest first.
    pub async fn log(&self, id: &str) -> Result<Vec<CommitInfo>> {
        let record = self.load(id)?;
        self.sync_job(&record, SyncScope::Branch).await?;
        Ok(self.scratch_of(&record).log(&record.base_commit).await?)
    }
}

/// What the dashboard shows of a job beyond its record, read without a sync.
#[derive(Debug, Clone, Default)]
pub struct LiveStatus {
    /// The sandbox as its runtime sees it now (None: the runtime cannot tell).
    pub sandbox: Option<crate::runtime::SandboxStatus>,
    /// Commits on the job's branch in the user's repository beyond the base (as of the last
    /// sync), and commits on the base ref since the job branched from it.
    pub ahead_behind: Option<(usize, usize)>,
}

impl Paddock {
    /// The job's [`LiveStatus`]: a look at its sandbox and two git2 reads of the user's
    /// repository (its branch and its base ref); never a sync, never the job's git dir.
    pub async fn live_status(&self, record: &JobRecord) -> LiveStatus {
        let sandbox = if matches!(record.state, JobState::Queued | JobState::Creating) {
            None
        } else {
            self.runtime_of(record).status(record).await
        };
        LiveStatus {
            sandbox,
            ahead_behind: self.ahead_behind(record).await,
        }
    }

    async fn ahead_behind(&self, record: &JobRecord) -> Option<(usize, usize)> {
        let repo = self.repo_of(record);
        let tip = repo
            .ref_target(&format!("refs/heads/{}", record.branch))
            .await
            .ok()??;
        let ahead = repo.count_ahead(&record.base_commit, &tip).await.ok()?;
        let base_tip = repo.resolve_commit(&record.base).await.ok()?;
        let behind = repo
            .count_ahead(&record.base_commit, &base_tip)
            .await
            .ok()?;
        Some((ahead, behind))
    }
}

/// The bytes of a job's logs dir and its `execs/` (paddock writes both; two levels, no
/// link followed).
fn logs_size(dir: &std::path::Path) -> u64 {
    let files = |dir: &std::path::Path| -> u64 {
        std::fs::read_dir(dir).map_or(0, |entries| {
            entries
                .flatten()
                .filter_map(|e| e.metadata().ok())
                .filter(std::fs::Metadata::is_file)
                .map(|m| m.len())
                .sum()
        })
    };
    files(dir) + files(&dir.join("execs"))
}
