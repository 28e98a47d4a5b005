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
            let host_pid = status.pid.filter(|_| !daemon.is_remote());
            if record.state != crate::job::JobState::Running
                && idle(&docker, record, &name, host_pid).await
            {
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
async fn idle(
    docker: &bollard::Docker,
    record: &JobRecord,
    name: &str,
    host_pid: Option<i64>,
) -> bool {
    if record.runtime != crate::job::RuntimeKind::Docker {
        return false;
    }
    // On this host the container's cgroup lists its processes without a round trip
    // through the engine (its `top` runs `ps`: ~15 ms of a checkpoint's budget).
    if let Some(pid) = host_pid
        && let Some(commands) = commands_in_cgroup_of(pid)
    {
        return !commands.is_empty() && commands.iter().all(|c| idle_command(c));
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
        && processes
            .iter()
            .all(|row| idle_command(row.last().map_or("", String::as_str)))
}

/// Whether a command line is one of an idle job container's own processes.
fn idle_command(args: &str) -> bool {
    args.starts_with("/sbin/docker-init -- ")
        || args == "/bin/sh /usr/local/bin/paddock-entrypoint"
        || args.starts_with(super::resident::SERVER_COMMAND)
        || args == "sleep 3600"
}

/// The command lines of the processes in the cgroup of host process `pid` (a container's
/// init), read from `/proc` and the cgroup filesystem (v1's `pids` hierarchy, or v2's);
/// `None` when any of it cannot be read (the engine's `top` answers then).
fn commands_in_cgroup_of(pid: i64) -> Option<Vec<String>> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let procs = cgroups.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controllers.split(',').any(|c| c == "pids") {
            Some(format!("/sys/fs/cgroup/pids{path}/cgroup.procs"))
        } else if controllers.is_empty() && line.starts_with("0::") {
            Some(format!("/sys/fs/cgroup{path}/cgroup.procs"))
        } else {
            None
        }
    })?;
    let listed = std::fs::read_to_string(procs).ok()?;
    listed
        .lines()
        .map(|p| {
            let raw = std::fs::read(format!("/proc/{}/cmdline", p.trim())).ok()?;
            let text = String::from_utf8_lossy(&raw);
            Some(text.trim_end_matches('\0').replace('\0', " "))
        })
        .collect()
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
