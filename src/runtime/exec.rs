//! The exec contract shared by every runtime: the request (with the command's standard
//! input, [`ExecStdin`]), the [`ExecResult`], live output sinks, and the per-stream output
//! cap that keeps the head and tail of a long output and cuts the middle with a visible
//! marker.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};

use crate::config::KillPolicy;

/// The default cap on each of stdout and stderr kept in an [`ExecResult`].
pub const DEFAULT_OUTPUT_CAP: usize = 1 << 20;

/// One command to run in a job.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub cmd: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Working directory; relative paths are inside the workspace.
    pub workdir: Option<String>,
    pub timeout: Duration,
    pub kill_policy: KillPolicy,
    pub grace: Duration,
    pub output_cap: usize,
    /// A shell snippet to run in the same sandbox session right after the command (whatever
    /// its outcome, unless it was killed), for paddock's own bookkeeping: the job's sync.
    /// Runtimes that cannot do this ignore it, and the caller notices the missing result.
    pub after: Option<String>,
    /// What the command reads on its standard input (nothing: it reads an empty stdin).
    pub stdin: ExecStdin,
    /// The uid and gid to run as when not the job's own (`exec --user`); only runtimes
    /// whose `contains_root` capability is set are given one (the engine checks).
    pub user: Option<(u32, u32)>,
}

/// A reader of an exec's standard input.
pub type StdinReader = Pin<Box<dyn AsyncRead + Send>>;

/// The standard input of one exec: none (the command reads end-of-file at once), or a
/// reader that the runtime takes once and copies to the command until it ends or the
/// command does. It is `Clone` because requests are; every clone names the same reader, so
/// only one runtime call can feed it (a retried exec reads an empty stdin).
#[derive(Clone, Default)]
pub struct ExecStdin(Option<Arc<Mutex<Option<StdinReader>>>>);

impl std::fmt::Debug for ExecStdin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "ExecStdin(..)"
        } else {
            "ExecStdin(none)"
        })
    }
}

impl ExecStdin {
    /// Bytes known up front (the API's inline `stdin`).
    pub fn bytes(bytes: Vec<u8>) -> ExecStdin {
        ExecStdin::reader(Box::pin(std::io::Cursor::new(bytes)))
    }

    /// A stream (the CLI's `-i`, the API's streamed body).
    pub fn reader(reader: StdinReader) -> ExecStdin {
        ExecStdin(Some(Arc::new(Mutex::new(Some(reader)))))
    }

    /// Whether the command gets a standard input to read.
    pub fn is_some(&self) -> bool {
        self.0.is_some()
    }

    /// The reader, the first time it is asked for.
    pub fn take(&self) -> Option<StdinReader> {
        self.0
            .as_ref()
            .and_then(|shared| shared.lock().expect("no panics hold the lock").take())
    }
}

/// An exec's stdin feed on a task of its own: it copies the input to the command's stdin,
/// then closes that (the command reads end-of-file). A command that stops reading (or
/// exits) ends the copy, and what it did not read is dropped, as a pipe would drop it.
/// Dropping the feed stops it: no feed outlives its exec.
pub struct StdinFeed(tokio::task::JoinHandle<()>);

impl StdinFeed {
    pub fn start(mut input: StdinReader, mut to: impl AsyncWrite + Send + Unpin + 'static) -> Self {
        StdinFeed::spawn(async move {
            let _ = tokio::io::copy(&mut input, &mut to).await;
            let _ = to.shutdown().await;
        })
    }

    /// A feed of a runtime's own shape (the microVM's stdin frames), stopped the same way.
    pub fn spawn(feed: impl std::future::Future<Output = ()> + Send + 'static) -> Self {
        StdinFeed(tokio::spawn(feed))
    }
}

impl Drop for StdinFeed {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub use crate::output::{Discard, ExecResult, OutputSink, StreamKind};

/// The shell that runs a command and then its [`ExecRequest::after`] snippet (`sh -c` of
/// this, `$1` the snippet, the command after it). It stays the command's parent, so it is in
/// the group a timeout signals, and it catches SIGTERM (a caught signal is the default again
/// in the command it starts; an ignored one would stay ignored there): it outlives a
/// graceful stop, the command gets its grace, then the command's own exit code comes back
/// and the snippet runs. Killed by the TERM instead, it would end the exec at once with 143,
/// and a command that ignores TERM would run on past its timeout with no one to kill it.
/// The command runs in a subshell that `exec`s it with the wrapper's stderr (fd 3): the
/// shell applies a command's redirections in itself too while it waits, and would then
/// write its own "Terminated" there, into the command's stderr. The snippet reads no stdin:
/// what the command left unread of its input is not paddock's to take.
pub const AFTER_WRAPPER: &str = r#"trap : TERM; after=$1; shift; exec 3>&2 2>/dev/null; (exec "$@" 2>&3 3>&-); rc=$?; exec 2>&3 3>&-; eval "$after" </dev/null; exit $rc"#;

/// Keeps at most `cap` bytes of a stream: the first half and the last half.
#[derive(Debug)]
pub struct CappedOutput {
    cap: usize,
    head: Vec<u8>,
    tail: Vec<u8>,
    total: u64,
}

/// The [`ExecResult`] of a command that ended, from its two capped streams: every runtime
/// builds its result here, so the truncation flag and the exact (base64) bytes agree.
pub fn exec_result(
    exit_code: i64,
    duration_ms: u64,
    timed_out: bool,
    oom_killed: bool,
    stdout: CappedOutput,
    stderr: CappedOutput,
) -> ExecResult {
    let (stdout, out_cut, stdout_base64) = stdout.finish_exact();
    let (stderr, err_cut, stderr_base64) = stderr.finish_exact();
    ExecResult {
        exit_code,
        stdout,
        stderr,
        duration_ms,
        timed_out,
        truncated: out_cut || err_cut,
        oom_killed,
        sync_error: None,
        exec_id: None,
        stdout_base64,
        stderr_base64,
        meta: None,
    }
}

impl CappedOutput {
    pub fn new(cap: usize) -> Self {
        CappedOutput {
            cap,
            head: Vec::new(),
            tail: Vec::new(),
            total: 0,
        }
    }

    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let head_cap = self.cap / 2;
        if self.head.len() < head_cap {
            let take = bytes.len().min(head_cap - self.head.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if bytes.is_empty() {
            return;
        }
        let tail_cap = self.cap - head_cap;
        self.tail.extend_from_slice(bytes);
        // Trim in amortized steps rather than on every push.
        if self.tail.len() > tail_cap.saturating_mul(2).max(8192) {
            let excess = self.tail.len() - tail_cap;
            self.tail.drain(..excess);
        }
    }

    pub fn truncated(&self) -> bool {
        self.total > self.cap as u64
    }

    /// The kept text, with a marker where bytes were dropped.
    pub fn finish(self) -> (String, bool) {
        let (text, truncated, _) = self.finish_exact();
        (text, truncated)
    }

    /// [`finish`](Self::finish), plus the kept bytes exactly (base64) when they are not
    /// UTF-8, so the text's U+FFFD replacements hide nothing.
    pub fn finish_exact(mut self) -> (String, bool, Option<String>) {
        let head_cap = self.cap / 2;
        let tail_cap = self.cap - head_cap;
        if self.tail.len() > tail_cap {
            let excess = self.tail.len() - tail_cap;
            self.tail.drain(..excess);
        }
        let truncated = self.truncated();
        let mut kept = std::mem::take(&mut self.head);
        if truncated {
            let omitted = self.total - (kept.len() + self.tail.len()) as u64;
            kept.extend_from_slice(
                format!("\n[... paddock: {omitted} bytes of output omitted ...]\n").as_bytes(),
            );
        }
        kept.extend_from_slice(&self.tail);
        match String::from_utf8(kept) {
            Ok(text) => (text, truncated, None),
            Err(error) => {
                use base64::Engine as _;
                let bytes = error.into_bytes();
                let exact = base64::engine::general_purpose::STANDARD.encode(&bytes);
                (
                    String::from_utf8_lossy(&bytes).into_owned(),
                    truncated,
                    Some(exact),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_keeps_head_and_tail_with_marker() {
        let mut out = CappedOutput::new(10);
        out.push(b"0123456789");
        out.push(b"abcdefghij");
        let (text, truncated) = out.finish();
        assert!(truncated);
        assert!(text.starts_with("01234"), "{text}");
        assert!(text.ends_with("fghij"), "{text}");
        assert!(text.contains("10 bytes of output omitted"), "{text}");
    }

    #[test]
    fn bytes_that_are_not_utf8_are_kept_exactly_beside_the_text() {
        let mut out = CappedOutput::new(100);
        out.push(b"ok \xff\xfe end");
        let (text, truncated, exact) = out.finish_exact();
        assert_eq!(text, "ok \u{fffd}\u{fffd} end");
        assert!(!truncated);
        assert_eq!(exact.as_deref(), Some("b2sg//4gZW5k"));
        let mut plain = CappedOutput::new(100);
        plain.push("é".as_bytes());
        assert_eq!(plain.finish_exact().2, None);
    }

    #[test]
    fn short_output_is_untouched() {
        let mut out = CappedOutput::new(100);
        out.push(b"hello ");
        out.push(b"world");
        assert_eq!(out.finish(), ("hello world".to_string(), false));
    }

    /// Runs `command` under [`AFTER_WRAPPER`] with `dash` (the job image's `sh`) in a
    /// process group of its own, sends the group SIGTERM after 300 ms as a graceful timeout
    /// does, and SIGKILL `kill_after` later; returns the exit status, stdout and stderr.
    fn wrapped_under_term(command: &str, kill_after: Duration) -> (Option<i32>, String, String) {
        use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
        let child = std::process::Command::new("dash")
            .args(["-c", AFTER_WRAPPER, "sh", "echo after", "sh", "-c", command])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("dash runs");
        let pgid = i32::try_from(child.id()).expect("a pid fits");
        std::thread::sleep(Duration::from_millis(300));
        crate::sys::signal_group(pgid, libc::SIGTERM);
        let (ended, ended_rx) = std::sync::mpsc::channel::<()>();
        let killer = std::thread::spawn(move || {
            if ended_rx.recv_timeout(kill_after).is_err() {
                crate::sys::signal_group(pgid, libc::SIGKILL);
            }
        });
        let out = child.wait_with_output().expect("the wrapper is waited for");
        let _ = ended.send(());
        killer.join().expect("the killer thread");
        (
            out.status.code().or(out.status.signal().map(|s| 128 + s)),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[test]
    fn the_after_wrapper_outlives_a_term_and_gives_the_command_its_own_end() {
        if std::process::Command::new("dash")
            .arg("-c")
            .arg(":")
            .status()
            .is_err()
        {
            eprintln!("skipped: no dash here");
            return;
        }
        // A command that dies of the TERM: its 143 comes back, the snippet ran, and the
        // shell's own "Terminated" is not in the command's stderr.
        let (code, stdout, stderr) = wrapped_under_term("sleep 30", Duration::from_secs(5));
        assert_eq!(code, Some(143));
        assert_eq!(stdout, "after\n");
        assert_eq!(stderr, "");
        // One that ignores TERM runs on in its grace (the wrapper with it) until the KILL.
        let started = std::time::Instant::now();
        let (code, stdout, _) =
            wrapped_under_term("trap '' TERM; sleep 30", Duration::from_millis(700));
        assert_eq!(code, Some(137), "only the KILL ended it");
        assert!(started.elapsed() >= Duration::from_millis(900));
        assert_eq!(stdout, "", "the snippet of a killed exec does not run");
        // A command's stderr and exit code pass through untouched.
        let (code, stdout, stderr) =
            wrapped_under_term("echo err >&2; exit 4", Duration::from_secs(5));
        assert_eq!(
            (code, stdout.as_str(), stderr.as_str()),
            (Some(4), "after\n", "err\n")
        );
    }
}
