//! The microVM runtime's errors, how they become the runtime's, and the removal of a VM's
//! host cgroup that reports one (shared by the job and pool-slot paths).

use std::path::PathBuf;
use std::time::Duration;

use super::{cgroup, protocol};
use crate::runtime::RuntimeError;

#[derive(Debug, thiserror::Error)]
pub enum MicrovmError {
    #[error("{what} is missing at `{path}`: {hint}")]
    Missing {
        what: &'static str,
        path: PathBuf,
        hint: &'static str,
    },
    #[error("{message}")]
    Config { message: String },
    #[error("building the {what} failed: {message}")]
    Build { what: &'static str, message: String },
    #[error("the VM did not start: {message}")]
    Start { message: String },
    #[error("the VM is not running; its console ended with:\n{console}")]
    NotRunning { console: String },
    #[error(
        "the VM's guest agent did not answer within {after:?} ({message}); console:\n{console}"
    )]
    NoAnswer {
        after: Duration,
        message: String,
        console: String,
    },
    #[error("the guest could not run the command: {message}")]
    Exec { message: String },
    #[error("the job has no git dir yet")]
    NoGitDir,
    #[error("`{path}` cannot be shared into a VM (spaces, commas and colons are not allowed)")]
    Path { path: PathBuf },
    #[error("the microVM runtime needs root (virtiofsd and the read-only shares mount as root)")]
    NotRoot,
    #[error("the guest agent's channel: {0}")]
    Frame(#[from] protocol::FrameError),
    #[error("the guest agent's channel: {0}")]
    Channel(#[from] std::io::Error),
    #[error("`{path}`: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Runtime(#[from] Box<RuntimeError>),
}

impl From<RuntimeError> for MicrovmError {
    fn from(error: RuntimeError) -> Self {
        MicrovmError::Runtime(Box::new(error))
    }
}

pub(super) fn runtime_error(error: MicrovmError) -> RuntimeError {
    match error {
        MicrovmError::Runtime(inner) => *inner,
        other => RuntimeError::Microvm(Box::new(other)),
    }
}

/// Removes the host cgroup of VM `name` (a job's or a pool slot's) whose processes were
/// just ended, killing what is left in it; an error when it still holds processes.
pub(super) async fn end_cgroup(
    cgroup: Result<cgroup::VmCgroup, MicrovmError>,
    name: &str,
) -> Result<(), RuntimeError> {
    let Ok(cgroup) = cgroup else {
        return Ok(());
    };
    if cgroup.kill_and_remove().await {
        Ok(())
    } else {
        Err(RuntimeError::Microvm(Box::new(MicrovmError::Start {
            message: format!("the host cgroup of VM `{name}` still holds processes"),
        })))
    }
}
