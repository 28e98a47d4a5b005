//! One MCP session: who it is (the label its jobs carry), what it may touch, and how a
//! failed tool is shown to the agent.

use std::path::PathBuf;

use crate::error::Error;

/// The label that says which MCP session created a job.
pub const SESSION_LABEL: &str = "mcp-session";

/// One MCP session: its id (the value of its jobs' label), whether it may touch every job,
/// and the repositories it serves (their git common dirs, as `GitRepo::open` resolves them):
/// without `--all-jobs` it creates jobs only there.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: String,
    pub all_jobs: bool,
    pub repos: Vec<PathBuf>,
}

impl Session {
    /// A session with a fresh random id, serving `repos` (common dirs).
    pub fn new(all_jobs: bool, repos: Vec<PathBuf>) -> Session {
        Session {
            id: crate::ids::random_hex(16),
            all_jobs,
            repos,
        }
    }
}

/// Why a tool failed: shown to the agent as an `isError` result.
pub(super) struct Failure {
    pub(super) code: &'static str,
    pub(super) message: String,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        let mut message = error.to_string();
        if let Some(hint) = error.hint() {
            message.push_str(&format!(" (hint: {hint})"));
        }
        Failure {
            code: error.kind().code(),
            message,
        }
    }
}
