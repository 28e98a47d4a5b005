//! `rm`: remove a job without losing work. The container is stopped first, the branch is
//! synced into the user's repository and a snapshot of uncommitted work into paddock's wip
//! store of it (never the user's object store, which later jobs read), and only then are the
//! container, the checkout and the job's git dir deleted; the record goes last, so a crash at
//! any point leaves a record that a later `rm` or sweep finishes.

use super::{BranchPolicy, Error, Paddock, RemoveOptions, RemoveReport, Result, SyncScope};
use crate::git::{GitRepo, JobWorktree};
use crate::job::{JobRecord, JobState};
use crate::wire::EventKind;

impl Paddock {
    /// Removes a job without losing work: snapshot uncommitted work to
    /// `refs/paddock/wip/<id>` in the repository's wip store, stop the container, remove the worktree and its git metadata,
    /// delete the branch under `options.branch_policy`, and remove the record last.
    /// Every step tolerates having been done already, so a crashed `rm` can be repeated.
    #[expect(
        clippy::too_many_lines,
        reason = "the removal's steps in order, each failure kept from losing work"
    )]
    pub async fn remove(&self, id: &str, options: RemoveOptions) -> Result<RemoveReport> {
        let record = self.load(id)?;
        if record.state == JobState::Queued {
            // Nothing but the record and its ticket exists yet.
            self.cancel_queued(&record)?;
            return Ok(RemoveReport {
                id: record.id.clone(),
                branch: record.branch.clone(),
                branch_kept: false,
                commits_ahead: 0,
                wip_ref: None,
                wip_commit: None,
                wip_store: None,
                unsaved_files: 0,
                unsaved_examples: Vec::new(),
            });
        }
        // A paused job is thawed first: its frozen processes could not act on the stop.
        let record = self.thaw(record).await?;
        let repo = self.repo_of(&record);
        let wip_ref = format!("refs/paddock/wip/{}", record.id);
        // Record the container's outcome and stop it first, so nothing writes to the
        // worktree while it is snapshotted.
        let record = self
            .runtime_of(&record)
            .stop_for_removal(&self.store, record)
            .await?;
        self.stop_port_relay(&record).await;

        let mut wip_commit = None;
        // Where the snapshot is kept: paddock's wip store of the repository (a legacy job's
        // is in the user's repository, as paddock saved them when it was made).
        let mut wip_store = Some(if record.is_legacy() {
            record.repo.clone()
        } else {
            self.wip_store_of(&record)
        });
        let mut unsaved = crate::tree::TooDeep::default();
        // A job still `creating` never ran an agent: there is no work to save, and a partial
        // checkout would only snapshot noise.
        let has_work = record.state != JobState::Creating;
        if has_work && self.place_of(&record).holds_work(&record) {
            match self.save_work(&repo, &record, &wip_ref).await {
                Ok(commit) => {
                    wip_commit = commit;
                    // What git could index is saved; files deeper than any path git can
                    // name (an agent's chain past PATH_MAX) cannot be, so they are counted
                    // and reported instead of failing the removal (see docs/commands.md).
                    unsaved = unreachable_by_git(&record.worktree).await;
                    if unsaved.count > 0 {
                        tracing::warn!(job = %record.id, files = unsaved.count, examples = ?unsaved.examples, "files too deep for git were not saved");
                    }
                }
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
        // A repository deleted under its job has nowhere to keep anything: `--force` (which
        // got past the failed snapshot) removes what is paddock's and touches no ref.
        let repo_gone = !record.git_common_dir.exists();
        if wip_commit.is_none() && !repo_gone {
            // A snapshot from an earlier, interrupted rm is still work to keep (in the wip
            // store, or in the user's repository where an older paddock saved it).
            if let Some(store) = self.wip_repo_of(&record) {
                wip_commit = store.ref_target(&wip_ref).await?;
            }
            if wip_commit.is_none() {
                wip_commit = repo.ref_target(&wip_ref).await?;
                wip_store = Some(record.repo.clone());
            }
        }
        if wip_commit.is_none() {
            wip_store = None;
        }

        self.runtime_of(&record).destroy(&record).await?;
        // A copy of what the job wrote may be large: off the async workers.
        let promoting = record.clone();
        let _ = tokio::task::spawn_blocking(move || promote_copied_caches(&promoting)).await;
        self.place_of(&record).remove(&repo, &record).await?;

        let tip = if repo_gone {
            None
        } else {
            repo.ref_target(&format!("refs/heads/{}", record.branch))
                .await?
        };
        let commits_ahead = match &tip {
            Some(tip) => repo.count_ahead(&record.base_commit, tip).await?,
            None => 0,
        };
        let delete = match options.branch_policy {
            BranchPolicy::Keep => false,
            BranchPolicy::DeleteIfNoCommits => commits_ahead == 0,
            // Checked now, after the last sync: work that is not in the base stays.
            BranchPolicy::DeleteIfMerged => {
                commits_ahead == 0
                    || self
                        .merge_status(&record)
                        .await
                        .is_ok_and(|status| status.merged)
            }
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
            EventKind::JobRemoved,
            Some(&record.id),
            Some(JobState::Removed),
            if unsaved.count == 0 {
                serde_json::json!({ "branch_kept": tip.is_some() && !delete, "wip_commit": wip_commit })
            } else {
                serde_json::json!({
                    "branch_kept": tip.is_some() && !delete,
                    "wip_commit": wip_commit,
                    "unsaved_files": unsaved.count,
                    "unsaved_examples": unsaved.examples,
                })
            },
        );
        Ok(RemoveReport {
            id: record.id.clone(),
            branch: record.branch.clone(),
            branch_kept: tip.is_some() && !delete,
            commits_ahead,
            wip_ref: wip_commit.as_ref().map(|_| wip_ref),
            wip_commit,
            wip_store,
            unsaved_files: unsaved.count,
            unsaved_examples: unsaved.examples,
        })
    }

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
        };
        let message = format!(
            "paddock: uncommitted work of job {} on {}",
            record.id, record.branch
        );
        Ok(repo.snapshot(&worktree, wip_ref, &message).await?)
    }
}

/// How many bytes of holes a tree the job wrote may have before a copy of it is refused:
/// dependency trees have next to none, and a copy writes them out in full.
const MAX_HOLES: u64 = 1 << 30;

/// Whether a copy of the job-written tree `from` may go next to `to`: refused when its
/// files are mostly holes (a sparse terabyte is a few blocks to the job and a terabyte to
/// write) or when they would not fit in the space left there.
fn copy_fits(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    let sizes = crate::tree::sizes(from);
    let room = to
        .parent()
        .and_then(crate::sys::fs_usage)
        .map_or(0, |usage| usage.available);
    if sizes.apparent > sizes.allocated.saturating_add(MAX_HOLES) || sizes.apparent > room {
        tracing::warn!(
            path = %from.display(),
            apparent = sizes.apparent,
            allocated = sizes.allocated,
            room,
            "a copy cache not kept: too large to copy"
        );
        return Err(std::io::Error::other("the cache copy is too large to keep"));
    }
    Ok(())
}

/// The files of `worktree` no git can reach: paths (from the checkout's top, as git names
/// them) of `PATH_MAX` bytes or more. A walk without recursion, on a blocking thread.
async fn unreachable_by_git(worktree: &std::path::Path) -> crate::tree::TooDeep {
    const PATH_MAX: usize = 4096;
    let worktree = worktree.to_path_buf();
    tokio::task::spawn_blocking(move || crate::tree::too_deep(&worktree, PATH_MAX))
        .await
        .unwrap_or_default()
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
            let moved = std::fs::rename(&copy, &staging).or_else(|_| {
                copy_fits(&copy, &cache.entry)?;
                crate::cache::copy_tree(&copy, &staging)
            });
            if moved.is_ok() && std::fs::remove_dir(&cache.entry).is_ok() {
                let _ = std::fs::rename(&staging, &cache.entry);
            } else {
                let _ = crate::tree::remove_tree(&staging);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparse_cache_copy_is_not_written_out() {
        let dir = tempfile::tempdir().expect("temp dir");
        let copy = dir.path().join("copy");
        std::fs::create_dir_all(copy.join("deep")).expect("mkdir");
        std::fs::write(copy.join("deep/real"), vec![1; 64 << 10]).expect("write");
        let entry = dir.path().join("entry");
        copy_fits(&copy, &entry).expect("a small real tree fits");
        std::fs::File::create(copy.join("deep/sparse"))
            .and_then(|f| f.set_len(1 << 40))
            .expect("a sparse file");
        let sizes = crate::tree::sizes(&copy);
        assert_eq!(sizes.apparent, (1 << 40) + (64 << 10));
        assert!(sizes.allocated < 1 << 20, "{sizes:?}");
        assert!(
            copy_fits(&copy, &entry).is_err(),
            "a sparse terabyte is refused"
        );
    }
}
