//! Docker engines besides the local one: their names and how to reach them (`engines:` in
//! the user config file), and the names of what a job keeps on one.
//!
//! A job on a remote engine shares no filesystem with the host that runs paddock: its
//! workspace, its private git dir and its outbox are volumes of that engine
//! ([`job_volume`]), filled at create by a stream through the engine's API and read back
//! only through it (the archive API, exec output), and the repository's objects the engine
//! already holds sit in one cache volume per (install, repository) ([`object_cache`]), which
//! job containers mount read-only, so the second job of a repository sends only what is new.
//! Engines are named only in the user's own file: a repository's file could otherwise send
//! its jobs, and the user's history, to a machine it names. This module holds no client (the
//! connection is `runtime/docker/remote/connect.rs`), so config and runtime can both use it.

pub mod context;
pub mod ssh;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// One engine of `engines:`: `host: tcp://HOST:2376` with `tls: {ca, cert, key}` (as the
/// Docker CLI's `--tlsverify`), or `context: NAME`, a Docker CLI context whose endpoint and
/// TLS files are read at load ([`context`]), or `host: ssh://USER@HOST[:PORT]`, reached as
/// the Docker CLI reaches it (`docker system dial-stdio` over the user's own ssh).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSpec {
    #[serde(default)]
    pub host: String,
    pub tls: Option<EngineTls>,
    /// A Docker CLI context to take `host` and `tls` from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// For an `ssh://` engine: `-o` options for `ssh` besides the user's own configuration
    /// (`IdentityFile=…`, `UserKnownHostsFile=…`), each `Key=Value`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_options: Vec<String>,
    /// How many jobs this engine holds at once for `engine: auto` (default: its CPUs).
    pub jobs: Option<u32>,
}

/// The client certificate, its key and the CA that signed the engine's certificate.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct EngineTls {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Why an engine cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("no engine `{name}` in the user config file's `engines:` (known: {known})")]
    Unknown { name: String, known: String },
    #[error(
        "engine `{name}`: `{host}` is neither `tcp://HOST:PORT` with `tls:` nor `ssh://USER@HOST`"
    )]
    BadHost { name: String, host: String },
    #[error("engine `{name}`: {message}")]
    Invalid { name: String, message: String },
    #[error("`engine: auto`: no engine has room ({engines}; each holds its `jobs:` or CPUs)")]
    NoRoom { engines: String },
}

/// Fills an entry of `engines:` given as `context: NAME` from that Docker context (an
/// entry that also names `host` or `tls` is refused: one source of truth).
pub fn resolve(name: &str, spec: &mut EngineSpec) -> Result<(), EngineError> {
    let Some(context) = spec.context.clone() else {
        return Ok(());
    };
    let invalid = |message: String| EngineError::Invalid {
        name: name.to_string(),
        message,
    };
    if !spec.host.is_empty() || spec.tls.is_some() {
        return Err(invalid(
            "give `context:` or `host:`/`tls:`, not both".into(),
        ));
    }
    let (host, tls) = context::resolve(&context).map_err(invalid)?;
    spec.host = host;
    spec.tls = tls;
    Ok(())
}

/// Checks one entry of `engines:`: a name that can be part of a Docker volume name and a
/// host paddock can reach without sending anything in clear (TLS, or ssh).
pub fn check(name: &str, spec: &EngineSpec) -> Result<(), EngineError> {
    let name_ok = !name.is_empty()
        && name != "local"
        && name != "auto"
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'));
    if !name_ok {
        return Err(EngineError::Invalid {
            name: name.to_string(),
            message: "use letters, digits, `-` and `_` (`local` and `auto` are taken)".into(),
        });
    }
    let tcp = spec.host.starts_with("tcp://") || spec.host.starts_with("https://");
    if spec.host.starts_with("ssh://") {
        // ssh carries its own authentication and encryption: `tls:` would mean nothing.
        if spec.tls.is_some() {
            return Err(EngineError::Invalid {
                name: name.to_string(),
                message: "an `ssh://` engine takes no `tls:` (ssh authenticates and encrypts)"
                    .into(),
            });
        }
        if let Some(bad) = spec
            .ssh_options
            .iter()
            .find(|o| o.starts_with('-') || !o.contains('='))
        {
            return Err(EngineError::Invalid {
                name: name.to_string(),
                message: format!("ssh option `{bad}`: give each as `Key=Value` (passed as `-o`)"),
            });
        }
        return ssh::parse(&spec.host)
            .map(drop)
            .map_err(|message| EngineError::Invalid {
                name: name.to_string(),
                message,
            });
    }
    if !spec.ssh_options.is_empty() {
        return Err(EngineError::Invalid {
            name: name.to_string(),
            message: "`ssh_options` is for `ssh://` engines".into(),
        });
    }
    match (tcp, &spec.tls) {
        (true, Some(_)) => Ok(()),
        (true, None) => Err(EngineError::Invalid {
            name: name.to_string(),
            message: format!(
                "`{}` needs `tls: {{ca, cert, key}}`: paddock never talks to an engine in clear",
                spec.host
            ),
        }),
        _ => Err(EngineError::BadHost {
            name: name.to_string(),
            host: spec.host.clone(),
        }),
    }
}

/// The engine `name` of `engines`, or why there is none.
pub fn find<'a>(
    engines: &'a BTreeMap<String, EngineSpec>,
    name: &str,
) -> Result<&'a EngineSpec, EngineError> {
    engines.get(name).ok_or_else(|| EngineError::Unknown {
        name: name.to_string(),
        known: if engines.is_empty() {
            "none".into()
        } else {
            engines.keys().cloned().collect::<Vec<_>>().join(", ")
        },
    })
}

/// The kinds of volume a job has on a remote engine, and where its container mounts each.
pub const JOB_VOLUMES: &[(&str, &str)] = &[
    ("ws", ""),
    ("git", "/paddock/git"),
    ("outbox", "/paddock/outbox"),
];

/// The volume of kind `kind` (`ws`, `git`, `outbox`) of the job whose container is
/// `container`: named after it, so the install's tag is in it.
pub fn job_volume(container: &str, kind: &str) -> String {
    format!("{container}-{kind}")
}

/// The object cache volume of a repository on an engine, for an install (`tag`).
pub fn object_cache(tag: &str, repo_key: &str) -> String {
    format!("paddock-{tag}-objects-{repo_key}")
}

/// Where a remote job's containers mount its cache volumes that have no place in the
/// workspace (`env` caches); a remote job's `JobCache::entry` is `<this>/<volume>`, so the
/// record names each cache's volume.
pub const CACHE_MOUNTS: &str = "/paddock/caches";

/// The cache volume of (install `tag`, repository, cache `name`, key `hash`) on an engine:
/// jobs of the same repository with the same key files share it.
pub fn cache_volume(tag: &str, repo_key: &str, name: &str, hash: &str) -> String {
    format!("paddock-{tag}-cache-{repo_key}-{name}-{hash}")
}

/// The volume of a remote job's cache (see [`CACHE_MOUNTS`]); `None` for a local cache.
pub fn volume_of(cache: &crate::cache::JobCache) -> Option<&str> {
    let volume = cache.entry.strip_prefix(CACHE_MOUNTS).ok()?;
    volume
        .to_str()
        .filter(|v| !v.is_empty() && !v.contains('/'))
}

/// One of this install's cache volumes on an engine, as the engine lists it (`cache ls`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheVolume {
    pub name: String,
    pub repo_key: String,
    pub cache: String,
    /// As the engine says it (RFC 3339).
    pub created_at: Option<String>,
}

/// Where this host keeps the last use of cache volume `volume` of engine `engine` (the
/// file's mtime, set when a job's fill used it): jobs cannot forge it.
pub fn last_use_mark(root: &std::path::Path, engine: &str, volume: &str) -> std::path::PathBuf {
    root.join("engine-caches").join(engine).join(volume)
}

/// Where `create` stages a remote job's `copy` files as a tar for the fill (in its job dir).
pub fn staged_copies(job_dir: &std::path::Path) -> std::path::PathBuf {
    job_dir.join("stage-copy.tar")
}

/// What filling a remote job's files sent to its engine (`runtime/docker/remote/fill.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct FillReport {
    /// The pack's size: what went over the wire for the repository's objects.
    pub bytes: u64,
    /// The objects in it.
    pub objects: usize,
}

/// The test switch: any bind mount of a host path into a remote engine's container fails.
pub fn forbid_host_binds() -> bool {
    std::env::var_os("PADDOCK_TEST_FORBID_HOST_BINDS").is_some_and(|v| v == "1")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(host: &str, tls: bool) -> EngineSpec {
        EngineSpec {
            host: host.into(),
            tls: tls.then(|| EngineTls {
                ca: "ca.pem".into(),
                cert: "cert.pem".into(),
                key: "key.pem".into(),
            }),
            jobs: None,
            context: None,
            ssh_options: Vec::new(),
        }
    }

    #[test]
    fn an_engine_is_reached_by_tls_or_ssh_only() {
        assert!(check("build1", &spec("tcp://10.0.0.2:2376", true)).is_ok());
        assert!(check("gpu", &spec("ssh://me@gpu", false)).is_ok());
        assert!(check("gpu", &spec("ssh://me@gpu", true)).is_err());
        assert!(check("gpu", &spec("ssh://-oProxyCommand=x", false)).is_err());
        assert!(check("b", &spec("tcp://10.0.0.2:2375", false)).is_err());
        assert!(check("b", &spec("unix:///var/run/docker.sock", false)).is_err());
        assert!(check("auto", &spec("tcp://h:2376", true)).is_err());
        assert!(check("a b", &spec("tcp://h:2376", true)).is_err());
    }
}
