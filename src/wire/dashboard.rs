//! The wire types of `POST /v1/dashboard` (`paddock dashboard`).

use serde::{Deserialize, Serialize};

/// The body of `POST /v1/dashboard` (`paddock dashboard`): where the dashboard listener
/// opens (a loopback address; default `127.0.0.1:0`, a free port).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DashboardRequest {
    #[serde(default)]
    pub listen: Option<String>,
}

/// The first line of `POST /v1/dashboard`'s answer: the listener's address and the sign-in
/// URL (with its one-time token). The listener lives while the answer streams.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DashboardLease {
    pub address: String,
    pub url: String,
}
