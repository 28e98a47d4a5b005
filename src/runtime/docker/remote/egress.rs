//! The egress sidecar of an `allowlist` job on a remote engine (`engines:`), where no host
//! path may be mounted (see `remote` and `egress`).
//!
//! The proxy runs from `paddock-proxy:<version>-<build id>`: the base image and this very
//! binary, built on the engine by `paddock image build --engine NAME` (the tag is the
//! binary's GNU build id, the linker's hash of it, so a rebuilt paddock asks for a new
//! image and a stale proxy never runs; a create on an engine without the tag of the running
//! binary is refused with that hint). The job range's guard on the engine's host runs from
//! the same image (`ranges`). The policy and the log live in two volumes of the engine,
//! `<container>-egress-policy` at `/paddock/egress` and `<container>-egress-log` at
//! `/paddock/log`, mounted in the sidecar only, written and read through the archive API.
//!
//! Invariants: the policy directory is the volume's root, owned by root, and the proxy runs
//! as the agent's uid with every capability dropped, so only paddock changes the policy: a
//! new file under a temporary name, then `mv` by root in the sidecar (a rename, as
//! `atomic::write_atomic` does on the host), so a running proxy never reads half a policy.
//! The log is the proxy's own file (made for the agent's uid before the proxy starts; the
//! job's container does not mount it); paddock copies it whole to the host's
//! `logs/<job>/egress.jsonl`, under the proxy's own cap, after each exec, before the sidecar
//! is removed and when the dashboard or the daemon's relay read decisions, so every reader
//! of that file works as for a local job. The policy's host addresses are the engine's
//! (`ranges`: the guard container reports them), never this machine's.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::Docker;
use bollard::models::{Mount, MountTypeEnum};
use bollard::query_parameters::DownloadFromContainerOptionsBuilder;
use futures_util::StreamExt;

use super::proxy_image::require_proxy_image;
use super::volumes::{egress_volumes, ensure_volume, upload};
use crate::egress::proxy::EGRESS_LOG_CAP;
use crate::job::JobRecord;
use crate::runtime::RuntimeError;
use crate::runtime::docker::archive::tar_of;
use crate::runtime::docker::sidecar::{
    SIDECAR_LOG, SIDECAR_POLICY_DIR, log_path, policy_dir, sidecar_name,
};
use crate::runtime::docker::{API_TIMEOUT, agent_user, call, io_error, job_container};
use crate::store::PaddockHome;

/// Deadline of the rename that puts a new policy in place.
const RENAME_TIMEOUT: Duration = Duration::from_secs(30);
/// Where the engine's host addresses, as the last guard run reported them, are kept for
/// the job's policy (beside its host copy, `policy_dir`).
const ENGINE_ADDRESSES: &str = "engine-addresses.json";

/// The sidecar's image and mounts on a remote engine: the proxy image and the job's egress
/// volumes (made with this install's labels first).
pub async fn sidecar_parts(
    daemon: &crate::runtime::docker::Daemon,
    docker: &Docker,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(String, Vec<Mount>), RuntimeError> {
    let mut mounts = Vec::new();
    for (name, target) in egress_volumes(record) {
        ensure_volume(docker, home, &name, record.id.as_str()).await?;
        mounts.push(Mount {
            target: Some(target.to_string()),
            source: Some(name),
            typ: Some(MountTypeEnum::VOLUME),
            read_only: Some(false),
            ..Default::default()
        });
    }
    Ok((require_proxy_image(daemon, docker).await?, mounts))
}

/// Before the sidecar `name` (created, not running) starts: the policy as the host copy
/// has it (no proxy reads it yet), the CA bundle of a job with secrets, and the proxy's log
/// file, made for the agent's uid when the volume has none.
pub async fn prepare(
    docker: &Docker,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    let name = sidecar_name(&job_container(record));
    let (path, policy) = read_policy(home, record)?;
    let tar = tar_of("policy.json", &policy, (0, 0), 0o644).map_err(io_error(&path))?;
    upload(docker, &name, SIDECAR_POLICY_DIR, tar).await?;
    super::secrets::upload_bundle(docker, home, record, &name).await?;
    if crate::runtime::docker::archive::stat_with(docker, &name, SIDECAR_LOG)
        .await?
        .is_some()
    {
        return Ok(());
    }
    let log = tar_of("egress.jsonl", b"", agent_user(record.limits.uid), 0o640)
        .map_err(io_error(Path::new(SIDECAR_LOG)))?;
    upload(docker, &name, "/paddock/log", log).await
}

/// The host copy of the job's policy: its path and bytes.
fn read_policy(home: &PaddockHome, record: &JobRecord) -> Result<(PathBuf, Vec<u8>), RuntimeError> {
    let path = policy_dir(home, &record.id).join("policy.json");
    let bytes = std::fs::read(&path).map_err(io_error(&path))?;
    Ok((path, bytes))
}

/// Puts the host copy of the job's policy (just written by `egress::write_policy`) in
/// place on its engine: in a running sidecar, uploaded under a temporary name and renamed
/// by root there; in a stopped one, uploaded as it is (no proxy reads it). Nothing when the
/// sidecar does not exist (its next start writes it).
pub async fn push_policy(
    daemon: &crate::runtime::docker::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    let name = sidecar_name(&job_container(record));
    let Some(status) =
        crate::runtime::docker::inspect_named(&docker, home, &name, record.id.as_str()).await?
    else {
        return Ok(());
    };
    if !status.running {
        return prepare(&docker, home, record).await;
    }
    let temp = format!(".policy.json.{}", crate::ids::random_hex(6));
    let (path, policy) = read_policy(home, record)?;
    let tar = tar_of(&temp, &policy, (0, 0), 0o644).map_err(io_error(&path))?;
    upload(&docker, &name, SIDECAR_POLICY_DIR, tar).await?;
    let from = format!("{SIDECAR_POLICY_DIR}/{temp}");
    let to = format!("{SIDECAR_POLICY_DIR}/policy.json");
    let cmd = vec!["mv".into(), "-f".into(), from, to];
    let (_, exec, _) = crate::runtime::docker::exec::exec_collect_as(
        &docker,
        &name,
        cmd,
        Some("0:0"),
        false,
        RENAME_TIMEOUT,
        0,
    )
    .await?;
    let inspected = call(
        "inspect exec",
        &name,
        API_TIMEOUT,
        docker.inspect_exec(&exec),
    )
    .await?;
    match inspected.exit_code {
        Some(0) => Ok(()),
        code => Err(RuntimeError::Docker {
            action: "put the egress policy in place",
            target: name,
            message: format!("`mv` exited {code:?}"),
        }),
    }
}

/// Copies the job's proxy log from its engine to the host's `logs/<job>/egress.jsonl`
/// (see the module docs) when its size differs from the host copy's. Nothing when the
/// sidecar is gone.
pub async fn pull_log(
    daemon: &crate::runtime::docker::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    let name = sidecar_name(&job_container(record));
    let host = log_path(home, &record.id);
    let Some(stat) =
        crate::runtime::docker::archive::stat_with(&docker, &name, SIDECAR_LOG).await?
    else {
        return Ok(());
    };
    let known = std::fs::metadata(&host).map_or(0, |m| m.len());
    if u64::try_from(stat.size).ok() == Some(known) {
        return Ok(());
    }
    // The proxy stops at its cap (plus one short `truncated` line); the tar adds headers.
    let cap = EGRESS_LOG_CAP + (64 << 10);
    let options = DownloadFromContainerOptionsBuilder::new()
        .path(SIDECAR_LOG)
        .build();
    let mut stream = docker.download_from_container(&name, Some(options));
    let mut tar = Vec::new();
    let deadline = tokio::time::Instant::now() + API_TIMEOUT;
    loop {
        let failed = |message: String| RuntimeError::Docker {
            action: "download from container",
            target: name.clone(),
            message,
        };
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(chunk))) => tar.extend_from_slice(&chunk),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(failed(e.to_string())),
            Err(_) => {
                return Err(RuntimeError::DockerTimeout {
                    action: "download from container",
                    target: name,
                    after: API_TIMEOUT,
                });
            }
        }
        if tar.len() as u64 > cap + 4096 {
            return Err(failed(format!(
                "the egress log passed {cap} bytes: not read"
            )));
        }
    }
    let log = tokio::task::spawn_blocking(move || log_of(&tar, cap))
        .await
        .expect("reading a tar does not panic")
        .map_err(io_error(&host))?;
    if let Some(dir) = host.parent() {
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    }
    crate::atomic::write_atomic(&host, &log, false).map_err(io_error(&host))
}

/// The one regular file of a downloaded log tar, at most `cap` bytes.
fn log_of(tar: &[u8], cap: u64) -> std::io::Result<Vec<u8>> {
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries()? {
        let entry = entry?;
        if entry.header().entry_type() == tar::EntryType::Regular {
            let mut log = Vec::new();
            entry.take(cap).read_to_end(&mut log)?;
            return Ok(log);
        }
    }
    Ok(Vec::new())
}

/// Where the engine's host addresses are kept for the job's policy.
fn addresses_path(home: &PaddockHome, record: &JobRecord) -> PathBuf {
    policy_dir(home, &record.id).join(ENGINE_ADDRESSES)
}

/// Keeps the engine's host addresses (as its guard container reported them) for the job's
/// policy.
pub fn keep_addresses(
    home: &PaddockHome,
    record: &JobRecord,
    addresses: &[std::net::IpAddr],
) -> Result<(), RuntimeError> {
    let path = addresses_path(home, record);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
    }
    let text = serde_json::to_vec(addresses).expect("addresses serialize");
    crate::atomic::write_atomic(&path, &text, false).map_err(io_error(&path))
}

/// The engine's host addresses kept for the job (empty before the first guard run).
pub fn engine_addresses(home: &PaddockHome, record: &JobRecord) -> Vec<std::net::IpAddr> {
    std::fs::read(addresses_path(home, record))
        .ok()
        .and_then(|text| serde_json::from_slice(&text).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_tar_gives_its_file_under_the_cap() {
        let tar = tar_of("egress.jsonl", b"{\"a\":1}\n{\"b\":2}\n", (1, 1), 0o640).unwrap();
        assert_eq!(log_of(&tar, 1 << 20).unwrap(), b"{\"a\":1}\n{\"b\":2}\n");
        assert_eq!(log_of(&tar, 4).unwrap(), b"{\"a\"");
    }
}
