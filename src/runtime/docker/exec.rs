//! Running commands in a job's container: the exec with its deadline and kill policy, the
//! sync's sandbox (the running container or a throwaway one), OOM detection, and the
//! interactive shell.

use std::path::Path;
use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use futures_util::StreamExt;
use tokio::time::sleep_until;

use super::{AFTER_KILL, API_TIMEOUT, call, job_container};
use crate::config::KillPolicy;
use crate::job::{JobRecord, random_hex};
use crate::runtime::RuntimeError;
use crate::runtime::exec::{CappedOutput, ExecRequest, ExecResult, OutputSink, StreamKind};
use crate::store::PaddockHome;

/// Runs a short helper command in the container as `user` (never the container's own
/// user, root where the exec server runs); its output as text. `server`: the container
/// runs the exec server (see [`exec_collect_as`]).
async fn helper_exec(
    docker: &Docker,
    name: &str,
    script: &str,
    (uid, gid): (u32, u32),
    server: bool,
) -> Result<String, RuntimeError> {
    let cmd = vec!["sh".into(), "-c".into(), script.into()];
    let user = format!("{uid}:{gid}");
    let (_, _, text) = exec_collect_as(
        docker,
        name,
        cmd,
        Some(&user),
        server,
        Duration::from_secs(5),
        usize::MAX,
    )
    .await?;
    Ok(text)
}

/// Runs `script` through `sh -c` in container `name` as the container's user, keeping at
/// most `cap` bytes of its output, until it ends or `within` passes: (whether it ended, the
/// exec's id, the output).
pub(super) async fn exec_collect(
    docker: &Docker,
    name: &str,
    script: &str,
    within: Duration,
    cap: usize,
) -> Result<(bool, String, String), RuntimeError> {
    let cmd = vec!["sh".into(), "-c".into(), script.into()];
    exec_collect_as(docker, name, cmd, None, false, within, cap).await
}

/// [`exec_collect`] of `cmd` (no shell), as `user` when given. `server`: the container's
/// main process is the exec server, whose capabilities Docker gives every exec: the
/// command starts through `no-caps` and holds none.
pub(super) async fn exec_collect_as(
    docker: &Docker,
    name: &str,
    cmd: Vec<String>,
    user: Option<&str>,
    server: bool,
    within: Duration,
    cap: usize,
) -> Result<(bool, String, String), RuntimeError> {
    let mut config = ExecConfig {
        user: user.map(str::to_string),
        cmd: Some(cmd),
        ..Default::default()
    };
    if server {
        super::root_caps::wrap_no_caps(&mut config);
    }
    exec_collect_config(docker, name, config, within, cap).await
}

/// [`exec_collect`] of an exec made from `config` (its output attached here).
pub(super) async fn exec_collect_config(
    docker: &Docker,
    name: &str,
    config: ExecConfig,
    within: Duration,
    cap: usize,
) -> Result<(bool, String, String), RuntimeError> {
    let config = ExecConfig {
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        ..config
    };
    let created = call(
        "create exec",
        name,
        API_TIMEOUT,
        docker.create_exec(name, config),
    )
    .await?;
    let started = call(
        "start exec",
        name,
        API_TIMEOUT,
        docker.start_exec(&created.id, None::<StartExecOptions>),
    )
    .await?;
    let mut text = String::new();
    let mut ended = true;
    if let StartExecResults::Attached { mut output, .. } = started {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, output.next()).await {
                Ok(Some(Ok(chunk))) => {
                    if text.len() < cap {
                        text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
                    }
                }
                Ok(Some(Err(_)) | None) => break,
                Err(_) => {
                    ended = false;
                    break;
                }
            }
        }
    }
    Ok((ended, created.id, text))
}

/// The container cgroup's OOM-kill counter (cgroup v1 `memory.oom_control`, v2
/// `memory.events`), read from inside the container.
async fn oom_kill_count(
    docker: &Docker,
    name: &str,
    user: (u32, u32),
    server: bool,
) -> Option<u64> {
    let text = helper_exec(
        docker,
        name,
        "cat /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null || cat /sys/fs/cgroup/memory.events 2>/dev/null",
        user,
        server,
    )
    .await
    .ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
}

/// What one exec in the job's container gave.
pub struct Done {
    pub result: ExecResult,
    /// The container's id (it changes when the container was recreated).
    pub container_id: String,
    /// The container cgroup's OOM-kill counter, when it was read.
    pub oom_kills: Option<u64>,
    /// The container's image id, when the daemon said on the way.
    pub image: Option<String>,
    /// How the command was started (`resident::PATH_SERVER` or `PATH_DOCKER`).
    pub exec_path: &'static str,
}

/// Runs one command in the job's container: through its resident exec server when it has
/// one (`resident`), else through Docker's exec ([`exec_in`]), which a server that did not
/// take the command falls back to as well.
pub async fn exec(
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
    request: &ExecRequest,
    sink: &mut dyn OutputSink,
) -> Result<Done, RuntimeError> {
    if request.cmd.is_empty() {
        return Err(RuntimeError::EmptyCommand);
    }
    let running = super::ensure_running_status(daemon, home, record).await?;
    let name = job_container(record);
    if let Some(done) = through_server(daemon, home, record, &running, request, sink).await? {
        return Ok(done);
    }
    let (result, oom_kills) =
        exec_in(daemon, &name, record, request, running.exec_server, sink).await?;
    Ok(Done {
        result,
        container_id: running.id,
        oom_kills,
        image: running.image,
        exec_path: super::resident::PATH_DOCKER,
    })
}

/// Runs one command through the resident exec server of the job's running container
/// (`running`), when it has one and the switch wants it; `None` when the server is not
/// there or did not take the command (it never ran: Docker's exec may run it).
pub(super) async fn through_server(
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
    running: &super::Running,
    request: &ExecRequest,
    sink: &mut dyn OutputSink,
) -> Result<Option<Done>, RuntimeError> {
    if !running.exec_server || !super::resident::wanted() {
        return Ok(None);
    }
    let name = job_container(record);
    let docker = daemon.connect()?;
    // Root's command in a gVisor job with its own root starts with root's capabilities
    // through a privileged exec (`root_caps.rs`), which the server cannot give.
    let user = exec_user(record, request);
    if super::root_caps::runs_with_root_caps(&docker, &name, record, user).await {
        return Ok(None);
    }
    let order = super::resident::Order {
        argv: super::resident::argv(request),
        env: exec_env(record, request),
        workdir: workdir(record, request),
        user,
    };
    let lock = home.job_dir(&record.id).join("exec-server.lock");
    let done = |result| Done {
        result,
        container_id: running.id.clone(),
        oom_kills: None,
        image: running.image.clone(),
        exec_path: super::resident::PATH_SERVER,
    };
    match super::resident::exec(&docker, &name, &lock, order, request, sink).await? {
        super::resident::Served::Ran(result) => Ok(Some(done(result))),
        super::resident::Served::Gone {
            stdout,
            mut stderr,
            timed_out,
            started,
        } => {
            let (code, oom_killed) = match stopped_container(&docker, &name).await {
                Some(false) => (137, oom_after_stop(&docker, &name).await),
                Some(true) => (137, true),
                None => (137, false),
            };
            sandbox_ended(oom_killed, sink, &mut stderr);
            Ok(Some(done(crate::runtime::exec::exec_result(
                code,
                crate::units::millis(started.elapsed()),
                timed_out,
                oom_killed,
                stdout,
                stderr,
            ))))
        }
        super::resident::Served::NotTaken(reason) => {
            tracing::warn!(job = %record.id, %reason, "the exec server did not take the command; using Docker's exec");
            Ok(None)
        }
    }
}

/// The uid and gid a command runs as: the exec's own (`--user`), else the agent's. Always
/// named: a container whose main process is the exec server is root's.
fn exec_user(record: &JobRecord, request: &ExecRequest) -> (u32, u32) {
    request
        .user
        .unwrap_or_else(|| super::agent_user(record.limits.uid))
}

/// What a command adds to the container's environment: a warm job's part, the profile's,
/// the exec's, then paddock's own facts (last, so nothing misstates them).
fn exec_env(record: &JobRecord, request: &ExecRequest) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = warm_env(record);
    env.extend(
        record
            .limits
            .env
            .iter()
            .chain(&request.env)
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    let (key, deadline) = crate::runtime::deadline_env(request.timeout);
    env.extend(crate::runtime::job_env(record, true));
    env.push((key, deadline));
    env
}

/// The command's working directory: the workspace, or a directory in it.
fn workdir(record: &JobRecord, request: &ExecRequest) -> String {
    let workspace = Path::new(&record.limits.workspace_dir);
    match &request.workdir {
        Some(dir) => workspace.join(dir),
        None => workspace.to_path_buf(),
    }
    .display()
    .to_string()
}

/// Runs one command in the running container `name` (see [`exec`]).
#[expect(
    clippy::too_many_lines,
    reason = "one exec's life on the engine: create, attach, stream, deadline, sync (issue 42 splits it)"
)]
pub(super) async fn exec_in(
    daemon: &super::Daemon,
    name: &str,
    record: &JobRecord,
    request: &ExecRequest,
    server: bool,
    sink: &mut dyn OutputSink,
) -> Result<(ExecResult, Option<u64>), RuntimeError> {
    if request.cmd.is_empty() {
        return Err(RuntimeError::EmptyCommand);
    }
    let docker = daemon.connect()?;
    let name = name.to_string();
    let pidfile = format!("/tmp/.paddock-exec-{}.pid", random_hex(10));
    let mut cmd = match &request.after {
        None => vec![
            "sh".to_string(),
            "-c".to_string(),
            r#"{ echo $$ > "$0"; } 2>/dev/null; exec "$@""#.to_string(),
            pidfile.clone(),
        ],
        // The wrapper stays as the command's parent to run the snippet after it; it is the
        // process group leader either way, so a timeout still signals the whole group.
        Some(after) => vec![
            "sh".to_string(),
            "-c".to_string(),
            format!(
                r#"{{ echo $$ > "$0"; }} 2>/dev/null; {}"#,
                crate::runtime::exec::AFTER_WRAPPER
            ),
            pidfile.clone(),
            after.clone(),
        ],
    };
    cmd.extend(request.cmd.iter().cloned());
    let env: Vec<String> = exec_env(record, request)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let user = exec_user(record, request);
    let mut config = ExecConfig {
        attach_stdin: Some(request.stdin.is_some()),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        cmd: Some(cmd),
        env: Some(env),
        working_dir: Some(workdir(record, request)),
        user: Some(format!("{}:{}", user.0, user.1)),
        ..Default::default()
    };
    if super::root_caps::runs_with_root_caps(&docker, &name, record, user).await {
        super::root_caps::wrap_root_exec(&mut config);
    } else if server {
        super::root_caps::wrap_no_caps(&mut config);
    }
    let started_at = Instant::now();
    let created = call(
        "create exec",
        &name,
        API_TIMEOUT,
        docker.create_exec(&name, config),
    )
    .await?;
    let start = call(
        "start exec",
        &name,
        API_TIMEOUT,
        docker.start_exec(&created.id, None::<StartExecOptions>),
    )
    .await?;
    let StartExecResults::Attached { mut output, input } = start else {
        return Err(RuntimeError::Docker {
            action: "start exec",
            target: name,
            message: "the daemon detached the exec".into(),
        });
    };
    // The input goes on its own while the output is read; it ends with the exec (a command
    // that exits before reading all of it drops the rest, as a pipe does). Without input
    // the attached stdin is closed now: the command reads end-of-file.
    let feeding = match request.stdin.take() {
        Some(stdin) => Some(crate::runtime::exec::StdinFeed::start(stdin, input)),
        None => {
            drop(input);
            None
        }
    };

    let mut stdout = CappedOutput::new(request.output_cap);
    let mut stderr = CappedOutput::new(request.output_cap);
    let deadline = tokio::time::Instant::now() + request.timeout;
    let far = deadline + Duration::from_secs(86_400 * 365);
    let mut kill_at = far;
    let mut give_up_at = far;
    let mut timed_out = false;
    // As the command's own user: only it may signal that user's processes.
    let signaller = Some(format!("{}:{}", user.0, user.1));
    let signal = |sig: &'static str| {
        let docker = docker.clone();
        let name = name.clone();
        let pidfile = pidfile.clone();
        let signaller = signaller.clone();
        async move {
            let script = format!(
                "p=$(cat {pidfile} 2>/dev/null) && {{ kill -{sig} -$p 2>/dev/null || kill -{sig} $p 2>/dev/null; }}; true"
            );
            let cmd = vec!["sh".into(), "-c".into(), script];
            let signalled = exec_collect_as(
                &docker,
                &name,
                cmd,
                signaller.as_deref(),
                server,
                Duration::from_secs(5),
                usize::MAX,
            )
            .await;
            if let Err(error) = signalled {
                tracing::warn!(%error, "failed to signal a timed-out exec");
                if sig == "KILL" {
                    // No room to even start the helper (a fork bomb at its pids limit): kill
                    // the container; the next exec starts it again.
                    let _ = docker
                        .kill_container(
                            &name,
                            None::<bollard::query_parameters::KillContainerOptions>,
                        )
                        .await;
                }
            }
        }
    };
    // The daemon does not always end an exec's stream when the sandbox dies under it (a
    // gVisor sandbox killed for memory): look at the container now and then.
    let mut alive_check = tokio::time::interval(SANDBOX_CHECK);
    alive_check.tick().await;
    loop {
        tokio::select! {
            _ = alive_check.tick() => {
                if stopped_container(&docker, &name).await.is_some() {
                    break;
                }
            },
            chunk = output.next() => match chunk {
                Some(Ok(LogOutput::StdOut { message })) => {
                    sink.write(StreamKind::Stdout, &message);
                    stdout.push(&message);
                }
                Some(Ok(LogOutput::StdErr { message })) => {
                    sink.write(StreamKind::Stderr, &message);
                    stderr.push(&message);
                }
                Some(Ok(_)) => {}
                Some(Err(error)) => {
                    return Err(RuntimeError::DockerUnavailable {
                        message: format!("exec output of `{name}` broke off: {error}"),
                    });
                }
                None => break,
            },
            _ = sleep_until(deadline), if !timed_out => {
                timed_out = true;
                match request.kill_policy {
                    KillPolicy::Hard => {
                        signal("KILL").await;
                        give_up_at = tokio::time::Instant::now() + AFTER_KILL;
                    }
                    KillPolicy::Graceful => {
                        signal("TERM").await;
                        kill_at = tokio::time::Instant::now() + request.grace;
                    }
                }
            },
            _ = sleep_until(kill_at) => {
                signal("KILL").await;
                kill_at = far;
                give_up_at = tokio::time::Instant::now() + AFTER_KILL;
            },
            // The command is dead but something (a background child) holds the stream open.
            _ = sleep_until(give_up_at) => break,
        }
    }
    drop(feeding);
    let duration_ms = crate::units::millis(started_at.elapsed());
    let inspect = call(
        "inspect exec",
        &name,
        API_TIMEOUT,
        docker.inspect_exec(&created.id),
    )
    .await;
    // The whole sandbox may have died under the command: under gVisor a memory overrun
    // kills the sandbox's kernel with it, and the daemon forgets the exec. That is the
    // command killed (137), out of memory when the daemon says the container was.
    let (exit_code, sandbox) = match inspect {
        Ok(inspect) => {
            let code = match inspect.exit_code {
                Some(code) if inspect.running != Some(true) => code,
                _ if timed_out => 137,
                _ => -1,
            };
            // A failed command in a sandbox that is gone died with it (runsc reports 128,
            // sometimes before the daemon has seen the container stop: give it a moment).
            let patience = if code == 128 { 15 } else { 1 };
            let mut stopped = None;
            if code != 0 && !timed_out {
                for attempt in 0..patience {
                    if attempt > 0 {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    stopped = stopped_container(&docker, &name).await;
                    if stopped.is_some() {
                        break;
                    }
                }
            }
            match stopped {
                Some(false) => (137, Some(oom_after_stop(&docker, &name).await)),
                Some(true) => (137, Some(true)),
                None => (code, None),
            }
        }
        Err(error) => match stopped_container(&docker, &name).await {
            Some(false) => (137, Some(oom_after_stop(&docker, &name).await)),
            Some(true) => (137, Some(true)),
            None => return Err(error),
        },
    };
    // Exit 137 is SIGKILL, not necessarily OOM: ask the cgroup whether it killed something
    // since the last time we looked.
    let mut oom_count = None;
    let mut oom_killed = sandbox.unwrap_or(false);
    if exit_code == 137 && !timed_out && sandbox.is_none() {
        oom_count = oom_kill_count(&docker, &name, user, server).await;
        match oom_count {
            Some(count) => oom_killed = count > record.oom_kills,
            // No counter to read (the container stopped): the daemon's word.
            None => oom_killed = stopped_container(&docker, &name).await.unwrap_or(false),
        }
    }
    if sandbox.is_some() {
        sandbox_ended(oom_killed, sink, &mut stderr);
    }
    Ok((
        crate::runtime::exec::exec_result(
            exit_code,
            duration_ms,
            timed_out,
            oom_killed,
            stdout,
            stderr,
        ),
        oom_count,
    ))
}

/// Says in the command's stderr (streamed and kept) that its sandbox ended under it, and
/// whether for memory: both exec paths, the server's and Docker's, end this way.
fn sandbox_ended(oom_killed: bool, sink: &mut dyn OutputSink, stderr: &mut CappedOutput) {
    let note = if oom_killed {
        "[paddock: the sandbox was killed for memory during the command]\n"
    } else {
        "[paddock: the sandbox stopped during the command]\n"
    };
    sink.write(StreamKind::Stderr, note.as_bytes());
    stderr.push(note.as_bytes());
}

/// How often a running exec checks that its sandbox is still there.
const SANDBOX_CHECK: Duration = Duration::from_secs(2);

/// The daemon's OOM flag of a container that stopped under a command, asked again for up to
/// 6 s while it says no: the daemon may record the stop before the kernel's OOM event (seen
/// under gVisor, whose sandbox dies whole when it overruns its memory; on a loaded 2-core CI
/// host 2 s was not always enough). Only a sandbox that died under a command waits here.
async fn oom_after_stop(docker: &Docker, name: &str) -> bool {
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if stopped_container(docker, name).await == Some(true) {
            return true;
        }
    }
    false
}

/// When the container `name` is not running: whether the daemon says it was killed for
/// memory. `None` while it runs (or cannot be inspected).
async fn stopped_container(docker: &Docker, name: &str) -> Option<bool> {
    let info = tokio::time::timeout(API_TIMEOUT, docker.inspect_container(name, None))
        .await
        .ok()?
        .ok()?;
    let state = info.state?;
    (state.running != Some(true)).then(|| state.oom_killed.unwrap_or(false))
}

/// An interactive shell in the job's container. A TTY session is the one place paddock uses
/// the `docker` CLI: it owns the terminal handling (raw mode, resize) that a shell needs.
///
/// `server`: the container runs the exec server, whose capabilities Docker gives every
/// exec: the shell starts through `no-caps` and holds none.
pub fn interactive_shell(
    daemon: &super::Daemon,
    record: &JobRecord,
    server: bool,
) -> Result<tokio::process::Command, RuntimeError> {
    use std::io::IsTerminal as _;
    let mut command = tokio::process::Command::new("docker");
    // A job on a remote engine: the CLI reaches it as paddock's client does, over TLS.
    command.args(daemon.cli_flags()?);
    // A terminal only when there is one: commands piped into `paddock shell` run too.
    command.args(["exec", "-i"]);
    // As the agent: the container's own user is root where the exec server runs.
    let (uid, gid) = super::agent_user(record.limits.uid);
    command.arg("-u").arg(format!("{uid}:{gid}"));
    if std::io::stdin().is_terminal() {
        command.arg("-t");
    }
    for (key, value) in warm_env(record)
        .into_iter()
        .chain(crate::runtime::job_env(record, true))
    {
        command.arg("-e").arg(format!("{key}={value}"));
    }
    if server {
        for var in super::resident::LOADER_VARS {
            command.arg("-e").arg(format!("{var}="));
        }
    }
    command.args(["-w", &record.limits.workspace_dir, &job_container(record)]);
    if server {
        command.args(super::resident::tool_command("no-caps"));
        command.arg("--");
    }
    command.args([
        "sh",
        "-c",
        "command -v bash >/dev/null && exec bash || exec sh",
    ]);
    Ok(command)
}

/// What a warm-started job's execs add to their environment: the part of a job
/// container's own environment that a pool slot's container, made before the job, lacks.
pub(super) fn warm_env(record: &JobRecord) -> Vec<(String, String)> {
    if record.pool_slot().is_none() {
        return Vec::new();
    }
    let mut env = crate::runtime::agent_git_env(record, true);
    env.extend(crate::cache::env_vars(&record.caches));
    env
}
