//! The wire types of getting a job's work to the user's branches: `conflicts`, `merge`,
//! `apply`, and the merge status `show` reports.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{ConflictFile, RemoveReport};
use crate::job::JobId;

/// A job's branch against a base (`conflicts`, `show`): what it changes, whether it merges
/// cleanly, whether it is already merged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergeStatus {
    /// The base: the job's base branch (`main`), or the ref given with `--base`.
    pub base: String,
    pub base_tip: String,
    /// Null when the branch does not exist (yet).
    pub branch_tip: Option<String>,
    /// The branch has commits beyond the job's base commit and all their changes are in the
    /// base (a merge, fast-forward, squash or rebase landed them).
    pub merged: bool,
    /// The branch merges into the base without conflicts.
    pub clean: bool,
    /// Files the branch changes since its merge base with the base, sorted.
    pub files: Vec<String>,
    /// Files that would conflict, with git's conflict type (`contents`, `modify/delete`, ...).
    pub conflicts: Vec<ConflictFile>,
}

/// Which jobs `conflicts` looks at: `paddock conflicts` and `GET /v1/conflicts`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ConflictsQuery {
    /// The jobs (empty: every job that has a branch, of `repo` when given).
    #[serde(default)]
    pub jobs: Vec<String>,
    /// The base to merge into (default: each job's base branch at its current tip).
    #[serde(default)]
    pub base: Option<String>,
    #[serde(default)]
    pub repo: Option<PathBuf>,
}

/// One job in a conflicts report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobConflicts {
    pub id: JobId,
    pub branch: String,
    /// Set when the job's last sync failed: the status is of the branch as the host last
    /// had it, which may not be the job's now.
    #[serde(default)]
    pub sync_error: Option<String>,
    #[serde(flatten)]
    pub status: MergeStatus,
}

/// Two jobs of one repository that touch the same files, and whether their branches merge
/// with each other.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobPair {
    pub jobs: [JobId; 2],
    pub shared_files: Vec<String>,
    pub clean: bool,
    pub conflicts: Vec<ConflictFile>,
}

/// `conflicts --json`: each job against its base, and each pair that shares files.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConflictsReport {
    pub jobs: Vec<JobConflicts>,
    pub pairs: Vec<JobPair>,
}

/// How `merge` lands a job's branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, strum::Display)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum MergeStrategy {
    /// As `git merge`: a fast-forward when the target has not moved, else a merge commit.
    #[default]
    Merge,
    /// One new commit on the target with the branch's changes.
    Squash,
    /// The branch's commits replayed onto the target (a fast-forward when it has not moved).
    Rebase,
}

/// The inputs of `merge` beyond the job id: the body of `POST /v1/jobs/{id}/merge`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MergeRequest {
    /// The branch to land on (default: the job's base branch).
    #[serde(default)]
    pub into: Option<String>,
    #[serde(default)]
    pub strategy: MergeStrategy,
    /// The message of the commit made (merge and squash).
    #[serde(default)]
    pub message: Option<String>,
    /// Remove the job and its branch after landing (as `rm`).
    #[serde(default)]
    pub delete: bool,
}

/// What `merge` did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MergeReport {
    pub id: JobId,
    pub branch: String,
    pub into: String,
    pub strategy: MergeStrategy,
    /// False when the branch's changes were already in the target (nothing moved).
    pub landed: bool,
    pub fast_forward: bool,
    /// The target's tip before and after.
    pub previous: String,
    pub commit: String,
    /// Commits paddock wrote (0 for a fast-forward).
    pub commits_written: usize,
    /// Checkouts of the target branch that were updated.
    pub checkouts: Vec<PathBuf>,
    /// With `delete`: the removal (as `rm --json`).
    pub removed: Option<RemoveReport>,
}

/// What `apply` did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ApplyReport {
    pub id: JobId,
    /// The checkout the changes went to.
    pub checkout: PathBuf,
    /// What was applied: the snapshot of the job's uncommitted work, else its branch tip.
    pub commit: String,
    /// Whether uncommitted work of the job was included.
    pub uncommitted: bool,
    /// Files the applied changes touch.
    pub files: Vec<String>,
}

/// The inputs of `push` beyond the job id: the body of `POST /v1/jobs/{id}/push`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PushRequest {
    /// A remote of the repository's config (default: the branch's upstream remote, else
    /// `origin`); never a URL.
    #[serde(default)]
    pub remote: Option<String>,
    /// Replace a remote branch the job's branch does not contain, if it is still at the
    /// tip seen just before the push.
    #[serde(default)]
    pub force_with_lease: bool,
    /// Push even when the branch carries commits the remote lacks that the user's other
    /// local refs reach and the job did not make (an agent can merge them in from the
    /// object store it reads): they become public too.
    #[serde(default)]
    pub include_local_history: bool,
}

/// What `push` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushReport {
    pub id: JobId,
    /// The job's branch (pushed from the user's repository, after a sync).
    pub branch: String,
    /// The remote's name in the repository's config, and the URL pushed to (no password).
    pub remote: String,
    pub url: String,
    /// The ref written on the remote (`refs/heads/...`).
    #[serde(rename = "ref")]
    pub dest_ref: String,
    /// The remote ref's tip before (null: it did not exist) and after.
    pub old: Option<String>,
    pub new: String,
    /// False when the remote already had the tip (nothing sent).
    pub updated: bool,
    /// The remote branch was rewritten (`--force-with-lease`).
    pub forced: bool,
    /// For a github.com or gitlab.com remote, the page that opens a pull request.
    pub pull_request_url: Option<String>,
}
