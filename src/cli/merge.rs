//! `paddock merge`: land a job's branch on a branch of the repository.

use clap::Args;

use super::exit;
use super::render::print_json;
use crate::error::Result;
use crate::ops::Operations;
use crate::wire::{MergeRequest, MergeStrategy};

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("strategy").multiple(false))]
pub struct MergeArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
    /// The branch to land on (default: the job's base branch).
    #[arg(long, value_name = "BRANCH")]
    into: Option<String>,
    /// One new commit with the branch's changes.
    #[arg(long, group = "strategy")]
    squash: bool,
    /// Replay the branch's commits onto the target.
    #[arg(long, group = "strategy")]
    rebase: bool,
    /// As `git merge`: fast-forward when possible, else a merge commit (the default).
    #[arg(long, group = "strategy")]
    merge: bool,
    /// The message of the commit made (merge and squash).
    #[arg(long, short, value_name = "M")]
    message: Option<String>,
    /// Then remove the job and its branch (as `rm`; work not in the target is kept).
    #[arg(long)]
    delete: bool,
    #[arg(long)]
    json: bool,
}

pub async fn run(ops: &impl Operations, args: MergeArgs) -> Result<i32> {
    let strategy = if args.squash {
        MergeStrategy::Squash
    } else if args.rebase {
        MergeStrategy::Rebase
    } else {
        MergeStrategy::Merge
    };
    let request = MergeRequest {
        into: args.into,
        strategy,
        message: args.message,
        delete: args.delete,
    };
    let report = ops.merge(&args.job, request).await?;
    if args.json {
        print_json(&report);
        return Ok(exit::OK);
    }
    let short = |sha: &str| sha[..sha.len().min(10)].to_string();
    if report.landed {
        let how = if report.fast_forward {
            "fast-forward".to_string()
        } else {
            format!(
                "{}, {} commit(s) written",
                report.strategy, report.commits_written
            )
        };
        say!(
            "merged {} into {}: {} -> {} ({how})",
            report.branch,
            report.into,
            short(&report.previous),
            short(&report.commit)
        );
        for checkout in &report.checkouts {
            say!("updated checkout {}", checkout.display());
        }
    } else {
        say!(
            "{} is already in {}: nothing to merge",
            report.branch,
            report.into
        );
    }
    if let Some(removed) = &report.removed {
        say!("removed job {}", removed.id);
        if removed.branch_kept {
            say!(
                "kept branch {} (it moved during the removal)",
                removed.branch
            );
        } else {
            say!("deleted branch {}", removed.branch);
        }
        if let Some(fetch) = removed.wip_fetch() {
            say!("uncommitted work saved: {fetch}");
        }
    }
    Ok(exit::OK)
}
