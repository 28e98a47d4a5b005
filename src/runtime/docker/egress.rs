//! The Docker side of an `allowlist` job: its internal network and its egress sidecar.
//!
//! Names follow the job's container `<name>` (`paddock-<install>-<job>`). The job's
//! container is attached only to `<name>-net`, an internal network (no route out, no
//! gateway). The sidecar `<name>-egress` sits on that network and on
//! Docker's default bridge; it runs this very binary (`paddock egress-proxy`, mounted
//! read-only from the host, so no image has to be pulled or built) as an unprivileged user
//! with every capability dropped, a read-only root and small limits. The job's DNS goes to
//! Docker's embedded resolver, which answers the sidecar's alias and forwards nothing else
//! (its upstream is set to the job's own loopback, where nothing listens), so names can
//! neither be resolved nor carry data out; the proxy resolves allowed names itself.
//!
//! Files: `jobs/<job>/egress/policy.json` (written by paddock atomically, read by the proxy
//! at each connection; mounted read-only as a directory so a rename is seen) and
//! `logs/<job>/egress.jsonl` (the proxy's decisions; the only file it can write).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, NetworkConnectRequest, NetworkCreateRequest,
    NetworkInspect,
};

use super::mounts::bind;
use super::{
    API_TIMEOUT, LABEL_HOME, LABEL_JOB, LABEL_ROLE, agent_user, call, create_named, first_error,
    inspect_named, io_error, job_container, optional, remove_labelled_container, start_named,
};
use crate::config::NetworkMode;
use crate::egress::EgressPolicy;
use crate::job::{JobId, JobRecord};
use crate::runtime::RuntimeError;
use crate::store::PaddockHome;

/// The port the proxy listens on inside the job's network.
pub const PROXY_PORT: u16 = 3128;
/// The bridge driver's option that leaves the host without an address on the network.
const INHIBIT_HOST_ADDRESS: &str = "com.docker.network.bridge.inhibit_ipv4";
const SIDECAR_BINARY: &str = "/paddock/bin/paddock";
const SIDECAR_POLICY_DIR: &str = "/paddock/egress";
const SIDECAR_LOG: &str = "/paddock/log/egress.jsonl";

/// The job's internal network, named after its container `base`.
pub fn network_name(base: &str) -> String {
    format!("{base}-net")
}

/// The job's egress sidecar, named after its container `base`.
pub fn sidecar_name(base: &str) -> String {
    format!("{base}-egress")
}

/// The sidecar's name on the job's own network, where it is the only other member: short,
/// so it resolves whatever the job id (a DNS label holds 63 characters, and
/// `paddock-<install>-<job>-egress` can be longer).
const PROXY_ALIAS: &str = "paddock-egress";

/// The proxy's URL as the job sees it: the sidecar's alias; for a job recorded before names
/// carried the install, its sidecar's name, as its container was made with (its sidecar
/// may predate the alias).
pub fn proxy_url(record: &JobRecord) -> String {
    let host = match record.container_name {
        Some(_) => PROXY_ALIAS.to_string(),
        None => sidecar_name(&job_container(record)),
    };
    format!("http://{host}:{PROXY_PORT}")
}

/// The environment that sends git, curl, cargo, pip and npm through the proxy.
pub fn proxy_env(record: &JobRecord) -> Vec<String> {
    let url = proxy_url(record);
    let mut env: Vec<String> = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"]
        .iter()
        .map(|key| format!("{key}={url}"))
        .collect();
    env.push("NO_PROXY=localhost,127.0.0.1,::1".into());
    env.push("no_proxy=localhost,127.0.0.1,::1".into());
    env
}

/// Where the job's policy file lives on the host.
pub fn policy_dir(home: &PaddockHome, id: &JobId) -> PathBuf {
    home.job_dir(id).join("egress")
}

/// Where the proxy's decisions go on the host.
pub fn log_path(home: &PaddockHome, id: &JobId) -> PathBuf {
    home.logs_dir(id).join("egress.jsonl")
}

/// Writes the job's policy where its proxy reads it (atomically: the proxy never sees half
/// a file). The next connection through the proxy follows it.
pub fn write_policy(home: &PaddockHome, record: &JobRecord) -> Result<(), RuntimeError> {
    let dir = policy_dir(home, &record.id);
    std::fs::create_dir_all(&dir).map_err(io_error(&dir))?;
    let policy = EgressPolicy {
        allow: record.limits.allow.clone(),
        host_addresses: crate::sys::host_addresses(),
    };
    let path = dir.join("policy.json");
    let text = serde_json::to_vec_pretty(&policy).expect("a policy serializes");
    crate::atomic::write_atomic(&path, &text, false).map_err(io_error(&path))
}

/// Makes sure an `allowlist` job's network and running sidecar exist (creating, starting
/// or recreating them), with the current policy written. Nothing for other jobs.
pub async fn ensure(
    docker: &Docker,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    if record.limits.network != NetworkMode::Allowlist {
        return Ok(());
    }
    write_policy(home, record)?;
    let base = job_container(record);
    let network = network_name(&base);
    ensure_network(docker, home, &record.id, &network).await?;
    let name = sidecar_name(&base);
    match inspect_named(docker, home, &name, record.id.as_str()).await? {
        Some(status) if status.running => return Ok(()),
        Some(_) => {
            if start_named(docker, &name).await.is_ok() {
                return Ok(());
            }
            remove_labelled_container(home, &name, record.id.as_str()).await?;
        }
        None => {}
    }
    create_named(docker, &name, sidecar_body(home, record)?).await?;
    call(
        "connect network",
        &network,
        API_TIMEOUT,
        docker.connect_network(
            &network,
            NetworkConnectRequest {
                container: name.clone(),
                endpoint_config: Some(EndpointSettings {
                    aliases: Some(vec![PROXY_ALIAS.to_string()]),
                    ..Default::default()
                }),
            },
        ),
    )
    .await?;
    start_named(docker, &name).await
}

/// The network `name`, if it exists; refused when it does not carry this install's labels
/// with `job` as its job.
async fn our_network(
    docker: &Docker,
    home: &PaddockHome,
    name: &str,
    job: &str,
) -> Result<Option<NetworkInspect>, RuntimeError> {
    let Some(found) = optional(
        "inspect network",
        name,
        API_TIMEOUT,
        docker.inspect_network(name, None),
    )
    .await?
    else {
        return Ok(None);
    };
    let labels = found.labels.clone().unwrap_or_default();
    if labels.get(LABEL_HOME).map(String::as_str) != Some(home.id())
        || labels.get(LABEL_JOB).map(String::as_str) != Some(job)
    {
        return Err(RuntimeError::NotOurContainer {
            name: name.to_string(),
        });
    }
    Ok(Some(found))
}

async fn ensure_network(
    docker: &Docker,
    home: &PaddockHome,
    id: &JobId,
    network: &str,
) -> Result<(), RuntimeError> {
    if let Some(found) = our_network(docker, home, network, id.as_str()).await? {
        let options = found.options.unwrap_or_default();
        let sealed = found.internal == Some(true)
            && options.get(INHIBIT_HOST_ADDRESS).map(String::as_str) == Some("true");
        return if sealed {
            Ok(())
        } else {
            // Not the network paddock makes: refuse rather than run the job on it.
            Err(RuntimeError::NotOurContainer {
                name: network.to_string(),
            })
        };
    }
    let request = NetworkCreateRequest {
        name: network.to_string(),
        driver: Some("bridge".into()),
        internal: Some(true),
        // No address for the host on this bridge: an internal network still gives its
        // members a default route to the host's bridge address, and through it every
        // service listening on any of the host's addresses. Without one, the job reaches
        // its sidecar (same link) and nothing else.
        options: Some(HashMap::from([(
            INHIBIT_HOST_ADDRESS.to_string(),
            "true".to_string(),
        )])),
        labels: Some(labels(home, id)),
        ..Default::default()
    };
    call(
        "create network",
        network,
        API_TIMEOUT,
        docker.create_network(request),
    )
    .await
    .map(drop)
}

fn labels(home: &PaddockHome, id: &JobId) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_JOB.to_string(), id.to_string()),
        (LABEL_HOME.to_string(), home.id().to_string()),
        (LABEL_ROLE.to_string(), "egress".to_string()),
    ])
}

fn sidecar_body(
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<ContainerCreateBody, RuntimeError> {
    let exe = std::env::current_exe().map_err(io_error(Path::new("/proc/self/exe")))?;
    let log = log_path(home, &record.id);
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .map_err(io_error(&log))?;
    let (uid, gid) = agent_user(record.limits.uid);
    if crate::sys::is_root() {
        std::os::unix::fs::chown(&log, Some(uid), Some(gid)).map_err(io_error(&log))?;
    }
    let host_config = HostConfig {
        mounts: Some(vec![
            bind(&exe, Path::new(SIDECAR_BINARY), true),
            bind(
                &policy_dir(home, &record.id),
                Path::new(SIDECAR_POLICY_DIR),
                true,
            ),
            bind(&log, Path::new(SIDECAR_LOG), false),
        ]),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        readonly_rootfs: Some(true),
        pids_limit: Some(256),
        memory: Some(256 << 20),
        memory_swap: Some(256 << 20),
        nano_cpus: Some(1_000_000_000),
        network_mode: Some("bridge".into()),
        init: Some(true),
        ..Default::default()
    };
    Ok(ContainerCreateBody {
        image: Some(record.limits.image.clone()),
        user: Some(format!("{uid}:{gid}")),
        entrypoint: Some(vec![SIDECAR_BINARY.to_string()]),
        cmd: Some(vec![
            "egress-proxy".into(),
            "--listen".into(),
            format!("0.0.0.0:{PROXY_PORT}"),
            "--policy".into(),
            format!("{SIDECAR_POLICY_DIR}/policy.json"),
            "--log".into(),
            SIDECAR_LOG.into(),
        ]),
        env: Some(vec!["RUST_LOG=warn".into()]),
        labels: Some(labels(home, &record.id)),
        stop_signal: Some("SIGTERM".into()),
        host_config: Some(host_config),
        ..Default::default()
    })
}

/// Removes the sidecar and the network named after the job container `base`, if they exist
/// and are `job`'s of this install (the network is tried even when the sidecar fails).
pub async fn remove(
    docker: &Docker,
    home: &PaddockHome,
    base: &str,
    job: &str,
) -> Result<(), RuntimeError> {
    let sidecar = remove_labelled_container(home, &sidecar_name(base), job).await;
    let network = network_name(base);
    let network = async {
        if our_network(docker, home, &network, job).await?.is_none() {
            return Ok(());
        }
        optional(
            "remove network",
            &network,
            API_TIMEOUT,
            docker.remove_network(&network),
        )
        .await
        .map(drop)
    }
    .await;
    first_error([sidecar, network])
}
