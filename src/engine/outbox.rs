//! Host reads of the files a job wrote into its outbox (`JobRecord::outbox`: `work/<id>/outbox`,
//! or `layers/outbox` on the job's disk; mounted in its sandbox): the piggybacked sync's
//! stream, stderr and exit code.
//!
//! The job owns those files while it runs and can replace, grow or truncate them at any
//! moment (a background loop can `truncate -s 1T` them: a sparse terabyte costs it no disk).
//! So every read here: opens without following a link and without blocking on a FIFO, takes
//! only a regular file, refuses one whose size or allocated blocks pass its cap before
//! reading a byte, stops at the cap when the file grows under it, stops at the caller's
//! deadline, and runs on a blocking thread, never on an async worker. Each refusal names the
//! file and the cap.

use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::git::sync::{MAX_STDERR_BYTES, MAX_STREAM_BYTES, SyncCapture};
use crate::output::{OutputSink, StreamKind};
use crate::units::format_size;

/// The cap of the file holding the sync script's exit code (or `unchanged`).
pub(super) const RC_CAP: u64 = 64;

/// Allocation is in whole blocks: a file's blocks may pass its cap by this much (the
/// largest block size of a common filesystem) before they count against it.
const BLOCK_SLACK: u64 = 64 << 10;

/// How much of a file the filesystem holds for it: its size, or its allocated blocks when
/// more (preallocated space past the end). A sparse file's size is what a reader would
/// read, so it counts in full.
pub(crate) fn stored_size(meta: &Metadata) -> u64 {
    meta.len().max(meta.blocks().saturating_mul(512))
}

/// Whether a file passes `cap`: its size, or its allocated blocks beyond a last partial
/// block.
pub(crate) fn over_cap(meta: &Metadata, cap: u64) -> bool {
    meta.len() > cap || meta.blocks().saturating_mul(512) > cap.saturating_add(BLOCK_SLACK)
}

/// Why an outbox file was not (wholly) read.
#[derive(Debug, thiserror::Error)]
pub(super) enum OutboxError {
    #[error("the job's {what} `{}` could not be read: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the job's {what} `{}` is not a regular file: not read", path.display())]
    NotRegular { what: &'static str, path: PathBuf },
    #[error(
        "the job's {what} `{}` is {}, over its cap of {}: not read",
        path.display(), format_size(*size), format_size(*cap)
    )]
    TooLarge {
        what: &'static str,
        path: PathBuf,
        size: u64,
        cap: u64,
    },
    #[error(
        "the job's {what} `{}` grew past its cap of {} while it was read: not used",
        path.display(), format_size(*cap)
    )]
    Grew {
        what: &'static str,
        path: PathBuf,
        cap: u64,
    },
    #[error(
        "reading the job's {what} `{}` passed the exec's deadline after {}: stopped",
        path.display(), format_size(*read)
    )]
    Deadline {
        what: &'static str,
        path: PathBuf,
        read: u64,
    },
}

/// One outbox file to read: what it is (for messages), where, and its cap.
#[derive(Debug, Clone)]
pub(super) struct OutboxFile {
    pub(super) what: &'static str,
    pub(super) path: PathBuf,
    pub(super) cap: u64,
}

impl OutboxFile {
    fn io(&self, source: std::io::Error) -> OutboxError {
        OutboxError::Io {
            what: self.what,
            path: self.path.clone(),
            source,
        }
    }

    fn grew(&self) -> OutboxError {
        OutboxError::Grew {
            what: self.what,
            path: self.path.clone(),
            cap: self.cap,
        }
    }

    fn too_large(&self, size: u64) -> OutboxError {
        OutboxError::TooLarge {
            what: self.what,
            path: self.path.clone(),
            size,
            cap: self.cap,
        }
    }

    /// Opens the file the job could have replaced: never through a symlink, never a FIFO or
    /// device (`O_NONBLOCK` keeps the open itself from waiting on one), only a regular file.
    /// Returns it with its stored size (see [`stored_size`]) when that passes the cap.
    fn open(&self) -> Result<(File, Option<u64>), OutboxError> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&self.path)
            .map_err(|e| self.io(e))?;
        let meta = file.metadata().map_err(|e| self.io(e))?;
        if !meta.is_file() {
            return Err(OutboxError::NotRegular {
                what: self.what,
                path: self.path.clone(),
            });
        }
        let over = over_cap(&meta, self.cap).then(|| stored_size(&meta));
        Ok((file, over))
    }

    /// The whole file, refused past its cap (checked before reading, and again as it is
    /// read, since it may grow meanwhile).
    pub(super) fn read(&self) -> Result<Vec<u8>, OutboxError> {
        let (file, over) = self.open()?;
        if let Some(size) = over {
            return Err(self.too_large(size));
        }
        let mut bytes = Vec::new();
        file.take(self.cap + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| self.io(e))?;
        if bytes.len() as u64 > self.cap {
            return Err(self.grew());
        }
        Ok(bytes)
    }

    /// Feeds the file to `sink` in chunks as the sandbox's `stream`. Refused past its cap
    /// (before reading, and as it grows); stops at `deadline`; stops quietly when `stop`
    /// says the reader has what it needs. With `head_only`, a file past the cap is not
    /// refused: its first `cap` bytes are fed and `Ok(true)` says it was cut.
    fn feed(
        &self,
        sink: &mut SyncCapture,
        stream: StreamKind,
        deadline: Instant,
        head_only: bool,
    ) -> Result<bool, OutboxError> {
        let (file, over) = self.open()?;
        if let (Some(size), false) = (over, head_only) {
            return Err(self.too_large(size));
        }
        let mut file = file.take(self.cap + 1);
        let mut buffer = vec![0; 64 << 10];
        let mut read = 0u64;
        loop {
            if sink.failed() {
                return Ok(false);
            }
            if Instant::now() >= deadline {
                return Err(OutboxError::Deadline {
                    what: self.what,
                    path: self.path.clone(),
                    read,
                });
            }
            let n = file.read(&mut buffer).map_err(|e| self.io(e))?;
            if n == 0 {
                return Ok(false);
            }
            let room = usize::try_from(self.cap - read.min(self.cap)).unwrap_or(usize::MAX);
            if n > room {
                sink.write(stream, &buffer[..room]);
                if head_only {
                    return Ok(true);
                }
                return Err(self.grew());
            }
            read += n as u64;
            sink.write(stream, &buffer[..n]);
        }
    }
}

/// The files a piggybacked sync left under `base` (`<base>.stream`, `.err`, `.rc`).
pub(super) fn sync_files(base: &Path) -> [OutboxFile; 3] {
    let file = |what, ext, cap| OutboxFile {
        what,
        path: base.with_extension(ext),
        cap,
    };
    [
        file("sync stream", "stream", MAX_STREAM_BYTES),
        file("sync stderr", "err", MAX_STDERR_BYTES as u64),
        file("sync exit code", "rc", RC_CAP),
    ]
}

/// Feeds the sync's stream and (the head of) its stderr to `capture`, on the calling
/// thread: call it from a blocking one. A stream refused here fails the capture with the
/// reason.
pub(super) fn capture_sync(
    stream: &OutboxFile,
    stderr: &OutboxFile,
    capture: &mut SyncCapture,
    deadline: Instant,
) {
    let fed = stream
        .feed(capture, StreamKind::Stdout, deadline, false)
        .and_then(|_| stderr.feed(capture, StreamKind::Stderr, deadline, true));
    match fed {
        Ok(true) => capture.cut_stderr(),
        Ok(false) => {}
        Err(error) => capture.fail(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn later() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn a_sparse_terabyte_is_refused_at_once_naming_file_and_cap() {
        let dir = tempfile::tempdir().expect("temp dir");
        let base = dir.path().join("abc");
        let [stream, stderr, rc] = sync_files(&base);
        for file in [&stream, &stderr, &rc] {
            File::create(&file.path)
                .and_then(|f| f.set_len(1 << 40))
                .expect("a sparse file");
        }
        let started = Instant::now();
        let mut capture = SyncCapture::new(dir.path().join("bundle"));
        capture_sync(&stream, &stderr, &mut capture, later());
        let error = capture.finish(0).expect_err("refused");
        assert!(
            error.contains("abc.stream` is 1.0 TiB, over its cap of 2.0 GiB: not read"),
            "{error}"
        );
        let error = rc.read().expect_err("refused").to_string();
        assert!(
            error.contains("abc.rc` is 1.0 TiB, over its cap of 64 B"),
            "{error}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "nothing was read: {:?}",
            started.elapsed()
        );
        assert!(!dir.path().join("bundle").exists(), "no bundle written");
    }

    #[test]
    fn allocated_blocks_count_and_a_long_stderr_is_cut_not_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let small = OutboxFile {
            what: "sync exit code",
            path: dir.path().join("x.rc"),
            cap: 64,
        };
        std::fs::write(&small.path, "0\n").expect("write");
        assert_eq!(small.read().expect("small file"), b"0\n");
        // A megabyte allocated past the end: the size still says 2 bytes.
        let allocated = std::process::Command::new("fallocate")
            .args(["--keep-size", "--length", "1MiB"])
            .arg(&small.path)
            .status()
            .expect("fallocate");
        assert!(allocated.success());
        let meta = std::fs::metadata(&small.path).expect("meta");
        assert_eq!(meta.len(), 2);
        assert!(stored_size(&meta) >= 1 << 20);
        let error = small.read().expect_err("refused").to_string();
        assert!(
            error.contains("is 1.0 MiB, over its cap of 64 B"),
            "{error}"
        );

        let base = dir.path().join("y");
        let [stream, stderr, _] = sync_files(&base);
        std::fs::write(&stream.path, "paddock-sync 1 - - - 0\n").expect("write");
        let mut noise = vec![b'e'; 200 << 10];
        noise.extend_from_slice(b"\nlast line\n");
        std::fs::write(&stderr.path, noise).expect("write");
        let mut capture = SyncCapture::new(dir.path().join("bundle"));
        capture_sync(&stream, &stderr, &mut capture, later());
        let error = capture.finish(1).expect_err("exit 1");
        assert!(error.contains("(stderr cut at 64.0 KiB)"), "{error}");
    }

    #[test]
    fn links_fifos_and_a_passed_deadline_are_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let target = dir.path().join("target");
        std::fs::write(&target, "0\n").expect("write");
        let link = OutboxFile {
            what: "sync exit code",
            path: dir.path().join("link.rc"),
            cap: 64,
        };
        std::os::unix::fs::symlink(&target, &link.path).expect("symlink");
        assert!(matches!(link.read(), Err(OutboxError::Io { .. })));
        let fifo = OutboxFile {
            path: dir.path().join("fifo.rc"),
            ..link.clone()
        };
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo.path)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        assert!(matches!(fifo.read(), Err(OutboxError::NotRegular { .. })));

        let [stream, stderr, _] = sync_files(&dir.path().join("z"));
        std::fs::write(&stream.path, vec![0; 1 << 20]).expect("write");
        std::fs::write(&stderr.path, "").expect("write");
        let mut capture = SyncCapture::new(dir.path().join("bundle"));
        capture_sync(&stream, &stderr, &mut capture, Instant::now());
        let error = capture.finish(0).expect_err("deadline");
        assert!(error.contains("passed the exec's deadline"), "{error}");
    }
}
