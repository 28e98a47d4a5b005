//! The runtimes of remote engines (`engines:`): one per (engine, kind, entry), made by the
//! maker the kind registered when a job on that engine is first touched, and kept for the
//! install. The engines' entries are read from the user config once and carried in each
//! runtime (no connection reads the config); the file is read again only when it changed
//! (its length or modification time), so a long-running `serve` follows an edited entry.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

pub(super) use super::absent::{ABSENT, Absent};
use super::{Runtime, Runtimes};
use crate::engines::EngineSpec;
use crate::job::RuntimeKind;
use crate::store::PaddockHome;

/// The runtimes made so far, by (engine, kind, entry).
type Made = BTreeMap<(String, String, String), Arc<dyn Runtime>>;

/// The user config file's identity when its engines were read: path, length, mtime.
type Stamp = Option<(std::path::PathBuf, u64, std::time::SystemTime)>;

/// The engines of the user config as last read.
struct Entries {
    read: Option<Stamp>,
    engines: Result<BTreeMap<String, EngineSpec>, String>,
}

impl Default for Entries {
    fn default() -> Entries {
        Entries {
            read: None,
            engines: Ok(BTreeMap::new()),
        }
    }
}

#[derive(Clone)]
pub(super) struct Remote {
    home: PaddockHome,
    made: Arc<Mutex<Made>>,
    entries: Arc<Mutex<Entries>>,
}

impl Remote {
    pub(super) fn new(home: &PaddockHome) -> Remote {
        Remote {
            home: home.clone(),
            made: Arc::default(),
            entries: Arc::default(),
        }
    }

    /// Engine `name`'s entry of the user config, read again only when the file changed.
    fn entry(&self, name: &str) -> Result<EngineSpec, String> {
        let env = crate::env::ProcessEnv;
        let stamp = crate::config::user_config_path(&env).and_then(|(path, _)| {
            let meta = std::fs::metadata(&path).ok()?;
            Some((path, meta.len(), meta.modified().ok()?))
        });
        let mut entries = self.entries.lock().expect("the entries are never poisoned");
        if entries.read.as_ref() != Some(&stamp) {
            entries.engines = crate::config::Config::load(None, &env)
                .map(|config| config.engines)
                .map_err(|error| error.to_string());
            entries.read = Some(stamp);
        }
        let engines = entries.engines.as_ref().map_err(Clone::clone)?;
        crate::engines::find(engines, name)
            .cloned()
            .map_err(|error| error.to_string())
    }
}

impl Runtimes {
    /// The runtime of `record`'s job: its recorded kind on its recorded engine. The one
    /// place outside a runtime that reads `JobRecord::engine` to decide anything; the rest
    /// ask the runtime this returns (its `describe`, `layout` and `capabilities`).
    pub fn of_job(&self, record: &crate::job::JobRecord) -> Arc<dyn Runtime> {
        self.on_engine(record.runtime, record.engine.as_deref())
    }

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
        let spec = self.remote.entry(engine);
        self.remote
            .made
            .lock()
            .expect("the runtime map is never poisoned")
            .entry((engine.to_string(), kind.to_string(), format!("{spec:?}")))
            .or_insert_with(|| make(&self.remote.home, kind, engine, &spec))
            .clone()
    }
}
