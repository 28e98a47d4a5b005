//! `paddock push`: publish exactly a job's branch to a remote of the repository, with the
//! user's own git credentials.

use clap::Args;

use super::exit;
use super::render::print_json;
use crate::error::Result;
use crate::ops::Operations;
use crate::wire::PushRequest;

#[derive(Debug, Args)]
pub struct PushArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
    /// A remote of the repository's config (default: the branch's upstream remote, else
    /// origin); never a URL.
    #[arg(long, value_name = "NAME")]
    remote: Option<String>,
    /// Replace a remote branch the job's branch does not contain, if it is still where it
    /// was just before the push.
    #[arg(long)]
    force_with_lease: bool,
    /// Push even when the branch carries commits the remote lacks that your other local
    /// branches or tags reach and the job did not make (they become public too).
    #[arg(long)]
    include_local_history: bool,
    #[arg(long)]
    json: bool,
}

pub async fn run(ops: &impl Operations, args: PushArgs) -> Result<i32> {
    let request = PushRequest {
        remote: args.remote,
        force_with_lease: args.force_with_lease,
        include_local_history: args.include_local_history,
    };
    let report = ops.push(&args.job, request).await?;
    if args.json {
        print_json(&report);
        return Ok(exit::OK);
    }
    let short = |sha: &str| sha[..sha.len().min(10)].to_string();
    let old = report.old.as_deref().map_or("(new)".to_string(), short);
    if report.updated {
        let forced = if report.forced { " (forced)" } else { "" };
        say!(
            "pushed {} to {} {}: {} -> {}{forced}",
            report.branch,
            report.remote,
            report.dest_ref,
            old,
            short(&report.new)
        );
    } else {
        say!(
            "{} {} is already at {}: nothing to push",
            report.remote,
            report.dest_ref,
            short(&report.new)
        );
    }
    if let Some(url) = &report.pull_request_url {
        say!("open a pull request: {url}");
    }
    Ok(exit::OK)
}
