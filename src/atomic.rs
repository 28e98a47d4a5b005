//! Atomic file writes: a reader sees the old file or the new one, never a torn one, and a
//! crash leaves one of them on disk.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use crate::ids::random_hex;

/// Writes `bytes` to `path` atomically: temp file in the same directory, fsync, rename, fsync
/// of the directory. With `exclusive`, fails with `AlreadyExists` instead of replacing.
pub fn write_atomic(path: &Path, bytes: &[u8], exclusive: bool) -> io::Result<()> {
    write_atomic_with(path, bytes, exclusive, true)
}

/// Replaces `path` as [`write_atomic`] does, but without waiting for the rename to reach
/// the disk (the new contents do): after a crash, readers find the previous file or the new
/// one, both whole. For changes a crash makes stale anyway (an exec starting), where the
/// directory's fsync would cost a second journal commit on the exec's path.
pub fn replace_atomic_lazily(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, bytes, false, false)
}

fn write_atomic_with(
    path: &Path,
    bytes: &[u8],
    exclusive: bool,
    durable_name: bool,
) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".tmp-{name}-{}", random_hex(8)));
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        if exclusive {
            fs::hard_link(&tmp, path)?;
            fs::remove_file(&tmp)?;
        } else {
            fs::rename(&tmp, path)?;
        }
        if durable_name {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Replaces `path` with `bytes` so readers see the old file or the new one, never a torn
/// one, without waiting for the disk: after a crash the file may be the old one, missing,
/// or empty. For files whose loss a reader tolerates (a running exec's status).
pub fn replace_unsynced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".tmp-{name}-{}", random_hex(8)));
    let result = fs::write(&tmp, bytes).and_then(|()| fs::rename(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
