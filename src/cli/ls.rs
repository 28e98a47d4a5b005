//! `paddock ls`: the jobs, as a table or JSON.

use std::path::PathBuf;

use clap::Args;

use super::exit;
use super::render::{print_job_table, print_json};
use crate::error::Result;
use crate::ops::Operations;

#[derive(Debug, Args)]
pub struct LsArgs {
    /// Only jobs of this repository.
    #[arg(long)]
    repo: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

pub async fn run(ops: &impl Operations, args: LsArgs) -> Result<i32> {
    let views = ops.list(args.repo.as_deref()).await?;
    if args.json {
        print_json(&views);
    } else {
        print_job_table(&views);
    }
    Ok(exit::OK)
}
