//! Connecting to a remote engine: its entry as read once, a client over TLS or ssh (kept
//! per entry), and the `docker` CLI's flags that reach it.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use bollard::Docker;

use crate::engines::EngineSpec;
use crate::runtime::RuntimeError;
use crate::runtime::docker::API_TIMEOUT;

/// A remote engine: its name in `engines:` and its entry there, read once when its runtime
/// was made (or why it could not be read, said at each call).
#[derive(Debug)]
pub struct RemoteEngine {
    pub name: String,
    pub spec: Result<EngineSpec, String>,
}

/// The entry of a remote engine, or why it could not be read.
fn spec_of(engine: &RemoteEngine) -> Result<&EngineSpec, RuntimeError> {
    engine
        .spec
        .as_ref()
        .map_err(|message| RuntimeError::DockerUnavailable {
            message: format!("engine `{}`: {message}", engine.name),
        })
}

/// The `docker` CLI's global flags that reach a remote engine, over TLS or through this
/// process's ssh relay.
pub(crate) fn cli_flags(engine: &RemoteEngine) -> Result<Vec<std::ffi::OsString>, RuntimeError> {
    let (name, spec) = (engine.name.as_str(), spec_of(engine)?);
    // An ssh engine: the CLI goes through this process's relay, so `ssh_options` hold.
    if spec.host.starts_with("ssh://") {
        let socket = super::ssh::relay_socket(&spec.host, &spec.ssh_options)?;
        let mut host = std::ffi::OsString::from("unix://");
        host.push(socket);
        return Ok(vec!["--host".into(), host]);
    }
    let Some(tls) = &spec.tls else {
        return Err(RuntimeError::DockerUnavailable {
            message: format!("engine `{name}`: `{}` has no `tls:`", spec.host),
        });
    };
    let mut flags: Vec<std::ffi::OsString> = vec!["--host".into(), spec.host.clone().into()];
    flags.push("--tlsverify".into());
    for (flag, path) in [
        ("--tlscacert", &tls.ca),
        ("--tlscert", &tls.cert),
        ("--tlskey", &tls.key),
    ] {
        flags.push(flag.into());
        flags.push(path.clone().into_os_string());
    }
    Ok(flags)
}

/// A client for a remote engine, over TLS or ssh. Clients are kept per (name, settings), so
/// a runtime made from a changed entry gets a client of its own.
pub(crate) fn connect_engine(engine: &RemoteEngine) -> Result<Docker, RuntimeError> {
    let name = engine.name.as_str();
    static CLIENTS: OnceLock<Mutex<HashMap<String, Docker>>> = OnceLock::new();
    let unavailable = |message: String| RuntimeError::DockerUnavailable {
        message: format!("engine `{name}`: {message}"),
    };
    let spec = spec_of(engine)?;
    let key = format!("{name} {spec:?}");
    let clients = CLIENTS.get_or_init(Default::default);
    if let Some(docker) = clients
        .lock()
        .expect("the client map is never poisoned")
        .get(&key)
    {
        return Ok(docker.clone());
    }
    let docker = if spec.host.starts_with("ssh://") {
        // Each connection is an `ssh … docker system dial-stdio` (see `ssh`).
        let socket = super::ssh::relay_socket(&spec.host, &spec.ssh_options)?;
        Docker::connect_with_socket(
            &socket.to_string_lossy(),
            API_TIMEOUT.as_secs(),
            bollard::API_DEFAULT_VERSION,
        )
    } else {
        let Some(tls) = &spec.tls else {
            return Err(unavailable(format!("`{}` has no `tls:`", spec.host)));
        };
        Docker::connect_with_ssl(
            &spec.host,
            &tls.key,
            &tls.cert,
            &tls.ca,
            API_TIMEOUT.as_secs(),
            bollard::API_DEFAULT_VERSION,
        )
    }
    .map_err(|e| unavailable(e.to_string()))?;
    clients
        .lock()
        .expect("the client map is never poisoned")
        .insert(key, docker.clone());
    Ok(docker)
}
