//! What `rm` answers: the job's branch, and where its uncommitted work was saved.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::job::JobId;

/// What `remove` did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RemoveReport {
    pub id: JobId,
    pub branch: String,
    pub branch_kept: bool,
    pub commits_ahead: usize,
    /// The wip ref holding uncommitted work, when there was any.
    pub wip_ref: Option<String>,
    pub wip_commit: Option<String>,
    /// The repository holding `wip_ref`: paddock's wip store of the repository
    /// (`$PADDOCK_HOME/wip/<repo-key>.git`), never mounted into a job; the user's repository
    /// for a job made before 0.2 or a snapshot an older paddock saved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wip_store: Option<PathBuf>,
    /// Files of the checkout git could not save (their path from the top is `PATH_MAX`
    /// bytes or longer), removed with the job: how many, and the first few.
    #[serde(default)]
    pub unsaved_files: u64,
    #[serde(default)]
    pub unsaved_examples: Vec<String>,
}

impl RemoveReport {
    /// The command that brings the saved work into the user's repository, when there is some.
    pub fn wip_fetch(&self) -> Option<String> {
        let (wip_ref, store) = (self.wip_ref.as_ref()?, self.wip_store.as_ref()?);
        Some(format!("git fetch {} {wip_ref}", store.display()))
    }
}
