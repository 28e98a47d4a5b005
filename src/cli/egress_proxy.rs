//! `paddock egress-proxy` (hidden): the egress proxy of an `allowlist` job, as its sidecar
//! container runs it. It needs no paddock install: only the policy file and the log.

use std::path::PathBuf;

use clap::Args;

use super::exit;
use crate::egress::proxy::{ProxyFiles, serve};
use crate::error::{Error, Result};

#[derive(Debug, Args)]
pub struct EgressProxyArgs {
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0:3128")]
    listen: String,
    /// The policy file (JSON), read again for each connection.
    #[arg(long)]
    policy: PathBuf,
    /// Where each decision is appended as a JSON line.
    #[arg(long)]
    log: PathBuf,
}

pub async fn run(args: EgressProxyArgs) -> Result<i32> {
    let failed = |message: String| Error::Serve { message };
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| failed(format!("cannot listen on {}: {e}", args.listen)))?;
    let files = ProxyFiles {
        policy: args.policy,
        log: args.log,
    };
    tokio::select! {
        served = serve(listener, files) => {
            served.map_err(|e| failed(format!("the egress proxy stopped: {e}")))?;
        }
        _ = tokio::signal::ctrl_c() => {}
        _ = terminated() => {}
    }
    Ok(exit::OK)
}

async fn terminated() {
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut signal) => {
            signal.recv().await;
        }
        Err(_) => std::future::pending().await,
    }
}
