//! Execution runtimes: where a job's commands run.
//!
//! Two implementations: [`docker`] (one long-lived, hardened container per job, runc or
//! gVisor's runsc) and [`process`] (child processes in the worktree with rlimits; isolates
//! neither files nor network). The engine calls the functions here, which dispatch on the
//! job's recorded [`RuntimeKind`]; nothing outside this module builds a bollard struct.

pub mod docker;
pub mod exec;
pub mod process;

use crate::config::RuntimeChoice;
use crate::job::{JobRecord, RuntimeKind};
use crate::store::{JobStore, PaddockHome};

pub use exec::{ExecRequest, ExecResult, OutputSink};

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot reach the Docker daemon: {message}")]
    DockerUnavailable { message: String },
    #[error("image `{image}` is not present")]
    ImageMissing { image: String },
    #[error("Docker runtime `{runtime}` is not registered with the daemon")]
    OciRuntimeMissing { runtime: String },
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
    #[error("refusing to touch container `{name}`: it does not carry this install's labels")]
    NotOurContainer { name: String },
    #[error("failed to write `{path}`: {source}")]
    Io {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The runtime a new job gets, and a warning when `auto` fell back to processes.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub kind: RuntimeKind,
    pub warning: Option<String>,
}

/// Resolves a profile's runtime choice. `auto` takes Docker when the daemon answers and the
/// image is present, else the process runtime with a warning naming what is missing; an
/// explicit `docker`/`runsc` never falls back.
pub async fn resolve(choice: RuntimeChoice, image: &str) -> Result<Resolved, RuntimeError> {
    match choice {
        RuntimeChoice::Process => Ok(Resolved {
            kind: RuntimeKind::Process,
            warning: None,
        }),
        RuntimeChoice::Docker | RuntimeChoice::Runsc => {
            let kind = if choice == RuntimeChoice::Runsc {
                RuntimeKind::Runsc
            } else {
                RuntimeKind::Docker
            };
            docker::check_ready(kind, image).await?;
            Ok(Resolved {
                kind,
                warning: None,
            })
        }
        RuntimeChoice::Auto => match docker::check_ready(RuntimeKind::Docker, image).await {
            Ok(()) => Ok(Resolved {
                kind: RuntimeKind::Docker,
                warning: None,
            }),
            Err(missing) => Ok(Resolved {
                kind: RuntimeKind::Process,
                warning: Some(format!(
                    "using the process runtime (no file or network isolation): {missing}"
                )),
            }),
        },
    }
}

/// Starts whatever a new job needs to run commands; returns the container id, if any.
pub async fn start(home: &PaddockHome, record: &JobRecord) -> Result<Option<String>, RuntimeError> {
    match record.runtime {
        RuntimeKind::Process => Ok(None),
        RuntimeKind::Docker | RuntimeKind::Runsc => {
            docker::create_first_container(home, record).await.map(Some)
        }
    }
}

/// Git's identity and settings for the agent's commands, the same in every runtime: commits
/// carry `paddock agent (<job>)` unless `PADDOCK_GIT_AUTHOR_NAME`/`_EMAIL` are set where
/// paddock runs. In containers they are part of the container's environment, so even the
/// first exec has them.
pub fn agent_git_env(record: &JobRecord) -> Vec<(String, String)> {
    let job = record.id.as_str();
    let name = std::env::var("PADDOCK_GIT_AUTHOR_NAME")
        .unwrap_or_else(|_| format!("paddock agent ({job})"));
    let email = std::env::var("PADDOCK_GIT_AUTHOR_EMAIL")
        .unwrap_or_else(|_| format!("{job}@paddock.invalid"));
    let mut env = vec![
        ("GIT_AUTHOR_NAME".to_string(), name.clone()),
        ("GIT_COMMITTER_NAME".to_string(), name),
        ("GIT_AUTHOR_EMAIL".to_string(), email.clone()),
        ("GIT_COMMITTER_EMAIL".to_string(), email),
    ];
    if record.runtime.uses_docker() {
        // The borrowed object store belongs to another uid; git must not refuse the job's
        // own files for that either.
        for (key, value) in [
            ("GIT_CONFIG_COUNT", "1"),
            ("GIT_CONFIG_KEY_0", "safe.directory"),
            ("GIT_CONFIG_VALUE_0", "*"),
        ] {
            env.push((key.to_string(), value.to_string()));
        }
    }
    env
}

/// Who must own the files of a job's checkout when that is not paddock's own user: the
/// agent's uid in containers when paddock runs as root.
pub fn files_owner(record: &JobRecord) -> Option<(u32, u32)> {
    let root = crate::sys::is_root();
    let (uid, gid) = docker::agent_user(record.limits.uid);
    (record.runtime.uses_docker() && root && uid != 0).then_some((uid, gid))
}

/// The job's git dir and work tree as commands in its sandbox see them (inside a container,
/// the git dir is at a path that exists only there).
pub fn sandbox_git_paths(record: &JobRecord) -> Option<(std::path::PathBuf, std::path::PathBuf)> {
    let git_dir = record.git_dir.clone()?;
    Some(match record.runtime {
        RuntimeKind::Process => (git_dir, record.worktree.clone()),
        RuntimeKind::Docker | RuntimeKind::Runsc => (
            docker::CONTAINER_GIT_DIR.into(),
            record.limits.workspace_dir.clone().into(),
        ),
    })
}

/// An interactive shell in the job: in its container (started if needed) or, for the process
/// runtime, in its worktree.
pub async fn shell_command(
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<tokio::process::Command, RuntimeError> {
    match record.runtime {
        RuntimeKind::Process => {
            let shell = std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".into());
            let mut command = tokio::process::Command::new(shell);
            command.current_dir(&record.worktree);
            Ok(command)
        }
        RuntimeKind::Docker | RuntimeKind::Runsc => {
            docker::ensure_running(home, record).await?;
            Ok(docker::interactive_shell(record))
        }
    }
}

/// Where a runtime that can run paddock's snippet after an exec (see
/// [`ExecRequest::after`]) lets it leave files the host reads: the job's outbox as the
/// sandbox sees it. `None` for runtimes that cannot.
pub fn sandbox_outbox(record: &JobRecord) -> Option<std::path::PathBuf> {
    record
        .runtime
        .uses_docker()
        .then(|| docker::CONTAINER_OUTBOX.into())
}

/// Whether the job's sandbox answers: an exec of `true` within a few seconds.
pub async fn health_check(home: &PaddockHome, record: &JobRecord) -> Result<(), String> {
    let request = ExecRequest {
        cmd: vec!["true".into()],
        env: Default::default(),
        workdir: None,
        timeout: std::time::Duration::from_secs(5),
        kill_policy: crate::config::KillPolicy::Hard,
        grace: std::time::Duration::ZERO,
        output_cap: 4096,
        after: None,
    };
    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        exec(home, record, &request, &mut exec::Discard),
    )
    .await;
    match outcome {
        Ok(Ok(done)) if done.result.exit_code == 0 && !done.result.timed_out => Ok(()),
        Ok(Ok(done)) => Err(format!(
            "`true` exited {} (timed out: {})",
            done.result.exit_code, done.result.timed_out
        )),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => Err("no answer within 10s".into()),
    }
}

pub use docker::{
    LabelledContainer as Sandbox, build_image, check_ready, list_job_containers as list_sandboxes,
    remove_job_container as remove_job_sandbox, remove_labelled_container as remove_sandbox,
};

/// Runs a short command of paddock's own (the sync script) in the job's sandbox without
/// starting the job again: in its running container, else in a throwaway container with the
/// same mounts; for the process runtime, as a child process like any exec.
pub async fn exec_in_sandbox(
    home: &PaddockHome,
    record: &JobRecord,
    request: &ExecRequest,
    sink: &mut dyn OutputSink,
) -> Result<ExecResult, RuntimeError> {
    match record.runtime {
        RuntimeKind::Process => process::exec(record, request, sink).await,
        RuntimeKind::Docker | RuntimeKind::Runsc => {
            docker::exec_in_sandbox(home, record, request, sink).await
        }
    }
}

/// Records the container's exit code and OOM flag, then stops it, ahead of removing a job.
pub async fn stop_for_removal(
    home: &PaddockHome,
    store: &JobStore,
    record: JobRecord,
) -> Result<JobRecord, RuntimeError> {
    match record.runtime {
        RuntimeKind::Process => Ok(record),
        RuntimeKind::Docker | RuntimeKind::Runsc => {
            docker::stop_job_container(home, store, record).await
        }
    }
}

/// Removes whatever the runtime holds for a job; succeeds when it is already gone.
pub async fn destroy(home: &PaddockHome, record: &JobRecord) -> Result<(), RuntimeError> {
    match record.runtime {
        RuntimeKind::Process => Ok(()),
        RuntimeKind::Docker | RuntimeKind::Runsc => {
            docker::remove_job_container(home, &record.id).await
        }
    }
}

/// What one exec produced, plus what the record must learn from it.
#[derive(Debug, Clone)]
pub struct ExecOutcome {
    pub result: ExecResult,
    /// The container id after the exec (it changes when a lost container was recreated).
    pub container_id: Option<String>,
    /// The container's OOM-kill counter, when it was read.
    pub oom_kills: Option<u64>,
}

/// Runs one command in a job, with its runtime.
pub async fn exec(
    home: &PaddockHome,
    record: &JobRecord,
    request: &ExecRequest,
    sink: &mut dyn OutputSink,
) -> Result<ExecOutcome, RuntimeError> {
    match record.runtime {
        RuntimeKind::Process => Ok(ExecOutcome {
            result: process::exec(record, request, sink).await?,
            container_id: None,
            oom_kills: None,
        }),
        RuntimeKind::Docker | RuntimeKind::Runsc => {
            let (result, container_id, oom_kills) =
                docker::exec(home, record, request, sink).await?;
            Ok(ExecOutcome {
                result,
                container_id: Some(container_id),
                oom_kills,
            })
        }
    }
}

/// Stops whatever runs for a job; true when something was running.
pub async fn stop(
    home: &PaddockHome,
    record: &JobRecord,
    grace: std::time::Duration,
) -> Result<bool, RuntimeError> {
    match record.runtime {
        RuntimeKind::Process => Ok(false),
        RuntimeKind::Docker | RuntimeKind::Runsc => docker::stop_job(home, &record.id, grace).await,
    }
}

/// One plain sentence on what a runtime isolates, for `show` and `doctor`.
pub fn isolation_note(kind: RuntimeKind) -> &'static str {
    match kind {
        RuntimeKind::Docker => {
            "container (runc): own filesystem and network, resource limits, non-root"
        }
        RuntimeKind::Runsc => {
            "container (gVisor runsc): user-space kernel, own filesystem and network, resource limits, non-root"
        }
        RuntimeKind::Process => {
            "process: rlimits only; it isolates neither files nor network (the agent can read and write anything your user can)"
        }
    }
}
