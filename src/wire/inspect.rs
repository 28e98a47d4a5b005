//! What `show` and `diff` answer: a job with what it changed, its patch, and the commits on
//! its branch it did not make.

use serde::{Deserialize, Serialize};

use super::{ChangeSummary, CommitInfo, JobView, MergeStatus};

/// `show`: the job plus what it changed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobDetails {
    #[serde(rename = "job")]
    pub view: JobView,
    pub changes: Option<ChangeSummary>,
    /// Set when the worktree could not be read (for example it was deleted by hand).
    pub changes_error: Option<String>,
    pub isolation: String,
    /// What the host keeps of the job's output (`logs/<job>/`: the output log, each exec's
    /// record and output, the egress log), in bytes: each part has a cap.
    #[serde(default)]
    pub logs_bytes: u64,
    /// The branch against its base branch: merged, clean, conflicting files.
    #[serde(default)]
    pub merge: Option<MergeStatus>,
    /// Commits on the branch since its base that the job did not make (history merged in
    /// from outside the job); `None`: there are none.
    #[serde(default)]
    pub outside_history: Option<OutsideHistory>,
    /// The id of the image the job's sandbox runs (`sha256:...`), when it has a container
    /// now; its name is `job.limits.image`.
    #[serde(default)]
    pub image_id: Option<String>,
}

/// `diff`: the patch (or diffstat) of a job's changes against its base.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobDiff {
    pub id: String,
    pub stat: bool,
    pub diff: String,
    /// As in [`JobDetails`]: commits on the branch the job did not make, whose changes the
    /// patch includes.
    #[serde(default)]
    pub outside_history: Option<OutsideHistory>,
}

/// Commits a job's branch carries since its base that the job did not make: the user's other
/// history (a branch, a tag, another job's branch, or a commit only the object store holds)
/// merged in. `push` refuses those the remote lacks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OutsideHistory {
    /// How many there are.
    pub count: usize,
    /// The local branches and tags that contain the first few (empty: none does).
    pub refs: Vec<String>,
    /// The first few, newest first.
    pub commits: Vec<CommitInfo>,
}

impl OutsideHistory {
    /// `abc1234567 "subject"`, for the first few, comma-separated.
    pub fn described(&self) -> String {
        self.commits
            .iter()
            // The subjects are the agent's text: one line each, and not a page.
            .map(|c| {
                let subject = crate::text::short_line(&c.summary, 120);
                format!("{} \"{subject}\"", &c.sha[..c.sha.len().min(10)])
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// One line for a person: how many, from where, which.
    pub fn sentence(&self) -> String {
        let from = if self.refs.is_empty() {
            "no branch or tag of yours; the object store".to_string()
        } else {
            self.refs.join(", ")
        };
        format!(
            "the branch carries {} commit(s) the job did not make (from {from}), e.g. {}",
            self.count,
            self.described()
        )
    }
}
