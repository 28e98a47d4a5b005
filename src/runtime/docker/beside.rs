//! A throwaway container beside a job's: its image, mounts, user and limits, but a network
//! of its own (`none` or `open`, never the job's sealed network), no port and no proxy,
//! labelled with its role so a sweep reaps one a crash left behind. A stopped job's sync and
//! setup commands with their own network policy run here.

use super::exec::exec_in;
use super::{
    Daemon, LABEL_ROLE, container_body, create_named, inspect_ours, job_container,
    remove_labelled_container, start_named,
};
use crate::config::NetworkMode;
use crate::job::{JobRecord, random_hex};
use crate::runtime::RuntimeError;
use crate::runtime::exec::{ExecRequest, ExecResult, OutputSink};
use crate::store::PaddockHome;

/// Runs `request` in a throwaway container beside the job's: the same image, mounts, user
/// and limits, but the network `network` (`none` or `open`: a container of its own, never
/// the job's sealed network), no port and no proxy; removed afterwards. `role` labels it
/// (`sync`: paddock's own sync of a stopped job; `setup`: setup commands with their own
/// network policy), so a sweep reaps one a crash left behind.
pub async fn exec_beside(
    daemon: &Daemon,
    home: &PaddockHome,
    record: &JobRecord,
    request: &ExecRequest,
    sink: &mut dyn OutputSink,
    network: NetworkMode,
    role: &'static str,
) -> Result<ExecResult, RuntimeError> {
    let docker = daemon.connect()?;
    let name = format!("{}-{role}-{}", job_container(record), random_hex(6));
    let mut stand_in = record.clone();
    stand_in.limits.network = match network {
        NetworkMode::Open => NetworkMode::Open,
        NetworkMode::None | NetworkMode::Allowlist => NetworkMode::None,
    };
    stand_in.ports.clear();
    // Labelled with the job's id (not a pool slot's): it is the job's helper, removed below by that.
    stand_in.pool = None;
    let mut body = container_body(daemon, home, &stand_in, None)?;
    if let Some(labels) = &mut body.labels {
        labels.insert(LABEL_ROLE.to_string(), role.to_string());
    }
    create_named(daemon, &docker, &name, body).await?;
    let result = async {
        start_named(&docker, &name).await?;
        // A throwaway container never runs the exec server.
        exec_in(daemon, &name, record, request, false, sink).await
    }
    .await;
    if let Err(error) = remove_labelled_container(daemon, home, &name, record.id.as_str()).await {
        tracing::warn!(container = %name, %error, "failed to remove a throwaway container");
    }
    Ok(result?.0)
}

/// Runs the sync script (or any short paddock command) in the job's sandbox: its container
/// when that runs, else a throwaway container with the same mounts, user and limits, so a
/// stopped job is not started again and no agent process runs beside the command (a
/// paused job's container stays frozen while the command runs beside it).
pub async fn exec_in_sandbox(
    daemon: &Daemon,
    home: &PaddockHome,
    record: &JobRecord,
    request: &ExecRequest,
    sink: &mut dyn OutputSink,
) -> Result<ExecResult, RuntimeError> {
    let docker = daemon.connect()?;
    // A paused container runs nothing, an exec into it included (a checkpoint reads a
    // frozen job's files): then the throwaway container beside it does.
    if let Some(status) = inspect_ours(&docker, home, record)
        .await?
        .filter(|status| status.running && !status.paused)
    {
        let running = super::Running {
            id: status.id,
            image: status.image,
            exec_server: status.exec_server,
        };
        // The sync's and a checkpoint's scripts take the server's path too: a round trip
        // on its stream instead of a runtime's exec.
        if let Some(done) =
            super::exec::through_server(daemon, home, record, &running, request, sink).await?
        {
            return Ok(done.result);
        }
        let name = job_container(record);
        let server = running.exec_server;
        return Ok(exec_in(daemon, &name, record, request, server, sink)
            .await?
            .0);
    }
    exec_beside(
        daemon,
        home,
        record,
        request,
        sink,
        NetworkMode::None,
        "sync",
    )
    .await
}
