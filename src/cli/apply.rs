//! `paddock apply`: a job's committed and uncommitted changes into the repository's
//! checkout, staged and not committed.

use clap::Args;

use super::exit;
use super::render::print_json;
use crate::error::Result;
use crate::ops::Operations;

#[derive(Debug, Args)]
pub struct ApplyArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
    #[arg(long)]
    json: bool,
}

pub async fn run(ops: &impl Operations, args: ApplyArgs) -> Result<i32> {
    let report = ops.apply(&args.job).await?;
    if args.json {
        print_json(&report);
        return Ok(exit::OK);
    }
    say!(
        "applied job {} to {} ({} file(s){}); nothing was committed",
        report.id,
        report.checkout.display(),
        report.files.len(),
        if report.uncommitted {
            ", uncommitted work included"
        } else {
            ""
        }
    );
    for file in &report.files {
        say!("  {file}");
    }
    Ok(exit::OK)
}
