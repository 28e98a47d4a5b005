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

use std::collections::HashMap;
use std::io::Read as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{Mount, MountTypeEnum};
use bollard::query_parameters::{BuildImageOptionsBuilder, DownloadFromContainerOptionsBuilder};
use futures_util::StreamExt;

use super::egress::{SIDECAR_LOG, SIDECAR_POLICY_DIR, log_path, policy_dir, sidecar_name};
use super::engine_secrets::CA_DIR;
use super::image::LABEL_IMAGE;
use super::remote::{ensure_volume, upload};
use super::{API_TIMEOUT, LABEL_HOME, agent_user, call, io_error, is_not_found, job_container};
use crate::egress::proxy::EGRESS_LOG_CAP;
use crate::engines::job_volume;
use crate::job::JobRecord;
use crate::runtime::RuntimeError;
use crate::store::PaddockHome;

/// The repository of the proxy images paddock builds on engines.
pub const PROXY_REPOSITORY: &str = "paddock-proxy";
const PROXY_DOCKERFILE: &str =
    "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY paddock /paddock/bin/paddock\n";
const SELF_EXE: &str = "/proc/self/exe";
/// Deadline of the rename that puts a new policy in place.
const RENAME_TIMEOUT: Duration = Duration::from_secs(30);
/// Where the engine's host addresses, as the last guard run reported them, are kept for
/// the job's policy (beside its host copy, `policy_dir`).
const ENGINE_ADDRESSES: &str = "engine-addresses.json";

/// The proxy image of this very binary: `paddock-proxy:<version>-<build id>`.
pub async fn proxy_tag() -> Result<String, RuntimeError> {
    static TAG: OnceLock<String> = OnceLock::new();
    if let Some(tag) = TAG.get() {
        return Ok(tag.clone());
    }
    let id = tokio::task::spawn_blocking(binary_id)
        .await
        .expect("reading the binary's id does not panic")
        .map_err(io_error(Path::new(SELF_EXE)))?;
    let version = env!("CARGO_PKG_VERSION");
    Ok(TAG
        .get_or_init(|| format!("{PROXY_REPOSITORY}:{version}-{id}"))
        .clone())
}

/// This binary's identity: its GNU build id (a note the loader maps; a few reads), else the
/// first 20 bytes of a SHA-256 of the whole file.
fn binary_id() -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    let mut file = std::fs::File::open(SELF_EXE)?;
    if let Some(id) = build_id(&file)? {
        return Ok(hex(&id[..id.len().min(20)]));
    }
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hex(&hasher.finalize()[..20]))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `NT_GNU_BUILD_ID` note of a 64-bit little-endian ELF file, from its `PT_NOTE`
/// segments; `None` when it has none.
fn build_id(file: &std::fs::File) -> std::io::Result<Option<Vec<u8>>> {
    const PT_NOTE: u32 = 4;
    const NT_GNU_BUILD_ID: u32 = 3;
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4"));
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
    let mut header = [0u8; 64];
    file.read_exact_at(&mut header, 0)?;
    if header[..4] != *b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return Ok(None);
    }
    let (offset, size, count) = (
        u64_at(&header, 0x20),
        usize::from(u16_at(&header, 0x36)),
        usize::from(u16_at(&header, 0x38)),
    );
    if size < 56 {
        return Ok(None);
    }
    let mut table = vec![0u8; size * count];
    file.read_exact_at(&mut table, offset)?;
    for entry in table.chunks_exact(size) {
        if u32_at(entry, 0) != PT_NOTE {
            continue;
        }
        let length = usize::try_from(u64_at(entry, 0x20).min(1 << 16)).expect("64 KiB fits");
        let mut notes = vec![0u8; length];
        file.read_exact_at(&mut notes, u64_at(entry, 8))?;
        let align = |n: usize| n.div_ceil(4) * 4;
        let mut at = 0;
        while at + 12 <= notes.len() {
            let name_size = u32_at(&notes, at) as usize;
            let desc_size = u32_at(&notes, at + 4) as usize;
            let kind = u32_at(&notes, at + 8);
            let name = at + 12;
            let desc = name + align(name_size);
            let Some(end) = desc.checked_add(desc_size).filter(|e| *e <= notes.len()) else {
                break;
            };
            if kind == NT_GNU_BUILD_ID && notes.get(name..name + name_size) == Some(b"GNU\0") {
                return Ok(Some(notes[desc..end].to_vec()));
            }
            at = desc + align(desc_size);
        }
    }
    Ok(None)
}

/// Builds the proxy image ([`proxy_tag`]) on the current engine from `base_image`, unless
/// it is there; returns its tag.
pub async fn build_proxy_image(
    daemon: &super::Daemon,
    base_image: &str,
    home_id: &str,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<String, RuntimeError> {
    let docker = daemon.connect()?;
    let tag = proxy_tag().await?;
    if has_image(&docker, &tag).await? {
        progress(&format!("the proxy image {tag} is there"));
        return Ok(tag);
    }
    let context = tokio::task::spawn_blocking(proxy_context)
        .await
        .expect("reading the binary does not panic")
        .map_err(io_error(Path::new(SELF_EXE)))?;
    let options = BuildImageOptionsBuilder::new()
        .dockerfile("Dockerfile")
        .t(&tag)
        .rm(true)
        .forcerm(true)
        .pull("false")
        .buildargs(&HashMap::from([("BASE_IMAGE", base_image)]))
        .labels(&HashMap::from([
            (LABEL_IMAGE, "proxy"),
            (LABEL_HOME, home_id),
        ]))
        .build();
    super::image::run_build(&docker, options, context, &tag, progress).await?;
    progress(&format!("built the proxy image {tag}"));
    Ok(tag)
}

/// The proxy image's build context: its Dockerfile and this binary.
fn proxy_context() -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(PROXY_DOCKERFILE.len() as u64);
    header.set_mode(0o644);
    builder.append_data(&mut header, "Dockerfile", PROXY_DOCKERFILE.as_bytes())?;
    let file = std::fs::File::open(SELF_EXE)?;
    let mut header = tar::Header::new_gnu();
    header.set_size(file.metadata()?.len());
    header.set_mode(0o755);
    builder.append_data(&mut header, "paddock", file)?;
    builder.into_inner()
}

async fn has_image(docker: &Docker, tag: &str) -> Result<bool, RuntimeError> {
    match tokio::time::timeout(API_TIMEOUT, docker.inspect_image(tag)).await {
        Ok(Ok(_)) => Ok(true),
        Ok(Err(e)) if is_not_found(&e) => Ok(false),
        Ok(Err(e)) => Err(RuntimeError::Docker {
            action: "inspect image",
            target: tag.to_string(),
            message: e.to_string(),
        }),
        Err(_) => Err(RuntimeError::DockerTimeout {
            action: "inspect image",
            target: tag.to_string(),
            after: API_TIMEOUT,
        }),
    }
}

/// Refuses (`ImageMissing`, which create turns into the `image build --engine` hint) when
/// the current engine lacks the proxy image of this binary.
pub async fn check_proxy_image(docker: &Docker) -> Result<(), RuntimeError> {
    let tag = proxy_tag().await?;
    if has_image(docker, &tag).await? {
        Ok(())
    } else {
        Err(RuntimeError::ImageMissing { image: tag })
    }
}

/// The proxy image's tag, refused with the command that builds it when the current engine
/// lacks it (a job made by an older paddock whose sidecar or guard is made anew).
pub async fn require_proxy_image(
    daemon: &super::Daemon,
    docker: &Docker,
) -> Result<String, RuntimeError> {
    let tag = proxy_tag().await?;
    if has_image(docker, &tag).await? {
        return Ok(tag);
    }
    let engine = daemon.engine().unwrap_or_default().to_string();
    Err(RuntimeError::Docker {
        action: "start the egress proxy",
        target: tag,
        message: format!(
            "the engine has no proxy image of this paddock: run `paddock image build --engine {engine}`"
        ),
    })
}

/// The job's egress volumes on its engine, with where the sidecar mounts them: policy, log
/// and, for a job with secrets, the CA bundle it trusts (`engine_secrets`).
fn volumes(record: &JobRecord) -> Vec<(String, &'static str)> {
    let container = job_container(record);
    let mut volumes = vec![
        (job_volume(&container, "egress-policy"), SIDECAR_POLICY_DIR),
        (job_volume(&container, "egress-log"), "/paddock/log"),
    ];
    if super::secrets::has_secrets(record) {
        volumes.push((super::engine_secrets::ca_volume(record), CA_DIR));
    }
    volumes
}

/// The names of the job's egress volumes (removed with the job's other volumes).
pub fn volume_names(record: &JobRecord) -> impl Iterator<Item = String> {
    // The CA volume whether or not the record names secrets now: removal checks labels.
    let mut names: Vec<String> = volumes(record).into_iter().map(|(name, _)| name).collect();
    let ca = super::engine_secrets::ca_volume(record);
    if !names.contains(&ca) {
        names.push(ca);
    }
    names.into_iter()
}

/// The sidecar's image and mounts on a remote engine: the proxy image and the job's egress
/// volumes (made with this install's labels first).
pub async fn sidecar_parts(
    daemon: &super::Daemon,
    docker: &Docker,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(String, Vec<Mount>), RuntimeError> {
    let mut mounts = Vec::new();
    for (name, target) in volumes(record) {
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

/// A tar of one file `name` holding `bytes`, owned by `uid:gid` with `mode`.
pub(super) fn tar_of(
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
    if super::archive::stat_with(docker, &name, SIDECAR_LOG)
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
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    let name = sidecar_name(&job_container(record));
    let Some(status) = super::inspect_named(&docker, home, &name, record.id.as_str()).await? else {
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
    let (_, exec, _) =
        super::exec::exec_collect_as(&docker, &name, cmd, Some("0:0"), RENAME_TIMEOUT, 0).await?;
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
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    let name = sidecar_name(&job_container(record));
    let host = log_path(home, &record.id);
    let Some(stat) = super::archive::stat_with(&docker, &name, SIDECAR_LOG).await? else {
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
    fn the_proxy_tag_is_this_binary_s_build_id() {
        let file = std::fs::File::open(SELF_EXE).unwrap();
        let id = build_id(&file)
            .unwrap()
            .expect("Debian's linker writes a build id");
        assert!(id.len() >= 16, "{id:?}");
        let tag = binary_id().unwrap();
        assert_eq!(tag, hex(&id[..id.len().min(20)]));
    }

    #[test]
    fn a_log_tar_gives_its_file_under_the_cap() {
        let tar = tar_of("egress.jsonl", b"{\"a\":1}\n{\"b\":2}\n", (1, 1), 0o640).unwrap();
        assert_eq!(log_of(&tar, 1 << 20).unwrap(), b"{\"a\":1}\n{\"b\":2}\n");
        assert_eq!(log_of(&tar, 4).unwrap(), b"{\"a\"");
    }
}
