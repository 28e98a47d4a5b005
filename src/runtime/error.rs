//! What a runtime's calls fail with: one enum for every runtime (Docker, process, and the
//! ones to come), each case naming the input that failed; `error::Error` maps it once onto
//! an `ErrorKind` (exit code, HTTP status, hint).

use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot reach the Docker daemon: {message}")]
    DockerUnavailable { message: String },
    #[error("image `{image}` is not present")]
    ImageMissing { image: String },
    #[error("Docker runtime `{runtime}` is not registered with the daemon")]
    OciRuntimeMissing { runtime: String },
    #[error("Docker runtime `{runtime}` is registered with `{flag}`: {consequence}")]
    OciRuntimeMisconfigured {
        runtime: String,
        flag: String,
        consequence: String,
    },
    #[error("docker {action} failed for `{target}`: {message}")]
    Docker {
        action: &'static str,
        target: String,
        message: String,
    },
    #[error("docker {action} timed out after {after:?} for `{target}`")]
    DockerTimeout {
        action: &'static str,
        target: String,
        after: std::time::Duration,
    },
    #[error("failed to start `{program}` in `{dir}`: {source}")]
    Spawn {
        program: String,
        dir: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("empty command: give the program to run after `--`")]
    EmptyCommand,
    #[error("the working directory `{dir}` is not a directory in the job")]
    NoWorkdir { dir: std::path::PathBuf },
    #[error("refusing to touch container `{name}`: it does not carry this install's labels")]
    NotOurContainer { name: String },
    #[error("the container name `{name}` is already in use by a container that is not this job's")]
    NameInUse { name: String },
    #[error("refusing to use image `{image}`: it does not carry paddock's label")]
    NotOurImage { image: String },
    #[error(
        "refusing to build `{tag}` from an untrusted repository's Dockerfile: its steps' processes cannot be capped here ({why}); prebuild the image and name it with `image:` in your config, or trust the repository with `paddock trust`"
    )]
    BuildUncapped { tag: String, why: String },
    #[error("failure injected at `{point}` (PADDOCK_FAIL_AT)")]
    Injected { point: &'static str },
    #[error("the {runtime} runtime cannot {what}")]
    Unsupported {
        runtime: &'static str,
        what: &'static str,
    },
    /// A job's secret could not be read or handed to its proxy (never says the value).
    #[error("job {job}: secret `{name}`: {message}")]
    Secret {
        job: String,
        name: String,
        message: String,
    },
    #[error("failed to write `{path}`: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("microVM: {0}")]
    Microvm(Box<MicrovmError>),
}

/// The microVM runtime's errors (`runtime::microvm`), here beside [`RuntimeError`], which
/// holds them, so neither file imports the other.
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
    #[error(
        "the VM is not running; QEMU's log ended with:\n{qemu_log}\nits console with:\n{console}"
    )]
    NotRunning { console: String, qemu_log: String },
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
    Frame(#[from] super::microvm::protocol::FrameError),
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
