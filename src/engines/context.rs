//! Docker's own contexts (`docker context create NAME --docker host=…,ca=…,cert=…,key=…`)
//! as engines: an entry `{context: NAME}` of `engines:` takes its endpoint and TLS files from
//! the Docker CLI's context store, so a machine already set up for `docker --context NAME`
//! needs no second copy of its address and certificates.
//!
//! The store is `$DOCKER_CONFIG` (default `~/.docker`): `contexts/meta/<sha256 of the
//! name>/meta.json` holds the endpoint, `contexts/tls/<same>/docker/{ca,cert,key}.pem` the
//! TLS files. A context that skips TLS verification, or has no TLS files for a `tcp://`
//! host, is refused by the same check as any entry: paddock never talks to an engine in
//! clear.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::EngineTls;

#[derive(Deserialize)]
struct Meta {
    #[serde(rename = "Name")]
    name: String,
    #[serde(rename = "Endpoints")]
    endpoints: Endpoints,
}

#[derive(Deserialize)]
struct Endpoints {
    docker: Endpoint,
}

#[derive(Deserialize)]
struct Endpoint {
    #[serde(rename = "Host")]
    host: String,
    #[serde(rename = "SkipTLSVerify", default)]
    skip_tls_verify: bool,
}

/// The Docker CLI's configuration directory.
fn docker_config() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker"))
}

/// The endpoint and TLS files of Docker context `context`, or why they cannot be used.
pub fn resolve(context: &str) -> Result<(String, Option<EngineTls>), String> {
    let config =
        docker_config().ok_or("no Docker configuration directory (set DOCKER_CONFIG or HOME)")?;
    resolve_in(&config.join("contexts"), context)
}

fn resolve_in(store: &Path, context: &str) -> Result<(String, Option<EngineTls>), String> {
    let key = crate::ids::hex(&Sha256::digest(context.as_bytes()));
    let meta_path = store.join("meta").join(&key).join("meta.json");
    let bytes = std::fs::read(&meta_path).map_err(|e| {
        format!(
            "Docker context `{context}` ({}): {e}; `docker context ls` lists the contexts",
            meta_path.display()
        )
    })?;
    let meta: Meta = serde_json::from_slice(&bytes)
        .map_err(|e| format!("Docker context `{context}` ({}): {e}", meta_path.display()))?;
    if meta.name != context {
        return Err(format!(
            "Docker context `{context}`: {} names `{}`",
            meta_path.display(),
            meta.name
        ));
    }
    if meta.endpoints.docker.skip_tls_verify {
        return Err(format!(
            "Docker context `{context}` skips TLS verification: paddock never does"
        ));
    }
    let tls_dir = store.join("tls").join(&key).join("docker");
    let tls = tls_dir.join("ca.pem").is_file().then(|| EngineTls {
        ca: tls_dir.join("ca.pem"),
        cert: tls_dir.join("cert.pem"),
        key: tls_dir.join("key.pem"),
    });
    Ok((meta.endpoints.docker.host, tls))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with(context: &str, meta: &str, tls: bool) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        let key = crate::ids::hex(&Sha256::digest(context.as_bytes()));
        let meta_dir = dir.path().join("meta").join(&key);
        std::fs::create_dir_all(&meta_dir).expect("mkdir");
        std::fs::write(meta_dir.join("meta.json"), meta).expect("write");
        if tls {
            let tls_dir = dir.path().join("tls").join(&key).join("docker");
            std::fs::create_dir_all(&tls_dir).expect("mkdir");
            for name in ["ca.pem", "cert.pem", "key.pem"] {
                std::fs::write(tls_dir.join(name), "pem").expect("write");
            }
        }
        dir
    }

    #[test]
    fn a_context_gives_its_endpoint_and_tls_files_and_skipping_verification_is_refused() {
        let meta = r#"{"Name":"b1","Metadata":{},"Endpoints":{"docker":{"Host":"tcp://10.0.0.2:2376","SkipTLSVerify":false}}}"#;
        let store = store_with("b1", meta, true);
        let (host, tls) = resolve_in(store.path(), "b1").expect("resolves");
        assert_eq!(host, "tcp://10.0.0.2:2376");
        let tls = tls.expect("tls files");
        assert!(tls.key.ends_with("docker/key.pem"), "{tls:?}");
        // No TLS files: no `tls`, which the entry check then refuses for a tcp host.
        let store = store_with("b1", meta, false);
        assert!(
            resolve_in(store.path(), "b1")
                .expect("resolves")
                .1
                .is_none()
        );
        let skip = meta.replace("\"SkipTLSVerify\":false", "\"SkipTLSVerify\":true");
        let store = store_with("b1", &skip, true);
        let error = resolve_in(store.path(), "b1").expect_err("refused");
        assert!(error.contains("skips TLS verification"), "{error}");
        let error = resolve_in(store.path(), "nope").expect_err("unknown");
        assert!(error.contains("docker context ls"), "{error}");
    }
}
