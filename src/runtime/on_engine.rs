//! The runtimes of remote engines (`engines:`): one per (engine, kind), made by the maker
//! the kind registered when a job on that engine is first touched, and kept for the install.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

pub(super) use super::absent::{ABSENT, Absent};
use super::{Runtime, Runtimes};
use crate::job::RuntimeKind;
use crate::store::PaddockHome;

/// The runtimes made so far, by (engine, kind).
type Made = BTreeMap<(String, String), Arc<dyn Runtime>>;

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
    /// The runtime of a job of `kind` on `engine` (`None`: this host, as [`of`](Self::of)).
    /// A kind that registered no remote maker answers for every engine with its local
    /// runtime (a test's double does).
    pub fn on_engine(&self, kind: RuntimeKind, engine: Option<&str>) -> Arc<dyn Runtime> {
        let local = || {
            self.registered_arc(kind)
                .cloned()
                .unwrap_or_else(|| Arc::new(Absent))
        };
        let Some(engine) = engine else {
            return local();
        };
        let Some((_, make)) = self.registry.remote.iter().find(|(k, _)| *k == kind) else {
            return local();
        };
        self.remote
            .made
            .lock()
            .expect("the runtime map is never poisoned")
            .entry((engine.to_string(), kind.to_string()))
            .or_insert_with(|| make(&self.remote.home, kind, engine))
            .clone()
    }
}
