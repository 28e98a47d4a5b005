//! Docker runtime (in progress).
use super::RuntimeError;
use crate::job::{JobId, JobRecord, RuntimeKind};
use crate::store::{JobStore, PaddockHome};

pub async fn check_ready(_kind: RuntimeKind, _image: &str) -> Result<(), RuntimeError> {
    Err(RuntimeError::DockerUnavailable {
        message: "not built yet".into(),
    })
}
pub async fn create_job_container(
    _home: &PaddockHome,
    _record: &JobRecord,
) -> Result<String, RuntimeError> {
    Err(RuntimeError::DockerUnavailable {
        message: "not built yet".into(),
    })
}
pub async fn stop_job_container(
    _home: &PaddockHome,
    _store: &JobStore,
    record: JobRecord,
) -> Result<JobRecord, RuntimeError> {
    Ok(record)
}
pub async fn remove_job_container(_home: &PaddockHome, _id: &JobId) -> Result<(), RuntimeError> {
    Ok(())
}
