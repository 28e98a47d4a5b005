//! What a runtime's `register` fills: the kinds it serves on this host, how its runtime is
//! made on a remote engine, and whether it is the machine's image engine. A file apart from
//! the list of runtimes (`registry.rs`), which imports every runtime's folder, so that no
//! runtime's folder imports that list back.

use std::sync::Arc;

use super::{Runtime, RuntimeKind};
use crate::store::PaddockHome;

/// Makes the runtime of a kind on a remote engine of `engines:`, from the engine's entry as
/// read (or why it could not be read).
pub type RemoteMaker = fn(
    &PaddockHome,
    RuntimeKind,
    &str,
    &Result<crate::engines::EngineSpec, String>,
) -> Arc<dyn Runtime>;

/// What the runtimes' `register` functions fill.
#[derive(Default)]
pub struct Registry {
    pub(super) kinds: Vec<(RuntimeKind, Arc<dyn Runtime>)>,
    /// The kinds whose jobs may live on a remote engine, and how their runtimes are made.
    pub(super) remote: Vec<(RuntimeKind, RemoteMaker)>,
    /// The kinds whose jobs run in containers of this machine's image engine; the first is
    /// the engine's own runtime: it builds and lists images, answers `doctor`'s engine rows,
    /// and lists the containers the sweep looks at.
    pub(super) engine: Vec<RuntimeKind>,
    /// The kind `auto` falls back to when the engine cannot take a job.
    pub(super) fallback: Option<RuntimeKind>,
}

impl Registry {
    /// `runtime` serves jobs of `kind` on this host.
    pub fn add(&mut self, kind: RuntimeKind, runtime: Arc<dyn Runtime>) {
        self.kinds.retain(|(k, _)| *k != kind);
        self.kinds.push((kind, runtime));
    }

    /// Jobs of `kind` may also live on a remote engine; `make` builds their runtime there.
    pub fn add_remote(&mut self, kind: RuntimeKind, make: RemoteMaker) {
        self.remote.retain(|(k, _)| *k != kind);
        self.remote.push((kind, make));
    }

    /// Jobs of `kind` run in the image engine's containers; the first kind added is the
    /// engine's own runtime.
    pub fn add_to_engine(&mut self, kind: RuntimeKind) {
        if !self.engine.contains(&kind) {
            self.engine.push(kind);
        }
    }

    /// Jobs of `kind` are what `auto` gives when the engine cannot take one.
    pub fn set_fallback(&mut self, kind: RuntimeKind) {
        self.fallback = Some(kind);
    }
}
