//! `paddock guard-ranges` (hidden): adds the job range's unreachable route
//! (`egress::ranges::install`), as the short-lived container paddock starts for a user who
//! is not root runs it (host network, `NET_ADMIN`). It needs no paddock install.

use super::exit;
use crate::error::{Error, Result};

pub fn run() -> Result<i32> {
    crate::egress::ranges::install().map_err(|e| Error::Serve {
        message: format!(
            "cannot add `unreachable {}`: {e}",
            crate::egress::ranges::job_range()
        ),
    })?;
    Ok(exit::OK)
}
