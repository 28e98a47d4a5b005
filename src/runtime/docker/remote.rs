//! Jobs on a remote Docker engine (`engines:`; see `crate::engines`): the TLS connection,
//! the volumes that hold the job's files there, filling them at create by a stream through
//! the engine's API, and reading the job's outbox back through the archive API.
//!
//! Which engine a call talks to is a [`Daemon`] value: each `DockerRuntime` holds one (one
//! `DockerRuntime` per engine) and hands it to every function of this module's parent.
//!
//! Trust: nothing the job can write is trusted on the host. The fill runs in a helper
//! container before any agent of the job has run; the object cache volume is written only by
//! such helpers and mounted read-only in job containers, so one job cannot plant objects or
//! a `shallow` file for the next. The outbox comes back as a tar whose entries are taken only
//! when they are regular files with the names a sync writes, each under its cap, and then
//! read by `engine::outbox` as if they had been on the host all along.

use std::collections::HashMap;
use std::io::Read as _;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use bollard::Docker;
use bollard::models::{Mount, MountTypeEnum, VolumeCreateRequest};
use bollard::query_parameters::{DownloadFromContainerOptionsBuilder, UploadToContainerOptions};
use futures_util::StreamExt;

use super::{API_TIMEOUT, CONTAINER_OBJECTS, LABEL_HOME, LABEL_JOB, LABEL_ROLE, call};
use crate::engines::{EngineSpec, JOB_VOLUMES, job_volume, object_cache};
use crate::job::JobRecord;
use crate::runtime::RuntimeError;
use crate::store::PaddockHome;

/// A remote engine: its name in `engines:` and its entry there, read once when its runtime
/// was made (or why it could not be read, said at each call).
#[derive(Debug)]
pub struct RemoteEngine {
    pub name: String,
    pub spec: Result<EngineSpec, String>,
}

/// The Docker daemon a call goes to: this host's, or an engine of the user config's
/// `engines:` with the entry it was made from. Each `DockerRuntime` holds one and passes it
/// down to every call it makes, so which daemon a call reaches is a value, never ambient
/// state, and no call reads the config again.
#[derive(Debug, Clone, Default)]
pub struct Daemon {
    engine: Option<std::sync::Arc<RemoteEngine>>,
}

impl Daemon {
    /// This host's daemon.
    pub fn local() -> Daemon {
        Daemon::default()
    }

    /// Engine `name` of the user config, with its entry as read (or why it was not).
    pub fn remote(name: &str, spec: Result<EngineSpec, String>) -> Daemon {
        Daemon {
            engine: Some(std::sync::Arc::new(RemoteEngine {
                name: name.to_string(),
                spec,
            })),
        }
    }

    /// The engine's name in `engines:`, if this is a remote one.
    pub fn engine(&self) -> Option<&str> {
        self.engine.as_ref().map(|engine| engine.name.as_str())
    }

    pub fn is_remote(&self) -> bool {
        self.engine.is_some()
    }

    /// A client of this daemon, with the API deadline.
    pub fn connect(&self) -> Result<Docker, RuntimeError> {
        if let Some(engine) = &self.engine {
            return connect_engine(engine);
        }
        Docker::connect_with_local_defaults()
            .map(|docker| docker.with_timeout(API_TIMEOUT))
            .map_err(|e| RuntimeError::DockerUnavailable {
                message: e.to_string(),
            })
    }
}

/// The entry of a remote engine, or why it could not be read.
fn spec_of(engine: &RemoteEngine) -> Result<&EngineSpec, RuntimeError> {
    engine
        .spec
        .as_ref()
        .map_err(|message| RuntimeError::DockerUnavailable {
            message: format!("engine `{}`: {message}", engine.name),
        })
}

/// The `docker` CLI's global flags that reach the current call's engine over TLS (none for
/// the local daemon): for what only the CLI does well, an interactive `exec -it`.
pub(super) fn cli_flags(daemon: &Daemon) -> Result<Vec<std::ffi::OsString>, RuntimeError> {
    let Some(engine) = &daemon.engine else {
        return Ok(Vec::new());
    };
    let (name, spec) = (engine.name.as_str(), spec_of(engine)?);
    // An ssh engine: the CLI goes through this process's relay, so `ssh_options` hold.
    if spec.host.starts_with("ssh://") {
        let socket = super::ssh::relay_socket(&spec.host, &spec.ssh_options)?;
        let mut host = std::ffi::OsString::from("unix://");
        host.push(socket);
        return Ok(vec!["--host".into(), host]);
    }
    let Some(tls) = &spec.tls else {
        return Err(RuntimeError::DockerUnavailable {
            message: format!("engine `{name}`: `{}` has no `tls:`", spec.host),
        });
    };
    let mut flags: Vec<std::ffi::OsString> = vec!["--host".into(), spec.host.clone().into()];
    flags.push("--tlsverify".into());
    for (flag, path) in [
        ("--tlscacert", &tls.ca),
        ("--tlscert", &tls.cert),
        ("--tlskey", &tls.key),
    ] {
        flags.push(flag.into());
        flags.push(path.clone().into_os_string());
    }
    Ok(flags)
}

/// A client for a remote engine, over TLS or ssh. Clients are kept per (name, settings), so
/// a runtime made from a changed entry gets a client of its own.
pub(super) fn connect_engine(engine: &RemoteEngine) -> Result<Docker, RuntimeError> {
    let name = engine.name.as_str();
    static CLIENTS: OnceLock<Mutex<HashMap<String, Docker>>> = OnceLock::new();
    let unavailable = |message: String| RuntimeError::DockerUnavailable {
        message: format!("engine `{name}`: {message}"),
    };
    let spec = spec_of(engine)?;
    let key = format!("{name} {spec:?}");
    let clients = CLIENTS.get_or_init(Default::default);
    if let Some(docker) = clients
        .lock()
        .expect("the client map is never poisoned")
        .get(&key)
    {
        return Ok(docker.clone());
    }
    let docker = if spec.host.starts_with("ssh://") {
        // Each connection is an `ssh … docker system dial-stdio` (see `ssh`).
        let socket = super::ssh::relay_socket(&spec.host, &spec.ssh_options)?;
        Docker::connect_with_socket(
            &socket.to_string_lossy(),
            API_TIMEOUT.as_secs(),
            bollard::API_DEFAULT_VERSION,
        )
    } else {
        let Some(tls) = &spec.tls else {
            return Err(unavailable(format!("`{}` has no `tls:`", spec.host)));
        };
        Docker::connect_with_ssl(
            &spec.host,
            &tls.key,
            &tls.cert,
            &tls.ca,
            API_TIMEOUT.as_secs(),
            bollard::API_DEFAULT_VERSION,
        )
    }
    .map_err(|e| unavailable(e.to_string()))?;
    clients
        .lock()
        .expect("the client map is never poisoned")
        .insert(key, docker.clone());
    Ok(docker)
}

fn volume(name: String, target: &str, read_only: bool) -> Mount {
    Mount {
        target: Some(target.to_string()),
        source: Some(name),
        typ: Some(MountTypeEnum::VOLUME),
        read_only: Some(read_only),
        ..Default::default()
    }
}

/// The mounts of a remote job's container: its volumes (workspace, git dir, outbox) and the
/// repository's object cache read-only at [`CONTAINER_OBJECTS`] (the git dir's alternates
/// name its `objects`). No host path.
pub(super) fn job_mounts(home: &PaddockHome, record: &JobRecord) -> Vec<Mount> {
    volume_mounts(
        home,
        &super::job_container(record),
        &record.limits.workspace_dir,
        &record.repo_key,
    )
}

/// The mounts of the container `container` (a job's, or a warm pool slot's, whose job takes
/// its name and so its volumes): the volumes named after it and the object cache of the
/// repository `repo_key`.
pub(super) fn volume_mounts(
    home: &PaddockHome,
    container: &str,
    workspace_dir: &str,
    repo_key: &str,
) -> Vec<Mount> {
    let mut mounts: Vec<Mount> = JOB_VOLUMES
        .iter()
        .map(|(kind, target)| {
            let target = if target.is_empty() {
                workspace_dir
            } else {
                target
            };
            volume(job_volume(container, kind), target, false)
        })
        .collect();
    mounts.push(volume(
        object_cache(home.tag(), repo_key),
        CONTAINER_OBJECTS,
        true,
    ));
    mounts
}

/// The test switch (`PADDOCK_TEST_FORBID_HOST_BINDS=1`): a container on a remote engine
/// with a bind mount of a host path is refused before it is made.
pub(super) fn check_no_host_binds(
    daemon: &super::Daemon,
    name: &str,
    body: &bollard::models::ContainerCreateBody,
) -> Result<(), RuntimeError> {
    if !daemon.is_remote() || !crate::engines::forbid_host_binds() {
        return Ok(());
    }
    let host = body.host_config.as_ref();
    let binds = host
        .and_then(|h| h.binds.as_ref())
        .is_some_and(|b| !b.is_empty());
    let bind_mounts = host
        .and_then(|h| h.mounts.as_ref())
        .is_some_and(|m| m.iter().any(|m| m.typ == Some(MountTypeEnum::BIND)));
    if binds || bind_mounts {
        return Err(RuntimeError::Docker {
            action: "create container",
            target: name.to_string(),
            message: "a host path bind-mounted into a remote engine's container (PADDOCK_TEST_FORBID_HOST_BINDS)".into(),
        });
    }
    Ok(())
}

/// Makes the volume `name` with this install's labels (a no-op when it exists).
pub(super) async fn ensure_volume(
    docker: &Docker,
    home: &PaddockHome,
    name: &str,
    job: &str,
) -> Result<(), RuntimeError> {
    let request = VolumeCreateRequest {
        name: Some(name.to_string()),
        labels: Some(HashMap::from([
            (LABEL_HOME.to_string(), home.id().to_string()),
            (LABEL_JOB.to_string(), job.to_string()),
        ])),
        ..Default::default()
    };
    call(
        "create volume",
        name,
        API_TIMEOUT,
        docker.create_volume(request),
    )
    .await
    .map(drop)
}

/// Removes the volume `name` of the current call's engine (its owner checked by the caller,
/// right before).
pub(super) async fn remove_volume(docker: &Docker, name: &str) -> Result<(), RuntimeError> {
    call(
        "remove volume",
        name,
        API_TIMEOUT,
        docker.remove_volume(name, None::<bollard::query_parameters::RemoveVolumeOptions>),
    )
    .await
    .map(drop)
}

/// Removes the job's volumes on its engine, each only when it carries this install's labels
/// with the job's id, or its pool slot's (checked right before). The object cache stays.
pub(super) async fn remove_job_volumes(
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    let container = super::job_container(record);
    let mut first = Ok(());
    let names = JOB_VOLUMES
        .iter()
        .map(|(kind, _)| job_volume(&container, kind))
        .chain(super::engine_egress::volume_names(record));
    for name in names {
        // A warm job's volumes were its pool slot's, and carry the slot's id.
        let ours = match docker.inspect_volume(&name).await {
            Ok(info) => {
                let job = info.labels.get(LABEL_JOB).map(String::as_str);
                info.labels.get(LABEL_HOME).map(String::as_str) == Some(home.id())
                    && (job == Some(record.id.as_str()) || job == Some(record.container_label()))
            }
            Err(_) => false,
        };
        if !ours {
            continue;
        }
        let removed = remove_volume(&docker, &name).await;
        if first.is_ok() {
            first = removed;
        }
    }
    first
}

/// Uploads `tar` into the container `name` at `path` through the archive API.
pub(super) async fn upload(
    docker: &Docker,
    name: &str,
    path: &str,
    tar: Vec<u8>,
) -> Result<(), RuntimeError> {
    let options = UploadToContainerOptions {
        path: path.to_string(),
        ..Default::default()
    };
    call(
        "upload to container",
        name,
        super::BUILD_TIMEOUT,
        docker.upload_to_container(name, Some(options), bollard::body_full(tar.into())),
    )
    .await
}

/// The names a sync writes in the outbox: 12 hex digits and `.stream`, `.err` or `.rc`,
/// with each one's cap.
fn outbox_cap(name: &str) -> Option<u64> {
    let (stem, ext) = name.split_once('.')?;
    if stem.len() != 12 || !stem.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    match ext {
        "stream" => Some(crate::git::sync::MAX_STREAM_BYTES),
        "err" => Some(crate::git::sync::MAX_STDERR_BYTES as u64),
        "rc" => Some(64),
        _ => None,
    }
}

/// Copies the sync files in the container `name`'s outbox to the job's outbox on the host
/// (`JobRecord::outbox`), through the archive API: a tar taken to a host file under a cap,
/// then only regular files with a sync's names, each under its cap, written new. Returns
/// the names taken, which the caller then removes in the container.
pub(super) async fn pull_outbox(
    docker: &Docker,
    name: &str,
    record: &JobRecord,
) -> Result<Vec<String>, RuntimeError> {
    let Some(host) = record.outbox() else {
        return Ok(Vec::new());
    };
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RuntimeError::Io { path, source }
    };
    let options = DownloadFromContainerOptionsBuilder::new()
        .path(super::CONTAINER_OUTBOX)
        .build();
    let total_cap = crate::git::sync::MAX_STREAM_BYTES + (1 << 20);
    let tar_path = host.with_extension("pull.tar");
    let mut file = tokio::fs::File::create(&tar_path)
        .await
        .map_err(io(&tar_path))?;
    let mut stream = docker.download_from_container(name, Some(options));
    let mut size = 0u64;
    let deadline = tokio::time::Instant::now() + super::BUILD_TIMEOUT;
    loop {
        let chunk = match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(chunk))) => chunk,
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                let _ = std::fs::remove_file(&tar_path);
                return Err(RuntimeError::Docker {
                    action: "download from container",
                    target: name.to_string(),
                    message: e.to_string(),
                });
            }
            Err(_) => {
                let _ = std::fs::remove_file(&tar_path);
                return Err(RuntimeError::DockerTimeout {
                    action: "download from container",
                    target: name.to_string(),
                    after: super::BUILD_TIMEOUT,
                });
            }
        };
        size += chunk.len() as u64;
        if size > total_cap {
            let _ = std::fs::remove_file(&tar_path);
            return Err(RuntimeError::Docker {
                action: "download from container",
                target: name.to_string(),
                message: format!("the job's outbox passed {total_cap} bytes: not read"),
            });
        }
        tokio::io::AsyncWriteExt::write_all(&mut file, &chunk)
            .await
            .map_err(io(&tar_path))?;
    }
    // tokio's file writes on a blocking thread: the last one is done only once flushed.
    tokio::io::AsyncWriteExt::flush(&mut file)
        .await
        .map_err(io(&tar_path))?;
    drop(file);
    let (tar_at, host_at) = (tar_path.clone(), host.clone());
    let taken = tokio::task::spawn_blocking(move || extract_outbox(&tar_at, &host_at))
        .await
        .expect("extracting the outbox does not panic");
    let _ = std::fs::remove_file(&tar_path);
    taken
}

/// Takes the sync files out of an outbox tar (see [`pull_outbox`]).
fn extract_outbox(tar_path: &Path, host: &Path) -> Result<Vec<String>, RuntimeError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RuntimeError::Io { path, source }
    };
    let file = std::fs::File::open(tar_path).map_err(io(tar_path))?;
    let mut archive = tar::Archive::new(file);
    let mut taken = Vec::new();
    for entry in archive.entries().map_err(io(tar_path))? {
        let mut entry = entry.map_err(io(tar_path))?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let path = entry.path().map_err(io(tar_path))?.into_owned();
        let mut parts = path.components();
        let (Some(first), Some(file_name), None) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if first.as_os_str() != "outbox" {
            continue;
        }
        let file_name = file_name.as_os_str().to_string_lossy().to_string();
        let Some(cap) = outbox_cap(&file_name) else {
            continue;
        };
        if entry.size() > cap {
            continue;
        }
        let target = host.join(&file_name);
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&target)
            .map_err(io(&target))?;
        std::io::copy(&mut (&mut entry).take(cap), &mut out).map_err(io(&target))?;
        taken.push(file_name);
    }
    Ok(taken)
}

/// Brings the sync files of the job container's outbox to the host ([`pull_outbox`]) and
/// removes them there.
pub(super) async fn collect_outbox(
    daemon: &super::Daemon,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    let name = super::job_container(record);
    let taken = pull_outbox(&docker, &name, record).await?;
    if !taken.is_empty() {
        let files: Vec<String> = taken
            .iter()
            .map(|file| format!("{}/{file}", super::CONTAINER_OUTBOX))
            .collect();
        super::fill::run(&docker, &name, &format!("rm -f {}", files.join(" "))).await?;
    }
    Ok(())
}

/// Labels of a fill helper: the job's, with role `sync`, so a sweep reaps one a crash left.
pub(super) fn helper_labels(home: &PaddockHome, job: &str) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_HOME.to_string(), home.id().to_string()),
        (LABEL_JOB.to_string(), job.to_string()),
        (LABEL_ROLE.to_string(), "sync".to_string()),
    ])
}

/// Makes the job's volumes and the repository's object cache on the engine.
pub(super) async fn ensure_volumes(
    docker: &Docker,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    let container = super::job_container(record);
    for (kind, _) in JOB_VOLUMES {
        ensure_volume(
            docker,
            home,
            &job_volume(&container, kind),
            // A warm job's volumes are its pool slot's (made with the slot's id).
            record.container_label(),
        )
        .await?;
    }
    ensure_volume(
        docker,
        home,
        &object_cache(home.tag(), &record.repo_key),
        "objects",
    )
    .await
}
