//! Warm pool containers (see `crate::pool`): a slot's container is a job container in
//! every hardening and limit, whose job-specific mounts are replaced by two mount points
//! that receive the job's files later, by propagation from the host: the slot's
//! `mnt/workspace` at the workspace, `mnt/paddock` at `/paddock` and `mnt/objects` at
//! `/paddock-objects`, where the job's object view goes (`rslave`: host mounts reach the
//! container, nothing the container does reaches the host). The stores the repository's
//! object store borrows from are mounted read-only at their own paths from the start, as in
//! every job's container, so a slot is of one repository.
//!
//! A claim makes the job's container mounts ([`job_mounts`]) appear through those three
//! points ([`claim_binds`]: a job that needs a mount anywhere else cannot be claimed into a
//! slot and starts cold), gives the job's files to the agent's uid, updates the container's
//! limits to the job's and renames it to the job's container name. Its job label stays the
//! slot's id (labels cannot change), which the job's record names (`JobRecord::pool`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bollard::models::{
    ContainerCreateBody, ContainerUpdateBody, HostConfig, MountBindOptions,
    MountBindOptionsPropagationEnum,
};
use bollard::query_parameters::RenameContainerOptionsBuilder;

use super::calls::{call, create_named, start_named};
use super::mounts::{bind, job_mounts, nested_object_mounts};
use super::{
    API_TIMEOUT, CONTAINER_GIT_DIR, CONTAINER_OBJECTS, LABEL_HOME, LABEL_JOB, LABEL_ROLE,
    agent_user, base_env, hardened_host_config, job_container, remove_labelled_container,
};
use crate::config::NetworkMode;
use crate::job::JobRecord;
use crate::pool::{HostBind, PoolSlot, PoolSlots};
use crate::runtime::RuntimeError;
use crate::runtime::access::grant_agent_access;
use crate::store::PaddockHome;

/// The container paths a slot receives mounts under, with the slot's directory of each.
fn propagated(workspace_dir: &str) -> [(PathBuf, &'static str); 3] {
    let paddock = Path::new(CONTAINER_GIT_DIR)
        .parent()
        .expect("the git dir is under /paddock")
        .to_path_buf();
    [
        (PathBuf::from(workspace_dir), "workspace"),
        (paddock, "paddock"),
        (PathBuf::from(CONTAINER_OBJECTS), "objects"),
    ]
}

/// A slot's container, local or on an engine: the job's hardening, the agent's uid, the
/// profile's image, limits and environment, `mounts`, and the network of its kind (`open`:
/// the bridge; otherwise none until a claim).
pub(super) fn slot_body(
    home: &PaddockHome,
    slot: &PoolSlot,
    mounts: Vec<bollard::models::Mount>,
) -> ContainerCreateBody {
    let limits = &slot.limits;
    let (uid, gid) = agent_user(limits.uid);
    let mut env = base_env(limits);
    env.extend(limits.env.iter().map(|(k, v)| format!("{k}={v}")));
    ContainerCreateBody {
        image: Some(limits.image.clone()),
        user: Some(format!("{uid}:{gid}")),
        working_dir: Some(limits.workspace_dir.clone()),
        env: Some(env),
        labels: Some(HashMap::from([
            (LABEL_JOB.to_string(), slot.id.clone()),
            (LABEL_HOME.to_string(), home.id().to_string()),
            (LABEL_ROLE.to_string(), "pool".to_string()),
        ])),
        stop_signal: Some("SIGTERM".into()),
        host_config: Some(HostConfig {
            network_mode: Some(
                if limits.network == NetworkMode::Open {
                    "bridge"
                } else {
                    "none"
                }
                .into(),
            ),
            ..hardened_host_config(limits, slot.runtime, mounts)
        }),
        ..Default::default()
    }
}

/// Gives the claimed slot container `name` the job's CPU, memory and pids limits, when they
/// differ from the slot's (local or remote slots alike).
pub(super) async fn limit_to_job(
    docker: &bollard::Docker,
    name: &str,
    record: &JobRecord,
    slot: &PoolSlot,
) -> Result<(), RuntimeError> {
    let wanted = &record.limits;
    if (wanted.memory, wanted.cpus, wanted.pids)
        != (slot.limits.memory, slot.limits.cpus, slot.limits.pids)
    {
        let full = hardened_host_config(wanted, record.runtime, Vec::new());
        let update = ContainerUpdateBody {
            memory: full.memory,
            memory_swap: full.memory_swap,
            nano_cpus: full.nano_cpus,
            pids_limit: full.pids_limit,
            ..Default::default()
        };
        call(
            "update container",
            name,
            API_TIMEOUT,
            docker.update_container(name, update),
        )
        .await?;
    }
    Ok(())
}

/// Why a job of `kind` cannot start in a slot's container, if it cannot.
pub(super) fn unsupported(kind: crate::job::RuntimeKind) -> Option<&'static str> {
    (kind == crate::job::RuntimeKind::Runsc).then_some(
        "gVisor serves a container's files through its own gofer: mounts made on the host after the start never reach it",
    )
}

/// Creates and starts a slot's container; returns its id.
pub async fn start_slot(
    daemon: &super::Daemon,
    home: &PaddockHome,
    slot: &PoolSlot,
) -> Result<String, RuntimeError> {
    if let Some(reason) = unsupported(slot.runtime) {
        return Err(RuntimeError::Unsupported {
            runtime: "pool",
            what: reason,
        });
    }
    let mnt = PoolSlots::of(home).mnt(&slot.id);
    let limits = &slot.limits;
    let mut mounts: Vec<_> = propagated(&limits.workspace_dir)
        .into_iter()
        .map(|(target, dir)| {
            // The objects point only ever receives a read-only view.
            let mut mount = bind(&mnt.join(dir), &target, dir == "objects");
            mount.bind_options = Some(MountBindOptions {
                propagation: Some(MountBindOptionsPropagationEnum::RSLAVE),
                ..Default::default()
            });
            mount
        })
        .collect();
    mounts.extend(nested_object_mounts(&slot.git_common_dir));
    let mut body = slot_body(home, slot, mounts);
    // A claimed job's first exec takes the fast path.
    super::resident::apply(home, &mut body);
    let docker = daemon.connect()?;
    let id = create_named(daemon, &docker, &slot.container_name, body).await?;
    start_named(&docker, &slot.container_name).await?;
    Ok(id)
}

/// The host binds that make `record`'s container mounts appear in a slot's container, or
/// why some mount cannot (it lies outside the two propagated points and is not one the
/// slot's container already has).
pub fn claim_binds(record: &JobRecord) -> Result<Vec<HostBind>, String> {
    if let Some(reason) = unsupported(record.runtime) {
        return Err(reason.to_string());
    }
    if !record.ports.is_empty() {
        return Err("published ports are set when a container is made".into());
    }
    if record.limits.network == NetworkMode::Allowlist {
        return Err(
            "an allowlist job's sealed network and egress proxy are made with its container".into(),
        );
    }
    // The slot's container has the borrowed object stores already, where a job's have.
    let objects: Vec<(Option<String>, Option<String>)> =
        nested_object_mounts(&record.git_common_dir)
            .into_iter()
            .map(|m| (m.source, m.target))
            .collect();
    let points = propagated(&record.limits.workspace_dir);
    let mut binds = Vec::new();
    for mount in job_mounts(record).map_err(|e| e.to_string())? {
        if objects.contains(&(mount.source.clone(), mount.target.clone())) {
            continue;
        }
        let source = PathBuf::from(mount.source.unwrap_or_default());
        let target = PathBuf::from(mount.target.unwrap_or_default());
        let Some((rest, dir)) = points
            .iter()
            .find_map(|(point, dir)| target.strip_prefix(point).ok().map(|rest| (rest, dir)))
        else {
            return Err(format!(
                "`{}` is mounted outside the workspace and /paddock (a cache kept at its own path)",
                target.display()
            ));
        };
        binds.push(HostBind {
            source,
            target: Path::new(dir).join(rest),
            read_only: mount.read_only.unwrap_or(false),
        });
    }
    Ok(binds)
}

/// Hands a claimed slot's container to `record` (whose files are already mounted into the
/// slot): the job's files to the agent's uid, the job's limits, the job's container name.
/// Returns the container id.
pub async fn adopt_slot(
    daemon: &super::Daemon,
    record: &JobRecord,
    slot: &PoolSlot,
) -> Result<String, RuntimeError> {
    // A walk of the job's trees and the shared cache entries (which jobs write): on a
    // blocking thread.
    let granted = record.clone();
    tokio::task::spawn_blocking(move || {
        grant_agent_access(&granted, agent_user(granted.limits.uid).0)
    })
    .await
    .expect("granting access does not panic")?;
    let docker = daemon.connect()?;
    let name = slot.container_name.clone();
    limit_to_job(&docker, &name, record, slot).await?;
    let job_name = job_container(record);
    let options = RenameContainerOptionsBuilder::new().name(&job_name).build();
    call(
        "rename container",
        &name,
        API_TIMEOUT,
        docker.rename_container(&name, options),
    )
    .await?;
    Ok(slot.container_id.clone().unwrap_or(job_name))
}

/// Removes a slot's container, under its waiting name or the job name a claim gave it,
/// when it carries this install's labels with the slot's id.
pub async fn remove_slot_container(
    daemon: &super::Daemon,
    home: &PaddockHome,
    slot: &PoolSlot,
    job_name: Option<&str>,
) -> Result<(), RuntimeError> {
    remove_labelled_container(daemon, home, &slot.container_name, &slot.id).await?;
    if let Some(name) = job_name {
        remove_labelled_container(daemon, home, name, &slot.id).await?;
    }
    Ok(())
}
