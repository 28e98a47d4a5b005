//! `paddock show`: a job with what it changed.

use clap::Args;

use super::exit;
use super::render::{print_details, print_json};
use crate::error::Result;
use crate::ops::Operations;

#[derive(Debug, Args)]
pub struct ShowArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
    #[arg(long)]
    json: bool,
}

pub async fn run(ops: &impl Operations, args: ShowArgs) -> Result<i32> {
    let details = ops.show(&args.job).await?;
    if args.json {
        print_json(&details);
    } else {
        print_details(&details);
    }
    Ok(if details.changes_error.is_some() {
        exit::STATE_UNKNOWN
    } else {
        exit::OK
    })
}
