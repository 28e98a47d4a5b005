//! `paddock rm`: remove a job; its uncommitted work is kept in `refs/paddock/wip/<job>` of
//! paddock's wip store of the repository (the output says how to fetch it).

use clap::Args;

use super::exit;
use super::render::print_json;
use crate::error::Result;
use crate::ops::Operations;
use crate::wire::RemoveOptions;

#[derive(Debug, Args)]
pub struct RmArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
    /// Remove even if saving uncommitted work fails.
    #[arg(long)]
    force: bool,
    /// Delete the branch even when it has commits.
    #[arg(long, conflicts_with = "keep_branch")]
    delete_branch: bool,
    /// Keep the branch even when it has no commits.
    #[arg(long)]
    keep_branch: bool,
    #[arg(long)]
    json: bool,
}

pub async fn run(ops: &impl Operations, args: RmArgs) -> Result<i32> {
    let options = RemoveOptions::from_flags(args.delete_branch, args.keep_branch, None, args.force);
    let report = ops.remove(&args.job, options).await?;
    if args.json {
        print_json(&report);
        return Ok(exit::OK);
    }
    say!("removed job {}", report.id);
    if report.branch_kept {
        say!(
            "kept branch {} ({} commit{} ahead of its base)",
            report.branch,
            report.commits_ahead,
            if report.commits_ahead == 1 { "" } else { "s" }
        );
    } else {
        say!("deleted branch {}", report.branch);
    }
    if let (Some(fetch), Some(commit)) = (report.wip_fetch(), &report.wip_commit) {
        say!(
            "uncommitted work saved ({}): {fetch}",
            &commit[..commit.len().min(10)]
        );
    }
    Ok(exit::OK)
}
