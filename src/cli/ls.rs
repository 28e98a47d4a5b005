//! `paddock ls`: the jobs, as a table or JSON; under the table, the host budget and what
//! holds it (`paddock doctor` and `GET /v1/admission` have it too).

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
        // The budget under the table, on stderr: paddock's words, not rows for scripts.
        if let Ok(view) = ops.admission().await {
            let _ = std::io::Write::flush(&mut std::io::stdout());
            tell!("budget: {}", view.summary());
        }
    }
    Ok(exit::OK)
}
