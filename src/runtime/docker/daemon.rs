//! Which Docker daemon a call goes to: a [`Daemon`] value, this host's or an engine of the
//! user config's `engines:` with the entry it was made from (`remote::connect` makes its
//! client). Each `DockerRuntime` holds one and passes it down to every call it makes, so
//! which daemon a call reaches is never ambient state, and no call reads the config again.

use bollard::Docker;

use super::API_TIMEOUT;
use super::remote::connect::{RemoteEngine, cli_flags, connect_engine};
use crate::engines::EngineSpec;
use crate::runtime::RuntimeError;

/// The Docker daemon a call goes to: this host's, or an engine of the user config's
/// `engines:` with the entry it was made from. Each `DockerRuntime` holds one and passes it
/// down to every call it makes, so which daemon a call reaches is a value, never ambient
/// state, and no call reads the config again.
#[derive(Debug, Clone, Default)]
pub struct Daemon {
    engine: Option<std::sync::Arc<RemoteEngine>>,
}

impl Daemon {
    /// This host's daemon.
    pub fn local() -> Daemon {
        Daemon::default()
    }

    /// Engine `name` of the user config, with its entry as read (or why it was not).
    pub fn remote(name: &str, spec: Result<EngineSpec, String>) -> Daemon {
        Daemon {
            engine: Some(std::sync::Arc::new(RemoteEngine {
                name: name.to_string(),
                spec,
            })),
        }
    }

    /// The engine's name in `engines:`, if this is a remote one.
    pub fn engine(&self) -> Option<&str> {
        self.engine.as_ref().map(|engine| engine.name.as_str())
    }

    pub fn is_remote(&self) -> bool {
        self.engine.is_some()
    }

    /// The `docker` CLI's global flags that reach this daemon (none for this host's): for
    /// what only the CLI does well, an interactive `exec -it`.
    pub(crate) fn cli_flags(&self) -> Result<Vec<std::ffi::OsString>, RuntimeError> {
        match &self.engine {
            Some(engine) => cli_flags(engine),
            None => Ok(Vec::new()),
        }
    }

    /// A client of this daemon, with the API deadline.
    pub fn connect(&self) -> Result<Docker, RuntimeError> {
        if let Some(engine) = &self.engine {
            return connect_engine(engine);
        }
        Docker::connect_with_local_defaults()
            .map(|docker| docker.with_timeout(API_TIMEOUT))
            .map_err(|e| RuntimeError::DockerUnavailable {
                message: e.to_string(),
            })
    }
}
