//! `paddock shell`: an interactive shell in the job (its container, or its worktree).

use clap::Args;

use crate::Paddock;
use crate::error::Result;

#[derive(Debug, Args)]
pub struct ShellArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
}

pub async fn run(paddock: &Paddock, args: ShellArgs) -> Result<i32> {
    paddock.shell(&args.job).await
}
