//! `paddock egress-proxy` (hidden): the sidecar of a job on a sealed network, as its
//! container runs it: the egress proxy of an `allowlist` job (`--listen`) and the relays of
//! the job's ports (`--relay`). It needs no paddock install: only the policy file and the log.

use std::path::PathBuf;

use clap::Args;

use crate::cli::exit;
use crate::egress::proxy::{ProxyFiles, serve};
use crate::egress::relay::{RelaySpec, default_gateway, serve_relay};
use crate::error::{Error, Result};

#[derive(Debug, Args)]
pub struct EgressProxyArgs {
    /// Address the proxy listens on (no proxy without it).
    #[arg(long)]
    listen: Option<String>,
    /// The policy file (JSON), read again for each connection.
    #[arg(long)]
    policy: PathBuf,
    /// Where each decision is appended as a JSON line.
    #[arg(long)]
    log: PathBuf,
    /// LISTEN_PORT=ADDRESS:PORT: relay connections on LISTEN_PORT to ADDRESS:PORT
    /// (repeatable).
    #[arg(long = "relay")]
    relays: Vec<RelaySpec>,
    /// A Unix socket where paddock sends the job's secrets (kept in memory only).
    #[arg(long)]
    control: Option<PathBuf>,
}

pub async fn run(args: EgressProxyArgs) -> Result<i32> {
    let failed = |message: String| Error::Serve { message };
    let mut servers = tokio::task::JoinSet::new();
    if let Some(listen) = &args.listen {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| failed(format!("cannot listen on {listen}: {e}")))?;
        let secrets = std::sync::Arc::new(crate::egress::secrets::Store::default());
        if let Some(path) = &args.control {
            // A socket left by the proxy's last run is in the way of this one's.
            let _ = std::fs::remove_file(path);
            let control = tokio::net::UnixListener::bind(path)
                .map_err(|e| failed(format!("cannot listen on {}: {e}", path.display())))?;
            let store = secrets.clone();
            servers.spawn(async move {
                (
                    "the control socket",
                    crate::egress::secrets::serve_control(control, store).await,
                )
            });
        }
        let files = ProxyFiles {
            policy: args.policy,
            log: args.log,
            secrets,
        };
        servers.spawn(async move { ("the egress proxy", serve(listener, files).await) });
    }
    // Relays serve the host only (see `egress::relay`): its address on the bridge.
    let host = default_gateway();
    for relay in args.relays {
        let listener = tokio::net::TcpListener::bind(("0.0.0.0", relay.listen_port))
            .await
            .map_err(|e| failed(format!("cannot listen on port {}: {e}", relay.listen_port)))?;
        servers.spawn(async move {
            (
                "a port relay",
                serve_relay(listener, relay.target, host).await,
            )
        });
    }
    if servers.is_empty() {
        return Err(failed("nothing to serve: give --listen or --relay".into()));
    }
    tokio::select! {
        Some(stopped) = servers.join_next() => {
            let (what, served) = stopped.map_err(|e| failed(format!("a server task failed: {e}")))?;
            served.map_err(|e| failed(format!("{what} stopped: {e}")))?;
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
