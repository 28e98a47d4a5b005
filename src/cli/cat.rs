//! `paddock cat`: a file of a job to stdout, byte for byte, as it streams.

use clap::Args;

use super::exit;
use crate::error::Result;
use crate::ops::Operations;
use crate::units::ByteSize;

#[derive(Debug, Args)]
pub struct CatArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
    /// The file, as the agent sees it (`/workspace/src/x.rs`) or relative to the workspace.
    path: String,
    /// Refuse a file larger than this (exit 4, nothing written), e.g. `50m`.
    #[arg(long, value_name = "SIZE")]
    max: Option<ByteSize>,
    /// Read as `agent` (the default), `root` or UID[:GID], with that user's permissions;
    /// another user than the agent only in a runsc or microvm job.
    #[arg(short = 'u', long, value_name = "USER", default_value_t)]
    user: crate::wire::ExecUser,
}

pub async fn run(ops: &impl Operations, args: CatArgs) -> Result<i32> {
    let bytes = ops
        .read_file(&args.job, &args.path, args.user, args.max.map(|m| m.0))
        .await?;
    super::cp::copy_to(bytes, tokio::io::stdout(), std::path::Path::new("-")).await?;
    Ok(exit::OK)
}
