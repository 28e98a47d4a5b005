//! The archive API of a remote engine's job container, for the file API of a remote job
//! (`engine::files_remote`, a `Place`): a path's mode (`HEAD …/archive`, which reports the
//! component itself, a link as a link), a tar of a path read under a cap, and a tar
//! uploaded into a directory. Works whether the container runs or not. Errors are the
//! runtime's; a missing path is `Ok(None)`.

use bollard::Docker;
use bollard::query_parameters::{
    ContainerArchiveInfoOptions, DownloadFromContainerOptionsBuilder, UploadToContainerOptions,
};
use futures_util::StreamExt;

use super::API_TIMEOUT;
use crate::runtime::RuntimeError;

fn docker_error(
    action: &'static str,
    target: &str,
    error: &bollard::errors::Error,
) -> RuntimeError {
    RuntimeError::Docker {
        action,
        target: target.to_string(),
        message: error.to_string(),
    }
}

fn not_found(error: &bollard::errors::Error) -> bool {
    matches!(
        error,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// The mode of `path` in `container` on `engine`, as Go's `os.FileMode` bits (`None`: it
/// does not exist).
pub async fn stat(
    daemon: &super::Daemon,
    container: &str,
    path: &str,
) -> Result<Option<u32>, RuntimeError> {
    let docker = daemon.connect()?;
    Ok(stat_with(&docker, container, path)
        .await?
        .map(|stat| stat.file_mode))
}

/// What the archive API says of `path` in `container` (`None`: it does not exist).
pub(super) async fn stat_with(
    docker: &Docker,
    container: &str,
    path: &str,
) -> Result<Option<bollard::container::PathStatResponse>, RuntimeError> {
    let options = ContainerArchiveInfoOptions {
        path: path.to_string(),
    };
    match tokio::time::timeout(
        API_TIMEOUT,
        docker.get_container_archive_info(container, Some(options)),
    )
    .await
    {
        Ok(Ok(stat)) => Ok(Some(stat)),
        Ok(Err(error)) if not_found(&error) => Ok(None),
        Ok(Err(error)) => Err(docker_error("stat in container", container, &error)),
        Err(_) => Err(RuntimeError::DockerTimeout {
            action: "stat in container",
            target: container.to_string(),
            after: API_TIMEOUT,
        }),
    }
}

/// The tar of `path` in `container` on `engine`, read up to `cap` bytes (`None` past it).
pub async fn download(
    daemon: &super::Daemon,
    container: &str,
    path: &str,
    cap: u64,
) -> Result<Option<Vec<u8>>, RuntimeError> {
    let docker = daemon.connect()?;
    let options = DownloadFromContainerOptionsBuilder::new()
        .path(path)
        .build();
    let mut stream = docker.download_from_container(container, Some(options));
    let deadline = tokio::time::Instant::now() + super::BUILD_TIMEOUT;
    let mut tar = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(chunk))) => {
                tar.extend_from_slice(&chunk);
                if tar.len() as u64 > cap {
                    return Ok(None);
                }
            }
            Ok(None) => return Ok(Some(tar)),
            Ok(Some(Err(error))) => {
                return Err(docker_error("download from container", container, &error));
            }
            Err(_) => {
                return Err(RuntimeError::DockerTimeout {
                    action: "download from container",
                    target: container.to_string(),
                    after: super::BUILD_TIMEOUT,
                });
            }
        }
    }
}

/// Unpacks `tar` into the directory `path` of `container` on `engine`, never replacing a
/// directory with a file or the other way round.
pub async fn upload(
    daemon: &super::Daemon,
    container: &str,
    path: &str,
    tar: Vec<u8>,
) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    let options = UploadToContainerOptions {
        path: path.to_string(),
        no_overwrite_dir_non_dir: Some("true".into()),
        copy_uidgid: None,
    };
    super::calls::call(
        "upload to container",
        container,
        super::BUILD_TIMEOUT,
        docker.upload_to_container(container, Some(options), bollard::body_full(tar.into())),
    )
    .await
}

/// A tar of one file `name` holding `bytes`, owned by `uid:gid` with `mode`.
pub(crate) fn tar_of(
    name: &str,
    bytes: &[u8],
    owner: (u32, u32),
    mode: u32,
) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(mode);
    header.set_uid(owner.0.into());
    header.set_gid(owner.1.into());
    header.set_mtime(chrono::Utc::now().timestamp().try_into().unwrap_or(0));
    builder.append_data(&mut header, name, bytes)?;
    builder.into_inner()
}
