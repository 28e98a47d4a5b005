//! The runtime of a kind no runtime registered (a test's own registry without a microVM,
//! say): every call is refused with the same error, nothing is started or removed.

use std::time::Duration;

use super::{
    Capabilities, Described, ExecOutcome, ExecRequest, ExecResult, OutputSink, Runtime,
    RuntimeError, SandboxLayout, SandboxStatus,
};
use crate::config::NetworkMode;
use crate::job::JobRecord;
use crate::store::JobStore;

/// Refuses every job.
pub struct Absent;

/// The one [`Absent`], for lookups that hand out a reference.
pub static ABSENT: Absent = Absent;
static HOST: SandboxLayout = SandboxLayout::Host;

fn refused() -> RuntimeError {
    RuntimeError::Unsupported {
        runtime: "absent",
        what: "run jobs of a kind no runtime of this build registered",
    }
}

#[async_trait::async_trait]
impl Runtime for Absent {
    fn describe(&self) -> Described<'_> {
        Described {
            name: "absent",
            isolation: "none: no runtime of this kind is registered",
            engine: None,
            ports: false,
            host_caches: true,
            fuse_checkout: None,
        }
    }
    fn layout(&self) -> &SandboxLayout {
        &HOST
    }
    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities::default()
    }
    async fn check_ready(&self, _image: &str, _network: NetworkMode) -> Result<(), RuntimeError> {
        Err(refused())
    }
    async fn start(&self, _record: &JobRecord) -> Result<Option<String>, RuntimeError> {
        Err(refused())
    }
    async fn exec(
        &self,
        _record: &JobRecord,
        _request: &ExecRequest,
        _sink: &mut dyn OutputSink,
    ) -> Result<ExecOutcome, RuntimeError> {
        Err(refused())
    }
    async fn exec_in_sandbox(
        &self,
        _record: &JobRecord,
        _request: &ExecRequest,
        _sink: &mut dyn OutputSink,
    ) -> Result<ExecResult, RuntimeError> {
        Err(refused())
    }
    async fn shell_command(
        &self,
        _record: &JobRecord,
    ) -> Result<tokio::process::Command, RuntimeError> {
        Err(refused())
    }
    async fn stop(&self, _record: &JobRecord, _grace: Duration) -> Result<bool, RuntimeError> {
        Ok(false)
    }
    async fn stop_for_removal(
        &self,
        _store: &JobStore,
        record: JobRecord,
    ) -> Result<JobRecord, RuntimeError> {
        Ok(record)
    }
    async fn destroy(&self, _record: &JobRecord) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn status(&self, _record: &JobRecord) -> Option<SandboxStatus> {
        None
    }
}
