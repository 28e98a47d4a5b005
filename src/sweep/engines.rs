//! The sweep's view of jobs on remote engines (`engines:`): each such job's containers are
//! listed on its own engine, and a job whose engine does not answer is `unreachable`: kept,
//! never removed or marked failed (its work is on a machine the sweep cannot see, and comes
//! back when that engine does). The install's containers on an engine that answers whose
//! job has no record are reaped there as on the local engine.

use super::{SweepOptions, SweepReport};
use crate::engine::Paddock;
use crate::job::{JobRecord, RuntimeKind};
use crate::runtime::Sandbox;

impl Paddock {
    /// The install's containers on a remote job's engine, or why that engine did not answer.
    pub(super) async fn engine_sandboxes(
        &self,
        record: &JobRecord,
    ) -> Result<Vec<Sandbox>, String> {
        let runtime = self
            .runtimes()
            .on_engine(record.runtime, record.engine.as_deref());
        runtime.list_sandboxes().await.map_err(|e| e.to_string())
    }

    /// The install's orphans on each engine of `engines:` that answers (see
    /// `reap_orphans_on`). A remote job's volumes stay with its container gone: they hold
    /// its files, and with no record the sweep cannot save its work first; the report names
    /// them (`kept`) with the way to look.
    pub(super) async fn reap_engine_orphans(
        &self,
        options: &SweepOptions,
        report: &mut SweepReport,
    ) {
        let Ok(config) = self.config(None) else {
            return;
        };
        for name in config.engines.keys() {
            let runtime = self.runtimes().on_engine(RuntimeKind::Docker, Some(name));
            self.reap_orphans_on(runtime.as_ref(), options, report)
                .await;
        }
    }
}
