//! `paddock egress-load` (hidden): run by paddock as an exec in a remote engine's egress
//! sidecar, it reads one secrets load (a JSON line) from its stdin, the exec's attached
//! stream, and hands it to the proxy over the sidecar's control socket (in a tmpfs only the
//! proxy's user reaches). So the values go from paddock's memory to the proxy's without a
//! file, a variable or an argument: nothing `docker inspect` shows, nothing on a disk. It
//! prints the proxy's answer (`ok`, or `error: ...`, never naming a value) and exits 0 only
//! on `ok`. It needs no paddock install.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::cli::exit;
use crate::error::{Error, Result};

/// How long the proxy's socket and answer are waited for (the sidecar has just started).
const DELIVER_DEADLINE: Duration = Duration::from_secs(15);

#[derive(Debug, Args)]
pub struct EgressLoadArgs {
    /// The proxy's control socket.
    #[arg(long)]
    control: PathBuf,
}

pub async fn run(args: EgressLoadArgs) -> Result<i32> {
    let failed = |message: String| Error::Serve { message };
    let load = crate::egress::secrets::read_load_line(tokio::io::stdin())
        .await
        .map_err(failed)?;
    let answer = crate::egress::secrets::deliver(&args.control, &load, DELIVER_DEADLINE)
        .await
        .map_err(failed)?;
    drop(load);
    super::print_line(&answer);
    Ok(if answer == "ok" {
        exit::OK
    } else {
        exit::REFUSED
    })
}
