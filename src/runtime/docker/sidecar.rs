//! The fixed names and paths of a job's egress sidecar, shared by the sidecar on this host
//! (`egress`, `secrets`) and on a remote engine (`remote::egress`, `remote::secrets`): where
//! its binary, policy, log, control socket and CA bundle are inside, where their host copies
//! are, and the hardening every helper of paddock's beside a job gets.

use std::path::Path;

use bollard::models::HostConfig;

use crate::egress::ca::{InstallCa, host_roots_pem};
use crate::job::JobRecord;
use crate::runtime::RuntimeError;

pub(crate) const SIDECAR_BINARY: &str = "/paddock/bin/paddock";

pub(crate) const SIDECAR_POLICY_DIR: &str = "/paddock/egress";

pub(crate) const SIDECAR_LOG: &str = "/paddock/log/egress.jsonl";

/// The job's egress sidecar, named after its container `base`.
pub fn sidecar_name(base: &str) -> String {
    format!("{base}-egress")
}

pub use crate::runtime::egress_files::{log_path, policy_dir};

/// Where the control directory is inside the sidecar.
pub const SIDECAR_CONTROL_DIR: &str = "/paddock/ctl";

/// The control socket inside the sidecar.
pub const SIDECAR_CONTROL: &str = "/paddock/ctl/ctl.sock";

/// Where the job finds its CA bundle.
pub const JOB_BUNDLE: &str = "/paddock/ca/bundle.pem";

pub(crate) fn has_secrets(record: &JobRecord) -> bool {
    record
        .limits
        .secrets
        .as_ref()
        .is_some_and(|s| !s.secrets.is_empty())
}

pub(crate) fn failed(record: &JobRecord, name: &str, message: impl Into<String>) -> RuntimeError {
    RuntimeError::Secret {
        job: record.id.to_string(),
        name: name.to_string(),
        message: message.into(),
    }
}

/// The CA bundle a job trusts: the host's roots and the install's CA (made the first time).
pub(crate) fn bundle_pem(root: &Path) -> Result<String, String> {
    let ca = InstallCa::load_or_create(root)?;
    let mut bundle = host_roots_pem();
    bundle.push_str(&ca.cert_pem);
    Ok(bundle)
}

/// Where the CA volume is mounted, in the sidecar and in the job.
pub const CA_DIR: &str = "/paddock/ca";

/// The hardening and limits of paddock's own helpers beside a job (its egress sidecar, a
/// remote job's port relay): every capability dropped, `no-new-privileges`, a read-only
/// root, 256 pids, 256 MiB without swap, one CPU, and an init that reaps.
pub(crate) fn helper_host_config() -> HostConfig {
    HostConfig {
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        readonly_rootfs: Some(true),
        pids_limit: Some(256),
        memory: Some(256 << 20),
        memory_swap: Some(256 << 20),
        nano_cpus: Some(1_000_000_000),
        init: Some(true),
        ..Default::default()
    }
}
