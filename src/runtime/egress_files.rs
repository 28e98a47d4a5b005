//! Where a job's egress proxy finds its policy and leaves its decisions on this host, for
//! every runtime that runs one (a container's sidecar, a VM's proxy on the host): the
//! policy file, written whole so a proxy never reads half of one, and the decision log.
//! Which addresses the policy refuses as "the host's" is the caller's to say: a remote
//! engine's proxy runs on that engine's host.

use std::net::IpAddr;
use std::path::PathBuf;

use crate::egress::EgressPolicy;
use crate::egress::secrets::SecretRule;
use crate::job::{JobId, JobRecord};
use crate::runtime::RuntimeError;
use crate::store::PaddockHome;

/// Where the job's policy file lives on the host.
pub fn policy_dir(home: &PaddockHome, id: &JobId) -> PathBuf {
    home.job_dir(id).join("egress")
}

/// Where the proxy's decisions go on the host.
pub fn log_path(home: &PaddockHome, id: &JobId) -> PathBuf {
    home.logs_dir(id).join("egress.jsonl")
}

/// The proxy's rules for the job's secrets.
pub fn secret_rules(record: &JobRecord) -> Vec<SecretRule> {
    record
        .limits
        .secrets
        .iter()
        .flat_map(|s| &s.secrets)
        .map(|s| SecretRule {
            name: s.name.clone(),
            placeholder: s.placeholder.clone(),
            hosts: s.hosts.clone(),
            header: s.header.clone(),
        })
        .collect()
}

/// Writes the job's policy where its proxy reads it (atomically: the proxy never sees half
/// a file), refusing `host_addresses` besides the ranges every policy refuses. The next
/// connection through the proxy follows it.
pub fn write_policy(
    home: &PaddockHome,
    record: &JobRecord,
    host_addresses: Vec<IpAddr>,
) -> Result<(), RuntimeError> {
    let dir = policy_dir(home, &record.id);
    std::fs::create_dir_all(&dir).map_err(|source| RuntimeError::Io {
        path: dir.clone(),
        source,
    })?;
    let policy = EgressPolicy {
        allow: record.limits.allow.clone(),
        host_addresses,
        secrets: secret_rules(record),
    };
    let path = dir.join("policy.json");
    let text = serde_json::to_vec_pretty(&policy).expect("a policy serializes");
    crate::atomic::write_atomic(&path, &text, false).map_err(|source| RuntimeError::Io {
        path: path.clone(),
        source,
    })
}
