//! [`Runtimes`]: one runtime of each kind for an install, and the runtimes of remote
//! engines made when first asked for; the engine picks a job's by its recorded kind and engine.

use std::sync::Arc;

use super::*;

/// One runtime of each kind, for an install. The engine holds one; tests may build their own
/// with [`Runtimes::with`].
#[derive(Clone)]
pub struct Runtimes {
    pub(super) docker: Arc<dyn Runtime>,
    pub(super) runsc: Arc<dyn Runtime>,
    pub(super) process: Arc<dyn Runtime>,
    /// Runtimes of remote engines, made when first asked for (`on_engine`).
    pub(super) remote: Option<on_engine::Remote>,
    /// `None` for a test's own set ([`Runtimes::with`]): microVM jobs are then refused.
    pub(super) microvm: Option<Arc<dyn Runtime>>,
}

impl Runtimes {
    /// The real runtimes for the install at `home`.
    pub fn new(home: &PaddockHome) -> Runtimes {
        Runtimes {
            docker: Arc::new(docker::DockerRuntime::new(home, RuntimeKind::Docker)),
            runsc: Arc::new(docker::DockerRuntime::new(home, RuntimeKind::Runsc)),
            process: Arc::new(process::ProcessRuntime),
            remote: Some(on_engine::Remote::new(home)),
            microvm: Some(Arc::new(microvm::MicrovmRuntime::new(home))),
        }
    }

    /// Runtimes of the caller's choosing (a test double, say) for each kind.
    pub fn with(
        docker: Arc<dyn Runtime>,
        runsc: Arc<dyn Runtime>,
        process: Arc<dyn Runtime>,
    ) -> Runtimes {
        Runtimes {
            docker,
            runsc,
            process,
            remote: None,
            microvm: None,
        }
    }

    /// The runtime of a job of `kind`.
    pub fn of(&self, kind: RuntimeKind) -> &dyn Runtime {
        match kind {
            RuntimeKind::Docker => self.docker.as_ref(),
            RuntimeKind::Runsc => self.runsc.as_ref(),
            RuntimeKind::Process => self.process.as_ref(),
            RuntimeKind::Microvm => self.microvm.as_deref().unwrap_or(self.process.as_ref()),
        }
    }

    /// The runtime that keeps sandboxes on the machine (containers), for listing and reaping
    /// them: runc and runsc jobs share one daemon and one set of labels.
    pub fn with_sandboxes(&self) -> &dyn Runtime {
        self.docker.as_ref()
    }

    /// Resolves a profile's runtime choice for a job with `network`. `auto` takes Docker when
    /// the daemon answers and the image is present, else the process runtime with a warning
    /// naming what is missing; an explicit `docker`/`runsc` never falls back. A runtime that
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
            RuntimeChoice::Microvm if self.microvm.is_none() => {
                return Err(RuntimeError::Unsupported {
                    runtime: "test",
                    what: "run microVM jobs",
                });
            }
            RuntimeChoice::Microvm => RuntimeKind::Microvm,
            RuntimeChoice::Auto => {
                return match self.docker.check_ready(image, network).await {
                    Ok(()) => Ok(Resolved {
                        kind: RuntimeKind::Docker,
                        warning: None,
                    }),
                    Err(missing) => {
                        self.process.check_ready(image, network).await?;
                        Ok(Resolved {
                            kind: RuntimeKind::Process,
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
