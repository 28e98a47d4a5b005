//! Warm pool slots on a remote engine (see `crate::pool`, `remote`): a slot is a job
//! container started ahead of creates on that engine, hardened and limited as a job's, with
//! volumes of its own named after its container (`engines::job_volume`) and the
//! repository's object cache read-only, exactly the mounts a remote job's container has. No
//! host path is involved: a claim fills the slot's volumes by the same stream as a cold
//! create (`fill`), and the job takes the container and its volumes as its own by taking
//! its name (the record's `container_name`), so every later call (exec, sync, the file API,
//! rm) finds them as a cold job's. The container and volumes keep the slot's id as their job
//! label (labels cannot change), which the job's record names (`JobRecord::pool`).
//!
//! Nothing of a job runs in a slot before its claim, and the fill writes the volumes before
//! the job's first exec, as in a cold create. Beside the slot's container waits the fill's
//! helper (`fill::slot_helper`, root with only the capabilities to hand files to the agent,
//! no network, sleeping), so a claim skips a container's create and start; the fill removes
//! it, as it removes a cold create's, before the job is ready.

use super::fill::{helper_body, slot_helper};
use super::volumes::{ensure_volume, volume_mounts};
use crate::engines::{JOB_VOLUMES, job_volume, object_cache};
use crate::job::JobRecord;
use crate::pool::PoolSlot;
use crate::runtime::RuntimeError;
use crate::runtime::docker::{
    LABEL_HOME, LABEL_JOB, LABEL_ROLE, create_named, inspect_named, remove_labelled_container,
    start_named,
};
use crate::store::PaddockHome;

/// Makes a remote slot's volumes and the repository's object cache, then creates and starts
/// its container on the current engine; returns the container's id.
pub async fn start_slot(
    daemon: &crate::runtime::docker::Daemon,
    home: &PaddockHome,
    slot: &PoolSlot,
) -> Result<String, RuntimeError> {
    let docker = daemon.connect()?;
    for (kind, _) in JOB_VOLUMES {
        ensure_volume(
            &docker,
            home,
            &job_volume(&slot.container_name, kind),
            &slot.id,
        )
        .await?;
    }
    ensure_volume(
        &docker,
        home,
        &object_cache(home.tag(), &slot.repo_key),
        "objects",
    )
    .await?;
    let limits = &slot.limits;
    let mounts = volume_mounts(
        home,
        &slot.container_name,
        &limits.workspace_dir,
        &slot.repo_key,
    );
    let body = crate::runtime::docker::pool::slot_body(home, slot, mounts);
    let id = create_named(daemon, &docker, &slot.container_name, body).await?;
    start_named(&docker, &slot.container_name).await?;
    // The claim's fill runs in this helper, waiting beside the slot (a pool container of the
    // slot's, so the sweep keeps it with its slot and reaps it with it).
    let helper = slot_helper(&slot.container_name);
    let mut labels = super::volumes::helper_labels(home, &slot.id);
    labels.insert(LABEL_ROLE.to_string(), "pool".to_string());
    let body = helper_body(
        home,
        (limits, &slot.repo_key),
        &slot.container_name,
        labels,
        "infinity",
    );
    create_named(daemon, &docker, &helper, body).await?;
    start_named(&docker, &helper).await?;
    Ok(id)
}

/// Checks, before a claim fills it, that the slot's container still runs with the slot's
/// labels on its engine.
pub async fn check_slot(
    daemon: &crate::runtime::docker::Daemon,
    home: &PaddockHome,
    slot: &PoolSlot,
) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    match inspect_named(&docker, home, &slot.container_name, &slot.id).await? {
        Some(status) if status.running => Ok(()),
        _ => Err(RuntimeError::Docker {
            action: "claim pool container",
            target: slot.container_name.clone(),
            message: "the waiting container is gone or stopped".into(),
        }),
    }
}

/// Hands a claimed remote slot (its volumes filled) to `record`: the job's CPU, memory and
/// pids limits. Its name stays (the job took it, and its volumes follow it).
pub async fn adopt_slot(
    daemon: &crate::runtime::docker::Daemon,
    record: &JobRecord,
    slot: &PoolSlot,
) -> Result<String, RuntimeError> {
    let docker = daemon.connect()?;
    let name = slot.container_name.clone();
    crate::runtime::docker::pool::limit_to_job(&docker, &name, record, slot).await?;
    Ok(slot.container_id.clone().unwrap_or(name))
}

/// Removes a remote slot's container and, unless a job claimed it (a claimed slot's volumes
/// hold that job's files: its `rm` removes them after saving its work, and with no record
/// they are kept, as an orphaned remote job's are), its volumes: each only when it carries
/// this install's labels with the slot's id, checked right before.
pub async fn remove_slot(
    daemon: &crate::runtime::docker::Daemon,
    home: &PaddockHome,
    slot: &PoolSlot,
) -> Result<(), RuntimeError> {
    remove_labelled_container(daemon, home, &slot_helper(&slot.container_name), &slot.id).await?;
    remove_labelled_container(daemon, home, &slot.container_name, &slot.id).await?;
    if matches!(slot.state, crate::pool::SlotState::Claimed { .. }) {
        return Ok(());
    }
    let docker = daemon.connect()?;
    for (kind, _) in JOB_VOLUMES {
        let name = job_volume(&slot.container_name, kind);
        let ours = match docker.inspect_volume(&name).await {
            Ok(info) => {
                info.labels.get(LABEL_HOME).map(String::as_str) == Some(home.id())
                    && info.labels.get(LABEL_JOB).map(String::as_str) == Some(slot.id.as_str())
            }
            Err(error) if crate::runtime::docker::is_not_found(&error) => false,
            Err(error) => {
                return Err(RuntimeError::Docker {
                    action: "inspect volume",
                    target: name,
                    message: error.to_string(),
                });
            }
        };
        if ours {
            super::volumes::remove_volume(&docker, &name).await?;
        }
    }
    Ok(())
}
