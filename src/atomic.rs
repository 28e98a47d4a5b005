//! Atomic file writes: a reader sees the old file or the new one, never a torn one, and a
//! crash leaves one of them on disk.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use crate::ids::random_hex;

/// Writes `bytes` to `path` atomically: temp file in the same directory, fsync, rename, fsync
/// of the directory. With `exclusive`, fails with `AlreadyExists` instead of replacing.
pub fn write_atomic(path: &Path, bytes: &[u8], exclusive: bool) -> io::Result<()> {
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
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}
