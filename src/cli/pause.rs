//! `paddock pause` and `paddock resume`: freeze a job's processes in place and thaw them.

use clap::Args;

use super::exit;
use super::render::print_json;
use crate::error::Result;
use crate::ops::Operations;

#[derive(Debug, Args)]
pub struct PauseArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn pause(ops: &impl Operations, args: PauseArgs) -> Result<i32> {
    let answer = ops.pause(&args.job).await?;
    if args.json {
        print_json(&answer);
    } else if let Some(since) = answer.since {
        say!(
            "paused job {} (since {}): its processes are frozen; `paddock resume {}` thaws them",
            answer.id,
            since.format("%Y-%m-%d %H:%M:%S UTC"),
            answer.id
        );
    }
    Ok(exit::OK)
}

pub async fn resume(ops: &impl Operations, args: PauseArgs) -> Result<i32> {
    let answer = ops.resume(&args.job).await?;
    if args.json {
        print_json(&answer);
    } else {
        say!("job {} runs", answer.id);
    }
    Ok(exit::OK)
}
