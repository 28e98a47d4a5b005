//! The host side of the resident exec server (issue 46): the parts of a job container that
//! run it, and one exec over Docker's attach stream to it.
//!
//! Design (measured in docs/decisions.md): the server (`paddock exec-server`,
//! `helpers/exec_server.rs`) is the job container's main process, under Docker's init,
//! started as root with only `SETUID`, `SETGID`, `SETPCAP` and `KILL`, which it keeps as a
//! uid of its own (`wire::EXEC_SERVER_ID`). Docker gives every exec of that container
//! those four whatever its user, so each Docker exec paddock makes there starts through
//! the `no-caps` helper (`root_caps::wrap_no_caps`). A server killed from outside ends
//! the container; the next exec starts it again (`ensure_running`). Its binary, loader and
//! libraries are this host's, bound read-only under [`TOOLS_DIR`] and started through the
//! host's loader with the image's cache, preload file and `LD_*` variables out of play, so
//! no file of the image runs with a capability (the server checks its own map too). Only
//! the engine's API reaches its stdin: an exec attaches to the container, writes one line
//! (the microVM agent's `ToGuest::Exec`), and reads the answers for its id; several
//! attached hosts skip each other's lines, and each write is one line below `PIPE_BUF`,
//! under the job's `exec-server.lock`. A server that does not answer `Started` soon has not
//! run the command: the exec goes to Docker's exec instead, and says so (`exec_path`).
//! Local jobs only: a remote engine cannot mount this host's files.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64::Engine as _;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::ContainerCreateBody;
use futures_util::StreamExt as _;
use tokio::io::AsyncWriteExt as _;
use tokio::time::sleep_until;

use super::mounts::bind;
use super::{AFTER_KILL, API_TIMEOUT};
use crate::config::KillPolicy;
use crate::output::StreamKind;
use crate::runtime::RuntimeError;
use crate::runtime::exec::{CappedOutput, ExecRequest, ExecResult, OutputSink};
use crate::runtime::microvm::protocol::{
    FromGuest, MAX_LINE, ToGuest, encode_line, encode_lines, take_lines,
};
use crate::store::PaddockHome;

/// Where the host mounts the server's files in the container (read-only).
pub const TOOLS_DIR: &str = "/.paddock-tools/exec";
/// How the server's process starts (its loader), as `ps` shows it.
pub(super) const SERVER_COMMAND: &str = "/.paddock-tools/exec/ld.so ";
/// The label of a job container whose main process is the exec server.
pub(super) const LABEL_SERVER: &str = "paddock.exec-server";
/// What an exec's `meta.exec_path` says of each way.
pub const PATH_SERVER: &str = "exec-server";
pub const PATH_DOCKER: &str = "docker-exec";
/// The switch that turns the server on for new containers and every exec
/// (`PADDOCK_EXEC_PATH=exec-server`); anything else is the default, Docker's exec (in a
/// container that runs the server too: `docker-exec` forces the fallback). The server
/// stays opt-in while issue 46's benchmark targets are not all met and its container holds
/// capabilities the default one does not.
const SWITCH: &str = "PADDOCK_EXEC_PATH";
/// How long a server may take to say it started a command.
const STARTED_WITHIN: Duration = Duration::from_secs(10);
/// How much input goes in one stdin line (its base64 stays below [`MAX_LINE`]).
const STDIN_CHUNK: usize = 2048;
/// The capabilities the server's container has (and nothing it starts keeps).
const SERVER_CAPS: [&str; 4] = ["SETUID", "SETGID", "SETPCAP", "KILL"];
/// The loader's variables that could load or write something as the server: emptied in
/// the container's environment (an image's `ENV` may set them).
pub(super) const LOADER_VARS: [&str; 6] = [
    "LD_PRELOAD",
    "LD_AUDIT",
    "LD_DEBUG",
    "LD_DEBUG_OUTPUT",
    "LD_PROFILE",
    "LD_PROFILE_OUTPUT",
];

/// The prefix under which the `no-caps` helper receives an exec's loader variables
/// (`PADDOCK_LOADER_LD_PRELOAD`...), to give them back to the command once it holds nothing.
pub const LOADER_PREFIX: &str = "PADDOCK_LOADER_";

/// Whether the exec server is wanted (the switch names it).
pub fn wanted() -> bool {
    std::env::var(SWITCH).is_ok_and(|v| v == PATH_SERVER)
}

/// This binary, its loader and its libraries, as the container sees them.
#[derive(Debug)]
struct ServerFiles {
    /// (host path, container path)
    binds: Vec<(PathBuf, String)>,
}

/// The server's files, read once from this process's own map; `None` when they cannot be
/// told (then jobs use Docker's exec).
fn server_files() -> Option<&'static ServerFiles> {
    static FILES: OnceLock<Option<ServerFiles>> = OnceLock::new();
    FILES
        .get_or_init(|| {
            let exe = std::env::current_exe().ok()?;
            let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
            files_of(&exe, &maps)
        })
        .as_ref()
}

/// The binds for `exe` and the libraries `maps` shows: the loader at `ld.so`, each library
/// under its file name and its `libX.so.N` name (the name a binary asks for).
fn files_of(exe: &Path, maps: &str) -> Option<ServerFiles> {
    let mut binds = vec![(exe.to_path_buf(), format!("{TOOLS_DIR}/paddock"))];
    let mut loader = false;
    let mut seen = std::collections::BTreeSet::new();
    for path in maps.lines().filter_map(|l| l.split_whitespace().nth(5)) {
        let path = Path::new(path);
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if path == exe || !name.contains(".so") || !seen.insert(path.to_path_buf()) {
            continue;
        }
        if name.starts_with("ld-linux") {
            loader = true;
            binds.push((path.to_path_buf(), format!("{TOOLS_DIR}/ld.so")));
            continue;
        }
        let mut names = vec![name.to_string()];
        if let Some((stem, version)) = name.split_once(".so.") {
            let major = version.split('.').next().unwrap_or(version);
            names.push(format!("{stem}.so.{major}"));
        }
        names.dedup();
        for name in names {
            binds.push((path.to_path_buf(), format!("{TOOLS_DIR}/lib/{name}")));
        }
    }
    loader.then_some(ServerFiles { binds })
}

/// Makes `body` (a local job or pool container's) run the exec server as its main process;
/// false (the body as it was) when the server is not wanted or its files cannot be told.
pub(super) fn apply(home: &PaddockHome, body: &mut ContainerCreateBody) -> bool {
    if !wanted() {
        return false;
    }
    let Some(mounts) = tool_mounts(home) else {
        return false;
    };
    body.entrypoint = Some(tool_command("exec-server"));
    body.cmd = Some(Vec::new());
    body.user = Some("0:0".into());
    body.open_stdin = Some(true);
    body.stdin_once = Some(false);
    body.env
        .get_or_insert_with(Vec::new)
        .extend(LOADER_VARS.iter().map(|var| format!("{var}=")));
    body.labels
        .get_or_insert_with(Default::default)
        .insert(LABEL_SERVER.to_string(), "1".to_string());
    let host = body.host_config.get_or_insert_with(Default::default);
    host.cap_add = Some(SERVER_CAPS.iter().map(|c| (*c).to_string()).collect());
    // The server's stdout carries every exec's output: with the engine's default driver
    // (json-file, no size cap) it would also be written to the engine's disk, unbounded and
    // outside the job's disk limit. Attach streams do not need a log driver.
    host.log_config = Some(bollard::models::HostConfigLogConfig {
        typ: Some("none".into()),
        config: None,
    });
    host.mounts.get_or_insert_with(Vec::new).extend(mounts);
    true
}

/// The read-only binds that let a container run this host's paddock (its binary, loader
/// and libraries under [`TOOLS_DIR`], and an empty file over the image's
/// `/etc/ld.so.preload`); `None` when they cannot be told.
pub(super) fn tool_mounts(home: &PaddockHome) -> Option<Vec<bollard::models::Mount>> {
    let files = server_files()?;
    let preload = empty_preload(home).ok()?;
    let mut mounts: Vec<_> = files
        .binds
        .iter()
        .map(|(source, target)| bind(source, Path::new(target), true))
        .collect();
    mounts.push(bind(&preload, Path::new("/etc/ld.so.preload"), true));
    Some(mounts)
}

/// The command line that starts paddock's helper `helper` from [`tool_mounts`]: through
/// the host's loader, with the image's library cache out of play.
pub(super) fn tool_command(helper: &str) -> Vec<String> {
    vec![
        format!("{TOOLS_DIR}/ld.so"),
        "--inhibit-cache".into(),
        "--library-path".into(),
        format!("{TOOLS_DIR}/lib"),
        format!("{TOOLS_DIR}/paddock"),
        helper.into(),
    ]
}

/// An empty file of paddock's, bound over the image's `/etc/ld.so.preload`.
fn empty_preload(home: &PaddockHome) -> std::io::Result<PathBuf> {
    let path = home.root().join("tools").join("ld.so.preload");
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == 0) {
        return Ok(path);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    crate::atomic::write_atomic(&path, b"", false)?;
    Ok(path)
}

/// How an exec through the server went.
pub(super) enum Served {
    /// The command ran: its result, and the container cgroup's OOM verdict is in it.
    Ran(ExecResult),
    /// The server did not take the command (why): it never ran; Docker's exec may run it.
    NotTaken(String),
    /// The stream ended before the command's end: the sandbox died under it.
    Gone {
        stdout: CappedOutput,
        stderr: CappedOutput,
        timed_out: bool,
        started: Instant,
    },
}

/// What one exec sends the server.
pub(super) struct Order {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub workdir: String,
    pub user: (u32, u32),
}

/// The argv the server starts: the command under `sh` as Docker's exec path starts it (the
/// same PATH lookup and 126/127 answers), with the exec's `after` snippet when it has one.
pub(super) fn argv(request: &ExecRequest) -> Vec<String> {
    let mut argv = vec!["sh".to_string(), "-c".to_string()];
    match &request.after {
        None => argv.extend([r#"exec "$@""#.to_string(), "sh".to_string()]),
        Some(after) => argv.extend([
            crate::runtime::exec::AFTER_WRAPPER.to_string(),
            "sh".to_string(),
            after.clone(),
        ]),
    }
    argv.extend(request.cmd.iter().cloned());
    argv
}

/// Runs `order` through the server of container `name` (see the module docs).
#[expect(
    clippy::too_many_lines,
    reason = "one exec's life over the attach stream: send, started, stream, deadline, end"
)]
pub(super) async fn exec(
    docker: &Docker,
    name: &str,
    lock: &Path,
    order: Order,
    request: &ExecRequest,
    sink: &mut dyn OutputSink,
) -> Result<Served, RuntimeError> {
    let options = bollard::query_parameters::AttachContainerOptionsBuilder::default()
        .stdin(true)
        .stdout(true)
        .stderr(false)
        .stream(true)
        .logs(false)
        .build();
    let attached =
        match tokio::time::timeout(API_TIMEOUT, docker.attach_container(name, Some(options))).await
        {
            Ok(Ok(attached)) => attached,
            Ok(Err(error)) => return Ok(Served::NotTaken(format!("attach: {error}"))),
            Err(_) => return Ok(Served::NotTaken("attach: no answer".into())),
        };
    let (mut output, mut input) = (attached.output, attached.input);
    let id = u64::from_str_radix(&crate::ids::random_hex(15), 16).expect("15 hex digits fit");
    let exec = ToGuest::Exec {
        id,
        argv: order.argv,
        env: order.env,
        workdir: order.workdir,
        uid: order.user.0,
        gid: order.user.1,
        stdin: request.stdin.is_some(),
        keep_caps: false,
    };
    let started_at = Instant::now();
    send(&mut input, lock, &encode_lines(&exec, id)).await?;
    let mut buffer = Vec::new();
    let mut stdout = CappedOutput::new(request.output_cap);
    let mut stderr = CappedOutput::new(request.output_cap);
    let mut started = false;
    let taken_by = tokio::time::Instant::now() + STARTED_WITHIN;
    let deadline = tokio::time::Instant::now() + request.timeout;
    let far = deadline + Duration::from_secs(86_400 * 365);
    let (mut kill_at, mut give_up_at, mut timed_out) = (far, far, false);
    let mut stdin = None;
    let mut input_open = false;
    let end = 'serve: loop {
        tokio::select! {
            chunk = output.next() => {
                let bytes = match chunk {
                    Some(Ok(LogOutput::StdOut { message })) => message,
                    Some(Ok(_)) => continue,
                    Some(Err(_)) | None if !started => {
                        return Ok(Served::NotTaken("the attach stream ended".into()));
                    }
                    Some(Err(_)) | None => {
                        return Ok(Served::Gone { stdout, stderr, timed_out, started: started_at });
                    }
                };
                buffer.extend_from_slice(&bytes);
                for message in take_lines::<FromGuest>(&mut buffer, 2 * MAX_LINE + 64 * 1024) {
                    match message {
                        FromGuest::Started { id: got } if got == id => {
                            started = true;
                            stdin = request.stdin.take().map(chunks);
                            input_open = stdin.is_some();
                        }
                        FromGuest::Stdout { id: got, data } if got == id => {
                            let bytes = crate::runtime::microvm::protocol::decode(&data);
                            sink.write(StreamKind::Stdout, &bytes);
                            stdout.push(&bytes);
                        }
                        FromGuest::Stderr { id: got, data } if got == id => {
                            let bytes = crate::runtime::microvm::protocol::decode(&data);
                            sink.write(StreamKind::Stderr, &bytes);
                            stderr.push(&bytes);
                        }
                        FromGuest::Exit { id: got, code, oom_killed } if got == id => {
                            break 'serve Some((code, oom_killed));
                        }
                        FromGuest::Failed { id: got, message } if got == id => {
                            return Ok(Served::NotTaken(message));
                        }
                        _ => {}
                    }
                }
            }
            chunk = next_chunk(&mut stdin), if input_open => {
                let chunk = chunk.unwrap_or_default();
                input_open = !chunk.is_empty();
                let data = base64::engine::general_purpose::STANDARD.encode(&chunk);
                send(&mut input, lock, &[encode_line(&ToGuest::Stdin { id, data })]).await?;
            }
            _ = sleep_until(taken_by), if !started => {
                return Ok(Served::NotTaken(format!("no answer within {STARTED_WITHIN:?}")));
            }
            _ = sleep_until(deadline), if !timed_out && started => {
                timed_out = true;
                let signal = match request.kill_policy {
                    KillPolicy::Graceful if !request.grace.is_zero() => {
                        kill_at = tokio::time::Instant::now() + request.grace;
                        libc::SIGTERM
                    }
                    _ => {
                        give_up_at = tokio::time::Instant::now() + AFTER_KILL;
                        libc::SIGKILL
                    }
                };
                send(&mut input, lock, &[encode_line(&ToGuest::Signal { id, signal })]).await?;
            }
            _ = sleep_until(kill_at) => {
                kill_at = far;
                let signal = libc::SIGKILL;
                send(&mut input, lock, &[encode_line(&ToGuest::Signal { id, signal })]).await?;
                give_up_at = tokio::time::Instant::now() + AFTER_KILL;
            }
            _ = sleep_until(give_up_at) => break 'serve None,
        }
    };
    let _ = input.shutdown().await;
    let (code, oom_killed) = end.unwrap_or((137, false));
    Ok(Served::Ran(crate::runtime::exec::exec_result(
        code,
        crate::units::millis(started_at.elapsed()),
        timed_out,
        oom_killed,
        stdout,
        stderr,
    )))
}

/// Writes lines to the server under the job's `exec-server.lock`, each in a write of its
/// own below `PIPE_BUF` (another process's line never lands inside ours; a message in
/// parts may interleave with another's by whole lines, which name their exec).
async fn send(
    input: &mut std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    lock: &Path,
    lines: &[Vec<u8>],
) -> Result<(), RuntimeError> {
    let failed = |error: std::io::Error| RuntimeError::DockerUnavailable {
        message: format!("writing to the exec server: {error}"),
    };
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock)
        .map_err(failed)?;
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => break,
            Err(_) if tokio::time::Instant::now() < until => {
                tokio::time::sleep(Duration::from_micros(500)).await;
            }
            // Someone holds it for seconds (a stopped process): send anyway.
            Err(_) => break,
        }
    }
    for line in lines {
        input.write_all(line).await.map_err(failed)?;
        input.flush().await.map_err(failed)?;
    }
    drop(file);
    Ok(())
}

/// The exec's input as chunks read on a task of its own; the last chunk is empty.
fn chunks(mut stdin: crate::runtime::exec::StdinReader) -> tokio::sync::mpsc::Receiver<Vec<u8>> {
    use tokio::io::AsyncReadExt as _;
    let (tx, rx) = tokio::sync::mpsc::channel(8);
    tokio::spawn(async move {
        loop {
            let mut chunk = vec![0u8; STDIN_CHUNK];
            let n = stdin.read(&mut chunk).await.unwrap_or(0);
            chunk.truncate(n);
            if tx.send(chunk).await.is_err() || n == 0 {
                return;
            }
        }
    });
    rx
}

async fn next_chunk(input: &mut Option<tokio::sync::mpsc::Receiver<Vec<u8>>>) -> Option<Vec<u8>> {
    match input {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_are_the_binary_the_loader_and_each_library_by_its_major_name() {
        let maps = "5600-5601 r-xp 0 08:01 1 /usr/bin/paddock\n\
                    7f00-7f01 r-xp 0 08:01 2 /usr/lib/x86_64-linux-gnu/libz.so.1.2.13\n\
                    7f01-7f02 r--p 0 08:01 2 /usr/lib/x86_64-linux-gnu/libz.so.1.2.13\n\
                    7f02-7f03 r-xp 0 08:01 3 /usr/lib/x86_64-linux-gnu/libc.so.6\n\
                    7f03-7f04 r-xp 0 08:01 4 /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2\n\
                    7f05-7f06 rw-p 0 00:00 0 [heap]\n";
        let files = files_of(Path::new("/usr/bin/paddock"), maps).expect("a loader");
        let targets: Vec<&str> = files.binds.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(
            targets,
            [
                "/.paddock-tools/exec/paddock",
                "/.paddock-tools/exec/lib/libz.so.1.2.13",
                "/.paddock-tools/exec/lib/libz.so.1",
                "/.paddock-tools/exec/lib/libc.so.6",
                "/.paddock-tools/exec/ld.so",
            ]
        );
        assert!(
            files_of(Path::new("/x"), "").is_none(),
            "no loader, no server"
        );
    }

    #[test]
    fn the_server_runs_the_command_under_sh_with_the_after_snippet() {
        let mut request = ExecRequest {
            cmd: vec!["true".into()],
            env: Default::default(),
            workdir: None,
            timeout: Duration::from_secs(5),
            kill_policy: KillPolicy::Hard,
            grace: Duration::ZERO,
            output_cap: 4096,
            after: None,
            stdin: Default::default(),
            user: None,
        };
        assert_eq!(argv(&request), ["sh", "-c", r#"exec "$@""#, "sh", "true"]);
        request.after = Some("echo done".into());
        let with = argv(&request);
        assert_eq!(with[3..], ["sh", "echo done", "true"]);
    }
}
