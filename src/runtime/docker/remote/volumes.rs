//! A remote job's volumes on its engine (`engines::JOB_VOLUMES`, its egress and CA
//! volumes) and the repository's object cache there: their names, mounts, making and
//! removal (each checked to be ours right before), and uploads through the archive API.

use std::collections::HashMap;

use bollard::Docker;
use bollard::models::{Mount, MountTypeEnum, VolumeCreateRequest};
use bollard::query_parameters::UploadToContainerOptions;

use crate::engines::{JOB_VOLUMES, job_volume, object_cache};
use crate::job::JobRecord;
use crate::runtime::RuntimeError;
use crate::runtime::docker::sidecar::{CA_DIR, SIDECAR_POLICY_DIR, has_secrets};
use crate::runtime::docker::{
    API_TIMEOUT, BUILD_TIMEOUT, CONTAINER_OBJECTS, Daemon, LABEL_HOME, LABEL_JOB, LABEL_ROLE, call,
    job_container,
};
use crate::store::PaddockHome;

/// The kind of the job's CA volume (`<container>-egress-ca`).
const CA_KIND: &str = "egress-ca";

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
pub(crate) fn job_mounts(home: &PaddockHome, record: &JobRecord) -> Vec<Mount> {
    volume_mounts(
        home,
        &job_container(record),
        &record.limits.workspace_dir,
        &record.repo_key,
    )
}

/// The mounts of the container `container` (a job's, or a warm pool slot's, whose job takes
/// its name and so its volumes): the volumes named after it and the object cache of the
/// repository `repo_key`.
pub(crate) fn volume_mounts(
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

/// Makes the volume `name` with this install's labels (a no-op when it exists).
pub(crate) async fn ensure_volume(
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
pub(crate) async fn remove_volume(docker: &Docker, name: &str) -> Result<(), RuntimeError> {
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
pub(crate) async fn remove_job_volumes(
    daemon: &Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    let container = job_container(record);
    let mut first = Ok(());
    let names = JOB_VOLUMES
        .iter()
        .map(|(kind, _)| job_volume(&container, kind))
        .chain(egress_volume_names(record));
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
pub(crate) async fn upload(
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
        BUILD_TIMEOUT,
        docker.upload_to_container(name, Some(options), bollard::body_full(tar.into())),
    )
    .await
}

/// Labels of a fill helper: the job's, with role `sync`, so a sweep reaps one a crash left.
pub(crate) fn helper_labels(home: &PaddockHome, job: &str) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_HOME.to_string(), home.id().to_string()),
        (LABEL_JOB.to_string(), job.to_string()),
        (LABEL_ROLE.to_string(), "sync".to_string()),
    ])
}

/// Makes the job's volumes and the repository's object cache on the engine.
pub(crate) async fn ensure_volumes(
    docker: &Docker,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    let container = job_container(record);
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

/// The name of the job's CA volume on its engine.
pub(crate) fn ca_volume(record: &JobRecord) -> String {
    job_volume(&job_container(record), CA_KIND)
}

/// The job's egress volumes on its engine, with where the sidecar mounts them: policy, log
/// and, for a job with secrets, the CA bundle it trusts (`remote::secrets`).
pub(crate) fn egress_volumes(record: &JobRecord) -> Vec<(String, &'static str)> {
    let container = job_container(record);
    let mut volumes = vec![
        (job_volume(&container, "egress-policy"), SIDECAR_POLICY_DIR),
        (job_volume(&container, "egress-log"), "/paddock/log"),
    ];
    if has_secrets(record) {
        volumes.push((ca_volume(record), CA_DIR));
    }
    volumes
}

/// The names of the job's egress volumes (removed with the job's other volumes).
pub(crate) fn egress_volume_names(record: &JobRecord) -> impl Iterator<Item = String> {
    // The CA volume whether or not the record names secrets now: removal checks labels.
    let mut names: Vec<String> = egress_volumes(record)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let ca = ca_volume(record);
    if !names.contains(&ca) {
        names.push(ca);
    }
    names.into_iter()
}
