//! The process runtime: commands run as child processes in the job's worktree.
//!
//! This is the zero-setup fallback for machines without Docker. It gives the same
//! [`ExecResult`], output cap, timeout and kill policy as the container runtime, runs each
//! command in its own process group (killed as a whole on timeout) and applies rlimits for
//! address space, process count and CPU time. It does not isolate files or network: the
//! command can read and write whatever the user running paddock can.

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Instant;

use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio::sync::mpsc;
use tokio::time::{Duration, sleep_until};

use super::RuntimeError;
use super::exec::{CappedOutput, ExecRequest, ExecResult, OutputSink, StreamKind};
use crate::config::KillPolicy;
use crate::job::JobRecord;
use crate::sys::Limit;

/// How long to keep reading after the command exited, for output still in the pipes, once
/// the pipes are quiet: a loaded machine can take longer than that to hand over the last
/// megabytes, so each chunk that still arrives extends the wait. A background child that
/// keeps the pipes open does not hold the exec past this once it is quiet, nor past
/// [`DRAIN_CAP`] while it keeps writing.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(500);
/// The longest an exec reads on after the command exited.
const DRAIN_CAP: Duration = Duration::from_secs(10);

#[expect(
    clippy::too_many_lines,
    reason = "a child process's run: spawn, stream, deadline, signal, kill"
)]
pub(super) async fn exec(
    record: &JobRecord,
    request: &ExecRequest,
    sink: &mut dyn OutputSink,
) -> Result<ExecResult, RuntimeError> {
    let (program, args) = request
        .cmd
        .split_first()
        .ok_or(RuntimeError::EmptyCommand)?;
    let dir = match &request.workdir {
        Some(workdir) => record.worktree.join(workdir),
        None => record.worktree.clone(),
    };
    let limits = &record.limits;
    let memory = limits.memory.0;
    let pids = u64::from(limits.pids);
    let cpu_secs = request.timeout.as_secs() + request.grace.as_secs() + 1;

    if !dir.is_dir() {
        return Err(RuntimeError::NoWorkdir { dir });
    }
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(&dir)
        .envs(super::agent_git_env(record, false))
        .envs(crate::cache::env_vars(&record.caches))
        .envs(&limits.env)
        .envs(&request.env)
        // paddock's own facts last, so no profile or exec variable can misstate them.
        .envs(super::job_env(record, false))
        .envs([super::deadline_env(request.timeout)])
        .env("PADDOCK_WORKSPACE", &record.worktree)
        .stdin(if request.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    crate::sys::ChildSetup {
        new_session: true,
        limits: vec![
            Limit::AddressSpace(memory),
            Limit::Processes(pids),
            Limit::CpuSeconds(cpu_secs),
        ],
        ..Default::default()
    }
    .apply(&mut command);
    let started = Instant::now();
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(source) => match not_runnable(program, &dir, &source) {
            Some((exit_code, message)) => {
                return Ok(shell_refusal(exit_code, &message, started, sink));
            }
            None => {
                return Err(RuntimeError::Spawn {
                    program: program.clone(),
                    dir: dir.clone(),
                    source,
                });
            }
        },
    };
    let pgid = child.id().and_then(|pid| i32::try_from(pid).ok());
    let _feeding = match (request.stdin.take(), child.stdin.take()) {
        (Some(input), Some(to)) => Some(crate::runtime::exec::StdinFeed::start(input, to)),
        _ => None,
    };

    let (tx, mut rx) = mpsc::channel::<(StreamKind, Vec<u8>)>(64);
    if let Some(stdout) = child.stdout.take() {
        tokio::spawn(pump(stdout, StreamKind::Stdout, tx.clone()));
    }
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(pump(stderr, StreamKind::Stderr, tx.clone()));
    }
    drop(tx);

    let mut stdout = CappedOutput::new(request.output_cap);
    let mut stderr = CappedOutput::new(request.output_cap);
    let deadline = tokio::time::Instant::now() + request.timeout;
    let far = deadline + Duration::from_secs(86_400 * 365);
    let mut kill_at = far;
    let mut drain_until = far;
    let mut drain_cap = far;
    let mut status = None;
    let mut timed_out = false;
    let mut streams_open = true;
    loop {
        tokio::select! {
            chunk = rx.recv(), if streams_open => match chunk {
                Some((kind, bytes)) => {
                    if status.is_some() {
                        drain_until = (tokio::time::Instant::now() + DRAIN_AFTER_EXIT).min(drain_cap);
                    }
                    sink.write(kind, &bytes);
                    match kind {
                        StreamKind::Stdout => stdout.push(&bytes),
                        StreamKind::Stderr => stderr.push(&bytes),
                    }
                }
                None if status.is_some() => break,
                None => streams_open = false,
            },
            exit = child.wait(), if status.is_none() => {
                status = Some(exit.map_err(|source| RuntimeError::Spawn {
                    program: program.clone(),
                    dir: dir.clone(),
                    source,
                })?);
                if timed_out {
                    // Stragglers of the group still hold resources: end them too.
                    signal_group(pgid, libc::SIGKILL);
                }
                if !streams_open {
                    break;
                }
                let now = tokio::time::Instant::now();
                drain_cap = now + DRAIN_CAP;
                drain_until = now + DRAIN_AFTER_EXIT;
            },
            _ = sleep_until(deadline), if status.is_none() && !timed_out => {
                timed_out = true;
                match request.kill_policy {
                    KillPolicy::Hard => signal_group(pgid, libc::SIGKILL),
                    KillPolicy::Graceful => {
                        signal_group(pgid, libc::SIGTERM);
                        kill_at = tokio::time::Instant::now() + request.grace;
                    }
                }
            },
            _ = sleep_until(kill_at), if status.is_none() => {
                signal_group(pgid, libc::SIGKILL);
                kill_at = far;
            },
            _ = sleep_until(drain_until), if status.is_some() => break,
        }
    }
    let status = status.expect("the loop ends only after the child exited");
    let exit_code = status
        .code()
        .map(i64::from)
        .or_else(|| status.signal().map(|s| 128 + i64::from(s)))
        .unwrap_or(-1);
    Ok(super::exec::exec_result(
        exit_code,
        crate::units::millis(started.elapsed()),
        timed_out,
        false,
        stdout,
        stderr,
    ))
}

/// A command that cannot be started for a reason of its own (no such program, not
/// executable, an empty name) ends as a shell ends it: exit 127 (not found) or 126 (found,
/// not runnable), the reason on stderr. That is the command's result, not paddock's failure;
/// a working directory that is not there stays an error (the request named it).
fn not_runnable(
    program: &str,
    dir: &std::path::Path,
    source: &std::io::Error,
) -> Option<(i64, String)> {
    use std::io::ErrorKind;
    if !dir.is_dir() {
        return None; // gone since the check above: paddock's failure, not the command's
    }
    let shown = if program.is_empty() { "''" } else { program };
    match source.kind() {
        ErrorKind::NotFound | ErrorKind::InvalidInput => {
            Some((127, format!("paddock: {shown}: command not found")))
        }
        ErrorKind::PermissionDenied | ErrorKind::IsADirectory => {
            Some((126, format!("paddock: {shown}: {source}")))
        }
        _ if source.raw_os_error() == Some(libc::ENOEXEC) => {
            Some((126, format!("paddock: {shown}: cannot execute: {source}")))
        }
        _ => None,
    }
}

/// The result of a command that never started: `exit_code` and `message` on stderr.
fn shell_refusal(
    exit_code: i64,
    message: &str,
    started: Instant,
    sink: &mut dyn OutputSink,
) -> ExecResult {
    let stderr = format!("{message}\n");
    sink.write(StreamKind::Stderr, stderr.as_bytes());
    ExecResult {
        exit_code,
        stdout: String::new(),
        stderr,
        duration_ms: crate::units::millis(started.elapsed()),
        timed_out: false,
        truncated: false,
        oom_killed: false,
        sync_error: None,
        exec_id: None,
        stdout_base64: None,
        stderr_base64: None,
        meta: None,
    }
}

fn signal_group(pgid: Option<i32>, signal: i32) {
    if let Some(pgid) = pgid {
        crate::sys::signal_group(pgid, signal);
    }
}

async fn pump(
    mut reader: impl tokio::io::AsyncRead + Unpin,
    kind: StreamKind,
    tx: mpsc::Sender<(StreamKind, Vec<u8>)>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.send((kind, buf[..n].to_vec())).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Jobs as child processes of paddock in their worktree (see the module's doc).
pub struct ProcessRuntime;

#[async_trait::async_trait]
impl super::Runtime for ProcessRuntime {
    fn describe(&self) -> super::Described<'_> {
        super::Described {
            name: "process",
            isolation: "process: rlimits only; it isolates neither files nor network (the agent can read and write anything your user can)",
            engine: None,
            // The job runs on the host's own network: a port is the host's, never mapped.
            ports: false,
            host_caches: true,
            fuse_checkout: None,
        }
    }

    fn layout(&self) -> &super::SandboxLayout {
        static HOST: super::SandboxLayout = super::SandboxLayout::Host;
        &HOST
    }

    fn capabilities(&self) -> super::Capabilities<'_> {
        // No sandbox to list, image, network, pool, relayed port or volume of its own.
        super::Capabilities::default()
    }

    async fn check_ready(
        &self,
        _image: &str,
        network: crate::config::NetworkMode,
    ) -> Result<(), RuntimeError> {
        if network == crate::config::NetworkMode::Allowlist {
            return Err(RuntimeError::Unsupported {
                runtime: "process",
                what: "enforce an allow-list (it shares the host's network); use --runtime docker",
            });
        }
        Ok(())
    }

    async fn start(&self, _record: &JobRecord) -> Result<Option<String>, RuntimeError> {
        Ok(None)
    }

    async fn exec(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
    ) -> Result<super::ExecOutcome, RuntimeError> {
        Ok(super::ExecOutcome {
            result: exec(record, request, sink).await?,
            container_id: None,
            oom_kills: None,
            image_id: None,
            exec_path: Some("process"),
        })
    }

    async fn exec_in_sandbox(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecResult, RuntimeError> {
        exec(record, request, sink).await
    }

    async fn shell_command(&self, record: &JobRecord) -> Result<Command, RuntimeError> {
        let shell = std::env::var("SHELL").unwrap_or_else(|_| "/bin/sh".into());
        let mut command = Command::new(shell);
        command.current_dir(&record.worktree);
        Ok(command)
    }

    async fn stop(&self, _record: &JobRecord, _grace: Duration) -> Result<bool, RuntimeError> {
        // Each exec's process group ends with the exec (its deadline kills it); nothing
        // outlives one to stop.
        Ok(false)
    }

    async fn stop_for_removal(
        &self,
        _store: &crate::store::JobStore,
        record: JobRecord,
    ) -> Result<JobRecord, RuntimeError> {
        Ok(record)
    }

    async fn destroy(&self, _record: &JobRecord) -> Result<(), RuntimeError> {
        Ok(())
    }

    async fn status(&self, _record: &JobRecord) -> Option<super::SandboxStatus> {
        None
    }
}

/// Registers process jobs.
pub(crate) fn register(
    registry: &mut crate::runtime::registration::Registry,
    _home: &crate::store::PaddockHome,
) {
    registry.add(
        crate::job::RuntimeKind::Process,
        std::sync::Arc::new(ProcessRuntime),
    );
    registry.set_fallback(crate::job::RuntimeKind::Process);
}
