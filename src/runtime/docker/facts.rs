//! What `doctor` needs to know of the daemon: its version, its OCI runtimes and which
//! resource limits it can enforce, read with deadlines; and whether a registered OCI
//! runtime is set up so that jobs keep their limits and networks.

use std::time::Duration;

use super::{PING_TIMEOUT, call};
use crate::config::NetworkMode;
use crate::runtime::{EngineFacts, RuntimeError};

pub(super) async fn engine_facts(daemon: &super::Daemon) -> Result<EngineFacts, RuntimeError> {
    let docker = daemon.connect()?;
    let version = call("version", "daemon", PING_TIMEOUT, docker.version())
        .await
        .map_err(|_| RuntimeError::DockerUnavailable {
            message: "the daemon does not answer".into(),
        })?;
    let info = call("info", "daemon", Duration::from_secs(10), docker.info()).await?;
    let no_build_cell = super::build_cell::cell_support(&info).err();
    let runtimes = info.runtimes.unwrap_or_default();
    let mut oci_runtimes: Vec<String> = runtimes.keys().cloned().collect();
    oci_runtimes.sort();
    let mut misconfigured: Vec<(String, String)> = runtimes
        .iter()
        .filter_map(|(name, runtime)| {
            let args = runtime.runtime_args.clone().unwrap_or_default();
            misconfiguration(name, &args, Some(NetworkMode::Allowlist))
                .map(|problem| (name.clone(), problem.to_string()))
        })
        .collect();
    misconfigured.sort();
    let enforced = [
        ("memory", info.memory_limit),
        ("swap", info.swap_limit),
        ("cpu", info.cpu_cfs_quota),
        ("pids", info.pids_limit),
    ];
    let cpus = info.ncpu.and_then(|n| u64::try_from(n).ok()).unwrap_or(1);
    Ok(EngineFacts {
        cpus,
        version: version.version.unwrap_or_default(),
        api_version: version.api_version.unwrap_or_default(),
        oci_runtimes,
        unenforced_limits: enforced
            .into_iter()
            .filter(|(_, on)| !on.unwrap_or(false))
            .map(|(name, _)| name)
            .collect(),
        misconfigured,
        no_build_cell,
    })
}

/// Why a registered OCI runtime cannot give jobs what paddock promises, if it cannot: the
/// flag at fault and what it breaks. `network` is the job's network (`None`: any job).
pub fn misconfiguration(
    runtime: &str,
    args: &[String],
    network: Option<NetworkMode>,
) -> Option<RuntimeError> {
    let flag = |flag: &str, consequence: String| RuntimeError::OciRuntimeMisconfigured {
        runtime: runtime.to_string(),
        flag: flag.to_string(),
        consequence,
    };
    if args.iter().any(|a| a == "--ignore-cgroups") {
        return Some(flag(
            "--ignore-cgroups",
            "the job's memory, CPU and pids limits would not be enforced".into(),
        ));
    }
    match network {
        Some(network @ (NetworkMode::Allowlist | NetworkMode::Open))
            if args.iter().any(|a| a == "--network=none") =>
        {
            Some(flag(
                "--network=none",
                format!("a job with network `{network}` would have no network at all"),
            ))
        }
        _ => None,
    }
}
