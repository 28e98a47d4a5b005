//! The file API beyond the workspace: an absolute path outside it (`/tmp/x`,
//! `/etc/hostname`) of a job that has a sandbox is read, written and listed **inside** that
//! sandbox, by a short shell script run as the job's user through the runtime's exec. So
//! the answer is the sandbox's file and the sandbox's rules: its own `/etc/hostname`, never
//! the host's file of that name; a file the agent cannot read is a permission error; a
//! read-only file is not written. No host path is opened for such a path, so nothing the
//! agent planted (a link, a mount, a swapped directory) can lead the host anywhere.
//!
//! The script answers by its exit code (the table in [`answer`]) before a byte of content
//! moves. A write goes to a temporary file beside the target that is renamed over it only
//! when every byte arrived (its size checked), so a cut transfer leaves nothing under the
//! target's name. Reads stream: the size first (`wc -c`, so a read limit is checked and
//! every refusal answered before a byte moves), then the bytes as `head` gives them, to
//! the end of that size; a remote job's workspace files come this way too (`OnEngine`). Jobs without a sandbox (the process runtime) have no such view: their paths stay
//! within the workspace.

use std::time::Duration;

use super::Paddock;
use crate::error::{Error, Result};
use crate::job::JobRecord;
use crate::output::{OutputSink, StreamKind};
use crate::runtime::ExecRequest;
use crate::runtime::exec::ExecStdin;
use crate::wire::{FILE_CAP, FileBytes, FileEntry, FileKind, FileList, FileReader, FileWritten};

/// How long one file operation inside the sandbox may take.
const INSIDE_TIMEOUT: Duration = Duration::from_secs(120);

/// `$1` the operation, `$2` the path, `$3` the bytes to read (the size `size` told; a file
/// that grew is cut there) or to write. `wc -c` of a regular file is its size from
/// `fstat`, not a read. Exit codes: 80 no such file, 81 a directory,
/// 82 not a regular file (or, to list, not a directory), 83 permission denied, 85 the write
/// failed, 86 the write was cut short. Sizes are counted, not `stat`ed: gVisor refuses
/// `statx` on some of its files (`/etc/hostname`). `tarout` streams a directory as a tar;
/// `tarin` extracts one from stdin into a temporary directory beside the target, then
/// moves it there (or copies it into an existing directory) only when all of it came.
const SCRIPT: &str = r#"p=$2
case $1 in
size)
  [ -e "$p" ] || exit 80
  [ -d "$p" ] && exit 81
  [ -f "$p" ] || exit 82
  [ -r "$p" ] || exit 83
  exec wc -c < "$p" ;;
read)
  [ -f "$p" ] && [ -r "$p" ] || exit 83
  exec head -c "$3" -- "$p" ;;
write)
  [ -d "$p" ] && exit 81
  d=$(dirname -- "$p")
  [ -d "$d" ] || mkdir -p -- "$d" 2>/dev/null || exit 83
  if [ -e "$p" ]; then
    [ -f "$p" ] || exit 82
    [ -w "$p" ] || exit 83
    new=false
  else
    new=true
  fi
  [ -w "$d" ] && [ -x "$d" ] || exit 83
  t="$d/.paddock-put.$$"
  cat > "$t" 2>/dev/null || { rm -f -- "$t"; exit 85; }
  [ "$(($(wc -c < "$t")))" = "$3" ] || { rm -f -- "$t"; exit 86; }
  [ "$new" = true ] || chmod --reference="$p" -- "$t" 2>/dev/null
  mv -f -- "$t" "$p" 2>/dev/null || { rm -f -- "$t"; exit 85; }
  echo "$new"; exit 0 ;;
tarout)
  [ -e "$p" ] || exit 80
  [ -d "$p" ] || exit 82
  [ -r "$p" ] && [ -x "$p" ] || exit 83
  exec tar -C "$p" -cf - . ;;
tarin)
  [ -e "$p" ] && { [ -d "$p" ] || exit 82; }
  d=$(dirname -- "$p")
  [ -d "$d" ] || mkdir -p -- "$d" 2>/dev/null || exit 83
  [ -w "$d" ] && [ -x "$d" ] || exit 83
  t="$d/.paddock-put.$$"
  mkdir -- "$t" 2>/dev/null || exit 85
  if ! tar -C "$t" -xf - --no-same-owner 2>&2; then rm -rf -- "$t"; exit 86; fi
  if [ -e "$p" ]; then
    [ -w "$p" ] || { rm -rf -- "$t"; exit 83; }
    cp -a -- "$t"/. "$p"/ 2>&2 || { rm -rf -- "$t"; exit 85; }
    rm -rf -- "$t"; echo false
  else
    mv -- "$t" "$p" || { rm -rf -- "$t"; exit 85; }
    echo true
  fi
  exit 0 ;;
list)
  [ -e "$p" ] || exit 80
  [ -d "$p" ] || exit 82
  [ -r "$p" ] && [ -x "$p" ] || exit 83
  exec find "$p" -mindepth 1 -maxdepth 1 -printf '%y\0%s\0%f\0%l\0' ;;
esac
exit 2"#;

/// A workspace path as the job's sandbox names it (`/workspace/src/x.rs`; the workspace
/// itself for an empty one).
pub(super) fn inside_path(record: &JobRecord, path: &crate::place::WorkspacePath) -> String {
    let workspace = record.limits.workspace_dir.trim_end_matches('/');
    if path.parts.is_empty() {
        workspace.to_string()
    } else {
        format!("{workspace}/{}", path.shown)
    }
}

/// Whether `input` names a path the sandbox, not the workspace, answers for: absolute,
/// outside the workspace the agent sees, and without `..` or NUL.
pub(super) fn is_inside_path(record: &JobRecord, input: &str) -> bool {
    let path = std::path::Path::new(input);
    !input.contains('\0')
        && path.is_absolute()
        && !path.starts_with(&record.limits.workspace_dir)
        && !path.starts_with(&record.worktree)
}

/// A job whose sandbox can run the script now: made, and not paused.
fn check_reachable(record: &JobRecord) -> Result<()> {
    super::checkpoint::made(record)?;
    if let Some(since) = record.paused_at {
        return Err(Error::Paused {
            id: record.id.clone(),
            since,
        });
    }
    Ok(())
}

/// Keeps a script's stdout, up to `cap` bytes (its stderr is the result's, capped there).
struct Collect {
    out: Vec<u8>,
    cap: usize,
    over: bool,
}

impl OutputSink for Collect {
    fn write(&mut self, stream: StreamKind, bytes: &[u8]) {
        if stream != StreamKind::Stdout {
            return;
        }
        let room = self.cap.saturating_sub(self.out.len());
        self.out.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.over |= bytes.len() > room;
    }
}

/// The error a script's exit code names (`None`: it succeeded).
fn answer(code: i64, path: &str, action: &'static str, stderr: &str) -> Option<Error> {
    let path = path.to_string();
    Some(match code {
        0 => return None,
        80 => Error::FileNotFound { path },
        81 => Error::FileKind {
            path,
            what: "a directory",
        },
        82 if action == "list" => Error::FileKind {
            path,
            what: "not a directory",
        },
        82 => Error::FileKind {
            path,
            what: "not a regular file",
        },
        83 => Error::FilePermission { path, action },
        _ => Error::FileIo {
            action,
            path,
            source: std::io::Error::other(format!(
                "the sandbox's script exited {code}: {}",
                stderr.trim().chars().take(300).collect::<String>()
            )),
        },
    })
}

/// How long one file operation inside the sandbox may take: two minutes, and a second
/// more per MiB it moves.
fn inside_timeout(bytes: u64) -> Duration {
    INSIDE_TIMEOUT + Duration::from_secs(bytes >> 20)
}

/// The script's exec as the job's user (or `user`, see [`As`]), feeding `stdin`.
fn request(args: [&str; 3], stdin: ExecStdin, timeout: Duration, user: As) -> ExecRequest {
    let mut cmd = vec!["sh".into(), "-c".into(), SCRIPT.into(), "sh".into()];
    cmd.extend(args.iter().map(|a| (*a).to_string()));
    ExecRequest {
        cmd,
        env: Default::default(),
        workdir: None,
        timeout,
        kill_policy: crate::config::KillPolicy::Hard,
        grace: Duration::ZERO,
        output_cap: 64 << 10,
        after: None,
        stdin,
        user: user.0,
    }
}

/// Who a file operation inside the sandbox runs as: `As(None)` the job's own user, else
/// another (uid, gid) the runtime contains (`--user` of the file API; see `exec --user`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct As(pub Option<(u32, u32)>);

fn not_in_time(path: &str) -> Error {
    Error::FileIo {
        action: "reach the sandbox for",
        path: path.to_string(),
        source: std::io::Error::other("the sandbox did not answer in time"),
    }
}

/// Sends a read's stdout on as it comes (its stderr is the result's, capped there).
struct Forward(tokio::sync::mpsc::UnboundedSender<std::io::Result<bytes::Bytes>>);

impl OutputSink for Forward {
    fn write(&mut self, stream: StreamKind, bytes: &[u8]) {
        if stream == StreamKind::Stdout {
            // A reader gone away stops caring; the exec ends by itself.
            let _ = self.0.send(Ok(bytes::Bytes::copy_from_slice(bytes)));
        }
    }
}

/// How long a directory's tar may take either way.
const TAR_TIMEOUT: Duration = Duration::from_secs(3600);

/// Counts what a reader gave (an extracted tar's bytes).
struct CountingReader {
    inner: FileReader,
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl tokio::io::AsyncRead for CountingReader {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = self.inner.as_mut().poll_read(cx, buf);
        let read = (buf.filled().len() - before) as u64;
        self.count
            .fetch_add(read, std::sync::atomic::Ordering::Relaxed);
        polled
    }
}

/// A read's bytes as they come from the sandbox; dropping it stops the exec.
struct Streamed {
    inner: tokio_util::io::StreamReader<
        tokio_stream::wrappers::UnboundedReceiverStream<std::io::Result<bytes::Bytes>>,
        bytes::Bytes,
    >,
    exec: tokio::task::JoinHandle<()>,
}

impl Drop for Streamed {
    fn drop(&mut self) {
        self.exec.abort();
    }
}

impl tokio::io::AsyncRead for Streamed {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl Paddock {
    /// Runs `request` in the job's sandbox on a task of its own, its stdout the reader's
    /// bytes as they come; a failed or timed-out exec ends the reader with an error.
    fn streamed(&self, record: &JobRecord, request: ExecRequest, what: &'static str) -> FileReader {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let runtime = self.runtime_of(record);
        let record = record.clone();
        let exec = tokio::spawn(async move {
            let mut sink = Forward(sender.clone());
            let failure = match runtime.exec(&record, &request, &mut sink).await {
                Ok(outcome) if outcome.result.timed_out => {
                    Some("the sandbox did not answer in time".to_string())
                }
                Ok(outcome) if outcome.result.exit_code != 0 => Some(format!(
                    "the sandbox's {what} exited {}: {}",
                    outcome.result.exit_code,
                    outcome
                        .result
                        .stderr
                        .trim()
                        .chars()
                        .take(300)
                        .collect::<String>()
                )),
                Ok(_) => None,
                Err(error) => Some(error.to_string()),
            };
            if let Some(failure) = failure {
                let _ = sender.send(Err(std::io::Error::other(failure)));
            }
        });
        let inner = tokio_util::io::StreamReader::new(
            tokio_stream::wrappers::UnboundedReceiverStream::new(receiver),
        );
        Box::pin(Streamed { inner, exec })
    }

    /// Runs the script in the job's sandbox, as the job's user, feeding `stdin`.
    async fn inside(
        &self,
        record: &JobRecord,
        args: [&str; 3],
        stdin: ExecStdin,
        (cap, timeout): (usize, Duration),
        user: As,
    ) -> Result<(i64, Vec<u8>, bool, String)> {
        check_reachable(record)?;
        let request = request(args, stdin, timeout, user);
        let mut sink = Collect {
            out: Vec::new(),
            cap,
            over: false,
        };
        let outcome = self
            .runtime_of(record)
            .exec(record, &request, &mut sink)
            .await?;
        let result = outcome.result;
        if result.timed_out {
            return Err(not_in_time(args[1]));
        }
        Ok((result.exit_code, sink.out, sink.over, result.stderr))
    }

    /// A file of the sandbox's own filesystem, as the job's user reads it, streamed: its
    /// size first (every refusal answered before a byte moves), then its bytes.
    pub(super) async fn read_inside(
        &self,
        record: &JobRecord,
        path: &str,
        limit: Option<u64>,
        user: As,
    ) -> Result<FileBytes> {
        let (code, out, _, stderr) = self
            .inside(
                record,
                ["size", path, "0"],
                ExecStdin::default(),
                (64, INSIDE_TIMEOUT),
                user,
            )
            .await?;
        if let Some(error) = answer(code, path, "read", &stderr) {
            return Err(error);
        }
        let size: u64 =
            String::from_utf8_lossy(&out)
                .trim()
                .parse()
                .map_err(|_| Error::FileIo {
                    action: "read",
                    path: path.to_string(),
                    source: std::io::Error::other("the sandbox gave no size"),
                })?;
        if let Some(limit) = limit
            && size > limit
        {
            return Err(Error::FileTooLarge {
                path: path.to_string(),
                size,
                cap: limit,
            });
        }
        let request = request(
            ["read", path, &size.to_string()],
            ExecStdin::default(),
            inside_timeout(size),
            user,
        );
        Ok(FileBytes {
            size,
            reader: self.streamed(record, request, "read"),
        })
    }

    /// Writes a file of the sandbox's own filesystem as the job's user, whole or not at all:
    /// the script counts what came before it renames.
    pub(super) async fn write_inside(
        &self,
        record: &JobRecord,
        path: &str,
        bytes: FileBytes,
        user: As,
    ) -> Result<FileWritten> {
        let size = bytes.size;
        let input = ExecStdin::reader(Box::pin(tokio::io::AsyncReadExt::take(bytes.reader, size)));
        let (code, out, _, stderr) = self
            .inside(
                record,
                ["write", path, &size.to_string()],
                input,
                (64, inside_timeout(size)),
                user,
            )
            .await?;
        if let Some(error) = answer(code, path, "write", &stderr) {
            return Err(error);
        }
        Ok(FileWritten {
            path: path.to_string(),
            size,
            created: String::from_utf8_lossy(&out).trim() == "true",
        })
    }

    /// A directory of the sandbox's own filesystem as a tar, streamed as the job's user
    /// makes it (`tarout`); refusals (not found, not a directory, not readable) come first.
    pub(super) async fn tar_inside(
        &self,
        record: &JobRecord,
        path: &str,
        user: As,
    ) -> Result<FileReader> {
        check_reachable(record)?;
        // The same checks as `tarout`'s own, answered before the stream starts.
        let (code, _, _, stderr) = self
            .inside(
                record,
                ["list", path, "0"],
                ExecStdin::default(),
                (0, INSIDE_TIMEOUT),
                user,
            )
            .await?;
        if let Some(error) = answer(code, path, "list", &stderr) {
            return Err(error);
        }
        // A whole tree may be large: the exec's deadline is generous, and a reader that
        // goes away stops it (`Streamed`).
        let request = request(
            ["tarout", path, "0"],
            ExecStdin::default(),
            TAR_TIMEOUT,
            user,
        );
        Ok(self.streamed(record, request, "tar"))
    }

    /// Extracts a tar into a directory of the sandbox's own filesystem as the job's user,
    /// whole or not at all (`tarin`).
    pub(super) async fn untar_inside(
        &self,
        record: &JobRecord,
        path: &str,
        tar: FileReader,
        user: As,
    ) -> Result<FileWritten> {
        let counted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = CountingReader {
            inner: tar,
            count: counted.clone(),
        };
        let (code, out, _, stderr) = self
            .inside(
                record,
                ["tarin", path, "0"],
                ExecStdin::reader(Box::pin(counter)),
                (64, TAR_TIMEOUT),
                user,
            )
            .await?;
        if let Some(error) = answer(code, path, "write", &stderr) {
            return Err(error);
        }
        Ok(FileWritten {
            path: path.to_string(),
            size: counted.load(std::sync::atomic::Ordering::Relaxed),
            created: String::from_utf8_lossy(&out).trim() == "true",
        })
    }

    /// A directory of the sandbox's own filesystem, as the job's user lists it.
    pub(super) async fn list_inside(
        &self,
        record: &JobRecord,
        path: &str,
        user: As,
    ) -> Result<FileList> {
        let cap = usize::try_from(FILE_CAP).expect("the cap fits");
        let (code, out, over, stderr) = self
            .inside(
                record,
                ["list", path, "0"],
                ExecStdin::default(),
                (cap, INSIDE_TIMEOUT),
                user,
            )
            .await?;
        if let Some(error) = answer(code, path, "list", &stderr) {
            return Err(error);
        }
        if over {
            return Err(Error::FileTooLarge {
                path: path.to_string(),
                size: FILE_CAP + 1,
                cap: FILE_CAP,
            });
        }
        Ok(FileList {
            path: path.to_string(),
            entries: entries(&out),
        })
    }
}

/// The entries of `find -printf '%y\0%s\0%f\0%l\0'`, sorted by name.
fn entries(out: &[u8]) -> Vec<FileEntry> {
    let fields: Vec<&[u8]> = out.split(|b| *b == 0).collect();
    let mut entries: Vec<FileEntry> = fields
        .chunks_exact(4)
        .map(|entry| {
            let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
            let kind = match entry[0] {
                b"f" => FileKind::File,
                b"d" => FileKind::Dir,
                b"l" => FileKind::Symlink,
                _ => FileKind::Other,
            };
            FileEntry {
                name: text(entry[2]),
                kind,
                size: if kind == FileKind::File {
                    text(entry[1]).parse().unwrap_or(0)
                } else {
                    0
                },
                target: (kind == FileKind::Symlink).then(|| text(entry[3])),
            }
        })
        .collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_keeps_names_with_tabs_and_newlines_and_link_targets() {
        let out = b"f\x003\x00a\tb\nc\x00\x00l\x005\x00ln\x00/etc/x\x00d\x004096\x00dir\x00\x00";
        let listed = entries(out);
        let names: Vec<&str> = listed.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a\tb\nc", "dir", "ln"]);
        assert_eq!(listed[0].size, 3);
        assert_eq!(listed[1].size, 0, "a directory's size is not shown");
        assert_eq!(listed[2].target.as_deref(), Some("/etc/x"));
    }

    #[test]
    fn each_exit_code_of_the_script_is_its_own_error() {
        let kind = |code| answer(code, "/p", "read", "").map(|e| e.kind());
        assert_eq!(kind(0), None);
        assert_eq!(kind(80), Some(crate::ErrorKind::NotFound));
        assert_eq!(kind(81), Some(crate::ErrorKind::InvalidInput));
        assert_eq!(kind(83), Some(crate::ErrorKind::PermissionDenied));
        assert_eq!(kind(86), Some(crate::ErrorKind::Internal));
    }
}
