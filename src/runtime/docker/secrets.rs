//! The Docker side of a job's secrets: the proxy's rules in its policy, its control
//! directory, the CA bundle the job trusts, and sending the values to a started proxy.
//!
//! Files: `jobs/<job>/egress-ctl/` (0700, the agent's uid; mounted read-write at
//! `/paddock/ctl` in the sidecar only, where the proxy makes its control socket) and
//! `jobs/<job>/egress-ca/bundle.pem` (the host's roots and the install's CA; mounted
//! read-only into the job). Neither holds a value: values go from this process's memory
//! over the socket to the proxy's (see `egress::secrets`), at each start of the sidecar. A
//! sidecar that restarts by itself (Docker's daemon restarting) holds no values until the
//! job is started again by paddock; it refuses secret hosts meanwhile.
//!
//! On a remote engine nothing of this is a host path: the bundle is a volume there and the
//! values go through an exec's stdin (see `remote::secrets`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use bollard::models::Mount;

use super::io_error;
use super::mounts::bind;
use super::sidecar::{
    JOB_BUNDLE, SIDECAR_CONTROL, SIDECAR_CONTROL_DIR, bundle_pem, failed, has_secrets,
};
use crate::egress::ca::{InstallCa, host_roots_pem};
use crate::egress::secrets::Load;
use crate::job::JobRecord;
use crate::runtime::RuntimeError;
use crate::store::PaddockHome;

/// How long paddock waits for a started proxy's control socket and answer.
const SEND_DEADLINE: Duration = Duration::from_secs(15);

fn control_dir(home: &PaddockHome, record: &JobRecord) -> PathBuf {
    home.job_dir(&record.id).join("egress-ctl")
}

fn bundle_path(home: &PaddockHome, record: &JobRecord) -> PathBuf {
    home.job_dir(&record.id)
        .join("egress-ca")
        .join("bundle.pem")
}

/// The sidecar's extra mount and arguments for a job with secrets (its control directory,
/// made here); nothing for one without.
pub fn sidecar_parts(
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
    (uid, gid): (u32, u32),
) -> Result<(Vec<Mount>, Vec<String>), RuntimeError> {
    if !has_secrets(record) {
        return Ok((Vec::new(), Vec::new()));
    }
    let args = vec!["--control".into(), SIDECAR_CONTROL.into()];
    if daemon.is_remote() {
        // A tmpfs of the sidecar there (`remote::secrets::control_tmpfs`).
        return Ok((Vec::new(), args));
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = control_dir(home, record);
    std::fs::create_dir_all(&dir).map_err(io_error(&dir))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io_error(&dir))?;
    if crate::sys::is_root() {
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).map_err(io_error(&dir))?;
    }
    Ok((
        vec![bind(&dir, Path::new(SIDECAR_CONTROL_DIR), false)],
        args,
    ))
}

/// The job container's mount of its CA bundle (see [`write_bundle`]) and its variables:
/// the placeholders and the bundle. Nothing for a job without secrets.
pub fn job_parts(
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> (Vec<Mount>, Vec<String>) {
    let Some(secrets) = record
        .limits
        .secrets
        .as_ref()
        .filter(|_| has_secrets(record))
    else {
        return (Vec::new(), Vec::new());
    };
    let mount = if daemon.is_remote() {
        super::remote::secrets::job_mount(record)
    } else {
        bind(&bundle_path(home, record), Path::new(JOB_BUNDLE), true)
    };
    (vec![mount], crate::secrets::job_env(secrets, JOB_BUNDLE))
}

/// Writes the job's CA bundle (the host's roots and the install's CA, made the first time)
/// before its container is made; on a blocking thread (a read of the host's roots).
pub async fn write_bundle(
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    // A remote job's bundle is uploaded into its volume there (`upload_bundle`).
    if !has_secrets(record) || daemon.is_remote() {
        return Ok(());
    }
    let (root, path, job) = (
        home.root().to_path_buf(),
        bundle_path(home, record),
        record.clone(),
    );
    tokio::task::spawn_blocking(move || {
        let bundle = bundle_pem(&root).map_err(|e| failed(&job, "*", e))?;
        let dir = path.parent().expect("the bundle is in a directory");
        std::fs::create_dir_all(dir).map_err(io_error(dir))?;
        crate::atomic::write_atomic(&path, bundle.as_bytes(), false).map_err(io_error(&path))
    })
    .await
    .expect("writing the bundle does not panic")
}

/// Reads the job's values and sends them, with its certificate and the upstream roots, to
/// its started proxy. Errors name the secret, never a value.
pub async fn send(
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<(), RuntimeError> {
    let Some(secrets) = record
        .limits
        .secrets
        .clone()
        .filter(|_| has_secrets(record))
    else {
        return Ok(());
    };
    let root = home.root().to_path_buf();
    let job = record.clone();
    // Files, commands and key generation: on a blocking thread.
    let load = tokio::task::spawn_blocking(move || -> Result<Load, RuntimeError> {
        let mut values = std::collections::BTreeMap::new();
        let mut hosts = Vec::new();
        for secret in &secrets.secrets {
            let value =
                crate::secrets::read_value(secret).map_err(|e| failed(&job, &secret.name, e))?;
            values.insert(secret.name.clone(), value);
            hosts.extend(secret.hosts.iter().cloned());
        }
        let ca = InstallCa::load_or_create(&root).map_err(|e| failed(&job, "*", e))?;
        let (cert_pem, key_pem) = ca.sign(&hosts).map_err(|e| failed(&job, "*", e))?;
        let mut roots_pem = host_roots_pem();
        if let Some(path) = &secrets.upstream_ca {
            let extra = std::fs::read_to_string(path).map_err(|e| {
                failed(
                    &job,
                    "*",
                    format!("egress.upstream_ca `{}`: {e}", path.display()),
                )
            })?;
            roots_pem.push_str(&extra);
        }
        Ok(Load {
            values,
            cert_pem,
            key_pem,
            roots_pem,
        })
    })
    .await
    .expect("reading secrets does not panic")?;
    let text = serde_json::to_vec(&load).expect("a load serializes");
    drop(load);
    let answer = if daemon.is_remote() {
        // No path of this machine is in the sidecar there: an exec's stdin (see
        // `remote::secrets`).
        let docker = daemon.connect()?;
        super::remote::secrets::deliver(&docker, record, &text).await
    } else {
        let socket = control_dir(home, record).join("ctl.sock");
        crate::egress::secrets::deliver(&socket, &text, SEND_DEADLINE).await
    };
    drop(text);
    match answer {
        Ok(answer) if answer == "ok" => Ok(()),
        Ok(answer) => Err(failed(
            record,
            "*",
            format!("the proxy refused them: {answer}"),
        )),
        Err(message) => Err(failed(record, "*", message)),
    }
}
