//! The Docker side of an `allowlist` job: its internal network and its egress sidecar.
//!
//! Names follow the job's container `<name>` (`paddock-<install>-<job>`). The job's
//! container is attached only to `<name>-net`, an internal network (no route out, no
//! gateway) on a /28 of 198.18.0.0/15 (the range RFC 2544 sets aside for benchmarks, so it
//! rarely meets a real destination; Docker's own pools hold only about 30 networks, too few
//! for a network per job). The sidecar `<name>-egress` has a fixed address in it (the
//! subnet's third), outside the range Docker hands out to the job, so the job's proxy
//! settings name an address that survives restarts and costs no name lookup per
//! connection. The host has no route to these subnets (no address on their bridges); an
//! `unreachable` route for the whole range, put in place before the first network is made
//! (`ranges.rs`), keeps connections to them, a removed job's included, on the host. The
//! sidecar sits on that network and on
//! Docker's default bridge; it runs this very binary (`paddock egress-proxy`, mounted
//! read-only from the host, so no image has to be pulled or built) as an unprivileged user
//! with every capability dropped, a read-only root and small limits. The job's DNS goes to
//! Docker's embedded resolver, which answers the sidecar's alias and forwards nothing else
//! (its upstream is set to the job's own loopback, where nothing listens), so names can
//! neither be resolved nor carry data out; the proxy resolves allowed names itself.
//!
//! A `none` job with ports gets the same sealed network and sidecar, the sidecar running no
//! proxy (nothing leaves the job) but only the relays of the job's ports (see `ports.rs`):
//! Docker cannot publish a port of a container without a network, nor of one on an
//! internal network, so the sidecar, also on Docker's bridge, publishes them and relays
//! each connection to the job's fixed address (the subnet's fourth).
//!
//! Files: `jobs/<job>/egress/policy.json` (written by paddock atomically, read by the proxy
//! at each connection; mounted read-only as a directory so a rename is seen) and
//! `logs/<job>/egress.jsonl` (the proxy's decisions; the only file it can write).
//!
//! On a remote engine the sidecar is the same container with the differences kept in
//! `remote/egress.rs`: its image holds the binary, the policy and the log are volumes there
//! (the host files are their copies), and the guard runs on the engine's host.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::Path;

use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, EndpointIpamConfig, EndpointSettings, HostConfig, Ipam, IpamConfig,
    NetworkConnectRequest, NetworkCreateRequest, NetworkInspect,
};

use super::mounts::bind;
use super::sidecar::{
    SIDECAR_BINARY, SIDECAR_LOG, SIDECAR_POLICY_DIR, helper_host_config, log_path, policy_dir,
    sidecar_name,
};
use super::{
    API_TIMEOUT, LABEL_HOME, LABEL_JOB, LABEL_ROLE, agent_user, call, create_named, first_error,
    inspect_named, io_error, job_container, optional, remove_labelled_container, start_named,
};
use crate::config::NetworkMode;
use crate::job::{JobId, JobRecord};
use crate::runtime::RuntimeError;
use crate::store::PaddockHome;

/// The port the proxy listens on inside the job's network.
pub const PROXY_PORT: u16 = 3128;
/// The bridge driver's option that leaves the host without an address on the network.
const INHIBIT_HOST_ADDRESS: &str = "com.docker.network.bridge.inhibit_ipv4";

/// The job's internal network, named after its container `base`.
pub fn network_name(base: &str) -> String {
    format!("{base}-net")
}

/// First address of the range the job networks' subnets come from (198.18.0.0/15).
const SUBNET_RANGE_START: Ipv4Addr = crate::egress::ranges::JOB_RANGE_START;
/// The /28s in that range.
const SUBNET_COUNT: u32 = 1 << (28 - crate::egress::ranges::JOB_RANGE_BITS);
/// Subnets tried, from the job's own, before giving up (each taken one is an overlap error).
const SUBNET_TRIES: u32 = 64;

/// A job network's /28: the gateway Docker reserves (first host address), the sidecar's
/// fixed address (the next), and the upper half for the addresses Docker hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobSubnet(Ipv4Addr);

impl JobSubnet {
    fn nth(index: u32) -> JobSubnet {
        JobSubnet(Ipv4Addr::from(
            u32::from(SUBNET_RANGE_START) + (index % SUBNET_COUNT) * 16,
        ))
    }

    /// The subnets to try for a job, starting from one its id picks (so two jobs rarely
    /// try the same first).
    fn candidates(home: &PaddockHome, id: &JobId) -> impl Iterator<Item = JobSubnet> {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(format!("{}\0{id}", home.id()));
        let start = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]);
        (0..SUBNET_TRIES).map(move |i| JobSubnet::nth(start.wrapping_add(i)))
    }

    fn offset(self, by: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.0) + by)
    }

    fn cidr(self) -> String {
        format!("{}/28", self.0)
    }

    /// The sidecar's fixed address.
    pub fn proxy(self) -> Ipv4Addr {
        self.offset(2)
    }

    /// The job's fixed address (given only to jobs with ports, whose relays need it).
    pub fn job(self) -> Ipv4Addr {
        self.offset(3)
    }

    fn ipam(self) -> Ipam {
        Ipam {
            config: Some(vec![IpamConfig {
                subnet: Some(self.cidr()),
                gateway: Some(self.offset(1).to_string()),
                ip_range: Some(format!("{}/29", self.offset(8))),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    /// The subnet of a network paddock made (one IPAM config, a /28 in the range).
    fn of(network: &NetworkInspect) -> Option<JobSubnet> {
        let configs = network.ipam.as_ref()?.config.as_ref()?;
        let [config] = configs.as_slice() else {
            return None;
        };
        let (address, bits) = config.subnet.as_deref()?.split_once('/')?;
        let address: Ipv4Addr = address.parse().ok()?;
        let offset = u32::from(address).checked_sub(u32::from(SUBNET_RANGE_START))?;
        (bits == "28" && offset % 16 == 0 && offset / 16 < SUBNET_COUNT)
            .then_some(JobSubnet(address))
    }
}

/// The sidecar's name on the job's own network, where it is the only other member: short,
/// so it resolves whatever the job id (a DNS label holds 63 characters, and
/// `paddock-<install>-<job>-egress` can be longer). Used by networks made before the
/// sidecar had a fixed address.
const PROXY_ALIAS: &str = "paddock-egress";

/// The proxy's URL as the job sees it: the sidecar's fixed address; on a network made
/// before addresses were fixed, its alias; for a job recorded before names carried the
/// install, its sidecar's name, as its container was made with.
pub fn proxy_url(record: &JobRecord, address: Option<Ipv4Addr>) -> String {
    let host = match (address, &record.container_name) {
        (Some(address), _) => address.to_string(),
        (None, Some(_)) => PROXY_ALIAS.to_string(),
        (None, None) => sidecar_name(&job_container(record)),
    };
    format!("http://{host}:{PROXY_PORT}")
}

/// The environment that sends git, curl, cargo, pip and npm through the proxy at
/// `address` (see [`ensure`]).
pub fn proxy_env(record: &JobRecord, address: Option<Ipv4Addr>) -> Vec<String> {
    let url = proxy_url(record, address);
    let mut env: Vec<String> = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"]
        .iter()
        .map(|key| format!("{key}={url}"))
        .collect();
    env.push("NO_PROXY=localhost,127.0.0.1,::1".into());
    env.push("no_proxy=localhost,127.0.0.1,::1".into());
    env
}

/// Writes the job's policy where its proxy reads it (`runtime::egress_files`). The next
/// connection through the proxy follows it.
pub fn write_policy(
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    // A remote job's proxy runs on its engine: the addresses to refuse are that host's.
    let host_addresses = if daemon.is_remote() {
        super::remote::egress::engine_addresses(home, record)
    } else {
        crate::sys::host_addresses()
    };
    crate::runtime::egress_files::write_policy(home, record, host_addresses)
}

/// Whether the job sits on its own sealed network with a sidecar: `allowlist` jobs, and
/// `none` jobs with ports (the sidecar then only relays the ports).
pub fn has_sealed_network(daemon: &super::Daemon, record: &JobRecord) -> bool {
    match record.limits.network {
        NetworkMode::Allowlist => true,
        // A remote job's ports go through its relay container instead (`port_relay`).
        NetworkMode::None => !record.ports.is_empty() && !daemon.is_remote(),
        NetworkMode::Open => false,
    }
}

/// The job's sealed network: its name and subnet (`None` for a network made before subnets
/// were paddock's).
pub struct SealedNetwork {
    pub name: String,
    pub subnet: Option<JobSubnet>,
}

/// Makes sure a job's sealed network and running sidecar exist (creating, starting or
/// recreating them), with the current policy written. Nothing (`None`) for a job without
/// one (see [`has_sealed_network`]).
pub async fn ensure(
    daemon: &super::Daemon,
    docker: &Docker,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<Option<SealedNetwork>, RuntimeError> {
    if !has_sealed_network(daemon, record) {
        return Ok(None);
    }
    let base = job_container(record);
    let network = network_name(&base);
    let subnet = ensure_network(daemon, docker, home, record, &network).await?;
    // After the network: on a remote engine its guard reports the addresses the policy names.
    write_policy(daemon, home, record)?;
    super::secrets::write_bundle(daemon, home, record).await?;
    let remote = daemon.is_remote();
    let sealed = SealedNetwork {
        name: network.clone(),
        subnet,
    };
    let address = subnet.map(JobSubnet::proxy);
    let name = sidecar_name(&base);
    match inspect_named(docker, home, &name, record.id.as_str()).await? {
        Some(status) if status.running => {
            if remote {
                super::remote::egress::push_policy(daemon, home, record).await?;
            }
            super::secrets::send(daemon, home, record).await?;
            return Ok(Some(sealed));
        }
        Some(_) => {
            if remote {
                super::remote::egress::prepare(docker, home, record).await?;
            }
            if start_named(docker, &name).await.is_ok() {
                super::secrets::send(daemon, home, record).await?;
                return Ok(Some(sealed));
            }
            remove_labelled_container(daemon, home, &name, record.id.as_str()).await?;
        }
        None => {}
    }
    let parts = if remote {
        Some(super::remote::egress::sidecar_parts(daemon, docker, home, record).await?)
    } else {
        None
    };
    create_named(
        daemon,
        docker,
        &name,
        sidecar_body(daemon, home, record, subnet, parts)?,
    )
    .await?;
    if remote {
        super::remote::egress::prepare(docker, home, record).await?;
    }
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
                    ipam_config: address.map(|address| EndpointIpamConfig {
                        ipv4_address: Some(address.to_string()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
            },
        ),
    )
    .await?;
    start_named(docker, &name).await?;
    super::secrets::send(daemon, home, record).await?;
    Ok(Some(sealed))
}

/// Restarts the job's sidecar (a short grace), ending its proxy's tunnels, when it runs.
pub async fn restart_sidecar(
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    if !has_sealed_network(daemon, record) {
        return Ok(());
    }
    let docker = daemon.connect()?;
    let name = sidecar_name(&job_container(record));
    if let Some(status) = inspect_named(&docker, home, &name, record.id.as_str()).await?
        && status.running
    {
        super::stop_container(&docker, &name, std::time::Duration::from_secs(1)).await?;
        start_named(&docker, &name).await?;
        super::secrets::send(daemon, home, record).await?;
    }
    Ok(())
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

/// Makes sure the job's sealed network exists; returns its subnet (`None` for a network
/// made before subnets were paddock's).
async fn ensure_network(
    daemon: &super::Daemon,
    docker: &Docker,
    home: &PaddockHome,
    record: &JobRecord,
    network: &str,
) -> Result<Option<JobSubnet>, RuntimeError> {
    let id = &record.id;
    // Before any address of the range is a job's, and again for a network that outlived a
    // reboot (which cleared the route): once a network is gone, nothing may reach its old
    // addresses through the default route (see `egress::ranges`). A read of
    // /proc/net/route when the route is there.
    if daemon.is_remote() {
        let addresses = super::ranges::ensure_on_engine(daemon, docker).await?;
        super::remote::egress::keep_addresses(home, record, &addresses)?;
    } else {
        super::ranges::ensure(daemon, docker, &record.limits.image).await?;
    }
    if let Some(found) = our_network(docker, home, network, id.as_str()).await? {
        let subnet = JobSubnet::of(&found);
        let options = found.options.unwrap_or_default();
        let sealed = found.internal == Some(true)
            && options.get(INHIBIT_HOST_ADDRESS).map(String::as_str) == Some("true");
        return if sealed {
            Ok(subnet)
        } else {
            // Not the network paddock makes: refuse rather than run the job on it.
            Err(RuntimeError::NotOurContainer {
                name: network.to_string(),
            })
        };
    }
    let mut last_error = None;
    for subnet in JobSubnet::candidates(home, id) {
        match create_network(docker, home, id, network, subnet).await {
            Ok(()) => return Ok(Some(subnet)),
            // Another network (a job's, the user's) has that subnet: try the next.
            Err(RuntimeError::Docker { message, .. }) if message.contains("overlap") => {
                last_error = Some(message);
            }
            Err(other) => return Err(other),
        }
    }
    Err(RuntimeError::Docker {
        action: "create network",
        target: network.to_string(),
        message: format!(
            "no free /28 in 198.18.0.0/15 among {SUBNET_TRIES} tried: {}",
            last_error.unwrap_or_default()
        ),
    })
}

async fn create_network(
    docker: &Docker,
    home: &PaddockHome,
    id: &JobId,
    network: &str,
    subnet: JobSubnet,
) -> Result<(), RuntimeError> {
    let request = NetworkCreateRequest {
        name: network.to_string(),
        ipam: Some(subnet.ipam()),
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

/// The local sidecar's binds: this binary, the policy directory and the log file.
fn host_mounts(
    home: &PaddockHome,
    record: &JobRecord,
    (uid, gid): (u32, u32),
) -> Result<Vec<bollard::models::Mount>, RuntimeError> {
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
    if crate::sys::is_root() {
        std::os::unix::fs::chown(&log, Some(uid), Some(gid)).map_err(io_error(&log))?;
    }
    let policy = policy_dir(home, &record.id);
    Ok(vec![
        bind(&exe, Path::new(SIDECAR_BINARY), true),
        bind(&policy, Path::new(SIDECAR_POLICY_DIR), true),
        bind(&log, Path::new(SIDECAR_LOG), false),
    ])
}

/// The sidecar's container; `remote`: its image and mounts on a remote engine
/// (`remote::egress::sidecar_parts`), else the job's image and the host binds.
fn sidecar_body(
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
    subnet: Option<JobSubnet>,
    remote: Option<(String, Vec<bollard::models::Mount>)>,
) -> Result<ContainerCreateBody, RuntimeError> {
    let (uid, gid) = agent_user(record.limits.uid);
    let remote_parts = remote.is_some();
    let (image, mounts) = match remote {
        Some(parts) => parts,
        None => (
            record.limits.image.clone(),
            host_mounts(home, record, (uid, gid))?,
        ),
    };
    let relays = if super::port_relay::relayed(daemon, record) {
        super::ports::Published::default()
    } else {
        super::ports::sidecar_relays(&record.ports, subnet.map(JobSubnet::job))
    };
    let (control_mounts, control_args) =
        super::secrets::sidecar_parts(daemon, home, record, (uid, gid))?;
    // On a remote engine the control socket's directory is the sidecar's own tmpfs.
    let tmpfs = (remote_parts && !control_args.is_empty())
        .then(|| super::remote::secrets::control_tmpfs(uid, gid));
    let host_config = HostConfig {
        mounts: Some(mounts.into_iter().chain(control_mounts).collect()),
        network_mode: Some("bridge".into()),
        port_bindings: relays.port_bindings,
        tmpfs,
        ..helper_host_config()
    };
    let mut cmd = vec!["egress-proxy".to_string()];
    if record.limits.network == NetworkMode::Allowlist {
        // Only on the job's sealed network, where it has a fixed address: the sidecar is also
        // on Docker's shared bridge, whose other containers must not use the job's proxy.
        let address = subnet.map_or_else(|| "0.0.0.0".to_string(), |s| s.proxy().to_string());
        cmd.extend(["--listen".into(), format!("{address}:{PROXY_PORT}")]);
    }
    cmd.extend([
        "--policy".into(),
        format!("{SIDECAR_POLICY_DIR}/policy.json"),
        "--log".into(),
        SIDECAR_LOG.into(),
    ]);
    cmd.extend(relays.args);
    cmd.extend(control_args);
    Ok(ContainerCreateBody {
        image: Some(image),
        user: Some(format!("{uid}:{gid}")),
        entrypoint: Some(vec![SIDECAR_BINARY.to_string()]),
        cmd: Some(cmd),
        exposed_ports: relays.exposed_ports,
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
    daemon: &super::Daemon,
    docker: &Docker,
    home: &PaddockHome,
    base: &str,
    job: &str,
) -> Result<(), RuntimeError> {
    let sidecar = remove_labelled_container(daemon, home, &sidecar_name(base), job).await;
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

#[cfg(test)]
#[path = "egress_tests.rs"]
mod tests;
