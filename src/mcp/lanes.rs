//! A session's lane: without `--all-jobs` an MCP session creates jobs only in the
//! repositories it was started with (`paddock mcp --repo`), and never based on the branch
//! of a job it did not create (that would hand it another session's work to read).

use super::session::{Failure, SESSION_LABEL, Session};
use crate::ops::Operations;
use crate::wire::CreateRequest;

/// The branch a base names (`agent/x/y` of `refs/heads/agent/x/y~2`), for the check that a
/// session does not start from another session's job.
fn base_branch(base: &str) -> &str {
    let name = base.strip_prefix("refs/heads/").unwrap_or(base);
    name.find(['~', '^', '@', ':'])
        .map_or(name, |end| &name[..end])
}

/// A session's own lane (without `--all-jobs`): a job only in a repository it serves, and
/// never based on the branch of a job another session (or anyone else) made.
pub(super) async fn check_lane(
    ops: &impl Operations,
    session: &Session,
    request: &CreateRequest,
) -> Result<(), Failure> {
    let refused = |message: String| Failure {
        code: "refused",
        message: format!("{message} (start `paddock mcp --repo PATH` or `--all-jobs` to allow it)"),
    };
    let repo = crate::git::GitRepo::open(&request.repo, &std::env::temp_dir())
        .await
        .map_err(|error| refused(error.to_string()))?;
    if !session.repos.contains(&repo.common_dir) {
        return Err(refused(format!(
            "this session serves only the repositories it was started with, not {}",
            repo.root.display()
        )));
    }
    if let Some(base) = &request.base {
        let branch = base_branch(base);
        let jobs = ops.list(Some(&repo.root)).await?;
        if let Some(job) = jobs
            .iter()
            .find(|job| job.branch == branch && job.labels.get(SESSION_LABEL) != Some(&session.id))
        {
            return Err(refused(format!(
                "the base `{base}` is the branch of job {}, which this session did not create",
                job.id
            )));
        }
    }
    Ok(())
}
