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
    use std::io::{IsTerminal, Write};
    let diff = ops.diff(&args.job, args.stat).await?;
    if let Some(outside) = &diff.outside_history {
        tell!("note: {}", outside.sentence());
    }
    let text = diff.diff;
    // The stat names files quoted as git does, so it is safe as it is; a patch's lines are
    // the agent's file contents: escaped on a terminal, raw into a pipe (`| git apply`).
    let mut out = std::io::stdout().lock();
    let _ = if args.stat || out.is_terminal() {
        write!(out, "{}", crate::text::block(&text))
    } else {
        write!(out, "{text}")
    };
    Ok(exit::OK)
}
