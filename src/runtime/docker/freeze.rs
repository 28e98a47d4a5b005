//! Freezing a job's container in place (`pause`, `resume`): the daemon's pause, the cgroup
//! freezer, which holds runc's processes and gVisor's sandbox alike, on this host or a
//! remote engine (the `Daemon` says which). Only the job's own container is frozen: its
//! egress sidecar keeps answering, so a thawed job finds its proxy as it left it. The
//! container's labels are checked first, as before any call that changes a container.

use super::{API_TIMEOUT, Daemon, call, inspect_ours, job_container};
use crate::job::JobRecord;
use crate::runtime::RuntimeError;
use crate::store::PaddockHome;

/// Pauses the job's running container; a paused one stays so.
pub async fn freeze(
    daemon: &Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    let name = job_container(record);
    match inspect_ours(&docker, home, record).await? {
        Some(status) if status.paused => Ok(()),
        Some(status) if status.running => {
            call(
                "pause container",
                &name,
                API_TIMEOUT,
                docker.pause_container(&name),
            )
            .await
        }
        // A stopped or missing container has no process to freeze, and the next exec would
        // start one the record calls paused.
        Some(_) | None => Err(RuntimeError::Docker {
            action: "pause container",
            target: name,
            message: "the job's container is not running: nothing to freeze".into(),
        }),
    }
}

/// Pauses the job's container when it runs (a checkpoint's moment); false when it does
/// not run or is paused already (then nothing is the caller's to thaw).
pub async fn freeze_if_running(
    daemon: &Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<bool, RuntimeError> {
    let docker = daemon.connect()?;
    let name = job_container(record);
    match inspect_ours(&docker, home, record).await? {
        Some(status) if status.running && !status.paused => {
            call(
                "pause container",
                &name,
                API_TIMEOUT,
                docker.pause_container(&name),
            )
            .await?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Unpauses the job's container when it is paused.
pub async fn thaw(
    daemon: &Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    let name = job_container(record);
    match inspect_ours(&docker, home, record).await? {
        Some(status) if status.paused => {
            call(
                "unpause container",
                &name,
                API_TIMEOUT,
                docker.unpause_container(&name),
            )
            .await
        }
        _ => Ok(()),
    }
}
