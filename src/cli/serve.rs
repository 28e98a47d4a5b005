//! `paddock serve`: the daemon (HTTP API, activity watcher, periodic sweep).

use std::path::PathBuf;

use clap::Args;

use super::exit;
use super::sweep::SweepArgs;
use crate::Paddock;
use crate::error::Result;
use crate::units::HumanDuration;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// How often to sweep (default: config `sweep.interval`, 5m).
    #[arg(long)]
    sweep_interval: Option<HumanDuration>,
    /// The Unix socket to listen on (default: $PADDOCK_HOME/paddock.sock, mode 0600).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Also listen on TCP (e.g. 127.0.0.1:7777); requires --token-file.
    #[arg(long)]
    listen: Option<String>,
    /// File holding the bearer token TCP clients must send.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Admitted creates built at once (checkouts are CPU and disk bound); more wait their
    /// turn.
    #[arg(long, default_value_t = 8)]
    max_concurrent_creates: usize,
    /// A repository MCP sessions over HTTP (`/mcp`) may create jobs in (repeatable; default:
    /// none, so a session only works in jobs it is given no way to make).
    #[arg(long, value_name = "PATH")]
    mcp_repo: Vec<PathBuf>,
    #[command(flatten)]
    sweep: SweepArgs,
}

pub async fn run(paddock: &Paddock, args: ServeArgs) -> Result<i32> {
    let config = paddock.config(None)?;
    // As `paddock mcp --repo`: each named once by its git common dir.
    let mut mcp_repos = Vec::new();
    for path in &args.mcp_repo {
        let repo = crate::git::GitRepo::open(path, &std::env::temp_dir()).await?;
        mcp_repos.push(repo.common_dir);
    }
    let options = crate::daemon::serve::ServeOptions {
        sweep_interval: args.sweep_interval.unwrap_or(config.sweep.interval.value).0,
        sweep: args.sweep.options(&config, true),
        socket: args.socket,
        listen: args.listen,
        token_file: args.token_file,
        max_concurrent_creates: args.max_concurrent_creates,
        mcp_repos,
        shutdown_grace: std::time::Duration::from_secs(30),
    };
    crate::daemon::serve::serve(options).await?;
    Ok(exit::OK)
}
