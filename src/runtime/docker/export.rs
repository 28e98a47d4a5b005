//! An image's files as a directory, for runtimes that boot them elsewhere (the microVM's
//! root filesystem), or one file of it (what `doctor` reads of the agent image): a created,
//! never started container is read and removed. Nothing of the image runs.

use std::path::Path;
use std::time::Duration;

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder};
use futures_util::StreamExt as _;
use tokio::io::AsyncWriteExt as _;

use super::{API_TIMEOUT, LABEL_HOME, LABEL_ROLE, calls::call};
use crate::runtime::RuntimeError;

/// Deadline of one export (an image of a few hundred MB takes seconds).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(600);

/// The id (`sha256:...`) of the local image `tag`.
pub async fn image_id(daemon: &super::Daemon, tag: &str) -> Result<String, RuntimeError> {
    let docker = daemon.connect()?;
    let image = call("inspect image", tag, API_TIMEOUT, docker.inspect_image(tag)).await?;
    image.id.ok_or_else(|| RuntimeError::ImageMissing {
        image: tag.to_string(),
    })
}

/// Unpacks the files of image `tag` into `dest` (which must not exist), keeping owners and
/// modes. The helper container is labelled with `home` and removed whatever happens.
pub async fn export_image(
    daemon: &super::Daemon,
    tag: &str,
    home: &str,
    dest: &Path,
) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    let name = create_unstarted(&docker, "export", tag, home).await?;
    let tar_path = dest.with_extension("tar");
    let exported = tokio::time::timeout(EXPORT_TIMEOUT, async {
        let mut file = tokio::fs::File::create(&tar_path)
            .await
            .map_err(super::io_error(&tar_path))?;
        let mut stream = docker.export_container(&name);
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| RuntimeError::Docker {
                action: "export container",
                target: name.clone(),
                message: e.to_string(),
            })?;
            file.write_all(&chunk)
                .await
                .map_err(super::io_error(&tar_path))?;
        }
        file.flush().await.map_err(super::io_error(&tar_path))
    })
    .await
    .unwrap_or_else(|_| {
        Err(RuntimeError::DockerTimeout {
            action: "export container",
            target: name.clone(),
            after: EXPORT_TIMEOUT,
        })
    });
    let removed = remove_unstarted(&docker, &name).await;
    let unpacked = match exported {
        Ok(()) => {
            let (tar_path, into) = (tar_path.clone(), dest.to_path_buf());
            tokio::task::spawn_blocking(move || {
                let file = std::fs::File::open(&tar_path)?;
                let mut archive = tar::Archive::new(file);
                archive.set_preserve_permissions(true);
                archive.set_preserve_ownerships(true);
                archive.set_unpack_xattrs(false);
                archive.unpack(&into)
            })
            .await
            .expect("unpacking does not panic")
            .map_err(super::io_error(dest))
        }
        Err(error) => Err(error),
    };
    let _ = std::fs::remove_file(&tar_path);
    unpacked.and(removed)
}

/// The bytes of the regular file `path` of image `tag`, at most `cap` of them (`None`: no
/// such file, or larger). A created, never started container labelled with `home` is read
/// through the archive API and removed whatever happens.
pub async fn image_file(
    daemon: &super::Daemon,
    (tag, home): (&str, &str),
    path: &str,
    cap: u64,
) -> Result<Option<Vec<u8>>, RuntimeError> {
    let docker = daemon.connect()?;
    let name = create_unstarted(&docker, "read", tag, home).await?;
    // The archive's headers and padding come on top of the file's bytes.
    let tar = super::archive::download(daemon, &name, path, cap + 4096).await;
    let removed = remove_unstarted(&docker, &name).await;
    let tar = match tar {
        Ok(Some(tar)) => tar,
        // Missing (the archive API's 404) or over the cap: no such file to read.
        Ok(None) | Err(RuntimeError::Docker { .. }) => return removed.map(|()| None),
        Err(error) => return Err(error),
    };
    removed?;
    Ok(first_file(&tar, cap))
}

/// A container of image `tag` that is never started (`paddock-<what>-<random>`, labelled
/// with `home` and the export role, so a sweep reaps one a crash left); its name.
async fn create_unstarted(
    docker: &bollard::Docker,
    what: &str,
    tag: &str,
    home: &str,
) -> Result<String, RuntimeError> {
    let name = format!("paddock-{what}-{}", crate::ids::random_hex(10));
    let options = CreateContainerOptionsBuilder::new().name(&name).build();
    let body = ContainerCreateBody {
        image: Some(tag.to_string()),
        network_disabled: Some(true),
        labels: Some(
            [
                (LABEL_HOME.to_string(), home.to_string()),
                (LABEL_ROLE.to_string(), "export".to_string()),
            ]
            .into(),
        ),
        ..Default::default()
    };
    call(
        "create container",
        &name,
        API_TIMEOUT,
        docker.create_container(Some(options), body),
    )
    .await?;
    Ok(name)
}

async fn remove_unstarted(docker: &bollard::Docker, name: &str) -> Result<(), RuntimeError> {
    call(
        "remove container",
        name,
        API_TIMEOUT,
        docker.remove_container(
            name,
            Some(RemoveContainerOptionsBuilder::new().force(true).build()),
        ),
    )
    .await
    .map(drop)
}

/// The first entry of `tar` when it is a regular file of at most `cap` bytes.
fn first_file(tar: &[u8], cap: u64) -> Option<Vec<u8>> {
    let mut archive = tar::Archive::new(tar);
    let mut entry = archive.entries().ok()?.next()?.ok()?;
    if !entry.header().entry_type().is_file() || entry.size() > cap {
        return None;
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut entry, &mut bytes).ok()?;
    Some(bytes)
}
