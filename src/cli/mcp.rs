//! `paddock mcp`: the Model Context Protocol server on stdin/stdout (see `crate::mcp`).

use clap::Args;

use super::exit;
use crate::error::{Error, Result};
use crate::mcp::Session;
use crate::ops::Operations;

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Let the session's tools reach every job of this install, not only the jobs it created.
    #[arg(long)]
    all_jobs: bool,
}

pub async fn run(ops: &impl Operations, args: McpArgs) -> Result<i32> {
    let session = Session::new(args.all_jobs);
    tracing::info!(session = %session.id, all_jobs = args.all_jobs, "mcp session started");
    let input = tokio::io::BufReader::new(tokio::io::stdin());
    crate::mcp::serve(ops, &session, input, tokio::io::stdout())
        .await
        .map_err(|source| Error::LocalFile {
            action: "serve MCP on",
            path: "stdin/stdout".into(),
            source,
        })?;
    Ok(exit::OK)
}
