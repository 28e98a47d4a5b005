//! The persisted event log: one history of every [`Event`] of this install, whether the
//! daemon or a CLI without a daemon made it, so a subscriber can resume from the last id it
//! saw.
//!
//! Layout: `$PADDOCK_HOME/events/<first id, 20 digits>.jsonl` segments of JSON lines
//! (`{"schema": 1, "event": {...}}`), and `events/.lock`. Invariants:
//! - ids are allocated and appended under the lock (one `O_APPEND` write of a whole line), so
//!   file order is id order and ids increase by one across processes;
//! - the newest segment is never deleted and names its first id, so the next id is always
//!   known (from its last line, or its name when it is empty) and never reused, even after
//!   compaction or a restart;
//! - a segment is rotated at [`SEGMENT_EVENTS`] events; older segments are deleted once all
//!   their events fall out of the window (the last [`KEEP_EVENTS`] ids and [`KEEP_AGE`]),
//!   and readers skip events outside the window, so what a reader sees is exactly the window.
//!
//! An event's detail may quote what an agent made (an egress host, a sync error naming a
//! path): each string in it is kept to [`DETAIL_STRING_CAP`] and each list to
//! [`DETAIL_LIST_CAP`] items ([`bounded_detail`]), so one event line stays small and the
//! window bounds the whole log.
//!
//! Readers take no lock: they parse complete lines only (skipping a torn one, which a write
//! cut short leaves; the next append starts a fresh line after it), and an [`EventCursor`]
//! remembers its segment and byte offset so tailing reads only new bytes.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};

/// The most of one string in an event's detail (2 KiB), then a marker.
pub const DETAIL_STRING_CAP: usize = 2 << 10;
/// The most items of one list in an event's detail.
pub const DETAIL_LIST_CAP: usize = 64;

/// An event's detail with every string cut at [`DETAIL_STRING_CAP`] bytes (on a character
/// boundary, with `…[cut]`) and every list at [`DETAIL_LIST_CAP`] items. Details are built
/// by paddock (a few levels deep), so the walk is shallow.
pub fn bounded_detail(detail: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match detail {
        Value::String(text) if text.len() > DETAIL_STRING_CAP => {
            let mut end = DETAIL_STRING_CAP;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            Value::String(format!("{}…[cut]", &text[..end]))
        }
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .take(DETAIL_LIST_CAP)
                .map(bounded_detail)
                .collect(),
        ),
        Value::Object(fields) => Value::Object(
            fields
                .into_iter()
                .map(|(key, value)| (key, bounded_detail(value)))
                .collect(),
        ),
        other => other,
    }
}
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::store::{FileLock, StoreError};
use crate::wire::Event;

/// Events kept: the last this many ids...
pub const KEEP_EVENTS: u64 = 100_000;
/// ...and only those younger than this, whichever is less.
pub const KEEP_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Events per segment file before a new one is started.
pub const SEGMENT_EVENTS: u64 = 10_000;
/// The line format's version.
const LINE_SCHEMA: u32 = 1;
/// How much of a segment's end is read to find its last id.
const TAIL_READ: u64 = 16 * 1024;
/// Most bytes a cursor reads per batch.
const BATCH_BYTES: usize = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum EventLogError {
    #[error("failed to access the event log at `{path}`")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Lock(#[from] StoreError),
    #[error("unreadable event log segment `{path}`: {message}")]
    Corrupt { path: PathBuf, message: String },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> EventLogError + '_ {
    move |source| EventLogError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One line of a segment, as read.
#[derive(Deserialize)]
struct Line {
    schema: u32,
    event: Event,
}

/// One line of a segment, as written.
#[derive(Serialize)]
struct LineRef<'a> {
    schema: u32,
    event: &'a Event,
}

/// The event log of one install (see the module docs).
#[derive(Debug, Clone)]
pub struct EventLog {
    dir: PathBuf,
}

impl EventLog {
    /// The log under `dir` (`$PADDOCK_HOME/events`); created on the first append.
    pub fn new(dir: PathBuf) -> EventLog {
        EventLog { dir }
    }

    fn segment_path(&self, first: u64) -> PathBuf {
        self.dir.join(format!("{first:020}.jsonl"))
    }

    /// The first ids of the segments, oldest first.
    fn segments(&self) -> Result<Vec<u64>, EventLogError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(EventLogError::Io {
                    path: self.dir.clone(),
                    source,
                });
            }
        };
        let mut firsts: Vec<u64> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name();
                let name = name.to_str()?;
                name.strip_suffix(".jsonl")?.parse().ok()
            })
            .collect();
        firsts.sort_unstable();
        Ok(firsts)
    }

    /// The id of the last event written (0 when there was none).
    pub fn last_id(&self) -> Result<u64, EventLogError> {
        match self.segments()?.last() {
            Some(&first) => self.last_id_in(first),
            None => Ok(0),
        }
    }

    /// The last id in the segment starting at `first` (`first - 1` when it is empty).
    fn last_id_in(&self, first: u64) -> Result<u64, EventLogError> {
        Ok(self.tail_of(first)?.0)
    }

    /// The last id in the segment starting at `first`, and whether it ends in a torn line (a
    /// write cut short: the next line must start on a line of its own).
    fn tail_of(&self, first: u64) -> Result<(u64, bool), EventLogError> {
        let path = self.segment_path(first);
        let mut file = File::open(&path).map_err(io_err(&path))?;
        let len = file.metadata().map_err(io_err(&path))?.len();
        let start = len.saturating_sub(TAIL_READ);
        file.seek(SeekFrom::Start(start)).map_err(io_err(&path))?;
        let mut tail = Vec::new();
        file.read_to_end(&mut tail).map_err(io_err(&path))?;
        let torn = tail.last().is_some_and(|b| *b != b'\n');
        let from_tail = tail
            .split(|b| *b == b'\n')
            .rev()
            .find_map(|line| serde_json::from_slice::<Line>(line).ok())
            .map(|line| line.event.id);
        let id = match from_tail {
            Some(id) => id,
            None if len == 0 => first.saturating_sub(1),
            // A tail of unreadable lines: the whole segment decides, never a reused id.
            None => {
                let whole = fs::read(&path).map_err(io_err(&path))?;
                whole
                    .split(|b| *b == b'\n')
                    .filter_map(|line| serde_json::from_slice::<Line>(line).ok())
                    .map(|line| line.event.id)
                    .max()
                    .unwrap_or(first.saturating_sub(1))
            }
        };
        Ok((id, torn))
    }

    /// Appends one event: `make` gets its id, `then` runs before the lock is released (the
    /// daemon publishes there, so subscribers see events in id order).
    pub fn append(
        &self,
        make: impl FnOnce(u64) -> Event,
        then: impl FnOnce(&Event),
    ) -> Result<Event, EventLogError> {
        fs::create_dir_all(&self.dir).map_err(io_err(&self.dir))?;
        let _lock = FileLock::acquire(&self.dir.join(".lock"), Duration::from_secs(10))?;
        let segments = self.segments()?;
        let (first, last, torn) = match segments.last() {
            Some(&first) => {
                let (last, torn) = self.tail_of(first)?;
                (first, last, torn)
            }
            None => (1, 0, false),
        };
        let event = make(last + 1);
        // A full segment: start the next one with this event.
        let first = if last + 1 - first >= SEGMENT_EVENTS {
            last + 1
        } else {
            first
        };
        let path = self.segment_path(first);
        // After a torn line (a write cut short by a full disk, say), start a line of our own.
        let mut line = if torn && first != event.id {
            vec![b'\n']
        } else {
            Vec::new()
        };
        serde_json::to_writer(
            &mut line,
            &LineRef {
                schema: LINE_SCHEMA,
                event: &event,
            },
        )
        .expect("events serialize");
        line.push(b'\n');
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| file.write_all(&line))
            .map_err(io_err(&path))?;
        then(&event);
        if first == event.id {
            self.compact(event.id);
        }
        Ok(event)
    }

    /// Deletes segments whose every event is outside the window (never the newest one).
    fn compact(&self, last: u64) {
        let Ok(segments) = self.segments() else {
            return;
        };
        let floor = last.saturating_sub(KEEP_EVENTS);
        for pair in segments.windows(2) {
            let (first, next) = (pair[0], pair[1]);
            let path = self.segment_path(first);
            let too_old = fs::metadata(&path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > KEEP_AGE);
            if next - 1 <= floor || too_old {
                let _ = fs::remove_file(&path);
            }
        }
    }

    /// The oldest id a reader can still get: the first event in the window, or the next id
    /// when the window is empty.
    pub fn oldest_available(&self) -> Result<u64, EventLogError> {
        let last = self.last_id()?;
        let mut cursor = self.cursor(0);
        let first = cursor.next_batch(1)?.first().map(|e| e.id);
        Ok(first.unwrap_or(last + 1))
    }

    /// A reader of the events after `after`.
    pub fn cursor(&self, after: u64) -> EventCursor {
        EventCursor {
            log: self.clone(),
            after,
            segment: None,
            offset: 0,
        }
    }
}

/// Reads events in id order after a given id, remembering where it is (see the module docs).
#[derive(Debug)]
pub struct EventCursor {
    log: EventLog,
    /// The id of the last event returned (or skipped).
    after: u64,
    /// The segment being read (its first id) and how far.
    segment: Option<u64>,
    offset: u64,
}

impl EventCursor {
    /// The id of the last event this cursor returned or passed.
    pub fn position(&self) -> u64 {
        self.after
    }

    /// Up to `max` events after the position, oldest first; empty when there is nothing new.
    pub fn next_batch(&mut self, max: usize) -> Result<Vec<Event>, EventLogError> {
        let segments = self.log.segments()?;
        let Some(&newest) = segments.last() else {
            return Ok(Vec::new());
        };
        let floor = self
            .log
            .last_id_in(newest)?
            .saturating_sub(KEEP_EVENTS)
            .max(self.after);
        let oldest_time = chrono::Utc::now()
            - chrono::Duration::from_std(KEEP_AGE).expect("seven days fit a chrono duration");
        // Start (or restart, when compaction removed it) at the segment holding `after + 1`.
        if self.segment.is_none_or(|s| !segments.contains(&s)) {
            let start = segments
                .iter()
                .rev()
                .find(|&&first| first <= self.after + 1)
                .copied()
                .unwrap_or(segments[0]);
            self.segment = Some(start);
            self.offset = 0;
        }
        let mut out = Vec::new();
        while out.len() < max {
            let segment = self.segment.expect("set above");
            let path = self.log.segment_path(segment);
            let bytes = read_from(&path, self.offset)?;
            let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            let mut used = 0;
            for line in bytes[..complete].split_inclusive(|b| *b == b'\n') {
                if out.len() >= max {
                    break;
                }
                used += line.len();
                let trimmed = &line[..line.len() - 1];
                if trimmed.is_empty() {
                    continue;
                }
                // A torn line (see `append`) is skipped: the lines after it are whole.
                let parsed: Line = match serde_json::from_slice(trimmed) {
                    Ok(parsed) => parsed,
                    Err(error) => {
                        tracing::warn!(%error, path = %path.display(), "skipped a torn event line");
                        continue;
                    }
                };
                if parsed.schema != LINE_SCHEMA {
                    return Err(EventLogError::Corrupt {
                        path,
                        message: format!(
                            "a line of schema {}; this paddock reads schema {LINE_SCHEMA}",
                            parsed.schema
                        ),
                    });
                }
                let event = parsed.event;
                if event.id <= self.after {
                    continue;
                }
                self.after = event.id;
                if event.id > floor && event.at >= oldest_time {
                    out.push(event);
                }
            }
            self.offset += used as u64;
            if used < complete || out.len() >= max {
                break;
            }
            if bytes.len() == BATCH_BYTES {
                if complete == 0 {
                    return Err(EventLogError::Corrupt {
                        path,
                        message: format!("a line longer than {BATCH_BYTES} bytes"),
                    });
                }
                // More of this segment to read.
                continue;
            }
            // The end of this segment: move to the next one if there is one (a segment with a
            // newer one after it is final; a torn last line of it is skipped).
            match segments.iter().find(|&&first| first > segment) {
                Some(&next) => {
                    self.segment = Some(next);
                    self.offset = 0;
                }
                None => break,
            }
        }
        Ok(out)
    }
}

/// The bytes of `path` from `offset`, at most [`BATCH_BYTES`]; nothing when it is gone.
fn read_from(path: &Path, offset: u64) -> Result<Vec<u8>, EventLogError> {
    let mut file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(EventLogError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    file.seek(SeekFrom::Start(offset)).map_err(io_err(path))?;
    let mut bytes = Vec::new();
    file.take(BATCH_BYTES as u64)
        .read_to_end(&mut bytes)
        .map_err(io_err(path))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_strings_and_lists_in_a_detail_are_cut() {
        let detail = serde_json::json!({
            "host": "é".repeat(5000),
            "files": (0..500).map(|n| n.to_string()).collect::<Vec<_>>(),
            "ok": 1,
        });
        let bounded = super::bounded_detail(detail);
        let host = bounded["host"].as_str().expect("a string");
        assert!(host.len() <= super::DETAIL_STRING_CAP + 8 && host.ends_with("…[cut]"));
        assert_eq!(
            bounded["files"].as_array().expect("a list").len(),
            super::DETAIL_LIST_CAP
        );
        assert_eq!(bounded["ok"], 1);
    }

    use super::*;
    use crate::wire::EventKind;

    fn event(id: u64) -> Event {
        Event {
            id,
            kind: EventKind::SweepDone,
            job: None,
            state: None,
            at: chrono::Utc::now(),
            detail: serde_json::Value::Null,
        }
    }

    #[test]
    fn ids_increase_across_segments_and_compaction_keeps_the_window() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = EventLog::new(dir.path().join("events"));
        assert_eq!(log.last_id().expect("empty log"), 0);
        let total = SEGMENT_EVENTS * 2 + 5;
        for n in 1..=total {
            let written = log.append(event, |_| {}).expect("append");
            assert_eq!(written.id, n);
        }
        assert_eq!(log.segments().expect("segments").len(), 3);
        let mut cursor = log.cursor(SEGMENT_EVENTS - 3);
        let mut seen = Vec::new();
        loop {
            let batch = cursor.next_batch(777).expect("read");
            if batch.is_empty() {
                break;
            }
            seen.extend(batch.into_iter().map(|e| e.id));
        }
        let expected: Vec<u64> = (SEGMENT_EVENTS - 2..=total).collect();
        assert_eq!(seen, expected);
        assert_eq!(log.oldest_available().expect("oldest"), 1);
        // A reopened log continues the ids.
        let again = EventLog::new(dir.path().join("events"));
        assert_eq!(again.append(event, |_| {}).expect("append").id, total + 1);
    }

    #[test]
    fn concurrent_writers_get_every_id_once_in_file_order() {
        let dir = tempfile::tempdir().expect("temp dir");
        let writers: Vec<_> = (0..4)
            .map(|_| {
                let log = EventLog::new(dir.path().join("events"));
                std::thread::spawn(move || {
                    (0..100)
                        .map(|_| log.append(event, |_| {}).expect("append").id)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut ids: Vec<u64> = writers
            .into_iter()
            .flat_map(|w| w.join().expect("a writer"))
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, (1..=400).collect::<Vec<_>>());
        let log = EventLog::new(dir.path().join("events"));
        let read: Vec<u64> = log
            .cursor(0)
            .next_batch(1000)
            .expect("read")
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(read, ids, "the file is in id order");
    }

    #[test]
    fn a_torn_line_is_skipped_and_the_next_event_starts_a_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = EventLog::new(dir.path().join("events"));
        log.append(event, |_| {}).expect("append");
        let segment = log.segment_path(1);
        let mut file = OpenOptions::new()
            .append(true)
            .open(&segment)
            .expect("the segment");
        file.write_all(br#"{"schema":1,"event":{"id":2,"ty"#)
            .expect("a torn write");
        assert_eq!(log.append(event, |_| {}).expect("append").id, 2);
        let ids: Vec<u64> = log
            .cursor(0)
            .next_batch(10)
            .expect("read")
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(ids, vec![1, 2]);
    }

    #[test]
    fn old_events_are_outside_the_window() {
        let dir = tempfile::tempdir().expect("temp dir");
        let log = EventLog::new(dir.path().join("events"));
        for _ in 0..3 {
            log.append(
                |id| Event {
                    at: chrono::Utc::now() - chrono::Duration::days(8),
                    ..event(id)
                },
                |_| {},
            )
            .expect("append");
        }
        log.append(event, |_| {}).expect("append");
        assert_eq!(log.oldest_available().expect("oldest"), 4);
        let ids: Vec<u64> = log
            .cursor(0)
            .next_batch(10)
            .expect("read")
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(ids, vec![4]);
    }
}
