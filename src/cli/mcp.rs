//! `paddock mcp`: the Model Context Protocol server on stdin/stdout (see `crate::mcp`).

use clap::Args;

use super::exit;
use crate::error::{Error, Result};
use crate::mcp::Session;
use crate::ops::Operations;

#[derive(Debug, Args)]
pub struct McpArgs {
    /// Let the session's tools reach every job of this install, not only the jobs it created,
    /// and create jobs in any repository.
    #[arg(long)]
    all_jobs: bool,
    /// A repository the session may create jobs in (repeatable; default: the repository
    /// around the current directory).
    #[arg(long, value_name = "PATH")]
    repo: Vec<std::path::PathBuf>,
}

pub async fn run(ops: &impl Operations, args: McpArgs) -> Result<i32> {
    let named = if args.repo.is_empty() {
        vec![std::path::PathBuf::from(".")]
    } else {
        args.repo.clone()
    };
    let mut repos = Vec::new();
    for path in &named {
        match crate::git::GitRepo::open(path, &std::env::temp_dir()).await {
            Ok(repo) => repos.push(repo.common_dir),
            // The current directory need not be a repository: the session then serves none.
            Err(_) if args.repo.is_empty() => {}
            Err(error) => return Err(error.into()),
        }
    }
    let session = Session::new(args.all_jobs, repos);
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
