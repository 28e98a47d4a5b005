//! [`Runtimes`]: the runtimes that registered (`registry.rs`), and the runtimes of remote
//! engines made when first asked for; the engine picks a job's by its recorded kind and
//! engine.

use std::sync::Arc;

use super::registration::Registry;
use super::registry::{REGISTERED, Register};
use super::*;
use crate::store::PaddockHome;

/// The runtimes of an install. The engine holds one; a test builds its own from the test
/// double's registration ([`Runtimes::registered`]).
#[derive(Clone)]
pub struct Runtimes {
    pub(super) registry: Arc<Registry>,
    /// Runtimes of remote engines, made when first asked for (`on_engine`).
    pub(super) remote: on_engine::Remote,
}

impl Runtimes {
    /// The real runtimes for the install at `home`.
    pub fn new(home: &PaddockHome) -> Runtimes {
        Runtimes::registered(home, REGISTERED)
    }

    /// The runtimes `registers` add, for the install at `home`.
    pub fn registered(home: &PaddockHome, registers: &[Register<'_>]) -> Runtimes {
        let mut registry = Registry::default();
        for register in registers {
            register(&mut registry, home);
        }
        Runtimes {
            registry: Arc::new(registry),
            remote: on_engine::Remote::new(home),
        }
    }

    /// The runtime of a job of `kind` on this host; one that refuses everything when no
    /// runtime of that kind registered.
    pub fn of(&self, kind: RuntimeKind) -> &dyn Runtime {
        match self.registry.kinds.iter().find(|(k, _)| *k == kind) {
            Some((_, runtime)) => runtime.as_ref(),
            None => &on_engine::ABSENT,
        }
    }

    pub(super) fn registered_arc(&self, kind: RuntimeKind) -> Option<&Arc<dyn Runtime>> {
        self.registry
            .kinds
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, runtime)| runtime)
    }

    /// This host's image engine (the runtime that builds images and keeps the containers
    /// the sweep lists), or one that refuses everything when none registered.
    pub fn with_sandboxes(&self) -> &dyn Runtime {
        match self.registry.engine.first() {
            Some(kind) => self.of(*kind),
            None => &on_engine::ABSENT,
        }
    }

    /// The image engine on `engine` (`None`: this host's).
    pub fn engine(&self, engine: Option<&str>) -> Arc<dyn Runtime> {
        match self.registry.engine.first() {
            Some(kind) => self.on_engine(*kind, engine),
            None => Arc::new(on_engine::Absent),
        }
    }

    /// Whether jobs of `kind` run in containers of the image engine (the sweep lists those
    /// with [`with_sandboxes`](Self::with_sandboxes); a cache or a checkout is shared with
    /// them as with a container).
    pub fn in_engine(&self, kind: RuntimeKind) -> bool {
        self.registry.engine.contains(&kind)
    }

    /// The kind a remote job of `choice` gets: the engine's gVisor when asked for, else its
    /// runc.
    pub fn remote_kind(&self, choice: RuntimeChoice) -> RuntimeKind {
        match choice {
            RuntimeChoice::Runsc => RuntimeKind::Runsc,
            _ => RuntimeKind::Docker,
        }
    }

    /// The kind of the image engine's own jobs (an orphan container's stand-in record).
    pub fn engine_kind(&self) -> RuntimeKind {
        self.registry
            .engine
            .first()
            .copied()
            .unwrap_or(RuntimeKind::Docker)
    }

    /// The runtime `auto` falls back to (the process runtime).
    pub fn fallback(&self) -> &dyn Runtime {
        match self.registry.fallback {
            Some(kind) => self.of(kind),
            None => &on_engine::ABSENT,
        }
    }

    /// The runtimes of this host whose sandboxes are not the image engine's containers (a
    /// microVM's), each listed and reaped by the sweep on its own.
    pub fn apart_from_engine(&self) -> impl Iterator<Item = &dyn Runtime> {
        self.registry
            .kinds
            .iter()
            .filter(|(kind, runtime)| {
                !self.registry.engine.contains(kind) && runtime.capabilities().sandboxes.is_some()
            })
            .map(|(_, runtime)| runtime.as_ref())
    }

    /// Every runtime registered on this host, once each.
    pub fn all(&self) -> impl Iterator<Item = &dyn Runtime> {
        self.registry
            .kinds
            .iter()
            .map(|(_, runtime)| runtime.as_ref())
    }

    /// Resolves a profile's runtime choice for a job with `network`. `auto` takes the image
    /// engine when it answers and the image is present, else the process runtime with a
    /// warning naming what is missing; an explicit choice never falls back. A runtime that
    /// cannot give the job its limits or its network is an error.
    pub async fn resolve(
        &self,
        choice: RuntimeChoice,
        image: &str,
        network: NetworkMode,
    ) -> Result<Resolved, RuntimeError> {
        let kind = match choice {
            RuntimeChoice::Process => RuntimeKind::Process,
            RuntimeChoice::Docker => RuntimeKind::Docker,
            RuntimeChoice::Runsc => RuntimeKind::Runsc,
            RuntimeChoice::Microvm => RuntimeKind::Microvm,
            RuntimeChoice::Auto => {
                let (engine, fallback) = (self.engine_kind(), self.registry.fallback);
                return match self.of(engine).check_ready(image, network).await {
                    Ok(()) => Ok(Resolved {
                        kind: engine,
                        warning: None,
                    }),
                    Err(missing) => {
                        let Some(fallback) = fallback else {
                            return Err(missing);
                        };
                        self.of(fallback).check_ready(image, network).await?;
                        Ok(Resolved {
                            kind: fallback,
                            warning: Some(format!(
                                "using the process runtime (no file or network isolation): {missing}"
                            )),
                        })
                    }
                };
            }
        };
        self.of(kind).check_ready(image, network).await?;
        Ok(Resolved {
            kind,
            warning: None,
        })
    }
}
