//! The sweep's view of jobs on remote engines (`engines:`): each such job's containers are
//! listed on its own engine, and a job whose engine does not answer is `unreachable`: kept,
//! never removed or marked failed (its work is on a machine the sweep cannot see, and comes
//! back when that engine does).

use crate::engine::Paddock;
use crate::job::JobRecord;
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
}
