//! The engine side of a remote job's ports (`engines:`; the host side is
//! `engine::port_relay`): a relay container, `<job container>-ports`, that joins the job
//! container's network namespace (`network_mode: container:<job container>`) and runs
//! nothing but `paddock port-bridge --hold` from the engine's proxy image (this very binary,
//! `remote::proxy_image`); each connection the host's relay accepts becomes an exec of
//! `paddock port-bridge PORT` in it, attached over the engine's API, whose stdin and stdout
//! carry the connection's bytes to `127.0.0.1:PORT` in the job's namespace.
//!
//! Invariants: the relay container publishes nothing and mounts no host path (nothing of
//! the engine's host is opened to the network); it is hardened like the egress sidecar
//! (read-only root, every capability dropped, `no-new-privileges`, the agent's uid) and
//! carries this install's labels with the job's id and role `ports`, so `rm` and the sweep
//! find it (checked right before removal). The port a bridge connects to is the argument
//! paddock gives the exec, one of the job's recorded ports: nothing the job sends chooses
//! it. A job container that starts again gets a new network namespace, so the relay
//! container is made again each time the job container starts.

use std::collections::HashMap;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, ExecConfig, HostConfig};
use futures_util::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{
    API_TIMEOUT, LABEL_HOME, LABEL_JOB, LABEL_ROLE, agent_user, call, create_named, inspect_named,
    inspect_ours, job_container, remove_labelled_container, start_named,
};
use crate::job::JobRecord;
use crate::runtime::RuntimeError;
use crate::store::PaddockHome;

/// Where the proxy image keeps this binary.
const BINARY: &str = "/paddock/bin/paddock";
/// The relay container's label role (listed as an egress helper: removed with its job).
pub const ROLE: &str = "ports";

/// The relay container of the job container `base`.
pub fn relay_name(base: &str) -> String {
    format!("{base}-ports")
}

/// Whether the job's ports are relayed through its engine (a remote job with ports).
pub fn relayed(daemon: &super::Daemon, record: &JobRecord) -> bool {
    daemon.is_remote() && !record.ports.is_empty()
}

/// After the job's container started: its relay container made anew in the container's
/// current network namespace (nothing for a job whose ports are not relayed).
pub async fn restart(
    daemon: &super::Daemon,
    docker: &Docker,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    if !relayed(daemon, record) {
        return Ok(());
    }
    let base = job_container(record);
    let name = relay_name(&base);
    remove_labelled_container(daemon, home, &name, record.id.as_str()).await?;
    let image = super::remote::proxy_image::require_proxy_image(daemon, docker).await?;
    let (uid, gid) = agent_user(record.limits.uid);
    let body = ContainerCreateBody {
        image: Some(image),
        user: Some(format!("{uid}:{gid}")),
        entrypoint: Some(vec![BINARY.to_string()]),
        cmd: Some(vec!["port-bridge".into(), "--hold".into()]),
        labels: Some(HashMap::from([
            (LABEL_JOB.to_string(), record.id.to_string()),
            (LABEL_HOME.to_string(), home.id().to_string()),
            (LABEL_ROLE.to_string(), ROLE.to_string()),
        ])),
        stop_signal: Some("SIGTERM".into()),
        host_config: Some(HostConfig {
            network_mode: Some(format!("container:{base}")),
            ..super::sidecar::helper_host_config()
        }),
        ..Default::default()
    };
    create_named(daemon, docker, &name, body).await?;
    start_named(docker, &name).await
}

/// Removes the job's relay container, if it exists and is the job's of this install.
pub async fn remove(
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    remove_labelled_container(
        daemon,
        home,
        &relay_name(&job_container(record)),
        record.id.as_str(),
    )
    .await
}

/// Carries one connection `client` the host's relay accepted to `port` of the job, through
/// an exec of the bridge in the relay container; returns when both ways ended. A relay
/// container that is gone or stopped while the job's runs is made again once.
pub async fn relay(
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
    port: u16,
    client: TcpStream,
) -> Result<(), RuntimeError> {
    if !record.ports.iter().any(|p| p.port == port) {
        return Err(RuntimeError::Docker {
            action: "relay a port",
            target: record.id.to_string(),
            message: format!("{port} is not a port of the job"),
        });
    }
    let docker = daemon.connect()?;
    let name = relay_name(&job_container(record));
    let opened = match open(&docker, &name, port).await {
        Ok(opened) => opened,
        Err(error) => {
            let running = inspect_ours(&docker, home, record)
                .await?
                .is_some_and(|status| status.running);
            let relay_up = inspect_named(&docker, home, &name, record.id.as_str())
                .await?
                .is_some_and(|status| status.running);
            if !running || relay_up {
                return Err(error);
            }
            restart(daemon, &docker, home, record).await?;
            open(&docker, &name, port).await?
        }
    };
    pump(client, opened).await;
    Ok(())
}

type Output = std::pin::Pin<
    Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>,
>;
type Input = std::pin::Pin<Box<dyn AsyncWrite + Send>>;

/// Starts `paddock port-bridge PORT` in the relay container `name`, attached.
async fn open(docker: &Docker, name: &str, port: u16) -> Result<(Output, Input), RuntimeError> {
    let config = ExecConfig {
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(vec![BINARY.into(), "port-bridge".into(), port.to_string()]),
        ..Default::default()
    };
    let created = call(
        "create exec",
        name,
        API_TIMEOUT,
        docker.create_exec(name, config),
    )
    .await?;
    let options = StartExecOptions {
        detach: false,
        tty: false,
        output_capacity: Some(64 << 10),
    };
    match call(
        "start exec",
        name,
        API_TIMEOUT,
        docker.start_exec(&created.id, Some(options)),
    )
    .await?
    {
        StartExecResults::Attached { output, input } => Ok((output, input)),
        StartExecResults::Detached => Err(RuntimeError::Docker {
            action: "start exec",
            target: name.to_string(),
            message: "the engine did not attach the bridge".into(),
        }),
    }
}

/// Moves bytes both ways between `client` and the bridge, each way on its own: the end of
/// the client's stream ends the bridge's stdin (a half-close the bridge passes on), the end
/// of the bridge's stdout ends the client's read side. What the bridge says on stderr (its
/// failure to connect) is not the job's answer and is dropped.
async fn pump(client: TcpStream, (mut output, mut input): (Output, Input)) {
    let _ = client.set_nodelay(true);
    let (mut from_client, mut to_client) = client.into_split();
    let up = async {
        let _ = tokio::io::copy(&mut from_client, &mut input).await;
        let _ = input.shutdown().await;
    };
    let down = async {
        while let Some(Ok(chunk)) = output.next().await {
            if let LogOutput::StdOut { message } = chunk
                && to_client.write_all(&message).await.is_err()
            {
                break;
            }
        }
        let _ = to_client.shutdown().await;
    };
    tokio::join!(up, down);
}
