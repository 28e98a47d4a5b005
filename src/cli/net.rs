//! `paddock net`: change what a live `allowlist` job may reach (from its next connection).

use clap::Args;

use super::exit;
use super::render::print_json;
use crate::error::Result;
use crate::ops::Operations;
use crate::wire::NetworkChange;

#[derive(Debug, Args)]
pub struct NetArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
    #[command(flatten)]
    change: NetworkChange,
    /// Print the job as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(ops: &impl Operations, args: NetArgs) -> Result<i32> {
    let view = ops.set_network(&args.job, args.change).await?;
    if args.json {
        print_json(&view);
    } else if view.limits.allow.is_empty() {
        say!("job {} now reaches nothing (allow-list empty)", view.id);
    } else {
        let allow: Vec<String> = view.limits.allow.iter().map(ToString::to_string).collect();
        say!("job {} now reaches: {}", view.id, allow.join(", "));
    }
    Ok(exit::OK)
}
