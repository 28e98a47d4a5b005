//! The runtimes of remote engines (`engines:`): one `DockerRuntime` per (engine, OCI
//! runtime), made when a job on that engine is first touched and kept for the install.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::{Runtime, Runtimes, docker::DockerRuntime};
use crate::job::RuntimeKind;
use crate::store::PaddockHome;

/// The runtimes made so far, by (engine, gVisor or not).
type Made = BTreeMap<(String, bool), Arc<dyn Runtime>>;

#[derive(Clone)]
pub(super) struct Remote {
    home: PaddockHome,
    made: Arc<Mutex<Made>>,
}

impl Remote {
    pub(super) fn new(home: &PaddockHome) -> Remote {
        Remote {
            home: home.clone(),
            made: Arc::default(),
        }
    }
}

impl Runtimes {
    /// The runtime of a job of `kind` on `engine` (`None`: the local engine, as
    /// [`of`](Self::of)). Runtimes a test made with [`with`](Self::with) have no remote
    /// engines: theirs answer for every engine.
    pub fn on_engine(&self, kind: RuntimeKind, engine: Option<&str>) -> Arc<dyn Runtime> {
        let local = match kind {
            RuntimeKind::Docker => &self.docker,
            RuntimeKind::Runsc => &self.runsc,
            RuntimeKind::Process => &self.process,
            RuntimeKind::Microvm => self.microvm.as_ref().unwrap_or(&self.process),
        };
        let (Some(engine), Some(remote), true) = (engine, &self.remote, kind.uses_docker()) else {
            return local.clone();
        };
        let key = (engine.to_string(), kind == RuntimeKind::Runsc);
        remote
            .made
            .lock()
            .expect("the runtime map is never poisoned")
            .entry(key)
            .or_insert_with(|| {
                Arc::new(DockerRuntime::on_engine(
                    &remote.home,
                    kind,
                    Some(engine.to_string()),
                ))
            })
            .clone()
    }
}
