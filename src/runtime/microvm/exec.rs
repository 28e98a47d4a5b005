//! The host side of the guest agent's channel: the readiness handshake and one exec.
//!
//! The channel is one QEMU chardev socket, which serves one client at a time, so execs in
//! one VM take turns under the job's `vm/exec.lock`. Every connection starts with pings
//! until a pong (the guest may be booting, or reopening its port after the last client),
//! then at most one exec. The deadline is the host's: at the exec's timeout the guest is
//! told to signal the command's process group (TERM, the grace, KILL, as the job's kill
//! policy says), and a guest that does not report the end soon after is given up on.

use std::time::{Duration, Instant};

use base64::Engine as _;
use futures_util::StreamExt as _;
use tokio::io::AsyncWriteExt as _;
use tokio::net::UnixStream;
use tokio::time::sleep_until;

use super::MicrovmError;
use super::protocol::{FromGuest, ToGuest, decode, encode, read_frame_async};
use super::vm::VmDir;
use crate::config::KillPolicy;
use crate::output::StreamKind;
use crate::runtime::exec::{CappedOutput, StdinFeed};
use crate::runtime::{ExecRequest, ExecResult, OutputSink};

/// How long a killed command's end may take to be reported.
const AFTER_KILL: Duration = Duration::from_secs(5);

/// A connection whose guest agent answered a ping; the guest's kernel release.
pub struct Channel {
    pub(super) stream: UnixStream,
    pub kernel: String,
    pub(super) next_id: u64,
}

/// Connects and pings until the guest answers or `within` passes.
pub async fn connect(vm: &VmDir, within: Duration) -> Result<Channel, MicrovmError> {
    let deadline = tokio::time::Instant::now() + within;
    let socket = vm.agent_socket();
    let mut last = String::from("no answer");
    while tokio::time::Instant::now() < deadline {
        if vm.qemu_pid().is_none() {
            return Err(MicrovmError::not_running(vm));
        }
        match UnixStream::connect(&socket).await {
            Ok(stream) => match handshake(stream, deadline).await {
                Ok(channel) => return Ok(channel),
                Err(error) => last = error.to_string(),
            },
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(MicrovmError::NoAnswer {
        after: within,
        message: last,
        console: tail(&vm.console()),
    })
}

async fn handshake(
    mut stream: UnixStream,
    deadline: tokio::time::Instant,
) -> Result<Channel, MicrovmError> {
    let id = 1u64 << 62 | u64::from(rand_u32());
    loop {
        // The write has the deadline too: a guest that never opens its port (a kernel hung
        // in boot) leaves QEMU unread, and the socket full.
        let ping = encode(&ToGuest::Ping { id });
        let Ok(written) = tokio::time::timeout_at(deadline, stream.write_all(&ping)).await else {
            return Err(MicrovmError::NoAnswer {
                after: Duration::ZERO,
                message: "the guest agent took no ping (its port is not open)".into(),
                console: String::new(),
            });
        };
        written?;
        let next_ping = (tokio::time::Instant::now() + Duration::from_millis(300)).min(deadline);
        loop {
            tokio::select! {
                frame = read_frame_async::<FromGuest>(&mut stream) => match frame? {
                    FromGuest::Pong { id: got, kernel } if got == id => {
                        return Ok(Channel { stream, kernel, next_id: id + 1 });
                    }
                    // The tail of an earlier client's exec, or an older ping's answer.
                    _ => {}
                },
                _ = sleep_until(next_ping) => break,
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(MicrovmError::NoAnswer {
                after: Duration::ZERO,
                message: "the guest agent did not answer a ping".into(),
                console: String::new(),
            });
        }
    }
}

fn rand_u32() -> u32 {
    u32::from_str_radix(&crate::ids::random_hex(8), 16).expect("8 hex digits fit a u32")
}

/// Runs `argv` in the guest as `uid:gid` and collects its result (see the module docs).
pub async fn run(
    mut channel: Channel,
    argv: Vec<String>,
    env: Vec<(String, String)>,
    workdir: String,
    (uid, gid): (u32, u32),
    request: &ExecRequest,
    sink: &mut dyn OutputSink,
) -> Result<ExecResult, MicrovmError> {
    let id = channel.next_id;
    channel.next_id += 1;
    let started = Instant::now();
    let exec = ToGuest::Exec {
        id,
        argv,
        env,
        workdir,
        uid,
        gid,
        stdin: request.stdin.is_some(),
        // Only the test switch's root keeps its capabilities (an agent that took the
        // guest's kernel); every other command has none, root's included.
        keep_caps: super::guest_root_for_tests(),
    };
    channel.stream.write_all(&encode(&exec)).await?;
    // Frames are read by one stream that lives through the loop (a read cut midway by
    // another branch would lose its bytes), and the input comes in chunks read on a task
    // of its own, each sent as a stdin frame; an empty one closes the command's stdin.
    let (reader, mut writer) = channel.stream.split();
    let mut frames = std::pin::pin!(futures_util::stream::unfold(reader, |mut reader| async {
        let frame = read_frame_async::<FromGuest>(&mut reader).await;
        Some((frame, reader))
    }));
    let (mut input, _feeding) = stdin_chunks(request);
    let mut input_open = input.is_some();
    let mut stdout = CappedOutput::new(request.output_cap);
    let mut stderr = CappedOutput::new(request.output_cap);
    let deadline = tokio::time::Instant::now() + request.timeout;
    let far = deadline + Duration::from_secs(86_400 * 365);
    let mut timed_out = false;
    let mut kill_at = far;
    let mut give_up_at = far;
    let end = loop {
        tokio::select! {
            chunk = next_chunk(&mut input), if input_open => {
                let chunk = chunk.unwrap_or_default();
                input_open = !chunk.is_empty();
                let data = base64::engine::general_purpose::STANDARD.encode(&chunk);
                writer.write_all(&encode(&ToGuest::Stdin { id, data })).await?;
            }
            frame = frames.next() => match frame.expect("the frame stream never ends")? {
                FromGuest::Stdout { id: got, data } if got == id => {
                    let bytes = decode(&data);
                    sink.write(StreamKind::Stdout, &bytes);
                    stdout.push(&bytes);
                }
                FromGuest::Stderr { id: got, data } if got == id => {
                    let bytes = decode(&data);
                    sink.write(StreamKind::Stderr, &bytes);
                    stderr.push(&bytes);
                }
                FromGuest::Exit { id: got, code, oom_killed } if got == id => {
                    break Some((code, oom_killed));
                }
                FromGuest::Failed { id: got, message } if got == id => {
                    return Err(MicrovmError::Exec { message });
                }
                _ => {}
            },
            _ = sleep_until(deadline), if !timed_out => {
                timed_out = true;
                let (signal, next) = match request.kill_policy {
                    KillPolicy::Graceful if !request.grace.is_zero() => {
                        (libc::SIGTERM, tokio::time::Instant::now() + request.grace)
                    }
                    _ => (libc::SIGKILL, far),
                };
                writer.write_all(&encode(&ToGuest::Signal { id, signal })).await?;
                if signal == libc::SIGKILL {
                    give_up_at = tokio::time::Instant::now() + AFTER_KILL;
                } else {
                    kill_at = next;
                }
            }
            _ = sleep_until(kill_at) => {
                kill_at = far;
                writer.write_all(&encode(&ToGuest::Signal { id, signal: libc::SIGKILL })).await?;
                give_up_at = tokio::time::Instant::now() + AFTER_KILL;
            }
            _ = sleep_until(give_up_at) => break None,
        }
    };
    // Input frames the guest has not read yet would be cut wherever QEMU drops the
    // connection, and the guest would take the next client's bytes for the rest of a frame:
    // a ping, and its answer, first (it comes after everything sent before it).
    if request.stdin.is_some() {
        drain(&mut writer, &mut frames, channel.next_id).await?;
    }
    let (exit_code, oom_killed) = end.unwrap_or((137, false));
    Ok(crate::runtime::exec::exec_result(
        exit_code,
        crate::units::millis(started.elapsed()),
        timed_out,
        oom_killed,
        stdout,
        stderr,
    ))
}

/// Pings the guest and reads until its answer: then it has read every frame sent before.
async fn drain(
    writer: &mut (impl tokio::io::AsyncWrite + Unpin),
    frames: &mut (
             impl futures_util::Stream<Item = Result<FromGuest, super::protocol::FrameError>> + Unpin
         ),
    ping: u64,
) -> Result<(), MicrovmError> {
    writer
        .write_all(&encode(&ToGuest::Ping { id: ping }))
        .await?;
    let drained = tokio::time::timeout(AFTER_KILL * 6, async {
        while let Some(frame) = frames.next().await {
            match frame {
                Ok(FromGuest::Pong { id: got, .. }) if got == ping => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        false
    })
    .await;
    if !matches!(drained, Ok(true)) {
        tracing::warn!("the guest agent did not answer the ping after an exec's input");
    }
    Ok(())
}

/// How much of an exec's input goes in one stdin frame (its base64 stays far below the cap
/// on frames).
const STDIN_CHUNK: usize = 64 << 10;

/// The exec's input as chunks read on a task of their own (the task stops when dropped);
/// the last chunk is empty: the input's end.
fn stdin_chunks(
    request: &ExecRequest,
) -> (
    Option<tokio::sync::mpsc::Receiver<Vec<u8>>>,
    Option<StdinFeed>,
) {
    use tokio::io::AsyncReadExt as _;
    let Some(mut stdin) = request.stdin.take() else {
        return (None, None);
    };
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let feed = StdinFeed::spawn(async move {
        loop {
            let mut chunk = vec![0u8; STDIN_CHUNK];
            let n = stdin.read(&mut chunk).await.unwrap_or(0);
            chunk.truncate(n);
            if tx.send(chunk).await.is_err() || n == 0 {
                return;
            }
        }
    });
    (Some(rx), Some(feed))
}

/// The next chunk of input (`None`: the reader failed, taken as the end).
async fn next_chunk(input: &mut Option<tokio::sync::mpsc::Receiver<Vec<u8>>>) -> Option<Vec<u8>> {
    match input {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Sends the guest agent one order without an answer (power off, kill the job's
/// processes); false when it could not be told.
pub async fn tell(vm: &VmDir, order: &ToGuest) -> bool {
    match connect(vm, Duration::from_secs(5)).await {
        Ok(mut channel) => {
            let sent = channel.stream.write_all(&encode(order)).await.is_ok();
            // A ping after the order: its answer means the order was read.
            let id = channel.next_id;
            let _ = channel
                .stream
                .write_all(&encode(&ToGuest::Ping { id }))
                .await;
            let _ = tokio::time::timeout(Duration::from_secs(2), async {
                while let Ok(frame) = read_frame_async::<FromGuest>(&mut channel.stream).await {
                    if matches!(frame, FromGuest::Pong { id: got, .. } if got == id) {
                        break;
                    }
                }
            })
            .await;
            sent
        }
        Err(_) => false,
    }
}

/// The last 15 lines of a VM's log (its console, QEMU's log), for errors: only the file's
/// last 16 KiB are read and each line is cut at 300 characters, however much the guest wrote.
pub fn tail(log: &std::path::Path) -> String {
    use std::io::{Read as _, Seek as _};
    const WINDOW: u64 = 16 << 10;
    let mut bytes = Vec::new();
    if let Ok(mut file) = std::fs::File::open(log) {
        let start = file
            .metadata()
            .map_or(0, |m| m.len().saturating_sub(WINDOW));
        if file.seek(std::io::SeekFrom::Start(start)).is_ok() {
            let _ = file.take(WINDOW).read_to_end(&mut bytes);
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<String> = text
        .lines()
        .rev()
        .take(15)
        .map(|line| line.chars().take(300).collect())
        .collect();
    lines.into_iter().rev().collect::<Vec<_>>().join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guest that never opens its port (a kernel hung in boot, as seen under the emulator
    /// on a loaded host): QEMU stops reading its socket, which fills. The handshake still
    /// ends at its deadline instead of waiting on its write for ever.
    #[tokio::test]
    async fn a_handshake_on_a_full_unread_socket_ends_at_its_deadline() {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
        ours.set_nonblocking(true).expect("nonblocking");
        let chunk = vec![0u8; 65536];
        loop {
            match std::io::Write::write(&mut &ours, &chunk) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("filling the socket: {e}"),
            }
        }
        let stream = UnixStream::from_std(ours).expect("a tokio stream");
        let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
        let ended = tokio::time::timeout(Duration::from_secs(10), handshake(stream, deadline))
            .await
            .expect("the handshake ends by its deadline");
        let Err(error) = ended else {
            panic!("a channel from a socket nobody reads")
        };
        assert!(matches!(error, MicrovmError::NoAnswer { .. }), "{error}");
        drop(theirs);
    }
}
