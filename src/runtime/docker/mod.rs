//! The Docker runtime: one long-lived, hardened container per job, through bollard.
//!
//! The container is named `paddock-<install>-<job>` ([`container_name`]; `<install>` is the
//! install's tag, so two installs sharing one daemon can both have a job `x`), recorded in
//! the job, and carries two labels, `dev.paddock.job` and `dev.paddock.home`; code that stops
//! or removes a container checks both right before it acts, so two installs sharing one
//! daemon never touch each other's containers. Jobs recorded before names carried the
//! install keep their `paddock-<job>` container.
//!
//! Hardening (always on): a non-root user, `cap_drop: ALL`, `no-new-privileges`, a read-only
//! root filesystem with tmpfs `/tmp` and HOME, pids/memory/CPU limits with swap equal to
//! memory, no network unless the profile asks for `bridge`, an init process, Docker's default
//! seccomp profile, and never the Docker socket.
//!
//! Git inside the container works without the user's repository being mounted: the job's
//! private git dir is mounted read-write at [`CONTAINER_GIT_DIR`] (the worktree's `.git` link
//! names that path, which exists only inside), and the user's object store, which it borrows
//! through alternates, is mounted read-only at [`CONTAINER_OBJECTS`] (a neutral path: the
//! repository's own may pass through a directory the agent's uid cannot enter inside the
//! image, such as Debian's 0700 `/root`); stores that one borrows in turn stay at their own
//! paths, which its `info/alternates` names. The git dir's `config`, `hooks/`,
//! `info/` and `objects/info/alternates`, and the worktree's `.git` link, are mounted
//! read-only again over the writable mounts, so git keeps working and the agent cannot
//! re-point them. Nothing else of the user's repository (refs, config, hooks, other
//! worktrees) is in the container.
//!
//! Every call to the daemon has a deadline: the client's for request/response calls, and our
//! own for streams (exec output, builds), which the client's timeout does not cover. Which
//! daemon a call reaches (this host's, or an engine of `engines:`) is a [`Daemon`] value the
//! calling `DockerRuntime` passes down, never ambient state.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::{
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder, StopContainerOptionsBuilder,
};

pub mod archive;
mod beside;
mod body;
pub(crate) mod build_cell;
mod cache_volumes;
mod calls;
mod daemon;
mod egress;
mod exec;
pub mod export;
mod facts;
mod freeze;
pub use facts::misconfiguration;
mod image;
mod mounts;
mod pool;
mod port_relay;
mod ports;
mod ranges;
mod remote;
pub mod resident;
mod root_caps;
mod sandbox;
mod secrets;
mod sidecar;
mod stats;
mod users;
pub use users::helper_present as other_users_helper;

use body::{base_env, container_body, hardened_host_config};
pub use daemon::Daemon;
pub use ranges::Guard;
pub use sandbox::DockerRuntime;

use super::access::grant_agent_access;
use super::{RuntimeError, Sandbox, SandboxRole};
use crate::config::NetworkMode;
use crate::job::{JobId, JobRecord, RuntimeKind};
use crate::store::{JobStore, PaddockHome};
use calls::{call, create_named, is_not_found, is_unreachable, optional, start_named};

/// Marks the images paddock built (`agent`: its agent layer; `devcontainer-base`: a
/// repository's own build under it), beside the building install's [`LABEL_HOME`]: paddock
/// removes only images carrying both, its own.
pub const LABEL_IMAGE: &str = "dev.paddock.image";
pub const LABEL_JOB: &str = "dev.paddock.job";
pub const LABEL_HOME: &str = "dev.paddock.home";
// The sandbox layout every runtime shares, under the names this folder's code reads.
pub(crate) use crate::runtime::layout::{
    SANDBOX_GIT_DIR as CONTAINER_GIT_DIR, SANDBOX_HOME as CONTAINER_HOME,
    SANDBOX_OBJECTS as CONTAINER_OBJECTS, SANDBOX_OUTBOX as CONTAINER_OUTBOX, agent_user,
};
/// Marks the short-lived containers that run a sync of a stopped job.
pub const LABEL_ROLE: &str = "dev.paddock.role";

/// Deadline for one request/response call to the daemon.
const API_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline for the "is the daemon there" probe.
const PING_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a timed-out exec's output may still trickle in after the kill.
const AFTER_KILL: Duration = Duration::from_secs(1);
/// Deadline of an image build.
const BUILD_TIMEOUT: Duration = Duration::from_secs(1800);

/// The name of a new job's container: `paddock-<install>-<job>`. The one place a job
/// container's name is made; its network, egress sidecar and sync containers are named after
/// it.
pub fn container_name(home: &PaddockHome, id: &JobId) -> String {
    crate::runtime::layout::sandbox_name(home.tag(), id)
}

/// Registers runc and gVisor jobs, on this host and on remote engines; runc's runtime is
/// the machine's image engine.
pub(crate) fn register(registry: &mut crate::runtime::registration::Registry, home: &PaddockHome) {
    for kind in [RuntimeKind::Docker, RuntimeKind::Runsc] {
        registry.add(kind, std::sync::Arc::new(DockerRuntime::new(home, kind)));
        registry.add_to_engine(kind);
        registry.add_remote(kind, |home, kind, engine, spec| {
            std::sync::Arc::new(DockerRuntime::on(
                home,
                kind,
                Daemon::remote(engine, spec.clone()),
            ))
        });
    }
}

/// The name of the job's container: the recorded one, else (a record from before names
/// carried the install) the old `paddock-<job>`.
fn job_container(record: &JobRecord) -> String {
    container_of(record)
}

/// The name of the job's container (for the file API of a remote job).
pub fn container_of(record: &JobRecord) -> String {
    record
        .container_name
        .clone()
        .unwrap_or_else(|| format!("paddock-{}", record.id))
}

/// The first error of several steps that were each tried.
fn first_error(
    results: impl IntoIterator<Item = Result<(), RuntimeError>>,
) -> Result<(), RuntimeError> {
    results.into_iter().find(Result::is_err).unwrap_or(Ok(()))
}

/// Host tasks a sandbox needs beyond the job's own processes. Under gVisor the host's pids
/// cgroup counts the threads of gVisor's kernel and file proxy (dozens, more with each
/// mount), not the job's processes, which gVisor runs itself; without headroom the sandbox
/// cannot start under a small limit.
const GVISOR_PIDS_HEADROOM: i64 = 256;

fn pids_headroom(runtime: RuntimeKind) -> i64 {
    if runtime == RuntimeKind::Runsc {
        GVISOR_PIDS_HEADROOM
    } else {
        0
    }
}

/// Checks that the daemon answers, the image exists and (for runsc) the runtime is
/// registered so that jobs keep their limits and `network`. Never pulls.
pub async fn check_ready(
    daemon: &Daemon,
    kind: RuntimeKind,
    image: &str,
    network: NetworkMode,
) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    call("ping", "daemon", PING_TIMEOUT, docker.ping())
        .await
        .map_err(|e| match e {
            RuntimeError::DockerTimeout { .. } => RuntimeError::DockerUnavailable {
                message: "the daemon did not answer within 3s".into(),
            },
            other => other,
        })?;
    match docker.inspect_image(image).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {
            return Err(RuntimeError::ImageMissing {
                image: image.to_string(),
            });
        }
        Err(e) => {
            return Err(RuntimeError::Docker {
                action: "inspect image",
                target: image.to_string(),
                message: e.to_string(),
            });
        }
    }
    if network == NetworkMode::Allowlist && daemon.is_remote() {
        remote::proxy_image::check_proxy_image(&docker).await?;
    }
    if kind == RuntimeKind::Runsc {
        let runtimes = registered_runtimes(&docker).await?;
        let Some(args) = runtimes.get("runsc") else {
            return Err(RuntimeError::OciRuntimeMissing {
                runtime: "runsc".into(),
            });
        };
        if let Some(error) = misconfiguration("runsc", args, Some(network)) {
            return Err(error);
        }
    }
    Ok(())
}

/// The OCI runtimes the daemon has registered, with their arguments.
pub async fn registered_runtimes(
    docker: &Docker,
) -> Result<std::collections::BTreeMap<String, Vec<String>>, RuntimeError> {
    let info = call("info", "daemon", API_TIMEOUT, docker.info()).await?;
    Ok(info
        .runtimes
        .unwrap_or_default()
        .into_iter()
        .map(|(name, runtime)| (name, runtime.runtime_args.unwrap_or_default()))
        .collect())
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> RuntimeError + '_ {
    move |source| RuntimeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Gives the job's files to the agent's uid (see [`grant_agent_access`]), then creates and
/// starts the job's first container; returns its id.
pub async fn create_first_container(
    daemon: &Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<String, RuntimeError> {
    // A remote job's files are in volumes its fill gave the agent already.
    if daemon.is_remote() {
        return Ok(create_job_container(daemon, home, record).await?.0);
    }
    // A walk of the job's trees and the shared cache entries (which jobs write): on a
    // blocking thread.
    let granted = record.clone();
    tokio::task::spawn_blocking(move || {
        grant_agent_access(&granted, agent_user(granted.limits.uid).0)
    })
    .await
    .expect("granting access does not panic")?;
    Ok(create_job_container(daemon, home, record).await?.0)
}

/// Creates and starts the job's container; returns its id and whether its main process is
/// the resident exec server.
async fn create_job_container(
    daemon: &Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(String, bool), RuntimeError> {
    let docker = daemon.connect()?;
    let sealed = egress::ensure(daemon, &docker, home, record).await?;
    let name = job_container(record);
    let mut body = container_body(daemon, home, record, sealed.as_ref())?;
    let exec_server = !daemon.is_remote() && resident::apply(home, &mut body);
    if !daemon.is_remote() {
        root_caps::add_root_caps(home, record, &mut body, exec_server);
    }
    let id = create_named(daemon, &docker, &name, body).await?;
    super::failpoint("container-create")?;
    start_named(&docker, &name).await?;
    super::failpoint("container-start")?;
    port_relay::restart(daemon, &docker, home, record).await?;
    Ok((id, exec_server))
}

/// What the daemon says about a job's container.
#[derive(Debug, Clone)]
pub struct ContainerStatus {
    pub id: String,
    pub running: bool,
    /// Frozen by a pause (Docker counts a paused container as running too).
    pub paused: bool,
    pub exit_code: Option<i64>,
    pub oom_killed: bool,
    /// The image it runs (`sha256:...`), when the daemon says.
    pub image: Option<String>,
    /// Whether its main process is the resident exec server (`resident::LABEL_SERVER`).
    pub exec_server: bool,
    /// Its main process's pid as the engine's host sees it, while it runs.
    pub pid: Option<i64>,
}

/// Inspects the job's container; `None` when it does not exist. Refuses a container that
/// does not carry both of this install's labels.
async fn inspect_ours(
    docker: &Docker,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<Option<ContainerStatus>, RuntimeError> {
    inspect_named(
        docker,
        home,
        &job_container(record),
        record.container_label(),
    )
    .await
}

/// Inspects the container `name`; `None` when it does not exist. Refuses one that does not
/// carry both this install's home label and `job` as its job label.
async fn inspect_named(
    docker: &Docker,
    home: &PaddockHome,
    name: &str,
    job: &str,
) -> Result<Option<ContainerStatus>, RuntimeError> {
    let name = name.to_string();
    let info = match tokio::time::timeout(API_TIMEOUT, docker.inspect_container(&name, None)).await
    {
        Ok(Ok(info)) => info,
        Ok(Err(e)) if is_not_found(&e) => return Ok(None),
        Ok(Err(e)) if is_unreachable(&e) => {
            return Err(RuntimeError::DockerUnavailable {
                message: e.to_string(),
            });
        }
        Ok(Err(e)) => {
            return Err(RuntimeError::Docker {
                action: "inspect container",
                target: name,
                message: e.to_string(),
            });
        }
        Err(_) => {
            return Err(RuntimeError::DockerTimeout {
                action: "inspect container",
                target: name,
                after: API_TIMEOUT,
            });
        }
    };
    let labels = info
        .config
        .as_ref()
        .and_then(|c| c.labels.clone())
        .unwrap_or_default();
    if labels.get(LABEL_JOB).map(String::as_str) != Some(job)
        || labels.get(LABEL_HOME).map(String::as_str) != Some(home.id())
    {
        return Err(RuntimeError::NotOurContainer { name });
    }
    let state = info.state.unwrap_or_default();
    Ok(Some(ContainerStatus {
        id: info.id.unwrap_or_default(),
        running: state.running.unwrap_or(false),
        paused: state.paused.unwrap_or(false),
        exit_code: state.exit_code,
        oom_killed: state.oom_killed.unwrap_or(false),
        image: info.image.filter(|image| !image.is_empty()),
        exec_server: labels.contains_key(resident::LABEL_SERVER),
        pid: state.pid.filter(|pid| *pid > 0),
    }))
}

/// The id of the image container `id` runs (for an exec's `meta`); `None` when the daemon
/// does not say within the API deadline: the meta names what it knows, the exec stands.
pub(super) async fn image_of(daemon: &Daemon, id: &str) -> Option<String> {
    let docker = daemon.connect().ok()?;
    let info = tokio::time::timeout(API_TIMEOUT, docker.inspect_container(id, None))
        .await
        .ok()?
        .ok()?;
    info.image.filter(|image| !image.is_empty())
}

/// Makes sure the job's container runs: starts it when stopped, recreates it (same mounts
/// and limits) when it is gone. Returns the container id.
pub async fn ensure_running(
    daemon: &Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<String, RuntimeError> {
    Ok(ensure_running_status(daemon, home, record).await?.id)
}

/// The job's running container, as [`ensure_running`] makes sure of it.
#[derive(Debug, Clone)]
pub struct Running {
    pub id: String,
    /// Its image's id, when the daemon said (a container made just now: not asked).
    pub image: Option<String>,
    /// Whether the resident exec server is its main process.
    pub exec_server: bool,
}

/// [`ensure_running`], with what the exec path needs to know of the container.
pub async fn ensure_running_status(
    daemon: &Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<Running, RuntimeError> {
    let docker = daemon.connect()?;
    let name = job_container(record);
    let status = inspect_ours(&docker, home, record).await?;
    if !status.as_ref().is_some_and(|status| status.running) {
        remount_disk(home, record)?;
    }
    match status {
        Some(status) if status.running => Ok(Running {
            id: status.id,
            image: status.image,
            exec_server: status.exec_server,
        }),
        Some(_)
            if !daemon.is_remote()
                && record
                    .pool_slot()
                    .is_some_and(|slot| !slot_still_mounted(home, slot)) =>
        {
            // A stopped warm container gets the job's files through its slot's host mounts,
            // which a reboot does not keep: it is replaced by one that mounts them itself.
            remove_labelled_container(daemon, home, &name, record.container_label()).await?;
            create_job_container(daemon, home, record).await.map(made)
        }
        Some(status) => {
            // A stopped job (a stop, a daemon restart) has a stopped proxy too.
            egress::ensure(daemon, &docker, home, record).await?;
            match start_named(&docker, &name).await {
                Ok(()) => {
                    // A new network namespace: the ports' relay container joins it.
                    port_relay::restart(daemon, &docker, home, record).await?;
                    Ok(Running {
                        id: status.id,
                        image: status.image,
                        exec_server: status.exec_server,
                    })
                }
                Err(error) => {
                    // A container that cannot start (say a mount source moved) is replaced.
                    tracing::warn!(job = %record.id, %error, "recreating a container that would not start");
                    remove_labelled_container(daemon, home, &name, record.container_label())
                        .await?;
                    create_job_container(daemon, home, record).await.map(made)
                }
            }
        }
        None => create_job_container(daemon, home, record).await.map(made),
    }
}

/// A container made just now: `(id, whether it runs the exec server)`.
fn made((id, exec_server): (String, bool)) -> Running {
    Running {
        id,
        image: None,
        exec_server,
    }
}

/// Mounts the job's disk again when its git dir lives there and a reboot left only the
/// image (the container must not start on the empty mount point).
fn remount_disk(home: &PaddockHome, record: &JobRecord) -> Result<(), RuntimeError> {
    let job_dir = home.job_dir(&record.id);
    let on_disk = record
        .git_dir
        .as_ref()
        .is_some_and(|git_dir| git_dir.starts_with(crate::disk::layers_dir(&job_dir)));
    if on_disk
        && crate::disk::remount(&job_dir).map_err(|e| RuntimeError::Io {
            path: job_dir.clone(),
            source: std::io::Error::other(e.to_string()),
        })?
    {
        tracing::info!(job = %record.id, "mounted the job's disk again");
    }
    Ok(())
}

/// Whether a warm job's slot still has the job's checkout mounted where its container
/// sees it (a stop or a daemon restart keeps it; a reboot does not).
fn slot_still_mounted(home: &PaddockHome, slot: &str) -> bool {
    let workspace = crate::pool::PoolSlots::of(home).mnt(slot).join("workspace");
    crate::overlay::mount_points_under(&workspace).contains(&workspace)
}

/// Records the container's exit code and OOM flag in the job, then stops the container.
pub async fn stop_job_container(
    daemon: &Daemon,
    home: &PaddockHome,
    store: &JobStore,
    record: JobRecord,
) -> Result<JobRecord, RuntimeError> {
    let docker = daemon.connect()?;
    let Some(status) = inspect_ours(&docker, home, &record).await? else {
        return Ok(record);
    };
    let mut record = record;
    if !status.running && (status.oom_killed || record.exit_code.is_none()) {
        let (exit_code, oom) = (status.exit_code, status.oom_killed);
        if let Ok((updated, ())) = store.update(&record.id, |r| {
            r.exit_code = r.exit_code.or(exit_code);
            r.oom_killed |= oom;
        }) {
            record = updated;
        }
    }
    if status.running {
        stop_container(&docker, &job_container(&record), record.limits.grace.0).await?;
    }
    Ok(record)
}

async fn stop_container(docker: &Docker, name: &str, grace: Duration) -> Result<(), RuntimeError> {
    let secs = i32::try_from(grace.as_secs()).unwrap_or(i32::MAX);
    let options = StopContainerOptionsBuilder::new().t(secs).build();
    // The client's timeout does not cover a long grace: give the call its own deadline.
    call(
        "stop container",
        name,
        grace + API_TIMEOUT,
        docker.stop_container(name, Some(options)),
    )
    .await
}

/// `paddock stop`: stops the job's container (SIGTERM, `grace`, then SIGKILL).
pub async fn stop_job(
    daemon: &Daemon,
    home: &PaddockHome,
    record: &JobRecord,
    grace: Duration,
) -> Result<bool, RuntimeError> {
    let docker = daemon.connect()?;
    match inspect_ours(&docker, home, record).await? {
        Some(status) if status.running => {
            stop_container(&docker, &job_container(record), grace).await?;
            // Its relay container sits in a namespace that is gone; the next start makes one.
            port_relay::remove(daemon, home, record).await?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Removes the job's container and its egress sidecar and network, those that exist and
/// are ours; each is tried even when another fails.
pub async fn remove_job_container(
    daemon: &Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    let name = job_container(record);
    if daemon.is_remote() && egress::has_sealed_network(daemon, record) {
        // The proxy's decisions outlive the job on the host, as a local job's do.
        if let Err(error) = remote::egress::pull_log(daemon, home, record).await {
            tracing::warn!(job = %record.id, %error, "cannot copy the egress log from the engine");
        }
    }
    // A remote job's volumes are its files: its `Place` removes them (`remove_files`).
    first_error([
        remove_labelled_container(daemon, home, &name, record.container_label()).await,
        remove_egress(daemon, home, &name, record.id.as_str()).await,
        port_relay::remove(daemon, home, record).await,
    ])
}

/// Removes the egress sidecar and network named after the job container `base`, if they
/// exist and are `job`'s of this install.
pub async fn remove_egress(
    daemon: &Daemon,
    home: &PaddockHome,
    base: &str,
    job: &str,
) -> Result<(), RuntimeError> {
    egress::remove(daemon, &daemon.connect()?, home, base, job).await
}

/// Removes the container `name` if it exists and carries this install's labels with `job`
/// as its job (checked right before the removal).
pub async fn remove_labelled_container(
    daemon: &Daemon,
    home: &PaddockHome,
    name: &str,
    job: &str,
) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    if inspect_named(&docker, home, name, job).await?.is_none() {
        return Ok(());
    }
    let name = name.to_string();
    let options = RemoveContainerOptionsBuilder::new()
        .force(true)
        .v(true)
        .build();
    match tokio::time::timeout(API_TIMEOUT, docker.remove_container(&name, Some(options))).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) if is_not_found(&e) => Ok(()),
        Ok(Err(e)) => Err(RuntimeError::Docker {
            action: "remove container",
            target: name,
            message: e.to_string(),
        }),
        Err(_) => Err(RuntimeError::DockerTimeout {
            action: "remove container",
            target: name,
            after: API_TIMEOUT,
        }),
    }
}

/// Every container labelled with this install's home id.
pub async fn list_job_containers(
    daemon: &Daemon,
    home: &PaddockHome,
) -> Result<Vec<Sandbox>, RuntimeError> {
    let docker = daemon.connect()?;
    let filters = HashMap::from([("label", vec![format!("{LABEL_HOME}={}", home.id())])]);
    let options = ListContainersOptionsBuilder::new()
        .all(true)
        .filters(&filters)
        .build();
    let containers = call(
        "list containers",
        "daemon",
        API_TIMEOUT,
        docker.list_containers(Some(options)),
    )
    .await?;
    Ok(containers
        .into_iter()
        .filter_map(|c| {
            let labels = c.labels.unwrap_or_default();
            if labels.get(LABEL_HOME).map(String::as_str) != Some(home.id()) {
                return None;
            }
            Some(Sandbox {
                name: c
                    .names
                    .and_then(|n| n.first().cloned())
                    .unwrap_or_default()
                    .trim_start_matches('/')
                    .to_string(),
                job: labels.get(LABEL_JOB).cloned()?,
                running: c.state.is_some_and(|s| s.to_string() == "running"),
                role: match labels.get(LABEL_ROLE).map(String::as_str) {
                    Some("sync" | "setup") => SandboxRole::Sync,
                    // A remote job's port relay goes, as a sidecar does, with its job.
                    Some("egress" | port_relay::ROLE) => SandboxRole::Egress,
                    Some("pool") => SandboxRole::Pool,
                    _ => SandboxRole::Job,
                },
                created: c
                    .created
                    .and_then(|t| chrono::DateTime::from_timestamp(t, 0)),
                volumes: (c.mounts.unwrap_or_default().into_iter())
                    .filter_map(|mount| mount.name)
                    .collect(),
            })
        })
        .collect())
}
