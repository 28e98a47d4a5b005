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

/// Pauses the job's container when something of the agent's runs in it (a checkpoint's
/// moment); false when it does not run, is paused already, or runs only its idle processes
/// (then nothing is the caller's to thaw, and the checkpoint's sync runs in it: a frozen
/// container would need a throwaway one beside it, half a second more).
pub async fn freeze_if_running(
    daemon: &Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<bool, RuntimeError> {
    let docker = daemon.connect()?;
    let name = job_container(record);
    match inspect_ours(&docker, home, record).await? {
        Some(status) if status.running && !status.paused => {
            if record.state != crate::job::JobState::Running && idle(&docker, record, &name).await {
                return Ok(false);
            }
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

/// Whether a runc container runs only what an idle job container runs: its init, the
/// entrypoint's loop and that loop's `sleep` (`entrypoint.sh`). Anything else (a process
/// the agent left running, an exec), a list that cannot be read, or a gVisor sandbox (whose
/// processes the engine's `top` does not list) counts as busy.
async fn idle(docker: &bollard::Docker, record: &JobRecord, name: &str) -> bool {
    if record.runtime != crate::job::RuntimeKind::Docker {
        return false;
    }
    let options = bollard::query_parameters::TopOptionsBuilder::default()
        .ps_args("-o pid,args")
        .build();
    let listed = tokio::time::timeout(API_TIMEOUT, docker.top_processes(name, Some(options))).await;
    let Ok(Ok(top)) = listed else {
        return false;
    };
    let processes = top.processes.unwrap_or_default();
    !processes.is_empty()
        && processes.iter().all(|row| {
            let args = row.last().map_or("", String::as_str);
            args.starts_with("/sbin/docker-init -- ")
                || args == "/bin/sh /usr/local/bin/paddock-entrypoint"
                || args.starts_with(super::resident::SERVER_COMMAND)
                || args == "sleep 3600"
        })
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
