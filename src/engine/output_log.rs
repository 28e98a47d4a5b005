//! The job's output log (`logs/<job>/output.log`): every exec's `==>` line, its output and
//! its `<==` line, appended as they come so `paddock logs --follow` sees them. An agent
//! decides how much its commands print, so the log has a cap ([`OUTPUT_LOG_CAP`]): output
//! past it is not kept here (the exec's own record keeps up to its own cap, and the caller
//! got it live), one marker line says so, and the framing lines of later execs still go in
//! within a small allowance, so the log stays a true index of what ran. The cap counts the
//! file as it is on disk, so it holds across execs and processes.

use std::io::Write;
use std::path::Path;

/// The most of any job's output log (64 MiB).
pub const OUTPUT_LOG_CAP: u64 = 64 << 20;
/// Room past the cap for the `==>`/`<==` lines of later execs (1 MiB).
const FRAMING_ROOM: u64 = 1 << 20;

/// The line that marks where output stopped being kept.
fn marker(cap: u64) -> String {
    format!(
        "\n[paddock: output.log reached its cap of {}; later output is not kept here \
         (each exec's own output: paddock execs JOB EXEC)]\n",
        crate::units::format_size(cap)
    )
}

/// An open output log and how long it is.
pub(super) struct OutputLog {
    file: std::fs::File,
    len: u64,
    cap: u64,
}

impl OutputLog {
    /// Opens (or makes) the log in `dir` for appending; `None` when it cannot be.
    pub(super) fn open(dir: &Path, cap: u64) -> Option<OutputLog> {
        std::fs::create_dir_all(dir).ok()?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("output.log"))
            .ok()?;
        let len = file.metadata().ok()?.len();
        Some(OutputLog { file, len, cap })
    }

    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all(bytes)?;
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// A framing line (`==>`, `<==`): kept while the log is under its cap plus the room.
    pub(super) fn line(&mut self, text: &str) -> std::io::Result<()> {
        let bytes = format!("{text}\n");
        if self.len + bytes.len() as u64 > self.cap + FRAMING_ROOM {
            return Ok(());
        }
        self.append(bytes.as_bytes())
    }

    /// A command's output: kept up to the cap; the write that reaches it keeps what fits and
    /// then the marker.
    pub(super) fn output(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.len >= self.cap {
            return Ok(());
        }
        let room = usize::try_from(self.cap - self.len).unwrap_or(usize::MAX);
        if bytes.len() < room {
            return self.append(bytes);
        }
        self.append(&bytes[..room])?;
        self.append(marker(self.cap).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_stops_at_the_cap_with_one_marker_and_framing_goes_on() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut log = OutputLog::open(dir.path(), 100).expect("opens");
        log.line("==> first").expect("line");
        for _ in 0..10 {
            log.output(&[b'A'; 30]).expect("output");
        }
        log.line("<== exit 0").expect("line");
        // Another process opens it again: the cap counts what is on disk.
        let mut again = OutputLog::open(dir.path(), 100).expect("opens");
        again.output(b"more").expect("output");
        again.line("==> second").expect("line");
        let text = std::fs::read_to_string(dir.path().join("output.log")).expect("reads");
        assert_eq!(text.matches("reached its cap").count(), 1, "{text}");
        assert!(
            text.contains("<== exit 0") && text.contains("==> second"),
            "{text}"
        );
        assert!(!text.contains("more"), "{text}");
        let kept = text.split("\n[paddock").next().expect("a part");
        assert_eq!(kept.len(), 100, "{kept}");
    }
}
