//! `paddock log`: commits on the job's branch since its base.

use clap::Args;

use super::exit;
use super::render::print_json;
use crate::error::Result;
use crate::ops::Operations;
use crate::units::format_age;

#[derive(Debug, Args)]
pub struct LogArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
    #[arg(long)]
    json: bool,
}

pub async fn run(ops: &impl Operations, args: LogArgs) -> Result<i32> {
    let commits = ops.log(&args.job).await?;
    if args.json {
        print_json(&commits);
        return Ok(exit::OK);
    }
    let now = chrono::Utc::now();
    for commit in commits {
        say!(
            "{} {} ({}, {} ago)",
            &commit.sha[..commit.sha.len().min(10)],
            crate::text::line(&commit.summary),
            crate::text::line(&commit.author),
            format_age(now - commit.time)
        );
    }
    Ok(exit::OK)
}
