//! Every exec's id, status and output, kept per job so they can be read again after the
//! client that started the exec went away: `logs/<job>/execs/<exec>.json` (an [`ExecInfo`],
//! written atomically at start and at the end) and `<exec>.ndjson` (the output as
//! `{"stream", "data"}` lines, appended one whole line per write, at most [`OUTPUT_LIMIT`]
//! bytes, then one `{"truncated": true, "limit"}` line). All execs of a job together keep at
//! most [`JOB_OUTPUT_LIMIT`]: an exec that starts with less room left keeps only that much.
//!
//! Readers: `execs` lists a job's execs, `exec_info` reads one, `exec_output_reader` reads the
//! output from a byte offset (offsets of whole lines: a reader that resumes at the sum of the
//! bytes it got lands on a line start) and, following, waits for more until the exec ends or
//! its deadline passes.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::Utc;

use super::{Error, Paddock, Result};
use crate::job::JobId;
use crate::output::StreamKind;
use crate::wire::{ExecInfo, ExecResult, ExecState};

/// Most output bytes kept per exec.
pub const OUTPUT_LIMIT: u64 = 64 << 20;
/// Most output bytes kept for all the execs of one job (1 GiB).
pub const JOB_OUTPUT_LIMIT: u64 = 1 << 30;

/// The bytes the `.ndjson` outputs in `dir` already hold (one directory read).
fn outputs_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "ndjson"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum()
    })
}
/// The status file's version.
const INFO_SCHEMA: u32 = 1;
/// Most bytes one read of the output returns.
const CHUNK: usize = 1 << 20;
/// Most bytes of output per line (escaped, at most six times this: under [`CHUNK`]).
const PIECE: usize = 64 << 10;
/// How often a follower looks for new output.
const POLL: Duration = Duration::from_millis(200);
/// A follower waits this long past the exec's own deadline (its timeout plus grace).
const FOLLOW_MARGIN: Duration = Duration::from_secs(60);

/// A new exec id: `x-` and 12 hex digits.
pub(super) fn new_exec_id() -> String {
    format!("x-{}", crate::ids::random_hex(12))
}

/// Whether `exec` has the shape of an exec id (so it is safe as a file name).
fn valid_exec_id(exec: &str) -> bool {
    exec.strip_prefix("x-").is_some_and(|hex| {
        !hex.is_empty() && hex.len() <= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())
    })
}

/// Writes one exec's status and output as it runs (see the module docs). Failing to write
/// never fails the exec: it is logged, and the exec goes on.
pub(super) struct ExecRecorder {
    info: ExecInfo,
    status_path: PathBuf,
    output: Option<File>,
    written: u64,
    /// What this exec may keep: [`OUTPUT_LIMIT`], or the job's room left under
    /// [`JOB_OUTPUT_LIMIT`] when that is less.
    limit: u64,
    /// The start of a character cut off at the end of the last chunk (stdout, stderr).
    partial: [Vec<u8>; 2],
}

impl ExecRecorder {
    /// Records a new exec of `job` in `dir` (the job's `execs` directory).
    pub(super) fn start(
        dir: &Path,
        job: &JobId,
        command: &[String],
        deadline: Duration,
    ) -> ExecRecorder {
        let id = new_exec_id();
        let limit = OUTPUT_LIMIT.min(JOB_OUTPUT_LIMIT.saturating_sub(outputs_size(dir)));
        let output_path = dir.join(format!("{id}.ndjson"));
        let output = std::fs::create_dir_all(dir)
            .and_then(|()| {
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&output_path)
            })
            .inspect_err(|error| tracing::warn!(%error, path = %output_path.display(), "cannot keep the exec's output"))
            .ok();
        let recorder = ExecRecorder {
            info: ExecInfo {
                schema: INFO_SCHEMA,
                id: id.clone(),
                job: job.to_string(),
                command: command.to_vec(),
                state: ExecState::Running,
                started_at: Utc::now(),
                finished_at: None,
                result: None,
                error: None,
                output_bytes: 0,
                pid: std::process::id(),
                deadline_ms: crate::units::millis(deadline),
            },
            status_path: dir.join(format!("{id}.json")),
            output,
            written: 0,
            limit,
            partial: [Vec::new(), Vec::new()],
        };
        // Not fsynced: a crash before the end leaves a running exec that is lost anyway, and
        // a reader skips a status file the crash left unreadable. The end is fsynced.
        recorder.save(false);
        recorder
    }

    pub(super) fn id(&self) -> &str {
        &self.info.id
    }

    /// Writes the status file whole (a reader never sees a torn one); `durable`: on disk
    /// before this returns.
    fn save(&self, durable: bool) {
        let bytes = serde_json::to_vec_pretty(&self.info).expect("exec infos serialize");
        let written = if durable {
            crate::atomic::write_atomic(&self.status_path, &bytes, false)
        } else {
            crate::atomic::replace_unsynced(&self.status_path, &bytes)
        };
        if let Err(error) = written {
            tracing::warn!(%error, path = %self.status_path.display(), "cannot record the exec");
        }
    }

    /// Appends a chunk of output as lines of at most [`PIECE`] bytes of data (so a reader's
    /// chunk always holds whole lines), or the truncation marker once the limit is hit.
    pub(super) fn write(&mut self, stream: StreamKind, bytes: &[u8]) {
        // A character cut between two chunks waits for its rest, so the text stays exact.
        let slot = usize::from(stream == StreamKind::Stderr);
        let mut joined = std::mem::take(&mut self.partial[slot]);
        joined.extend_from_slice(bytes);
        if let Err(error) = std::str::from_utf8(&joined)
            && error.error_len().is_none()
        {
            self.partial[slot] = joined.split_off(error.valid_up_to());
        }
        self.write_pieces(stream, &joined);
    }

    fn write_pieces(&mut self, stream: StreamKind, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let mut end = bytes.len().min(PIECE);
            // Not inside a UTF-8 sequence (up to three continuation bytes back).
            while end < bytes.len() && end > PIECE - 4 && bytes[end] & 0xC0 == 0x80 {
                end -= 1;
            }
            self.write_line(stream, &bytes[..end]);
            bytes = &bytes[end..];
        }
    }

    fn write_line(&mut self, stream: StreamKind, bytes: &[u8]) {
        let Some(file) = &mut self.output else {
            return;
        };
        let mut line = serde_json::to_vec(&crate::output::output_line(stream, bytes))
            .expect("output lines serialize");
        line.push(b'\n');
        let mut capped = false;
        if self.written + line.len() as u64 > self.limit {
            line = format!("{{\"truncated\":true,\"limit\":{}}}\n", self.limit).into_bytes();
            capped = true;
        }
        if file.write_all(&line).is_ok() {
            self.written += line.len() as u64;
        }
        if capped {
            self.output = None;
        }
    }

    /// Records the end: the result, or why paddock could not run the command.
    pub(super) fn finish(&mut self, outcome: std::result::Result<&ExecResult, String>) {
        for (slot, stream) in [StreamKind::Stdout, StreamKind::Stderr]
            .into_iter()
            .enumerate()
        {
            let rest = std::mem::take(&mut self.partial[slot]);
            self.write_pieces(stream, &rest);
        }
        self.info.state = ExecState::Finished;
        self.info.finished_at = Some(Utc::now());
        self.info.output_bytes = self.written;
        match outcome {
            Ok(result) => self.info.result = Some(result.clone()),
            Err(error) => self.info.error = Some(error),
        }
        self.save(true);
    }
}

/// The output of one exec from an offset (see [`Paddock::exec_output_reader`]).
pub struct ExecOutput {
    path: PathBuf,
    status: PathBuf,
    offset: u64,
    follow: bool,
    deadline: Instant,
}

impl ExecOutput {
    /// The offset the next chunk starts at.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next whole lines of output; `None` at the end: everything read (without
    /// `follow`), or the exec ended and everything read, or the follow deadline passed.
    pub async fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        loop {
            // The status first: output written before it said finished is read below. Both
            // reads on a blocking thread: up to a chunk of what the job printed, per call.
            let (status, path, offset, follow) = (
                self.status.clone(),
                self.path.clone(),
                self.offset,
                self.follow,
            );
            let (ended, bytes) = tokio::task::spawn_blocking(move || {
                let ended = !follow || read_info(&status)?.state != ExecState::Running;
                Ok::<_, Error>((ended, read_lines(&path, offset)?))
            })
            .await
            .map_err(|e| Error::ExecFiles {
                path: self.path.clone(),
                message: e.to_string(),
            })??;
            if !bytes.is_empty() {
                self.offset += bytes.len() as u64;
                return Ok(Some(bytes));
            }
            let now = Instant::now();
            if ended || now >= self.deadline {
                return Ok(None);
            }
            tokio::time::sleep(POLL.min(self.deadline - now)).await;
        }
    }
}

/// Whole lines of `path` from `offset` (at most [`CHUNK`] bytes; one longer line whole).
fn read_lines(path: &Path, offset: u64) -> Result<Vec<u8>> {
    let io = |source| Error::ExecFiles {
        path: path.to_path_buf(),
        message: format!("{source}"),
    };
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(e)),
    };
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(CHUNK as u64)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if let Some(end) = bytes.iter().rposition(|b| *b == b'\n') {
        bytes.truncate(end + 1);
    } else if bytes.len() < CHUNK {
        // A line still being written.
        bytes.clear();
    }
    Ok(bytes)
}

fn read_info(path: &Path) -> Result<ExecInfo> {
    let corrupt = |message: String| Error::ExecFiles {
        path: path.to_path_buf(),
        message,
    };
    let bytes = std::fs::read(path).map_err(|e| corrupt(e.to_string()))?;
    let mut info: ExecInfo = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
    if info.schema != INFO_SCHEMA {
        return Err(corrupt(format!(
            "schema {}; this paddock reads schema {INFO_SCHEMA}",
            info.schema
        )));
    }
    // A running exec whose process is gone will never finish.
    if info.state == ExecState::Running
        && info.pid != std::process::id()
        && !Path::new("/proc").join(info.pid.to_string()).exists()
    {
        info.state = ExecState::Lost;
    }
    if info.state == ExecState::Running {
        info.output_bytes = std::fs::metadata(path.with_extension("ndjson")).map_or(0, |m| m.len());
    }
    Ok(info)
}

impl Paddock {
    /// The status file of `exec` of `job`, or [`Error::NoExec`].
    fn exec_status_path(&self, job: &str, exec: &str) -> Result<(JobId, PathBuf)> {
        let record = self.load(job)?;
        let path = self.home.execs_dir(&record.id).join(format!("{exec}.json"));
        if !valid_exec_id(exec) || !path.is_file() {
            return Err(Error::NoExec {
                job: record.id,
                exec: exec.to_string(),
            });
        }
        Ok((record.id, path))
    }

    /// A job's execs, oldest first.
    pub fn execs(&self, job: &str) -> Result<Vec<ExecInfo>> {
        let record = self.load(job)?;
        let dir = self.home.execs_dir(&record.id);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(Vec::new());
        };
        let mut infos: Vec<ExecInfo> = entries
            .filter_map(std::result::Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|e| e == "json"))
            .filter_map(|path| read_info(&path).ok())
            .collect();
        infos.sort_by(|a, b| a.started_at.cmp(&b.started_at).then(a.id.cmp(&b.id)));
        Ok(infos)
    }

    /// One exec: its state, and its result once finished.
    pub fn exec_info(&self, job: &str, exec: &str) -> Result<ExecInfo> {
        let (_, path) = self.exec_status_path(job, exec)?;
        read_info(&path)
    }

    /// The output of an exec from byte `offset` of its output log; with `follow`, chunks keep
    /// coming until the exec ends (or its deadline plus a minute passes).
    pub fn exec_output_reader(
        &self,
        job: &str,
        exec: &str,
        offset: u64,
        follow: bool,
    ) -> Result<ExecOutput> {
        let (_, status) = self.exec_status_path(job, exec)?;
        let info = read_info(&status)?;
        let elapsed = (Utc::now() - info.started_at).to_std().unwrap_or_default();
        let until_deadline = Duration::from_millis(info.deadline_ms).saturating_sub(elapsed);
        Ok(ExecOutput {
            path: status.with_extension("ndjson"),
            status,
            offset,
            follow,
            deadline: Instant::now() + until_deadline + FOLLOW_MARGIN,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_execs_of_one_job_keep_at_most_the_job_limit() {
        let dir = tempfile::tempdir().expect("temp dir");
        // Earlier execs already hold all but 10 bytes of the job's room (sparse: no disk).
        std::fs::File::create(dir.path().join("x-old.ndjson"))
            .and_then(|f| f.set_len(JOB_OUTPUT_LIMIT - 10))
            .expect("an old output");
        let job = JobId::parse("full").expect("an id");
        let mut recorder = ExecRecorder::start(dir.path(), &job, &["x".into()], Duration::ZERO);
        recorder.write(StreamKind::Stdout, &[b'A'; 100]);
        recorder.finish(Err("gone".into()));
        let log = std::fs::read_to_string(dir.path().join(format!("{}.ndjson", recorder.id())))
            .expect("the output log");
        assert_eq!(log, "{\"truncated\":true,\"limit\":10}\n");
    }

    #[test]
    fn a_character_cut_between_chunks_is_kept_whole() {
        let dir = tempfile::tempdir().expect("temp dir");
        let job = JobId::parse("utf8").expect("an id");
        let mut recorder = ExecRecorder::start(dir.path(), &job, &["x".into()], Duration::ZERO);
        let text = "grüße €".as_bytes();
        for byte in text {
            recorder.write(StreamKind::Stdout, std::slice::from_ref(byte));
        }
        recorder.write(StreamKind::Stderr, &[0xE2, 0x82]);
        recorder.finish(Err("gone".into()));
        let log = std::fs::read_to_string(dir.path().join(format!("{}.ndjson", recorder.id())))
            .expect("the output log");
        let (mut out, mut err) = (String::new(), String::new());
        for line in log.lines() {
            let value: serde_json::Value = serde_json::from_str(line).expect("json");
            let data = value["data"].as_str().expect("data");
            match value["stream"].as_str() {
                Some("stdout") => out.push_str(data),
                _ => err.push_str(data),
            }
        }
        assert_eq!(out, "grüße €");
        assert_eq!(
            err, "\u{FFFD}",
            "a cut character at the end is replaced, once"
        );
    }

    #[tokio::test]
    async fn output_is_kept_whole_lines_up_to_the_limit_then_marked() {
        let dir = tempfile::tempdir().expect("temp dir");
        let job = JobId::parse("cap").expect("an id");
        let mut recorder = ExecRecorder::start(dir.path(), &job, &["x".into()], Duration::ZERO);
        let chunk = vec![b'a'; 20 << 20];
        for _ in 0..4 {
            recorder.write(StreamKind::Stdout, &chunk);
        }
        recorder.write(StreamKind::Stderr, b"late");
        recorder.finish(Err("gone".into()));
        let status = dir.path().join(format!("{}.json", recorder.id()));
        let info = read_info(&status).expect("a status");
        assert_eq!(info.state, ExecState::Finished);
        assert!(info.output_bytes <= OUTPUT_LIMIT, "{}", info.output_bytes);
        let mut output = ExecOutput {
            path: status.with_extension("ndjson"),
            status,
            offset: 0,
            follow: true,
            deadline: Instant::now() + Duration::from_secs(5),
        };
        let mut lines = Vec::new();
        while let Some(chunk) = output.next_chunk().await.expect("readable") {
            assert_eq!(chunk.last(), Some(&b'\n'), "whole lines");
            lines.extend(
                chunk
                    .split(|b| *b == b'\n')
                    .filter(|l| !l.is_empty())
                    .map(<[u8]>::to_vec),
            );
        }
        let last: serde_json::Value =
            serde_json::from_slice(lines.last().expect("lines")).expect("json");
        assert_eq!(last["truncated"], true, "the marker ends it");
        let data: u64 = lines[..lines.len() - 1]
            .iter()
            .map(|line| {
                let value: serde_json::Value = serde_json::from_slice(line).expect("json");
                assert_eq!(value["stream"], "stdout", "nothing after the cut");
                value["data"].as_str().expect("data").len() as u64
            })
            .sum();
        assert!(
            data > OUTPUT_LIMIT - (1 << 20),
            "kept up to the limit: {data}"
        );
        assert_eq!(output.offset(), info.output_bytes);
    }
}
