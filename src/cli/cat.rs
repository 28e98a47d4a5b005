//! `paddock cat`: a file of a job's workspace to stdout, byte for byte.

use std::io::Write;

use clap::Args;

use super::exit;
use crate::error::{Error, Result};
use crate::ops::Operations;

#[derive(Debug, Args)]
pub struct CatArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
    /// The file, as the agent sees it (`/workspace/src/x.rs`) or relative to the workspace.
    path: String,
}

pub async fn run(ops: &impl Operations, args: CatArgs) -> Result<i32> {
    let bytes = ops.read_file(&args.job, &args.path).await?;
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes)
        .and_then(|()| out.flush())
        .map_err(|source| Error::LocalFile {
            action: "write",
            path: "-".into(),
            source,
        })?;
    Ok(exit::OK)
}
