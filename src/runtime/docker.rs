//! The Docker runtime: one long-lived, hardened container per job, through bollard.
//!
//! The container is named `paddock-<job>` and carries two labels, `dev.paddock.job` and
//! `dev.paddock.home`; code that stops or removes a container checks both right before it
//! acts, so two installs sharing one daemon never touch each other's containers.
//!
//! Hardening (always on): a non-root user, `cap_drop: ALL`, `no-new-privileges`, a read-only
//! root filesystem with tmpfs `/tmp` and HOME, pids/memory/CPU limits with swap equal to
//! memory, no network unless the profile asks for `bridge`, an init process, Docker's default
//! seccomp profile, and never the Docker socket.
//!
//! Git inside the container works without the user's repository being mounted: the job's
//! private git dir is mounted read-write at [`CONTAINER_GIT_DIR`] (the worktree's `.git` link
//! names that path, which exists only inside), and the user's object store, which it borrows
//! through alternates, is mounted read-only at its own path. The git dir's `config`, `hooks/`,
//! `info/` and `objects/info/alternates`, and the worktree's `.git` link, are mounted
//! read-only again over the writable mounts, so git keeps working and the agent cannot
//! re-point them. Nothing else of the user's repository (refs, config, hooks, other
//! worktrees) is in the container.
//!
//! Every call to the daemon has a deadline: the client's for request/response calls, and our
//! own for streams (exec output, builds), which the client's timeout does not cover.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, ExecConfig, HostConfig, Mount, MountTypeEnum};
use bollard::query_parameters::{
    BuildImageOptionsBuilder, CreateContainerOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder, StopContainerOptionsBuilder,
};
use futures_util::StreamExt;
use tokio::time::sleep_until;

use super::RuntimeError;
use super::exec::{CappedOutput, ExecRequest, ExecResult, OutputSink, StreamKind};
use crate::cache::Strategy;
use crate::config::{KillPolicy, NetworkMode};
use crate::job::{JobId, JobRecord, RuntimeKind, random_hex};
use crate::store::{JobStore, PaddockHome};

pub const LABEL_JOB: &str = "dev.paddock.job";
pub const LABEL_HOME: &str = "dev.paddock.home";
/// Where HOME is inside job containers (a tmpfs).
pub const CONTAINER_HOME: &str = "/home/agent";
/// Where the job's private git dir is inside its container.
pub const CONTAINER_GIT_DIR: &str = "/paddock/git";
/// Where the job's outbox is inside its container.
pub const CONTAINER_OUTBOX: &str = "/paddock/outbox";
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

/// The Dockerfile and entrypoint built into the binary, so `paddock image build` works from
/// anywhere.
pub const DOCKERFILE: &str = include_str!("../../Dockerfile.agent");
pub const ENTRYPOINT: &str = include_str!("../../entrypoint.sh");

pub fn container_name(id: &JobId) -> String {
    format!("paddock-{id}")
}

/// A client for the local daemon (`DOCKER_HOST` or the default socket).
pub fn connect() -> Result<Docker, RuntimeError> {
    Docker::connect_with_local_defaults()
        .map(|docker| docker.with_timeout(API_TIMEOUT))
        .map_err(|e| RuntimeError::DockerUnavailable {
            message: e.to_string(),
        })
}

fn is_not_found(error: &bollard::errors::Error) -> bool {
    matches!(
        error,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

fn is_unreachable(error: &bollard::errors::Error) -> bool {
    use bollard::errors::Error as E;
    matches!(
        error,
        E::HyperResponseError { .. }
            | E::IOError { .. }
            | E::RequestTimeoutError
            | E::SocketNotFoundError(_)
    )
}

/// Awaits one daemon call with a deadline and turns its failure into a [`RuntimeError`] that
/// names the action and the target.
async fn call<T>(
    action: &'static str,
    target: &str,
    deadline: Duration,
    future: impl Future<Output = Result<T, bollard::errors::Error>>,
) -> Result<T, RuntimeError> {
    match tokio::time::timeout(deadline, future).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) if is_unreachable(&error) => Err(RuntimeError::DockerUnavailable {
            message: format!("{action} `{target}`: {error}"),
        }),
        Ok(Err(error)) => Err(RuntimeError::Docker {
            action,
            target: target.to_string(),
            message: error.to_string(),
        }),
        Err(_) => Err(RuntimeError::DockerTimeout {
            action,
            target: target.to_string(),
            after: deadline,
        }),
    }
}

/// Checks that the daemon answers, the image exists and (for runsc) the runtime is
/// registered. Never pulls.
pub async fn check_ready(kind: RuntimeKind, image: &str) -> Result<(), RuntimeError> {
    let docker = connect()?;
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
    if kind == RuntimeKind::Runsc {
        let runtimes = registered_runtimes(&docker).await?;
        if !runtimes.iter().any(|r| r == "runsc") {
            return Err(RuntimeError::OciRuntimeMissing {
                runtime: "runsc".into(),
            });
        }
    }
    Ok(())
}

/// The OCI runtimes the daemon has registered.
pub async fn registered_runtimes(docker: &Docker) -> Result<Vec<String>, RuntimeError> {
    let info = call("info", "daemon", API_TIMEOUT, docker.info()).await?;
    let mut names: Vec<String> = info.runtimes.unwrap_or_default().into_keys().collect();
    names.sort();
    Ok(names)
}

/// The uid:gid the agent runs as: the host user's when paddock is not root, else the
/// profile's unprivileged uid.
pub fn agent_user(profile_uid: u32) -> (u32, u32) {
    // SAFETY: geteuid/getegid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    if uid == 0 {
        (profile_uid, profile_uid)
    } else {
        (uid, gid)
    }
}

fn bind(source: &Path, target: &Path, read_only: bool) -> Mount {
    Mount {
        target: Some(target.display().to_string()),
        source: Some(source.display().to_string()),
        typ: Some(MountTypeEnum::BIND),
        read_only: Some(read_only),
        ..Default::default()
    }
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> RuntimeError + '_ {
    move |source| RuntimeError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The mounts of a job container (see the module docs for why each one is there).
fn job_mounts(record: &JobRecord) -> Result<Vec<Mount>, RuntimeError> {
    let git_dir = record.git_dir.as_ref().ok_or_else(|| RuntimeError::Io {
        path: record.worktree.clone(),
        source: std::io::Error::other("the job has no git dir yet"),
    })?;
    let workspace = Path::new(&record.limits.workspace_dir);
    let inside_git = Path::new(CONTAINER_GIT_DIR);
    let mut mounts = vec![
        bind(&record.worktree, workspace, false),
        bind(&record.worktree.join(".git"), &workspace.join(".git"), true),
        bind(git_dir, inside_git, false),
    ];
    for name in crate::git::jobdir::PROTECTED {
        mounts.push(bind(&git_dir.join(name), &inside_git.join(name), true));
    }
    if let Some(outbox) = outbox_of(record) {
        mounts.push(bind(&outbox, Path::new(CONTAINER_OUTBOX), false));
    }
    for objects in crate::git::object_dirs(&record.git_common_dir) {
        mounts.push(bind(&objects, &objects, true));
    }
    // Caches: a symlinked entry is mounted at its own path so the link resolves inside as
    // outside; an env entry likewise; a mount entry at its place in the workspace.
    for cache in &record.caches {
        match (cache.strategy, &cache.path) {
            (Strategy::Symlink | Strategy::Env, _) => {
                mounts.push(bind(&cache.entry, &cache.entry, false));
            }
            (Strategy::Mount, Some(path)) => {
                mounts.push(bind(&cache.entry, &workspace.join(path), cache.readonly));
            }
            _ => {}
        }
    }
    Ok(mounts)
}

/// The job's outbox on the host (beside its git dir), when it has one.
fn outbox_of(record: &JobRecord) -> Option<PathBuf> {
    let outbox = record.git_dir.as_ref()?.parent()?.join("outbox");
    outbox.is_dir().then_some(outbox)
}

/// When paddock runs as root the agent runs as an unprivileged uid: give that uid the job's
/// worktree and private git dir (except the parts that stay read-only and paddock's) and
/// the shared cache entries it uses. Ownership rather than ACLs, because gVisor checks mode
/// bits and ignores ACLs. Runs once, when the job's first container is made and before any
/// agent has run, so no agent can race the walk; nothing of the user's repository is touched.
fn grant_agent_access(record: &JobRecord, uid: u32) -> Result<(), RuntimeError> {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    let git_dir = record.git_dir.as_ref().ok_or_else(|| RuntimeError::Io {
        path: record.worktree.clone(),
        source: std::io::Error::other("the job has no git dir yet"),
    })?;
    // The checkout itself was written by the agent's uid (see `JobGitDir::checkout`); what
    // paddock added to it afterwards (cache copies and links) and its git dir were not.
    let mut paths = vec![record.worktree.clone()];
    for cache in &record.caches {
        if let Some(path) = &cache.path {
            // Directories paddock made on the way to a cache's place are its, too.
            for parent in Path::new(path).ancestors().skip(1) {
                let dir = record.worktree.join(parent);
                if dir != record.worktree && !paths.contains(&dir) {
                    paths.push(dir);
                }
            }
            let placed = record.worktree.join(path);
            if std::fs::symlink_metadata(&placed).is_ok() {
                collect_tree(&placed, false, &mut paths)?;
            }
        }
    }
    collect_tree(git_dir, false, &mut paths)?;
    if let Some(outbox) = outbox_of(record) {
        paths.push(outbox);
    }
    let kept: Vec<PathBuf> = crate::git::jobdir::PROTECTED
        .iter()
        .map(|name| git_dir.join(name))
        .chain([record.worktree.join(".git")])
        .collect();
    paths.retain(|p| !kept.iter().any(|k| p.starts_with(k)));
    for cache in &record.caches {
        let shared = matches!(
            cache.strategy,
            Strategy::Symlink | Strategy::Env | Strategy::Mount
        );
        let owner = std::os::unix::fs::MetadataExt::uid(
            &std::fs::symlink_metadata(&cache.entry).map_err(io_error(&cache.entry))?,
        );
        if shared && owner != uid {
            collect_tree(&cache.entry, false, &mut paths)?;
        }
    }
    for path in paths {
        std::os::unix::fs::lchown(&path, Some(uid), Some(uid)).map_err(io_error(&path))?;
    }
    Ok(())
}

/// Paths under `root` (itself included): directories only, or everything.
fn collect_tree(root: &Path, dirs_only: bool, out: &mut Vec<PathBuf>) -> Result<(), RuntimeError> {
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).map_err(io_error(&path))?;
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(io_error(&path))? {
                stack.push(entry.map_err(io_error(&path))?.path());
            }
            out.push(path);
        } else if !dirs_only && meta.is_file() {
            out.push(path);
        }
    }
    Ok(())
}

/// The container's configuration, derived from the record alone so a container can be
/// recreated identically.
fn container_body(
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<ContainerCreateBody, RuntimeError> {
    let limits = &record.limits;
    let (uid, gid) = agent_user(limits.uid);
    let mut env = vec![
        format!("HOME={CONTAINER_HOME}"),
        format!("PADDOCK_JOB_ID={}", record.id),
        format!("PADDOCK_WORKSPACE={}", limits.workspace_dir),
    ];
    // Git's identity and settings are part of the container, so the first exec has them
    // (no entrypoint script that could race it).
    env.extend(
        super::agent_git_env(record)
            .into_iter()
            .map(|(k, v)| format!("{k}={v}")),
    );
    env.extend(
        crate::cache::env_vars(&record.caches)
            .iter()
            .map(|(k, v)| format!("{k}={v}")),
    );
    env.extend(limits.env.iter().map(|(k, v)| format!("{k}={v}")));
    let tmpfs_opts = |size: &str| format!("rw,nosuid,nodev,size={size},mode=1777");
    let memory = i64::try_from(limits.memory.0).unwrap_or(i64::MAX);
    let host_config = HostConfig {
        mounts: Some(job_mounts(record)?),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        readonly_rootfs: Some(true),
        tmpfs: Some(HashMap::from([
            ("/tmp".to_string(), tmpfs_opts("512m")),
            (CONTAINER_HOME.to_string(), tmpfs_opts("256m")),
        ])),
        pids_limit: Some(i64::from(limits.pids)),
        memory: Some(memory),
        memory_swap: Some(memory),
        nano_cpus: Some(limits.cpus.nano_cpus()),
        network_mode: Some(
            match limits.network {
                NetworkMode::None => "none",
                NetworkMode::Bridge => "bridge",
            }
            .into(),
        ),
        init: Some(true),
        runtime: Some(
            match record.runtime {
                RuntimeKind::Runsc => "runsc",
                _ => "runc",
            }
            .into(),
        ),
        ..Default::default()
    };
    Ok(ContainerCreateBody {
        image: Some(limits.image.clone()),
        user: Some(format!("{uid}:{gid}")),
        working_dir: Some(limits.workspace_dir.clone()),
        env: Some(env),
        labels: Some(HashMap::from([
            (LABEL_JOB.to_string(), record.id.to_string()),
            (LABEL_HOME.to_string(), home.id().to_string()),
        ])),
        stop_signal: Some("SIGTERM".into()),
        host_config: Some(host_config),
        ..Default::default()
    })
}

/// Gives the job's files to the agent's uid (see [`grant_agent_access`]), then creates and
/// starts the job's first container; returns its id.
pub async fn create_first_container(
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<String, RuntimeError> {
    grant_agent_access(record, agent_user(record.limits.uid).0)?;
    create_job_container(home, record).await
}

/// Creates and starts the job's container; returns its id.
async fn create_job_container(
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<String, RuntimeError> {
    let docker = connect()?;
    let name = container_name(&record.id);
    let body = container_body(home, record)?;
    let options = CreateContainerOptionsBuilder::new().name(&name).build();
    let created = call(
        "create container",
        &name,
        API_TIMEOUT,
        docker.create_container(Some(options), body),
    )
    .await?;
    call(
        "start container",
        &name,
        API_TIMEOUT,
        docker.start_container(&name, None),
    )
    .await?;
    Ok(created.id)
}

/// What the daemon says about a job's container.
#[derive(Debug, Clone)]
pub struct ContainerStatus {
    pub id: String,
    pub running: bool,
    pub exit_code: Option<i64>,
    pub oom_killed: bool,
}

/// Inspects `paddock-<job>`; `None` when it does not exist. Refuses a container that does
/// not carry both of this install's labels.
async fn inspect_ours(
    docker: &Docker,
    home: &PaddockHome,
    id: &JobId,
) -> Result<Option<ContainerStatus>, RuntimeError> {
    inspect_named(docker, home, &container_name(id), id.as_str()).await
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
        exit_code: state.exit_code,
        oom_killed: state.oom_killed.unwrap_or(false),
    }))
}

/// Makes sure the job's container runs: starts it when stopped, recreates it (same mounts
/// and limits) when it is gone. Returns the container id.
pub async fn ensure_running(
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<String, RuntimeError> {
    let docker = connect()?;
    let name = container_name(&record.id);
    match inspect_ours(&docker, home, &record.id).await? {
        Some(status) if status.running => Ok(status.id),
        Some(status) => {
            let started = call(
                "start container",
                &name,
                API_TIMEOUT,
                docker.start_container(&name, None),
            )
            .await;
            match started {
                Ok(()) => Ok(status.id),
                Err(error) => {
                    // A container that cannot start (say a mount source moved) is replaced.
                    tracing::warn!(job = %record.id, %error, "recreating a container that would not start");
                    remove_job_container(home, &record.id).await?;
                    create_job_container(home, record).await
                }
            }
        }
        None => create_job_container(home, record).await,
    }
}

/// Records the container's exit code and OOM flag in the job, then stops the container.
pub async fn stop_job_container(
    home: &PaddockHome,
    store: &JobStore,
    record: JobRecord,
) -> Result<JobRecord, RuntimeError> {
    let docker = connect()?;
    let Some(status) = inspect_ours(&docker, home, &record.id).await? else {
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
        stop_container(&docker, &record.id, record.limits.grace.0).await?;
    }
    Ok(record)
}

async fn stop_container(docker: &Docker, id: &JobId, grace: Duration) -> Result<(), RuntimeError> {
    let name = container_name(id);
    let secs = i32::try_from(grace.as_secs()).unwrap_or(i32::MAX);
    let options = StopContainerOptionsBuilder::new().t(secs).build();
    // The client's timeout does not cover a long grace: give the call its own deadline.
    call(
        "stop container",
        &name,
        grace + API_TIMEOUT,
        docker.stop_container(&name, Some(options)),
    )
    .await
}

/// `paddock stop`: stops the job's container (SIGTERM, `grace`, then SIGKILL).
pub async fn stop_job(
    home: &PaddockHome,
    id: &JobId,
    grace: Duration,
) -> Result<bool, RuntimeError> {
    let docker = connect()?;
    match inspect_ours(&docker, home, id).await? {
        Some(status) if status.running => {
            stop_container(&docker, id, grace).await?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// Removes the job's container if it exists and is ours.
pub async fn remove_job_container(home: &PaddockHome, id: &JobId) -> Result<(), RuntimeError> {
    remove_labelled_container(home, &container_name(id), id.as_str()).await
}

/// Removes the container `name` if it exists and carries this install's labels with `job`
/// as its job (checked right before the removal).
pub async fn remove_labelled_container(
    home: &PaddockHome,
    name: &str,
    job: &str,
) -> Result<(), RuntimeError> {
    let docker = connect()?;
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

/// A container that carries this install's labels.
#[derive(Debug, Clone)]
pub struct LabelledContainer {
    pub name: String,
    pub job: String,
    pub running: bool,
    /// A short-lived container running a sync of a stopped job, not the job's own.
    pub sync: bool,
    pub created: Option<chrono::DateTime<chrono::Utc>>,
}

/// Every container labelled with this install's home id.
pub async fn list_job_containers(
    home: &PaddockHome,
) -> Result<Vec<LabelledContainer>, RuntimeError> {
    let docker = connect()?;
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
            Some(LabelledContainer {
                name: c
                    .names
                    .and_then(|n| n.first().cloned())
                    .unwrap_or_default()
                    .trim_start_matches('/')
                    .to_string(),
                job: labels.get(LABEL_JOB).cloned()?,
                running: c.state.map(|s| s.to_string() == "running").unwrap_or(false),
                sync: labels.get(LABEL_ROLE).map(String::as_str) == Some("sync"),
                created: c
                    .created
                    .and_then(|t| chrono::DateTime::from_timestamp(t, 0)),
            })
        })
        .collect())
}

/// Runs a short helper command in the container (signals, counters); its output as text.
async fn helper_exec(docker: &Docker, name: &str, script: &str) -> Result<String, RuntimeError> {
    let config = ExecConfig {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(vec!["sh".into(), "-c".into(), script.into()]),
        ..Default::default()
    };
    let created = call(
        "create exec",
        name,
        API_TIMEOUT,
        docker.create_exec(name, config),
    )
    .await?;
    let started = call(
        "start exec",
        name,
        API_TIMEOUT,
        docker.start_exec(&created.id, None::<StartExecOptions>),
    )
    .await?;
    let mut text = String::new();
    if let StartExecResults::Attached { mut output, .. } = started {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while let Ok(Some(Ok(chunk))) = tokio::time::timeout_at(deadline, output.next()).await {
            text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
        }
    }
    Ok(text)
}

/// The container cgroup's OOM-kill counter (cgroup v1 `memory.oom_control`, v2
/// `memory.events`), read from inside the container.
async fn oom_kill_count(docker: &Docker, name: &str) -> Option<u64> {
    let text = helper_exec(
        docker,
        name,
        "cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || cat /sys/fs/cgroup/memory.events 2>/dev/null",
    )
    .await
    .ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// Runs one command in the job's container. The command is started through a tiny shell
/// wrapper that writes its pid (which is also its process group) to /tmp, so a timed-out
/// command can be signalled as a group from inside the container: Docker has no "kill exec",
/// and this works the same under runc and gVisor.
///
/// Returns the result and the container id (which changes when the container was recreated).
pub async fn exec(
    home: &PaddockHome,
    record: &JobRecord,
    request: &ExecRequest,
    sink: &mut dyn OutputSink,
) -> Result<(ExecResult, String, Option<u64>), RuntimeError> {
    if request.cmd.is_empty() {
        return Err(RuntimeError::EmptyCommand);
    }
    let container_id = ensure_running(home, record).await?;
    let (result, oom_count) = exec_in(&container_name(&record.id), record, request, sink).await?;
    Ok((result, container_id, oom_count))
}

/// Runs the sync script (or any short paddock command) in the job's sandbox: its container
/// when that runs, else a throwaway container with the same mounts, user and limits, so a
/// stopped job is not started again and no agent process runs beside the command.
pub async fn exec_in_sandbox(
    home: &PaddockHome,
    record: &JobRecord,
    request: &ExecRequest,
    sink: &mut dyn OutputSink,
) -> Result<ExecResult, RuntimeError> {
    let docker = connect()?;
    if inspect_ours(&docker, home, &record.id)
        .await?
        .is_some_and(|status| status.running)
    {
        let name = container_name(&record.id);
        return Ok(exec_in(&name, record, request, sink).await?.0);
    }
    let name = format!("{}-sync-{}", container_name(&record.id), random_hex(6));
    let mut body = container_body(home, record)?;
    if let Some(labels) = &mut body.labels {
        labels.insert(LABEL_ROLE.to_string(), "sync".to_string());
    }
    let options = CreateContainerOptionsBuilder::new().name(&name).build();
    call(
        "create container",
        &name,
        API_TIMEOUT,
        docker.create_container(Some(options), body),
    )
    .await?;
    let result = async {
        call(
            "start container",
            &name,
            API_TIMEOUT,
            docker.start_container(&name, None),
        )
        .await?;
        exec_in(&name, record, request, sink).await
    }
    .await;
    if let Err(error) = remove_labelled_container(home, &name, record.id.as_str()).await {
        tracing::warn!(container = %name, %error, "failed to remove a sync container");
    }
    Ok(result?.0)
}

/// Runs one command in the running container `name` (see [`exec`]).
async fn exec_in(
    name: &str,
    record: &JobRecord,
    request: &ExecRequest,
    sink: &mut dyn OutputSink,
) -> Result<(ExecResult, Option<u64>), RuntimeError> {
    if request.cmd.is_empty() {
        return Err(RuntimeError::EmptyCommand);
    }
    let docker = connect()?;
    let name = name.to_string();
    let pidfile = format!("/tmp/.paddock-exec-{}.pid", random_hex(10));
    let mut cmd = match &request.after {
        None => vec![
            "sh".to_string(),
            "-c".to_string(),
            r#"{ echo $$ > "$0"; } 2>/dev/null; exec "$@""#.to_string(),
            pidfile.clone(),
        ],
        // The wrapper stays as the command's parent to run the snippet after it; it is the
        // process group leader either way, so a timeout still signals the whole group.
        Some(after) => vec![
            "sh".to_string(),
            "-c".to_string(),
            r#"{ echo $$ > "$0"; } 2>/dev/null; after=$1; shift; "$@"; rc=$?; eval "$after"; exit $rc"#
                .to_string(),
            pidfile.clone(),
            after.clone(),
        ],
    };
    cmd.extend(request.cmd.iter().cloned());
    let mut env = vec![format!("PADDOCK_JOB_ID={}", record.id)];
    env.extend(record.limits.env.iter().map(|(k, v)| format!("{k}={v}")));
    env.extend(request.env.iter().map(|(k, v)| format!("{k}={v}")));
    let workspace = Path::new(&record.limits.workspace_dir);
    let workdir = match &request.workdir {
        Some(dir) => workspace.join(dir),
        None => workspace.to_path_buf(),
    };
    let config = ExecConfig {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(cmd),
        env: Some(env),
        working_dir: Some(workdir.display().to_string()),
        ..Default::default()
    };
    let started_at = Instant::now();
    let created = call(
        "create exec",
        &name,
        API_TIMEOUT,
        docker.create_exec(&name, config),
    )
    .await?;
    let start = call(
        "start exec",
        &name,
        API_TIMEOUT,
        docker.start_exec(&created.id, None::<StartExecOptions>),
    )
    .await?;
    let StartExecResults::Attached { mut output, .. } = start else {
        return Err(RuntimeError::Docker {
            action: "start exec",
            target: name,
            message: "the daemon detached the exec".into(),
        });
    };

    let mut stdout = CappedOutput::new(request.output_cap);
    let mut stderr = CappedOutput::new(request.output_cap);
    let deadline = tokio::time::Instant::now() + request.timeout;
    let far = deadline + Duration::from_secs(86_400 * 365);
    let mut kill_at = far;
    let mut give_up_at = far;
    let mut timed_out = false;
    let signal = |sig: &'static str| {
        let docker = docker.clone();
        let name = name.clone();
        let pidfile = pidfile.clone();
        async move {
            let script = format!(
                "p=$(cat {pidfile} 2>/dev/null) && {{ kill -{sig} -$p 2>/dev/null || kill -{sig} $p 2>/dev/null; }}; true"
            );
            if let Err(error) = helper_exec(&docker, &name, &script).await {
                tracing::warn!(%error, "failed to signal a timed-out exec");
                if sig == "KILL" {
                    // No room to even start the helper (a fork bomb at its pids limit): kill
                    // the container; the next exec starts it again.
                    let _ = docker
                        .kill_container(
                            &name,
                            None::<bollard::query_parameters::KillContainerOptions>,
                        )
                        .await;
                }
            }
        }
    };
    loop {
        tokio::select! {
            chunk = output.next() => match chunk {
                Some(Ok(LogOutput::StdOut { message })) => {
                    sink.write(StreamKind::Stdout, &message);
                    stdout.push(&message);
                }
                Some(Ok(LogOutput::StdErr { message })) => {
                    sink.write(StreamKind::Stderr, &message);
                    stderr.push(&message);
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => {
                    return Err(RuntimeError::DockerUnavailable {
                        message: format!("exec output of `{name}` broke off: {error}"),
                    });
                }
                None => break,
            },
            _ = sleep_until(deadline), if !timed_out => {
                timed_out = true;
                match request.kill_policy {
                    KillPolicy::Hard => {
                        signal("KILL").await;
                        give_up_at = tokio::time::Instant::now() + AFTER_KILL;
                    }
                    KillPolicy::Graceful => {
                        signal("TERM").await;
                        kill_at = tokio::time::Instant::now() + request.grace;
                    }
                }
            },
            _ = sleep_until(kill_at) => {
                signal("KILL").await;
                kill_at = far;
                give_up_at = tokio::time::Instant::now() + AFTER_KILL;
            },
            // The command is dead but something (a background child) holds the stream open.
            _ = sleep_until(give_up_at) => break,
        }
    }
    let duration_ms = started_at.elapsed().as_millis() as u64;
    let inspect = call(
        "inspect exec",
        &name,
        API_TIMEOUT,
        docker.inspect_exec(&created.id),
    )
    .await?;
    let exit_code = match inspect.exit_code {
        Some(code) if inspect.running != Some(true) => code,
        _ if timed_out => 137,
        _ => -1,
    };
    // Exit 137 is SIGKILL, not necessarily OOM: ask the cgroup whether it killed something
    // since the last time we looked.
    let mut oom_count = None;
    let mut oom_killed = false;
    if exit_code == 137 && !timed_out {
        oom_count = oom_kill_count(&docker, &name).await;
        if let Some(count) = oom_count {
            oom_killed = count > record.oom_kills;
        }
    }
    let (stdout, out_cut) = stdout.finish();
    let (stderr, err_cut) = stderr.finish();
    Ok((
        ExecResult {
            exit_code,
            stdout,
            stderr,
            duration_ms,
            timed_out,
            truncated: out_cut || err_cut,
            oom_killed,
            sync_error: None,
        },
        oom_count,
    ))
}

/// An interactive shell in the job's container. A TTY session is the one place paddock uses
/// the `docker` CLI: it owns the terminal handling (raw mode, resize) that a shell needs.
pub fn interactive_shell(record: &JobRecord) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("docker");
    command.args([
        "exec",
        "-it",
        "-w",
        &record.limits.workspace_dir,
        &container_name(&record.id),
        "sh",
        "-c",
        "command -v bash >/dev/null && exec bash || exec sh",
    ]);
    command
}

/// Builds the agent image from the Dockerfile built into paddock. `progress` receives each
/// line of build output. Returns the image id.
pub async fn build_image(
    base_image: &str,
    tag: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<String, RuntimeError> {
    let docker = connect()?;
    let context = build_context().map_err(|source| RuntimeError::Io {
        path: PathBuf::from("Dockerfile.agent"),
        source,
    })?;
    let options = BuildImageOptionsBuilder::new()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        .pull("false")
        .buildargs(&HashMap::from([("BASE_IMAGE", base_image)]))
        .build();
    let mut stream = docker.build_image(
        options,
        None,
        Some(bollard::body_full(bytes::Bytes::from(context))),
    );
    let deadline = tokio::time::Instant::now() + BUILD_TIMEOUT;
    let mut image_id = String::new();
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next())
            .await
            .map_err(|_| RuntimeError::DockerTimeout {
                action: "build image",
                target: tag.to_string(),
                after: BUILD_TIMEOUT,
            })?;
        let Some(item) = next else { break };
        let info = item.map_err(|e| RuntimeError::Docker {
            action: "build image",
            target: tag.to_string(),
            message: e.to_string(),
        })?;
        if let Some(detail) = info.error_detail {
            return Err(RuntimeError::Docker {
                action: "build image",
                target: tag.to_string(),
                message: detail.message.unwrap_or_default(),
            });
        }
        if let Some(line) = info.stream {
            for line in line.lines().filter(|l| !l.trim().is_empty()) {
                progress(line);
                if let Some(id) = line.strip_prefix("Successfully built ") {
                    image_id = id.trim().to_string();
                }
            }
        }
        if let Some(aux) = info.aux.and_then(|a| a.id) {
            image_id = aux;
        }
    }
    Ok(image_id)
}

fn build_context() -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, text, mode) in [
        ("Dockerfile", DOCKERFILE, 0o644),
        ("entrypoint.sh", ENTRYPOINT, 0o755),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_size(text.len() as u64);
        header.set_mode(mode);
        header.set_mtime(0);
        header.set_cksum();
        builder.append_data(&mut header, name, text.as_bytes())?;
    }
    builder.into_inner()
}
