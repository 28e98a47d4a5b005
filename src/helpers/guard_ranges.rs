//! `paddock guard-ranges` (hidden): adds the job range's unreachable route
//! (`egress::ranges::install`), as the short-lived container paddock starts for a user who
//! is not root runs it (host network, `NET_ADMIN`), and as the remote engine's guard runs it
//! from the proxy image. It needs no paddock install. On success it prints the host's
//! addresses as one JSON list (the egress policy of a remote engine's jobs refuses them).

use crate::cli::exit;
use crate::error::{Error, Result};

pub fn run() -> Result<i32> {
    crate::egress::ranges::install().map_err(|e| Error::Serve {
        message: format!(
            "cannot add `unreachable {}`: {e}",
            crate::egress::ranges::job_range()
        ),
    })?;
    let addresses =
        serde_json::to_string(&crate::sys::host_addresses()).expect("addresses serialize");
    super::print_line(&addresses);
    Ok(exit::OK)
}
