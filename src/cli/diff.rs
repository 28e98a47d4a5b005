//! `paddock diff`: the job's committed and uncommitted changes against its base.

use clap::Args;

use super::exit;
use crate::error::Result;
use crate::ops::Operations;

#[derive(Debug, Args)]
pub struct DiffArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
    /// A diffstat instead of the patch.
    #[arg(long)]
    stat: bool,
}

pub async fn run(ops: &impl Operations, args: DiffArgs) -> Result<i32> {
    print!("{}", ops.diff(&args.job, args.stat).await?);
    Ok(exit::OK)
}
