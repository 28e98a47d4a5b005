//! Idempotency keys: the first answer to a mutating request, kept for 24 hours, so a request
//! retried with the same key (after a timeout, a dropped connection, a restarted
//! orchestrator) gets that answer instead of doing the work twice.
//!
//! A key's file `idempotency/<sha256 of the key>.json` holds the operation (`POST /v1/jobs`,
//! `cli create`), a hash of the request body, and either `pending` with the process doing the
//! work or `done` with the answer. Claims are decided under `locks/idempotency.lock`, so of
//! two requests with one key exactly one does the work. A pending claim whose process is gone,
//! or that was given up without an answer (a failure the client should retry), is free again.
//! The same key with another operation or body is a mismatch (the API's 422).

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::job::ProcessId;
use crate::store::{FileLock, PaddockHome, StoreError, io_err};

/// The layout this build writes and reads.
const SCHEMA: u32 = 1;
/// How long an answer is kept.
pub const KEEP: Duration = Duration::from_secs(24 * 3600);
/// How long a claim may wait for the lock.
const LOCK_WAIT: Duration = Duration::from_secs(10);
/// The longest key accepted.
pub const MAX_KEY_LEN: usize = 255;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum KeptState {
    Pending,
    Done,
}

/// A key's file.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Kept {
    schema: u32,
    key: String,
    operation: String,
    request_sha256: String,
    state: KeptState,
    owner: Option<ProcessId>,
    created_at: DateTime<Utc>,
    /// The HTTP status (or exit code) and body of the first answer, once done.
    status: Option<u16>,
    content_type: Option<String>,
    answer: Option<serde_json::Value>,
    /// What a retry of work still running can follow (an exec's id).
    pointer: Option<serde_json::Value>,
}

/// What a claim found.
#[derive(Debug)]
pub enum Claim {
    /// Nobody did this yet: do it, then [`Pending::finish`].
    Fresh(Pending),
    /// Done before: answer this.
    Replay {
        status: u16,
        content_type: Option<String>,
        answer: serde_json::Value,
    },
    /// Another request with this key is still at work (with what it points at, if known).
    InProgress { pointer: Option<serde_json::Value> },
    /// The key was used for another operation or another body.
    Mismatch { operation: String },
}

/// The install's kept answers.
#[derive(Debug, Clone)]
pub struct IdempotencyStore {
    dir: PathBuf,
    lock: PathBuf,
}

/// Whether `key` can be used: 1 to 255 visible ASCII characters.
pub fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY_LEN && key.bytes().all(|b| b.is_ascii_graphic())
}

fn hex(bytes: &[u8]) -> String {
    crate::ids::hex(&Sha256::digest(bytes))
}

impl IdempotencyStore {
    pub fn open(home: &PaddockHome) -> Result<IdempotencyStore, StoreError> {
        let dir = home.root().join("idempotency");
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        Ok(IdempotencyStore {
            dir,
            lock: home.locks_dir().join("idempotency.lock"),
        })
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{}.json", hex(key.as_bytes())))
    }

    fn read(path: &Path) -> Option<Kept> {
        let bytes = std::fs::read(path).ok()?;
        serde_json::from_slice::<Kept>(&bytes)
            .ok()
            .filter(|k| k.schema == SCHEMA)
    }

    fn write(path: &Path, kept: &Kept) -> Result<(), StoreError> {
        let text = serde_json::to_vec_pretty(kept).expect("a kept answer serializes");
        crate::atomic::write_atomic(path, &text, false).map_err(io_err(path))
    }

    /// Claims `key` for `operation` with `request` (the body as sent).
    pub fn claim(&self, key: &str, operation: &str, request: &[u8]) -> Result<Claim, StoreError> {
        let _lock = FileLock::acquire(&self.lock, LOCK_WAIT)?;
        self.prune();
        let path = self.path(key);
        let request_sha256 = hex(request);
        if let Some(kept) = Self::read(&path) {
            if kept.operation != operation || kept.request_sha256 != request_sha256 {
                return Ok(Claim::Mismatch {
                    operation: kept.operation,
                });
            }
            match kept.state {
                KeptState::Done => {
                    return Ok(Claim::Replay {
                        status: kept.status.unwrap_or(200),
                        content_type: kept.content_type,
                        answer: kept.answer.unwrap_or(serde_json::Value::Null),
                    });
                }
                KeptState::Pending if kept.owner.is_some_and(|o| o.is_alive()) => {
                    return Ok(Claim::InProgress {
                        pointer: kept.pointer,
                    });
                }
                // Its process died before answering: the work is free to be done again.
                KeptState::Pending => {}
            }
        }
        let kept = Kept {
            schema: SCHEMA,
            key: key.to_string(),
            operation: operation.to_string(),
            request_sha256,
            state: KeptState::Pending,
            owner: ProcessId::current(),
            created_at: Utc::now(),
            status: None,
            content_type: None,
            answer: None,
            pointer: None,
        };
        Self::write(&path, &kept)?;
        Ok(Claim::Fresh(Pending {
            path,
            kept,
            finished: false,
        }))
    }

    /// Removes answers older than [`KEEP`] (a few at a time, on each claim).
    fn prune(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let cutoff = std::time::SystemTime::now() - KEEP;
        for entry in entries.flatten().take(256) {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|modified| modified < cutoff);
            if old {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// A claimed key whose work is under way. Dropped without [`finish`](Pending::finish), the
/// claim is released (the work failed in a way worth retrying, or was abandoned).
#[derive(Debug)]
pub struct Pending {
    path: PathBuf,
    kept: Kept,
    finished: bool,
}

impl Pending {
    /// Records what a retry of work still running can follow.
    pub fn point_at(&mut self, pointer: serde_json::Value) {
        self.kept.pointer = Some(pointer);
        let _ = IdempotencyStore::write(&self.path, &self.kept);
    }

    /// Keeps the answer for the key's retries.
    pub fn finish(
        mut self,
        status: u16,
        content_type: Option<String>,
        answer: serde_json::Value,
    ) -> Result<(), StoreError> {
        self.kept.state = KeptState::Done;
        self.kept.owner = None;
        self.kept.status = Some(status);
        self.kept.content_type = content_type;
        self.kept.answer = Some(answer);
        self.finished = true;
        IdempotencyStore::write(&self.path, &self.kept)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.finished {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_answers_once_then_replays_and_refuses_another_body() {
        let dir = tempfile::tempdir().unwrap();
        let home = PaddockHome::open_at(dir.path()).unwrap();
        let store = IdempotencyStore::open(&home).unwrap();
        let Claim::Fresh(pending) = store.claim("k1", "POST /v1/jobs", b"{}").unwrap() else {
            panic!("a new key is fresh");
        };
        assert!(matches!(
            store.claim("k1", "POST /v1/jobs", b"{}").unwrap(),
            Claim::InProgress { .. }
        ));
        pending
            .finish(201, None, serde_json::json!({"id": "j"}))
            .unwrap();
        match store.claim("k1", "POST /v1/jobs", b"{}").unwrap() {
            Claim::Replay { status, answer, .. } => {
                assert_eq!((status, answer["id"].as_str()), (201, Some("j")));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            store.claim("k1", "POST /v1/jobs", b"{\"x\":1}").unwrap(),
            Claim::Mismatch { .. }
        ));
        // A claim given up without an answer frees the key.
        let Claim::Fresh(pending) = store.claim("k2", "op", b"").unwrap() else {
            panic!("fresh");
        };
        drop(pending);
        assert!(matches!(
            store.claim("k2", "op", b"").unwrap(),
            Claim::Fresh(_)
        ));
        assert!(valid_key("order-42/retry") && !valid_key("") && !valid_key("a b"));
    }
}
