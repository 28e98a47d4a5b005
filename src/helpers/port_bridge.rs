//! `paddock port-bridge` (hidden): run in a remote job's relay container on its engine
//! (`runtime/docker/port_relay.rs`): `PORT` bridges the exec's stdin and stdout with
//! `127.0.0.1:PORT` in the job's network namespace (`egress::bridge`); `--hold` is the
//! container's own process, which only waits. It needs no paddock install.

use clap::Args;

use crate::cli::exit;
use crate::error::{Error, Result};

#[derive(Debug, Args)]
pub struct PortBridgeArgs {
    /// The job's port to connect to, on 127.0.0.1 of the job's network namespace.
    #[arg(required_unless_present = "hold")]
    port: Option<u16>,
    /// Wait until stopped (the relay container's own process).
    #[arg(long, conflicts_with = "port")]
    hold: bool,
}

pub fn run(args: &PortBridgeArgs) -> Result<i32> {
    let Some(port) = args.port.filter(|_| !args.hold) else {
        crate::egress::bridge::hold();
    };
    crate::egress::bridge::run(port).map_err(|e| Error::Serve {
        message: format!("port bridge to 127.0.0.1:{port}: {e}"),
    })?;
    Ok(exit::OK)
}
