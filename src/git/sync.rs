//! The host half of the sync protocol (the scratch repository that receives it is in
//! [`super::scratch`]): how a job's branch and uncommitted work get from its
//! private git dir into the user's repository without any host-side git ever using a file
//! the agent could have written.
//!
//! Inside the job's sandbox, `sync.sh` prints a header, the list of untracked paths and,
//! when a ref moved, a git bundle (whose pack may hold nothing the host lacks). Here, [`SyncCapture`] takes that stream
//! with size caps; the scratch repository then checks that the bundle holds exactly the refs
//! the header names and indexes it with `index-pack --strict` (fsck of every object, and every
//! object it names present); the engine then hands the user's repository that pack and moves
//! the job's branch (or, for a sync with uncommitted work, fetches only what the branch
//! needs), writing only the job's branch and paddock's own `refs/paddock/*`.
//!
//! Invariants: the agent's bytes reach the host only as this stream; a sync that fails at
//! any step leaves the user's refs where they were.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;

use crate::output::{OutputSink, StreamKind};

/// The script the sandbox runs; its header format is documented at its top.
pub const SYNC_SCRIPT: &str = concat!(include_str!("changed.sh"), include_str!("sync.sh"));
/// What the sandbox half of a checkpoint or a restore says on stderr when it looked only at
/// the paths an overlay job changed (`changed.sh`).
pub const LOOKED_AT_CHANGES: &str = "paddock: looked only at the changed paths";

/// The most a sync may send (untracked list plus bundle) before it is refused.
pub const MAX_SYNC_BYTES: u64 = 2 << 30;
/// The most a checkpoint's changed files may take, in all (a sparse file counts whole): the
/// sandbox half refuses past it before hashing anything.
pub const MAX_CHECKPOINT_BYTES: u64 = MAX_SYNC_BYTES;
/// The most the untracked list may take.
pub const MAX_UNTRACKED_BYTES: u64 = 8 << 20;
/// The longest header line.
pub const MAX_HEADER_BYTES: u64 = 512;
/// The most of the sandbox's stderr kept for an error message (diagnostics only: more is
/// dropped, and the message says so).
pub const MAX_STDERR_BYTES: usize = 64 << 10;
/// The most a whole sync stream may be: header line, untracked list and bundle.
pub const MAX_STREAM_BYTES: u64 = MAX_HEADER_BYTES + 1 + MAX_UNTRACKED_BYTES + MAX_SYNC_BYTES;
/// Where the scratch repository keeps the job's branch and uncommitted-work snapshot.
pub const SCRATCH_BRANCH: &str = "refs/sync/branch";
pub const SCRATCH_STATE: &str = "refs/sync/state";

/// The uncommitted work a sync found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkState {
    /// Not asked for (a sync after an exec only brings the branch).
    Unknown,
    /// The worktree matches HEAD.
    Clean,
    /// A commit whose tree is the worktree and whose parent is HEAD.
    Snapshot(String),
}

/// The header line of a sync stream, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncHeader {
    pub tip: Option<String>,
    pub state: WorkState,
    pub bundle: bool,
    pub untracked_bytes: u64,
}

pub(super) fn is_object_id(text: &str) -> bool {
    matches!(text.len(), 40 | 64)
        && text
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

impl SyncHeader {
    /// Parses `paddock-sync 1 TIP STATE BUNDLE UNTRACKED_BYTES`.
    pub fn parse(line: &str) -> Result<SyncHeader, String> {
        let fields: Vec<&str> = line.trim_end().split(' ').collect();
        let [magic, version, tip, state, bundle, untracked] = fields[..] else {
            return Err(format!("malformed sync header `{}`", shown(line)));
        };
        if magic != "paddock-sync" || version != "1" {
            return Err(format!("unknown sync header `{}`", shown(line)));
        }
        let object = |text: &str| -> Result<Option<String>, String> {
            match text {
                "-" => Ok(None),
                id if is_object_id(id) => Ok(Some(id.to_string())),
                other => Err(format!("`{}` is not an object id", shown(other))),
            }
        };
        let state = match state {
            "-" => WorkState::Unknown,
            "clean" => WorkState::Clean,
            id => WorkState::Snapshot(object(id)?.ok_or("missing state")?),
        };
        Ok(SyncHeader {
            tip: object(tip)?,
            state,
            bundle: match bundle {
                "bundle" => true,
                "-" => false,
                other => return Err(format!("bad bundle flag `{}`", shown(other))),
            },
            untracked_bytes: untracked
                .parse()
                .map_err(|_| format!("bad untracked length `{}`", shown(untracked)))?,
        })
    }
}

/// At most 80 printable characters of agent-made text, for an error message.
pub(super) fn shown(text: &str) -> String {
    text.chars()
        .take(80)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Receives the sandbox's output: the header, the untracked list (kept in memory, capped)
/// and the bundle (written to a host-owned file, capped). Anything past a cap is dropped and
/// the sync fails.
pub struct SyncCapture {
    header_line: Vec<u8>,
    header: Option<Result<SyncHeader, String>>,
    untracked: Vec<u8>,
    /// Bytes of the untracked list seen, kept or not.
    untracked_seen: u64,
    /// The list is over its cap: it is read past, not kept, and the sync still brings the
    /// branch and the snapshot (`Received::untracked_cut`).
    untracked_cut: bool,
    bundle_path: PathBuf,
    bundle: Option<std::fs::File>,
    bundle_bytes: u64,
    stderr: Vec<u8>,
    /// Set when stderr passed its cap: said in the error message.
    stderr_cut: bool,
    failure: Option<String>,
}

impl SyncCapture {
    /// A capture that writes the bundle, if any, to `bundle_path` (replaced).
    pub fn new(bundle_path: PathBuf) -> SyncCapture {
        SyncCapture {
            header_line: Vec::new(),
            header: None,
            untracked: Vec::new(),
            untracked_seen: 0,
            untracked_cut: false,
            bundle_path,
            bundle: None,
            bundle_bytes: 0,
            stderr: Vec::new(),
            stderr_cut: false,
            failure: None,
        }
    }

    /// Refuses the stream with `message` (the first failure wins).
    pub fn fail(&mut self, message: String) {
        if self.failure.is_none() {
            self.failure = Some(message);
        }
    }

    /// Whether the stream is already refused: its reader can stop, nothing more is kept.
    pub fn failed(&self) -> bool {
        self.failure.is_some()
    }

    /// Notes that the sandbox's stderr was longer than what was kept of it.
    pub fn cut_stderr(&mut self) {
        self.stderr_cut = true;
    }

    fn take_stdout(&mut self, mut bytes: &[u8]) {
        if self.failure.is_some() {
            return;
        }
        if self.header.is_none() {
            let end = bytes.iter().position(|&b| b == b'\n');
            let (line, rest) = match end {
                Some(end) => (&bytes[..end], &bytes[end + 1..]),
                None => (bytes, &[][..]),
            };
            self.header_line.extend_from_slice(line);
            if self.header_line.len() as u64 > MAX_HEADER_BYTES {
                return self.fail(format!(
                    "the sync header is longer than {MAX_HEADER_BYTES} bytes"
                ));
            }
            if end.is_none() {
                return;
            }
            let text = String::from_utf8_lossy(&self.header_line).into_owned();
            let header = SyncHeader::parse(&text);
            if let Ok(header) = &header {
                if header.untracked_bytes > MAX_SYNC_BYTES {
                    return self.fail(format!(
                        "the untracked list has {} bytes (at most {MAX_SYNC_BYTES} pass through)",
                        header.untracked_bytes
                    ));
                }
                // Over its cap, the list is read past rather than kept: the tracked
                // changes and the snapshot still come through, and the host says which
                // part it could not see.
                self.untracked_cut = header.untracked_bytes > MAX_UNTRACKED_BYTES;
            }
            self.header = Some(header);
            bytes = rest;
        }
        let Some(Ok(header)) = &self.header else {
            return;
        };
        let wanted = header.untracked_bytes - self.untracked_seen.min(header.untracked_bytes);
        let take = usize::try_from(wanted)
            .unwrap_or(usize::MAX)
            .min(bytes.len());
        self.untracked_seen += take as u64;
        if !self.untracked_cut {
            self.untracked.extend_from_slice(&bytes[..take]);
        }
        bytes = &bytes[take..];
        if bytes.is_empty() {
            return;
        }
        if !header.bundle {
            return self.fail("the sandbox sent data after the sync stream".into());
        }
        self.bundle_bytes += bytes.len() as u64;
        if self.bundle_bytes > MAX_SYNC_BYTES {
            return self.fail(format!("the bundle is larger than {MAX_SYNC_BYTES} bytes"));
        }
        if self.bundle.is_none() {
            match std::fs::File::create(&self.bundle_path) {
                Ok(file) => self.bundle = Some(file),
                Err(error) => {
                    let path = self.bundle_path.display().to_string();
                    return self.fail(format!("failed to write `{path}`: {error}"));
                }
            }
        }
        if let Some(file) = &mut self.bundle
            && let Err(error) = file.write_all(bytes)
        {
            let path = self.bundle_path.display().to_string();
            self.fail(format!("failed to write `{path}`: {error}"));
        }
    }

    /// The checked stream: header, untracked paths and the bundle file (when one came), or
    /// why it is unusable. `exit_code` is the sandbox script's.
    pub fn finish(mut self, exit_code: i64) -> Result<Received, String> {
        let stderr = String::from_utf8_lossy(&self.stderr);
        let stderr = stderr.trim();
        let cut = if self.stderr_cut {
            format!(
                " (stderr cut at {})",
                crate::units::format_size(MAX_STDERR_BYTES as u64)
            )
        } else {
            String::new()
        };
        let context = if stderr.is_empty() {
            String::new()
        } else {
            format!(
                ": {}{cut}",
                shown(stderr.lines().last().unwrap_or_default())
            )
        };
        if let Some(failure) = self.failure.take() {
            return Err(failure);
        }
        if exit_code != 0 {
            return Err(format!("the sync script exited {exit_code}{context}"));
        }
        let header = match self.header.take() {
            Some(Ok(header)) => header,
            Some(Err(error)) => return Err(error),
            None => return Err(format!("the sandbox sent no sync header{context}")),
        };
        if self.untracked_seen < header.untracked_bytes {
            return Err("the untracked list was cut short".into());
        }
        if header.bundle && self.bundle_bytes == 0 {
            return Err("the header announced a bundle that never came".into());
        }
        // The bundle is read back at once (index-pack) and then deleted: no fsync.
        drop(self.bundle.take());
        let untracked = self
            .untracked
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        Ok(Received {
            bundle: header.bundle.then(|| self.bundle_path.clone()),
            header,
            untracked,
            untracked_cut: self.untracked_cut,
        })
    }
}

impl SyncCapture {
    /// Whether the sandbox half said `text` on stderr (in what was kept of it).
    pub fn said(&self, text: &str) -> bool {
        let needle = text.as_bytes();
        self.stderr.windows(needle.len()).any(|w| w == needle)
    }
}

impl OutputSink for SyncCapture {
    fn write(&mut self, stream: StreamKind, bytes: &[u8]) {
        match stream {
            StreamKind::Stdout => self.take_stdout(bytes),
            StreamKind::Stderr => {
                let room = MAX_STDERR_BYTES.saturating_sub(self.stderr.len());
                self.stderr_cut |= bytes.len() > room;
                self.stderr
                    .extend_from_slice(&bytes[..room.min(bytes.len())]);
            }
        }
    }
}

/// A sync stream that passed its checks.
#[derive(Debug, Clone)]
pub struct Received {
    pub header: SyncHeader,
    pub untracked: BTreeSet<String>,
    /// The untracked list was over [`MAX_UNTRACKED_BYTES`] and not kept: `untracked` is
    /// empty, and untracked files of the snapshot cannot be told from added ones.
    pub untracked_cut: bool,
    pub bundle: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn headers_are_checked_field_by_field() {
        let header = SyncHeader::parse(&format!("paddock-sync 1 {A} clean - 12\n")).unwrap();
        assert_eq!(header.tip.as_deref(), Some(A));
        assert_eq!(header.state, WorkState::Clean);
        assert!(!header.bundle);
        assert_eq!(header.untracked_bytes, 12);
        for bad in [
            "paddock-sync 2 - - - 0",
            "paddock-sync 1 ../../etc/passwd - - 0",
            "paddock-sync 1 - - maybe 0",
            "paddock-sync 1 - - - -3",
            "paddock-sync 1 - - - 0 extra",
            "paddock-sync 1 0123456789ABCDEF0123456789ABCDEF01234567 - - 0",
        ] {
            assert!(SyncHeader::parse(bad).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn the_capture_splits_header_untracked_list_and_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let mut capture = SyncCapture::new(dir.path().join("b"));
        let stream = format!("paddock-sync 1 {A} - bundle 6\na\0b/c\0BUNDLE");
        for chunk in stream.as_bytes().chunks(5) {
            capture.write(StreamKind::Stdout, chunk);
        }
        let received = capture.finish(0).unwrap();
        assert_eq!(
            received.untracked.into_iter().collect::<Vec<_>>(),
            vec!["a".to_string(), "b/c".to_string()]
        );
        assert_eq!(std::fs::read(dir.path().join("b")).unwrap(), b"BUNDLE");
    }

    #[test]
    fn a_capture_refuses_extra_data_and_missing_headers() {
        let dir = tempfile::tempdir().unwrap();
        let mut capture = SyncCapture::new(dir.path().join("b"));
        capture.write(
            StreamKind::Stdout,
            format!("paddock-sync 1 {A} - - 0\nmore").as_bytes(),
        );
        assert!(capture.finish(0).is_err());
        let mut capture = SyncCapture::new(dir.path().join("b"));
        capture.write(StreamKind::Stderr, b"fatal: broken\n");
        let error = capture.finish(3).unwrap_err();
        assert!(
            error.contains("exited 3") && error.contains("fatal: broken"),
            "{error}"
        );
    }
}
