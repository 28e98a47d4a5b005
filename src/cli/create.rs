//! `paddock create`: a branch, a private git dir, a checkout and (with Docker) a container.

use clap::Args;

use super::exit;
use super::render::print_json;
use crate::error::Result;
use crate::ops::Operations;
use crate::wire::CreateRequest;

#[derive(Debug, Args)]
pub struct CreateArgs {
    #[command(flatten)]
    pub request: CreateRequest,
    #[arg(long)]
    pub json: bool,
}

pub async fn run(ops: &impl Operations, args: CreateArgs) -> Result<i32> {
    let (view, warning) = ops.create(args.request).await?;
    if let Some(warning) = &warning {
        eprintln!("warning: {warning}");
    }
    if args.json {
        print_json(&view);
    } else {
        println!(
            "created job {} on branch {} at {}",
            view.id,
            view.branch,
            view.worktree.display()
        );
    }
    Ok(exit::OK)
}
