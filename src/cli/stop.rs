//! `paddock stop`: stop what runs in a job (SIGTERM, the grace period, then SIGKILL).

use clap::Args;

use super::exit;
use crate::error::Result;
use crate::ops::Operations;
use crate::units::HumanDuration;

#[derive(Debug, Args)]
pub struct StopArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
    #[arg(long)]
    grace: Option<HumanDuration>,
}

pub async fn run(ops: &impl Operations, args: StopArgs) -> Result<i32> {
    let stopped = ops.stop(&args.job, args.grace.map(|g| g.0)).await?;
    if stopped {
        say!("stopped job {}", args.job);
    } else {
        say!("job {} had nothing running", args.job);
    }
    Ok(exit::OK)
}
