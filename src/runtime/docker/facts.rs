//! What `doctor` needs to know of the daemon: its version, its OCI runtimes and which
//! resource limits it can enforce, read with deadlines.

use std::time::Duration;

use super::{PING_TIMEOUT, call, connect};
use crate::runtime::{EngineFacts, RuntimeError};

pub(super) async fn engine_facts() -> Result<EngineFacts, RuntimeError> {
    let docker = connect()?;
    let version = call("version", "daemon", PING_TIMEOUT, docker.version())
        .await
        .map_err(|_| RuntimeError::DockerUnavailable {
            message: "the daemon does not answer".into(),
        })?;
    let info = call("info", "daemon", Duration::from_secs(10), docker.info()).await?;
    let mut oci_runtimes: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
    oci_runtimes.sort();
    let enforced = [
        ("memory", info.memory_limit),
        ("swap", info.swap_limit),
        ("cpu", info.cpu_cfs_quota),
        ("pids", info.pids_limit),
    ];
    Ok(EngineFacts {
        version: version.version.unwrap_or_default(),
        api_version: version.api_version.unwrap_or_default(),
        oci_runtimes,
        unenforced_limits: enforced
            .into_iter()
            .filter(|(_, on)| !on.unwrap_or(false))
            .map(|(name, _)| name)
            .collect(),
    })
}
