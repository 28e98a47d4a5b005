//! `merge` and `apply`: a job's work into the user's repository.
//!
//! `merge` lands the job's branch (as last synced: every exec and shell syncs it) on a
//! target branch. It first does the whole merge in a read-only session (objects in a
//! quarantine), so a merge that would conflict is refused with its files and changes
//! nothing; only then does it write the commits it lands into the repository and move the
//! target, with every checkout of the target following (`GitRepo::land`: refused when one
//! has uncommitted changes). `apply` brings the job's committed and uncommitted work to the
//! user's checkout without committing: the work is captured inside the job by the same
//! snapshot sync `rm` uses, checked in a quarantine, fetched (with fsck) to a temporary
//! `refs/paddock/apply/<id>`, and squashed into the checkout by `git merge --squash`.

use super::{Error, Paddock, RemoveOptions, Result, SyncScope};
use crate::config::BranchPolicy;
use crate::git::GitRepo;
use crate::git::merge::MergeSession;
use crate::git::sync::{SCRATCH_STATE, WorkState};
use crate::job::{JobRecord, JobState};
use crate::wire::{ApplyReport, MergeReport, MergeRequest, MergeStrategy};

/// What landing computed: the new tip and how many commits it wrote.
struct Landing {
    commit: String,
    written: usize,
    fast_forward: bool,
}

/// Refuses a job without a branch of its own to work on (legacy, queued, being created).
pub(super) fn require_branch(record: &JobRecord) -> Result<()> {
    if record.is_legacy() {
        return Err(Error::Legacy {
            id: record.id.clone(),
        });
    }
    if matches!(record.state, JobState::Queued | JobState::Creating) {
        return Err(Error::NotRunnable {
            id: record.id.clone(),
            state: record.state,
        });
    }
    Ok(())
}

impl Paddock {
    /// Lands a job's branch on `request.into` (default: its base branch); see the module
    /// docs. With `delete`, the job is then removed as `rm` does, and its branch deleted
    /// when it did not move meanwhile.
    pub async fn merge(&self, id: &str, request: MergeRequest) -> Result<MergeReport> {
        let record = self.load(id)?;
        require_branch(&record)?;
        let repo = self.repo_of(&record);
        let branch_ref = format!("refs/heads/{}", record.branch);
        let tip = repo.ref_target(&branch_ref).await?.ok_or_else(|| {
            crate::git::GitError::NoSuchBranch {
                branch: record.branch.clone(),
                repo: repo.root.clone(),
            }
        })?;
        let into = match &request.into {
            Some(into) => into.strip_prefix("refs/heads/").unwrap_or(into).to_string(),
            None => {
                let facts = self.facts(&repo, &[&record], None).await?;
                let facts = &facts[0];
                if !facts.base_is_branch {
                    return Err(Error::NoTargetBranch {
                        id: record.id.clone(),
                        base: record.base.clone(),
                    });
                }
                facts.base.clone()
            }
        };
        // A branch a job holds is that job's: its next sync would put it back.
        self.refuse_held_branch(&record.repo_key, &into)?;
        let previous = repo
            .ref_target(&format!("refs/heads/{into}"))
            .await?
            .ok_or_else(|| crate::git::GitError::NoSuchBranch {
                branch: into.clone(),
                repo: repo.root.clone(),
            })?;
        let tmp = self.home().root().join("tmp");
        let check = repo.read_only_merges(&tmp, &[]).await?;
        // Already there: the target has the tip, or merging it changes nothing (a squash or
        // rebase of the branch landed before).
        let already = repo.is_ancestor(&tip, &previous).await? || {
            let outcome = check.merge_tree(&previous, &tip, None).await?;
            outcome.clean() && outcome.tree == repo.tree_of(&previous).await?
        };
        let mut report = MergeReport {
            id: record.id.clone(),
            branch: record.branch.clone(),
            into: into.clone(),
            strategy: request.strategy,
            landed: false,
            fast_forward: false,
            previous: previous.clone(),
            commit: previous.clone(),
            commits_written: 0,
            checkouts: Vec::new(),
            removed: None,
        };
        if !already {
            // The dry run first: a conflict refuses here, with nothing written.
            self.land_in(&check, &record, &request, &into, &previous, &tip)
                .await?;
            drop(check);
            let writing = repo.writing_merges().await?;
            let landing = self
                .land_in(&writing, &record, &request, &into, &previous, &tip)
                .await?;
            report.checkouts = repo.checkouts_of(&into).await?;
            repo.land(
                &into,
                &previous,
                &landing.commit,
                &self.home.worktrees_dir(),
            )
            .await?;
            report.landed = true;
            report.fast_forward = landing.fast_forward;
            report.commit = landing.commit;
            report.commits_written = landing.written;
        }
        if request.delete {
            let mut removed = self
                .remove(
                    id,
                    RemoveOptions {
                        branch_policy: BranchPolicy::Keep,
                        force: false,
                    },
                )
                .await?;
            // The removal synced the branch once more: delete it only if that brought
            // nothing new, so work that is not in the target is never deleted; and, as `rm`
            // does, never a branch that existed before the job (`--reuse-branch`).
            if record.branch_created
                && repo.ref_target(&branch_ref).await?.as_deref() == Some(tip.as_str())
            {
                repo.delete_branch(&record.branch).await?;
                removed.branch_kept = false;
            }
            report.removed = Some(removed);
        }
        Ok(report)
    }

    /// Computes the new tip of `into` in `session` (read-only: a dry run; writing: for real).
    async fn land_in(
        &self,
        session: &MergeSession,
        record: &JobRecord,
        request: &MergeRequest,
        into: &str,
        previous: &str,
        tip: &str,
    ) -> Result<Landing> {
        let repo = session.repo();
        let fast_forward_ok = repo.is_ancestor(previous, tip).await?;
        let conflict = |outcome: crate::git::merge::MergeOutcome| Error::MergeConflict {
            id: record.id.clone(),
            into: into.to_string(),
            files: outcome
                .conflicts
                .iter()
                .map(|c| format!("{} ({})", c.path, c.kind))
                .collect(),
        };
        match request.strategy {
            MergeStrategy::Merge | MergeStrategy::Rebase if fast_forward_ok => Ok(Landing {
                commit: tip.to_string(),
                written: 0,
                fast_forward: true,
            }),
            MergeStrategy::Merge => {
                let outcome = session.merge_tree(previous, tip, None).await?;
                if !outcome.clean() {
                    return Err(conflict(outcome));
                }
                let message = request.message.clone().unwrap_or_else(|| {
                    format!(
                        "Merge branch '{}' into {into} (paddock job {})",
                        record.branch, record.id
                    )
                });
                let commit = session
                    .commit_tree(&outcome.tree, &[previous, tip], &message, None)
                    .await?;
                Ok(Landing {
                    commit,
                    written: 1,
                    fast_forward: false,
                })
            }
            MergeStrategy::Squash => {
                let outcome = session.merge_tree(previous, tip, None).await?;
                if !outcome.clean() {
                    return Err(conflict(outcome));
                }
                let message = match &request.message {
                    Some(message) => message.clone(),
                    None => self.squash_message(record, repo, previous, tip).await?,
                };
                let commit = session
                    .commit_tree(&outcome.tree, &[previous], &message, None)
                    .await?;
                Ok(Landing {
                    commit,
                    written: 1,
                    fast_forward: false,
                })
            }
            MergeStrategy::Rebase => {
                let commits = repo.commits_to_replay(previous, tip).await?;
                if commits.iter().any(|c| c.parents.len() != 1) {
                    return Err(Error::RebaseMerges {
                        id: record.id.clone(),
                    });
                }
                let mut onto = previous.to_string();
                let mut written = 0;
                for commit in &commits {
                    let outcome = session
                        .merge_tree(&onto, &commit.sha, Some(&commit.parents[0]))
                        .await?;
                    if !outcome.clean() {
                        return Err(conflict(outcome));
                    }
                    // A change the target already has is dropped, as `git rebase` does.
                    if outcome.tree == session.tree_of(&onto).await? {
                        continue;
                    }
                    written += 1;
                    onto = session
                        .commit_tree(
                            &outcome.tree,
                            &[&onto],
                            &commit.message,
                            Some(&commit.author),
                        )
                        .await?;
                }
                Ok(Landing {
                    commit: onto,
                    written,
                    fast_forward: false,
                })
            }
        }
    }

    /// `<job>: <branch>` and the summaries of the branch's commits.
    async fn squash_message(
        &self,
        record: &JobRecord,
        repo: &GitRepo,
        previous: &str,
        tip: &str,
    ) -> Result<String> {
        let commits = repo.commits_to_replay(previous, tip).await?;
        let mut message = format!("Squashed job {} ({})\n", record.id, record.branch);
        if !commits.is_empty() {
            message.push('\n');
        }
        for commit in commits {
            let summary = commit
                .message
                .lines()
                .next()
                .unwrap_or_default()
                .to_string();
            message.push_str(&format!("* {summary}\n"));
        }
        Ok(message)
    }

    /// Applies a job's committed and uncommitted changes to the user's checkout, staged and
    /// not committed (see the module docs). Refused, with nothing changed, when they would
    /// conflict with the checkout's HEAD.
    pub async fn apply(&self, id: &str) -> Result<ApplyReport> {
        let record = self.load(id)?;
        require_branch(&record)?;
        let repo = self.repo_of(&record);
        let checkout =
            repo.checkout_dir()
                .await?
                .ok_or_else(|| crate::git::GitError::NoCheckout {
                    repo: repo.root.clone(),
                })?;
        // Captured inside the job, as `rm` does: never host-side git on the agent's tree.
        let synced = self.sync_job(&record, SyncScope::BranchAndWork).await?;
        let (commit, uncommitted) = match &synced.work {
            WorkState::Snapshot(commit) => (commit.clone(), true),
            _ => match synced.tip.clone() {
                Some(tip) => (tip, false),
                None => (record.base_commit.clone(), false),
            },
        };
        let head = repo.resolve_commit("HEAD").await?;
        let scratch = self.scratch_of(&record);
        let tmp = self.home().root().join("tmp");
        let check = repo
            .read_only_merges(&tmp, &[scratch.path.join("objects")])
            .await?;
        let outcome = check.merge_tree(&head, &commit, None).await?;
        if !outcome.clean() {
            return Err(Error::MergeConflict {
                id: record.id.clone(),
                into: checkout.display().to_string(),
                files: outcome
                    .conflicts
                    .iter()
                    .map(|c| format!("{} ({})", c.path, c.kind))
                    .collect(),
            });
        }
        let files = check.changed_paths(&head, &outcome.tree).await?;
        drop(check);
        let apply_ref = format!("refs/paddock/apply/{}", record.id);
        if uncommitted {
            repo.publish(&scratch.path, &[(SCRATCH_STATE, apply_ref.clone())])
                .await?;
        }
        let applied = repo.squash_into_checkout(&commit).await;
        if uncommitted {
            repo.delete_paddock_ref(&apply_ref).await?;
        }
        applied?;
        Ok(ApplyReport {
            id: record.id.clone(),
            checkout,
            commit,
            uncommitted,
            files,
        })
    }
}
