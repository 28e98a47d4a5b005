//! A job's secrets on a remote engine (`engines:`), where no host path may be mounted (see
//! `docker::secrets` for the local side, `remote::egress` for the sidecar there).
//!
//! The CA bundle the job trusts lives in the volume `<container>-egress-ca`: mounted
//! read-write at `/paddock/ca` in the sidecar only so paddock can upload it through the
//! archive API before each start (a file owned by root, 0644, in a root-owned directory: the
//! proxy's uid, capability-less, cannot change it), and read-only at the same path in the
//! job, so the job finds `/paddock/ca/bundle.pem` as a local job does. It holds no value.
//!
//! The values never touch a disk of the engine, a volume or a container's settings: the
//! sidecar's control directory `/paddock/ctl` is a tmpfs (0700, the proxy's uid; memory
//! only, and the sidecar has no swap), and paddock hands the load to the proxy by an exec of
//! `paddock egress-load` in the sidecar whose stdin is the exec's attached stream through
//! the engine's API, after each start of the sidecar by paddock. The exec runs as the proxy's
//! uid, not root: with every capability dropped, root could not enter that 0700 directory.
//! `docker inspect` of the exec shows its command, never its input. The job's container has
//! neither the tmpfs nor the sidecar's mounts, and reaches the sidecar only at its proxy's
//! port. A sidecar the engine restarts by itself holds no values (the tmpfs is new, the
//! proxy's memory empty) and refuses the secret hosts until paddock starts the job again.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::{ExecConfig, Mount, MountTypeEnum};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use super::volumes::ca_volume;
use crate::job::JobRecord;
use crate::runtime::RuntimeError;
use crate::runtime::docker::sidecar::{CA_DIR, SIDECAR_BINARY, sidecar_name};
use crate::runtime::docker::sidecar::{
    JOB_BUNDLE, SIDECAR_CONTROL, SIDECAR_CONTROL_DIR, bundle_pem, failed, has_secrets,
};
use crate::runtime::docker::{API_TIMEOUT, call, io_error, job_container};
use crate::store::PaddockHome;

/// How long the exec that hands the values over may take (the sidecar has just started:
/// `egress-load` waits up to 15 s for the proxy's socket).
const DELIVER_DEADLINE: Duration = Duration::from_secs(25);
/// Most of the exec's output kept (the proxy's answer is one short line).
const ANSWER_CAP: usize = 4096;

/// The job container's mount of its CA volume: read-only where the bundle is expected.
pub fn job_mount(record: &JobRecord) -> Mount {
    debug_assert!(JOB_BUNDLE.starts_with(CA_DIR));
    Mount {
        target: Some(CA_DIR.to_string()),
        source: Some(ca_volume(record)),
        typ: Some(MountTypeEnum::VOLUME),
        read_only: Some(true),
        ..Default::default()
    }
}

/// The sidecar's tmpfs for its control socket: memory only, reachable by the proxy's
/// `uid:gid` alone.
pub fn control_tmpfs(uid: u32, gid: u32) -> HashMap<String, String> {
    HashMap::from([(
        SIDECAR_CONTROL_DIR.to_string(),
        format!("rw,noexec,nosuid,nodev,size=1m,mode=0700,uid={uid},gid={gid}"),
    )])
}

/// Uploads the CA bundle `pem` into the job's CA volume through its sidecar `name` (created;
/// running or not), as root's 0644 file.
async fn upload_pem(docker: &Docker, name: &str, pem: &[u8]) -> Result<(), RuntimeError> {
    let tar = crate::runtime::docker::archive::tar_of("bundle.pem", pem, (0, 0), 0o644)
        .map_err(io_error(std::path::Path::new(JOB_BUNDLE)))?;
    super::volumes::upload(docker, name, CA_DIR, tar).await
}

/// Hands `load` (one JSON line) to the proxy of the job's running sidecar: an exec of
/// `paddock egress-load` reading it from its attached stdin. The proxy's answer, or why it
/// could not be had (never naming a value).
pub async fn deliver(docker: &Docker, record: &JobRecord, load: &[u8]) -> Result<String, String> {
    let name = sidecar_name(&job_container(record));
    let (uid, gid) = crate::runtime::docker::agent_user(record.limits.uid);
    let config = ExecConfig {
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        user: Some(format!("{uid}:{gid}")),
        env: Some(vec!["RUST_LOG=warn".into()]),
        cmd: Some(vec![
            SIDECAR_BINARY.into(),
            "egress-load".into(),
            "--control".into(),
            SIDECAR_CONTROL.into(),
        ]),
        ..Default::default()
    };
    let created = call(
        "create exec",
        &name,
        API_TIMEOUT,
        docker.create_exec(&name, config),
    )
    .await
    .map_err(|e| e.to_string())?;
    let started = call(
        "start exec",
        &name,
        API_TIMEOUT,
        docker.start_exec(&created.id, None::<StartExecOptions>),
    )
    .await
    .map_err(|e| e.to_string())?;
    let StartExecResults::Attached {
        mut output,
        mut input,
    } = started
    else {
        return Err("the exec was not attached".into());
    };
    let mut answer = String::new();
    let exchanged = tokio::time::timeout(DELIVER_DEADLINE, async {
        input.write_all(load).await?;
        input.write_all(b"\n").await?;
        input.flush().await?;
        // The line is the load; the end of the stream is only a courtesy.
        let _ = input.shutdown().await;
        while let Some(chunk) = output.next().await {
            let chunk = chunk.map_err(std::io::Error::other)?;
            if answer.len() < ANSWER_CAP {
                answer.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
            }
        }
        Ok::<_, std::io::Error>(())
    })
    .await;
    drop(input);
    match exchanged {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("the exec in {name}: {e}")),
        Err(_) => {
            return Err(format!(
                "the exec in {name} did not end in {DELIVER_DEADLINE:?}"
            ));
        }
    }
    let inspected = call(
        "inspect exec",
        &name,
        API_TIMEOUT,
        docker.inspect_exec(&created.id),
    )
    .await
    .map_err(|e| e.to_string())?;
    // The last line is the proxy's answer (`egress-load` prints it; errors go before it).
    let said = answer.lines().last().unwrap_or_default().trim().to_string();
    match inspected.exit_code {
        Some(0) if said == "ok" => Ok(said),
        code => Err(format!(
            "`paddock egress-load` exited {code:?}: {}",
            crate::text::line(answer.trim())
        )),
    }
}

/// A remote job's CA bundle, uploaded into its CA volume through its sidecar `name`
/// (created, before it starts); nothing for a job without secrets.
pub async fn upload_bundle(
    docker: &bollard::Docker,
    home: &PaddockHome,
    record: &JobRecord,
    name: &str,
) -> Result<(), RuntimeError> {
    if !has_secrets(record) {
        return Ok(());
    }
    let (root, job) = (home.root().to_path_buf(), record.clone());
    let bundle = tokio::task::spawn_blocking(move || bundle_pem(&root))
        .await
        .expect("reading the roots does not panic")
        .map_err(|e| failed(&job, "*", e))?;
    upload_pem(docker, name, bundle.as_bytes()).await
}
