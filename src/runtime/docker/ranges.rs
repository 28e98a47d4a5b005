//! Putting the job range's unreachable route in place (see `egress::ranges`) before paddock
//! makes a job network, at `paddock serve`'s start and in `doctor`.
//!
//! As root, paddock adds the route itself (rtnetlink, on a blocking thread). Otherwise the
//! user can still reach Docker, which can: a short-lived container in the host's network
//! namespace with `NET_ADMIN` only (every other capability dropped, read-only root, runc)
//! runs this very binary (`paddock guard-ranges`, mounted read-only as the sidecar's is, so
//! no image needs `ip`) from the job's image. The container is removed whatever happens,
//! and every wait has a deadline.
//!
//! On a remote engine the host to guard is the engine's, whose route table paddock cannot
//! read: the same container runs there every time a job's sidecar is made or started
//! (`ensure_on_engine`; adding the route is a replace, harmless when it is there), from the
//! proxy image (`remote::proxy_image`), so no host binary is mounted, and it reports the engine
//! host's addresses for the job's policy.

use std::path::Path;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    LogsOptionsBuilder, RemoveContainerOptionsBuilder, WaitContainerOptionsBuilder,
};
use futures_util::StreamExt;

use super::mounts::bind;
use super::{API_TIMEOUT, create_named, io_error, start_named};
use crate::egress::ranges;
use crate::runtime::RuntimeError;

/// How long the guard container may take to add the route (it is one netlink request).
const GUARD_DEADLINE: Duration = Duration::from_secs(30);
const GUARD_BINARY: &str = "/paddock/bin/paddock";

/// Whether the route was there already or paddock added it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    Present,
    Installed,
}

/// Makes sure the job range is unreachable from the host (and so from `open` jobs), adding
/// the route when it is missing: itself as root, else through a container from `image`.
pub async fn ensure(
    daemon: &super::Daemon,
    docker: &Docker,
    image: &str,
) -> Result<Guard, RuntimeError> {
    let range = ranges::job_range();
    let failed = |message: String| RuntimeError::Docker {
        action: "guard the job range",
        target: range.clone(),
        message,
    };
    if guarded().await? {
        return Ok(Guard::Present);
    }
    if crate::sys::is_root() {
        tokio::task::spawn_blocking(ranges::install)
            .await
            .expect("a netlink request does not panic")
            .map_err(|e| failed(format!("adding `unreachable {range}`: {e}")))?;
    } else {
        run_guard_container(daemon, docker, image, true).await?;
    }
    if guarded().await? {
        Ok(Guard::Installed)
    } else {
        Err(failed("the route is still missing after adding it".into()))
    }
}

/// Adds the route on the current remote engine's host (see the module docs); returns that
/// host's addresses as the guard reported them.
pub async fn ensure_on_engine(
    daemon: &super::Daemon,
    docker: &Docker,
) -> Result<Vec<std::net::IpAddr>, RuntimeError> {
    let image = super::remote::proxy_image::require_proxy_image(daemon, docker).await?;
    let output = run_guard_container(daemon, docker, &image, false).await?;
    Ok(output
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str(line.trim()).ok())
        .unwrap_or_default())
}

async fn guarded() -> Result<bool, RuntimeError> {
    tokio::task::spawn_blocking(ranges::is_guarded)
        .await
        .expect("reading /proc/net/route does not panic")
        .map_err(io_error(Path::new("/proc/net/route")))
}

/// Runs `paddock guard-ranges` in a short-lived container from `image` (with this binary
/// bind-mounted when `mount_binary`, else the image's own); returns what it printed.
async fn run_guard_container(
    daemon: &super::Daemon,
    docker: &Docker,
    image: &str,
    mount_binary: bool,
) -> Result<String, RuntimeError> {
    let mounts = if mount_binary {
        let exe = std::env::current_exe().map_err(io_error(Path::new("/proc/self/exe")))?;
        vec![bind(&exe, Path::new(GUARD_BINARY), true)]
    } else {
        Vec::new()
    };
    let name = format!("paddock-guard-ranges-{}", crate::ids::random_hex(8));
    let body = ContainerCreateBody {
        image: Some(image.to_string()),
        user: Some("0:0".into()),
        entrypoint: Some(vec![GUARD_BINARY.to_string()]),
        cmd: Some(vec!["guard-ranges".to_string()]),
        host_config: Some(HostConfig {
            mounts: Some(mounts),
            network_mode: Some("host".into()),
            cap_drop: Some(vec!["ALL".into()]),
            cap_add: Some(vec!["NET_ADMIN".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            readonly_rootfs: Some(true),
            // gVisor's own network stack would take the route, not the host's.
            runtime: Some("runc".into()),
            pids_limit: Some(16),
            memory: Some(64 << 20),
            ..Default::default()
        }),
        ..Default::default()
    };
    create_named(daemon, docker, &name, body).await?;
    let outcome = async {
        start_named(docker, &name).await?;
        let options = WaitContainerOptionsBuilder::new()
            .condition("not-running")
            .build();
        let mut wait = docker.wait_container(&name, Some(options));
        match tokio::time::timeout(GUARD_DEADLINE, wait.next()).await {
            Ok(Some(Ok(done))) if done.status_code == 0 => Ok(()),
            Ok(Some(Ok(done))) => Err(exited(&name, done.status_code)),
            Ok(Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. }))) => {
                Err(exited(&name, code))
            }
            Ok(Some(Err(error))) => Err(RuntimeError::Docker {
                action: "wait for container",
                target: name.clone(),
                message: error.to_string(),
            }),
            Ok(None) => Err(exited(&name, -1)),
            Err(_) => Err(RuntimeError::DockerTimeout {
                action: "wait for container",
                target: name.clone(),
                after: GUARD_DEADLINE,
            }),
        }
    }
    .await;
    let printed = match outcome {
        Ok(()) => Ok(guard_output(docker, &name).await),
        Err(error) => Err(error),
    };
    let options = RemoveContainerOptionsBuilder::new().force(true).build();
    let removed = super::call(
        "remove container",
        &name,
        API_TIMEOUT,
        docker.remove_container(&name, Some(options)),
    )
    .await;
    printed.and_then(|printed| removed.map(|()| printed))
}

/// What the guard container printed on stdout (its first 64 KiB), before the deadline.
async fn guard_output(docker: &Docker, name: &str) -> String {
    let options = LogsOptionsBuilder::new().stdout(true).build();
    let mut logs = docker.logs(name, Some(options));
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + API_TIMEOUT;
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(deadline, logs.next()).await {
        if text.len() < 64 << 10 {
            text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
        }
    }
    text
}

fn exited(name: &str, code: i64) -> RuntimeError {
    RuntimeError::Docker {
        action: "guard the job range",
        target: name.to_string(),
        message: format!(
            "`paddock guard-ranges` exited {code}: adding the route needs NET_ADMIN in the host's network namespace"
        ),
    }
}
