//! A remote job's outbox, brought back: the sync files its container wrote, read through
//! the archive API as a tar taken to a host file under a cap, of which only regular files
//! with a sync's names, each under its cap, are written to the job's outbox on the host.

use std::io::Read as _;
use std::path::Path;

use bollard::Docker;
use bollard::query_parameters::DownloadFromContainerOptionsBuilder;
use futures_util::StreamExt;

use crate::job::JobRecord;
use crate::runtime::RuntimeError;
use crate::runtime::docker::{BUILD_TIMEOUT, CONTAINER_OUTBOX, Daemon, job_container};

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
pub(crate) async fn pull_outbox(
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
        .path(CONTAINER_OUTBOX)
        .build();
    let total_cap = crate::git::sync::MAX_STREAM_BYTES + (1 << 20);
    let tar_path = host.with_extension("pull.tar");
    let mut file = tokio::fs::File::create(&tar_path)
        .await
        .map_err(io(&tar_path))?;
    let mut stream = docker.download_from_container(name, Some(options));
    let mut size = 0u64;
    let deadline = tokio::time::Instant::now() + BUILD_TIMEOUT;
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
                    after: BUILD_TIMEOUT,
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
pub(crate) async fn collect_outbox(
    daemon: &Daemon,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    let name = job_container(record);
    let taken = pull_outbox(&docker, &name, record).await?;
    if !taken.is_empty() {
        let files: Vec<String> = taken
            .iter()
            .map(|file| format!("{}/{file}", CONTAINER_OUTBOX))
            .collect();
        super::fill::run(&docker, &name, &format!("rm -f {}", files.join(" "))).await?;
    }
    Ok(())
}
