//! Creates that wait for an engine with room (`create --engine auto`, see
//! `engine::placement`): each is a file `placing/<job>.json` for as long as it waits, so the
//! admission view (and with it the waiting create's terminal line, `GET /v1/admission`,
//! `doctor` and the line under `ls`) shows it beside the host's own queues.
//!
//! Placement is not a FIFO queue (whoever looks first when an engine frees takes it), so a
//! waiter's place is its rank by the time it began waiting. The file names its owner
//! process; one whose owner is gone is not shown and is removed by the next reader, so a
//! killed create leaves nothing that claims to wait. The file is removed when the wait ends
//! either way ([`Placing`] is a guard).

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{WaitKind, Waiter};
use crate::job::{JobId, ProcessId};
use crate::store::{PaddockHome, StoreError, io_err};

/// The layout of a `placing/<job>.json` this build writes and reads.
const SCHEMA: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    schema: u32,
    job: JobId,
    owner: Option<ProcessId>,
    since: DateTime<Utc>,
    gives_up_at: DateTime<Utc>,
    reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tag: Option<String>,
}

pub(super) fn dir(home: &PaddockHome) -> PathBuf {
    home.root().join("placing")
}

/// One create's wait for an engine, shown while this guard lives.
pub struct Placing {
    path: PathBuf,
    entry: Entry,
}

impl Placing {
    /// Starts showing `job`'s wait (tagged `tag` by its caller), begun at `since`, until
    /// `gives_up_at`.
    pub fn begin(
        home: &PaddockHome,
        job: &JobId,
        tag: Option<&str>,
        (since, gives_up_at): (DateTime<Utc>, DateTime<Utc>),
        reason: String,
    ) -> Result<Placing, StoreError> {
        let dir = dir(home);
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let placing = Placing {
            path: dir.join(format!("{job}.json")),
            entry: Entry {
                schema: SCHEMA,
                job: job.clone(),
                owner: ProcessId::current(),
                since,
                gives_up_at,
                reason,
                tag: tag.map(str::to_string),
            },
        };
        placing.write()?;
        Ok(placing)
    }

    /// Says why it still waits, when that changed.
    pub fn update(&mut self, reason: String) -> Result<(), StoreError> {
        if reason == self.entry.reason {
            return Ok(());
        }
        self.entry.reason = reason;
        self.write()
    }

    fn write(&self) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(&self.entry).expect("a placing entry serializes");
        // What it shows is rewritten within a second by a live waiter and dropped with a
        // dead one: no fsync is owed.
        crate::atomic::replace_unsynced(&self.path, &bytes).map_err(io_err(&self.path))
    }
}

impl Drop for Placing {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The creates waiting for an engine now, by when they began waiting; entries of processes
/// that are gone are removed.
pub(super) fn waiters(dir: &Path) -> Vec<Waiter> {
    let mut live: Vec<Entry> = Vec::new();
    let Ok(read) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    for item in read.flatten() {
        let path = item.path();
        match read_entry(&path) {
            Some(entry) if entry.owner.is_some_and(|owner| owner.is_alive()) => live.push(entry),
            Some(_) => {
                let _ = std::fs::remove_file(&path);
            }
            // Half-written or foreign: not shown, and left for its writer.
            None => {}
        }
    }
    live.sort_by(|a, b| (a.since, &a.job).cmp(&(b.since, &b.job)));
    let of = live.len();
    live.into_iter()
        .enumerate()
        .map(|(place, entry)| Waiter {
            kind: WaitKind::Place,
            job: entry.job,
            place: place + 1,
            of,
            reason: entry.reason,
            going: false,
            since: entry.since,
            gives_up_at: entry.gives_up_at,
            tag: entry.tag,
        })
        .collect()
}

fn read_entry(path: &Path) -> Option<Entry> {
    if path.extension().is_none_or(|ext| ext != "json") {
        return None;
    }
    // Written by paddock alone (the state root is never mounted into a job); the size check
    // only keeps a damaged file from being read whole.
    if std::fs::symlink_metadata(path).ok()?.len() > 64 * 1024 {
        return None;
    }
    let bytes = std::fs::read(path).ok()?;
    serde_json::from_slice::<Entry>(&bytes)
        .ok()
        .filter(|entry| entry.schema == SCHEMA)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_shown_while_it_lasts_and_a_dead_owner_s_is_dropped() {
        let dir = tempfile::tempdir().expect("temp dir");
        let home = PaddockHome::open_at(dir.path()).expect("a state root");
        let job = JobId::parse("j1").expect("an id");
        let until = Utc::now() + chrono::Duration::minutes(30);
        let mut placing = Placing::begin(
            &home,
            &job,
            Some("w-1"),
            (Utc::now(), until),
            "no room".into(),
        )
        .expect("begin");
        let shown = waiters(&super::dir(&home));
        assert_eq!(shown.len(), 1);
        assert_eq!(
            (shown[0].kind, shown[0].place, shown[0].of),
            (WaitKind::Place, 1, 1)
        );
        assert_eq!(shown[0].tag.as_deref(), Some("w-1"));
        placing.update("still no room".into()).expect("update");
        assert_eq!(waiters(&super::dir(&home))[0].reason, "still no room");
        drop(placing);
        assert!(waiters(&super::dir(&home)).is_empty());

        // A waiter whose process is gone: not shown, and its file is removed.
        let dead = Entry {
            schema: SCHEMA,
            job: JobId::parse("j2").expect("an id"),
            owner: Some(ProcessId {
                pid: u32::MAX - 1,
                start: 1,
            }),
            since: Utc::now(),
            gives_up_at: until,
            reason: "no room".into(),
            tag: None,
        };
        let path = super::dir(&home).join("j2.json");
        std::fs::write(&path, serde_json::to_vec(&dead).expect("json")).expect("write");
        assert!(waiters(&super::dir(&home)).is_empty());
        assert!(!path.exists());
    }
}
