//! A job container's configuration: what the daemon is asked to create. Derived from the
//! record alone (and a sealed network's subnet), so a lost container is recreated the same;
//! the hardening every container of paddock's has lives in [`hardened_host_config`].

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, EndpointIpamConfig, EndpointSettings, HostConfig, NetworkingConfig,
};

use super::mounts::job_mounts;
use super::{
    CONTAINER_HOME, LABEL_HOME, LABEL_JOB, LABEL_ROLE, agent_user, egress, pids_headroom, ports,
};
use crate::config::NetworkMode;
use crate::job::{JobRecord, RuntimeKind};
use crate::runtime::RuntimeError;
use crate::store::PaddockHome;

/// The container's configuration, derived from the record alone (and, for a job on a
/// sealed network, that network's subnet) so a container can be recreated identically.
pub(super) fn container_body(
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
    sealed: Option<&egress::SealedNetwork>,
) -> Result<ContainerCreateBody, RuntimeError> {
    let subnet = sealed.and_then(|s| s.subnet);
    let limits = &record.limits;
    let (uid, gid) = agent_user(limits.uid);
    let mut env = base_env(limits);
    // Git's identity and settings are part of the container, so the first exec has them
    // (no entrypoint script that could race it).
    env.extend(
        crate::runtime::agent_git_env(record, true)
            .into_iter()
            .map(|(k, v)| format!("{k}={v}")),
    );
    env.extend(
        crate::cache::env_vars(&record.caches)
            .iter()
            .map(|(k, v)| format!("{k}={v}")),
    );
    if limits.network == NetworkMode::Allowlist {
        env.extend(egress::proxy_env(
            record,
            subnet.map(egress::JobSubnet::proxy),
        ));
    }
    env.extend(limits.env.iter().map(|(k, v)| format!("{k}={v}")));
    // Placeholders only: the values stay in the proxy (see `secrets.rs`).
    let (secret_mounts, secret_env) = super::secrets::job_parts(daemon, home, record);
    env.extend(secret_env);
    let mut mounts = if daemon.is_remote() {
        let mut mounts = super::remote::volumes::job_mounts(home, record);
        mounts.extend(super::cache_volumes::job_mounts(record));
        mounts
    } else {
        let mut mounts = job_mounts(record)?;
        mounts.extend(super::users::tools_mount(record));
        mounts
    };
    mounts.extend(secret_mounts);
    // paddock's own facts last, so no profile variable can misstate them.
    env.extend(
        crate::runtime::job_env(record, true)
            .into_iter()
            .map(|(k, v)| format!("{k}={v}")),
    );
    // A remote job's ports are relayed through its engine's API (`port_relay`): nothing is
    // published on the engine's host.
    let published = if sealed.is_none()
        && limits.network == NetworkMode::Open
        && !super::port_relay::relayed(daemon, record)
    {
        ports::job_container(&record.ports)
    } else {
        ports::Published::default()
    };
    // With ports on a sealed network the job has a fixed address, where its sidecar relays.
    let networking_config = match (sealed, subnet) {
        (Some(sealed), Some(subnet)) if !record.ports.is_empty() => Some(NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                sealed.name.clone(),
                EndpointSettings {
                    ipam_config: Some(EndpointIpamConfig {
                        ipv4_address: Some(subnet.job().to_string()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )])),
        }),
        _ => None,
    };
    let host_config = HostConfig {
        network_mode: Some(match (sealed, limits.network) {
            (Some(sealed), _) => sealed.name.clone(),
            (None, NetworkMode::Open) => "bridge".into(),
            (None, _) => "none".into(),
        }),
        // On the sealed network Docker's resolver answers only container names there (the
        // proxy's); its upstream is the job's own loopback, where nothing answers, so no
        // other name resolves and no query leaves the job.
        dns: sealed.is_some().then(|| vec!["127.0.0.1".into()]),
        port_bindings: published.port_bindings,
        ..hardened_host_config(limits, record.runtime, mounts)
    };
    Ok(ContainerCreateBody {
        image: Some(limits.image.clone()),
        user: Some(format!("{uid}:{gid}")),
        working_dir: Some(limits.workspace_dir.clone()),
        env: Some(env),
        labels: Some({
            let mut labels = HashMap::from([
                (LABEL_JOB.to_string(), record.container_label().to_string()),
                (LABEL_HOME.to_string(), home.id().to_string()),
            ]);
            // A warm job's container, recreated, is still found as its slot's.
            if record.pool_slot().is_some() {
                labels.insert(LABEL_ROLE.to_string(), "pool".to_string());
            }
            labels
        }),
        stop_signal: Some("SIGTERM".into()),
        exposed_ports: published.exposed_ports,
        host_config: Some(host_config),
        networking_config,
        ..Default::default()
    })
}

/// What every container of paddock's starts with in its environment.
pub(super) fn base_env(limits: &crate::job::Limits) -> Vec<String> {
    vec![
        format!("HOME={CONTAINER_HOME}"),
        format!("PADDOCK_WORKSPACE={}", limits.workspace_dir),
    ]
}

/// The hardening and limits every job container has (see the module docs), with `mounts`
/// and no network; callers add the network.
pub(super) fn hardened_host_config(
    limits: &crate::job::Limits,
    runtime: RuntimeKind,
    mounts: Vec<bollard::models::Mount>,
) -> HostConfig {
    let tmpfs_opts = |size: &str| format!("rw,nosuid,nodev,size={size},mode=1777");
    let memory = i64::try_from(limits.memory.0).unwrap_or(i64::MAX);
    HostConfig {
        mounts: Some(mounts),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        readonly_rootfs: Some(limits.rootfs.is_read_only()),
        tmpfs: Some(HashMap::from([
            ("/tmp".to_string(), tmpfs_opts("512m")),
            (CONTAINER_HOME.to_string(), tmpfs_opts("256m")),
        ])),
        pids_limit: Some(i64::from(limits.pids) + pids_headroom(runtime)),
        memory: Some(memory),
        memory_swap: Some(memory),
        nano_cpus: Some(limits.cpus.nano_cpus()),
        network_mode: Some("none".into()),
        init: Some(true),
        runtime: Some(
            match runtime {
                RuntimeKind::Runsc => "runsc",
                _ => "runc",
            }
            .into(),
        ),
        ..Default::default()
    }
}
