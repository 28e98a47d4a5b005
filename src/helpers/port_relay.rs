//! `paddock port-relay JOB` (hidden): the detached process that serves a remote job's ports
//! on this host's loopback (`engine::port_relay`), started by the engine when the job's
//! container starts. The one helper that opens the install.

use clap::Args;

use crate::cli::exit;
use crate::engine::Paddock;
use crate::error::Result;

#[derive(Debug, Args)]
pub struct PortRelayArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
}

pub async fn run(args: PortRelayArgs) -> Result<i32> {
    let paddock = Paddock::from_env()?;
    paddock.serve_port_relay(&args.job).await?;
    Ok(exit::OK)
}
