//! Checkpoints (issue 43): a named, immutable snapshot of a job's state, its branch tip,
//! index, tracked changes, untracked files and `copy` files (ignored files such as caches
//! are left out), kept as `refs/paddock/checkpoints/<job>/<name>` in paddock's wip store of
//! the repository (never mounted into a job, so no job reads another's checkpoint) with a
//! record beside paddock's state (`$PADDOCK_HOME/checkpoints/<job>/<name>.json`). Both
//! outlive the job: `rm` and the sweep leave them, `checkpoint rm` removes them.
//!
//! A checkpoint is a sync (`sync.sh`, SNAPSHOT 2) under the job's sync lock: its commit
//! comes out as the checked bundle stream, is fetched with fsck into the wip store and its
//! shape is checked there. While it is read, the job's processes are frozen where the
//! runtime can read files beside a frozen sandbox (Docker and gVisor: a throwaway container
//! with the same mounts), so what it saves is one moment; the record says `paused_at` for
//! that moment, as `pause` does, so a crash leaves a job that says it is paused. A microVM
//! runs its sync inside the frozen VM, so its checkpoint is taken live; a process job has
//! nothing running between execs.
//!
//! Invariants: a checkpoint that fails leaves no ref and no record; a name is taken once.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde::{Deserialize, Serialize};

use super::failpoints::crash_point;
use super::sync::SyncScope;
use super::{Error, Paddock, Result};
use crate::git::GitRepo;
use crate::git::sync::{SCRATCH_STATE, WorkState};
use crate::job::{JobId, JobRecord, JobState};
use crate::wire::{
    CheckpointList, CheckpointRemoved, CheckpointRequest, CheckpointView, EventKind,
};

/// How long the sandbox half of a checkpoint may take.
const CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a checkpoint waits for another sync of the job.
const LOCK_WAIT: Duration = Duration::from_secs(120);
#[cfg(test)]
pub use crate::git::sync::MAX_CHECKPOINT_BYTES;
const RECORD_SCHEMA: u32 = 1;

/// A checkpoint's record on disk: what `checkpoints` shows, plus which repository it is of.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Stored {
    schema: u32,
    pub(super) repo_key: String,
    pub(super) repo: PathBuf,
    #[serde(flatten)]
    pub(super) view: CheckpointView,
}

impl Stored {
    /// The wip store that holds it, as a repository to read.
    pub(super) fn store(&self, home: &crate::store::PaddockHome) -> GitRepo {
        let path = self.view.wip_store.clone();
        GitRepo::known(path.clone(), path, &home.locks_dir())
    }
}

/// A checkpoint's name, checked: it becomes a ref's last component and a file's name.
pub(super) fn check_name(name: &str) -> Result<String> {
    let bad = |why| Error::CheckpointName {
        name: crate::text::short_line(name, 80),
        why,
    };
    if name.is_empty() || name.len() > 64 {
        return Err(bad("it takes 1 to 64 characters"));
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(bad("only letters, digits, `.`, `_` and `-` (no `/`)"));
    }
    if name.starts_with(['.', '-']) || name.contains("..") || name.ends_with(".lock") {
        return Err(bad(
            "it may not start with `.` or `-`, hold `..` or end with `.lock`",
        ));
    }
    Ok(name.to_string())
}

/// A name for a checkpoint nobody named: `prefix`, the time, and a suffix when two are
/// taken within one second.
pub(super) fn default_name(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        Utc::now().format("%Y%m%d-%H%M%S"),
        crate::job::random_hex(2)
    )
}

/// Only a made job that is not being removed has a state to save or restore.
pub(super) fn made(record: &JobRecord) -> Result<()> {
    if matches!(
        record.state,
        JobState::Queued | JobState::Creating | JobState::Removed
    ) {
        return Err(Error::NotRunnable {
            id: record.id.clone(),
            state: record.state,
        });
    }
    if record.is_legacy() {
        return Err(Error::Legacy {
            id: record.id.clone(),
        });
    }
    Ok(())
}

impl Paddock {
    /// Where a job's checkpoint records are (they outlive the job's own directory); `job`
    /// is checked with the one id rule first, whoever asks (a path of it is built here).
    fn checkpoints_dir(&self, job: &str) -> Result<PathBuf> {
        let id = JobId::parse(job)?;
        Ok(self.home().root().join("checkpoints").join(id.as_str()))
    }

    fn checkpoint_path(&self, job: &str, name: &str) -> Result<PathBuf> {
        Ok(self.checkpoints_dir(job)?.join(format!("{name}.json")))
    }

    /// Saves the job's state as a checkpoint (see the module docs).
    pub async fn checkpoint(
        &self,
        id: &str,
        request: &CheckpointRequest,
    ) -> Result<CheckpointView> {
        let record = self.load(id)?;
        made(&record)?;
        let name = match &request.name {
            Some(name) => check_name(name)?,
            None => default_name("cp"),
        };
        self.take_checkpoint(&record, &name).await
    }

    /// Takes checkpoint `name` of `record`: frozen where the runtime allows, synced, kept,
    /// announced (`job.checkpointed`).
    pub(super) async fn take_checkpoint(
        &self,
        record: &JobRecord,
        name: &str,
    ) -> Result<CheckpointView> {
        let path = self.checkpoint_path(record.id.as_str(), name)?;
        if path.exists() {
            return Err(Error::CheckpointExists {
                job: record.id.to_string(),
                name: name.to_string(),
            });
        }
        let lock = self.sync_lock_for(record, LOCK_WAIT).await?;
        let frozen = self.freeze_briefly(record).await?;
        crash_point("checkpoint-frozen");
        let deadline = Instant::now() + CHECKPOINT_TIMEOUT;
        let outcome = self
            .sync_under_lock(record, SyncScope::Checkpoint, Some(deadline))
            .await;
        if frozen {
            self.thaw_briefly(record).await?;
        }
        // A refused checkpoint is no failed sync: the job's sync state stays as it was.
        let synced = match outcome {
            Ok(synced) => {
                let ok = Ok(synced);
                self.record_sync(record, &ok);
                ok?
            }
            Err(error) => return Err(refusal(record, error)),
        };
        let WorkState::Snapshot(commit) = &synced.work else {
            return Err(Error::Checkpoint {
                id: record.id.clone(),
                message: "the sandbox sent no checkpoint commit".into(),
            });
        };
        let refname = format!("refs/paddock/checkpoints/{}/{name}", record.id);
        let store = self.ensure_wip_store(record).await?;
        self.keep_in_wip_store(record, &store, &synced, commit, &refname)
            .await?;
        crash_point("checkpoint-published");
        drop(lock);
        let kept = async {
            let facts = store.checkpoint_facts(commit).await?;
            let view = CheckpointView {
                job: record.id.to_string(),
                name: name.to_string(),
                created_at: Utc::now(),
                branch: record.branch.clone(),
                tip: synced.tip.clone(),
                head: facts.head,
                commit: commit.clone(),
                refname: refname.clone(),
                wip_store: self.wip_store_of(record),
                files: facts.files,
                bytes: facts.bytes,
                frozen: frozen || record.paused_at.is_some(),
            };
            self.write_checkpoint(record, &view)?;
            Ok::<_, Error>(view)
        }
        .await;
        match &kept {
            Ok(view) => self.emit(
                EventKind::JobCheckpointed,
                Some(&record.id),
                None,
                serde_json::json!({
                    "checkpoint": view.name,
                    "commit": view.commit,
                    "files": view.files,
                    "bytes": view.bytes,
                }),
            ),
            Err(_) => {
                let _ = store.delete_paddock_ref(&refname).await;
            }
        }
        kept
    }

    /// Puts checkpoint `commit` into the wip store as `refname`: the pack its sync received
    /// linked in when the store already holds everything the sandbox left out of it (the
    /// job's base and known tip, in the user's store it borrows; the last snapshot, which
    /// only an earlier checkpoint put there), else fetched from the scratch repository
    /// with its own check. The link saves about 35 ms of a checkpoint on a 50,000-file
    /// checkout (docs/BENCHMARKS.md).
    async fn keep_in_wip_store(
        &self,
        record: &JobRecord,
        store: &crate::git::GitRepo,
        synced: &super::Synced,
        commit: &str,
        refname: &str,
    ) -> Result<()> {
        if let Some(pack) = &synced.pack
            && !synced.left_out.is_empty()
        {
            let held = store.existing(synced.left_out.clone()).await?;
            if synced.left_out.iter().all(|c| held.contains(c)) {
                match store.adopt_pack_for_ref(pack, refname, commit).await {
                    Ok(()) => return Ok(()),
                    Err(error) => {
                        tracing::debug!(job = %record.id, %error, "fetching the checkpoint instead");
                    }
                }
            }
        }
        store
            .publish(
                &self.scratch_of(record).path,
                &[(SCRATCH_STATE, refname.to_string())],
            )
            .await?;
        Ok(())
    }

    /// The automatic checkpoint before an exec (`checkpoint: {before_exec: true}` of the
    /// job's profile), named `auto-` and the time; then all but the newest `keep` automatic
    /// ones are removed. One that fails fails the exec: a rollback point is never silently
    /// missing.
    pub(super) async fn auto_checkpoint(&self, record: &JobRecord, keep: u32) -> Result<()> {
        self.take_checkpoint(record, &default_name("auto")).await?;
        let autos: Vec<String> = self
            .checkpoints(record.id.as_str())?
            .checkpoints
            .into_iter()
            .filter(|c| c.name.starts_with("auto-"))
            .map(|c| c.name)
            .collect();
        let surplus = autos.len().saturating_sub(keep as usize);
        for name in &autos[..surplus] {
            self.checkpoint_remove(record.id.as_str(), name).await?;
        }
        Ok(())
    }

    /// Writes a checkpoint's record, once: a name another checkpoint took in the meantime
    /// fails here.
    fn write_checkpoint(&self, record: &JobRecord, view: &CheckpointView) -> Result<()> {
        let path = self.checkpoint_path(record.id.as_str(), &view.name)?;
        let stored = Stored {
            schema: RECORD_SCHEMA,
            repo_key: record.repo_key.clone(),
            repo: record.repo.clone(),
            view: view.clone(),
        };
        let dir = path.parent().expect("a checkpoint record has a directory");
        std::fs::create_dir_all(dir).map_err(crate::store::io_err(dir))?;
        let bytes = serde_json::to_vec_pretty(&stored).expect("a checkpoint record serializes");
        match crate::atomic::write_atomic(&path, &bytes, true) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(Error::CheckpointExists {
                    job: view.job.clone(),
                    name: view.name.clone(),
                })
            }
            Err(error) => Err(crate::store::io_err(&path)(error).into()),
        }
    }

    /// Checkpoint `name` of job `job` (which may be gone).
    pub(super) fn load_checkpoint(&self, job: &str, name: &str) -> Result<Stored> {
        let name = check_name(name)?;
        let path = self.checkpoint_path(job, &name)?;
        let missing = || Error::NoCheckpoint {
            job: job.to_string(),
            name: name.clone(),
        };
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Err(missing()),
            Err(error) => return Err(crate::store::io_err(&path)(error).into()),
        };
        serde_json::from_slice(&bytes).map_err(|error| Error::Checkpoint {
            id: JobId::parse(job).unwrap_or_else(|_| JobId::generate("job")),
            message: format!("its record `{}` is unreadable: {error}", path.display()),
        })
    }

    /// The checkpoints of a job, oldest first; the job itself may be gone.
    pub fn checkpoints(&self, job: &str) -> Result<CheckpointList> {
        let dir = self.checkpoints_dir(job)?;
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                // A job that exists has no checkpoint yet; one that does not is not found.
                let record = self.load(job)?;
                return Ok(CheckpointList {
                    job: record.id.to_string(),
                    checkpoints: Vec::new(),
                });
            }
            Err(error) => return Err(crate::store::io_err(&dir)(error).into()),
        };
        let mut checkpoints: Vec<CheckpointView> = entries
            .filter_map(|entry| {
                let name = entry.ok()?.file_name().into_string().ok()?;
                let name = name.strip_suffix(".json")?;
                self.load_checkpoint(job, name).ok().map(|s| s.view)
            })
            .collect();
        checkpoints.sort_by(|a, b| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)));
        Ok(CheckpointList {
            job: job.to_string(),
            checkpoints,
        })
    }

    /// Removes a checkpoint: its ref, then its record (a crash between leaves a record
    /// whose removal finishes next time). Removing one that is gone changes nothing.
    pub async fn checkpoint_remove(&self, job: &str, name: &str) -> Result<CheckpointRemoved> {
        let stored = match self.load_checkpoint(job, name) {
            Ok(stored) => stored,
            Err(Error::NoCheckpoint { .. }) => {
                return Ok(CheckpointRemoved {
                    job: job.to_string(),
                    name: name.to_string(),
                    removed: false,
                });
            }
            Err(error) => return Err(error),
        };
        if stored.view.wip_store.join("objects").is_dir() {
            stored
                .store(self.home())
                .delete_paddock_ref(&stored.view.refname)
                .await?;
        }
        let path = self.checkpoint_path(job, &stored.view.name)?;
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(crate::store::io_err(&path)(error).into()),
        }
        let _ = std::fs::remove_dir(self.checkpoints_dir(job)?);
        Ok(CheckpointRemoved {
            job: job.to_string(),
            name: stored.view.name,
            removed: true,
        })
    }

    /// Freezes the job's sandbox while a checkpoint is read beside it, when its runtime can
    /// do that; true when it froze something. The record says paused first (as `pause`).
    async fn freeze_briefly(&self, record: &JobRecord) -> Result<bool> {
        let runtime = self.runtime_of(record);
        let Some(freeze) = runtime.capabilities().freeze else {
            return Ok(false);
        };
        if let Some(since) = record.paused_at {
            // Frozen already: fine where its files can be read beside it, else nothing runs
            // that could read them.
            return if freeze.reads_while_frozen() {
                Ok(false)
            } else {
                Err(Error::Paused {
                    id: record.id.clone(),
                    since,
                })
            };
        }
        if !freeze.reads_while_frozen() {
            return Ok(false);
        }
        let now = Utc::now();
        self.store.update(&record.id, |r| {
            r.paused_at = Some(now);
            r.frozen_by = crate::job::ProcessId::current();
        })?;
        let clear = |r: &mut JobRecord| {
            r.paused_at = None;
            r.frozen_by = None;
        };
        match freeze.freeze_if_running(record).await {
            Ok(true) => Ok(true),
            Ok(false) => {
                self.store.update(&record.id, clear)?;
                Ok(false)
            }
            Err(error) => {
                let _ = self.store.update(&record.id, clear);
                Err(error.into())
            }
        }
    }

    async fn thaw_briefly(&self, record: &JobRecord) -> Result<()> {
        if let Some(freeze) = self.runtime_of(record).capabilities().freeze {
            freeze.thaw(record).await?;
        }
        self.store.update(&record.id, |r| {
            r.paused_at = None;
            r.frozen_by = None;
        })?;
        Ok(())
    }

    /// Thaws a job a checkpoint froze for a moment when the process that froze it is gone
    /// (killed mid-checkpoint); the record as it is now, or `None` when there was nothing to
    /// do. A job its user paused (`frozen_by` unset) stays paused.
    pub(crate) async fn thaw_abandoned(&self, record: &JobRecord) -> Result<Option<JobRecord>> {
        let Some(freezer) = record.frozen_by else {
            return Ok(None);
        };
        if record.paused_at.is_none() || freezer.is_alive() {
            return Ok(None);
        }
        self.thaw_briefly(record).await?;
        Ok(Some(self.load(record.id.as_str())?))
    }
}

/// What an overlay job changed against its lower layer (see `overlay::changes`), handed to
/// the sandbox half of a checkpoint or a restore (`sync.sh`, `restore.sh`) so that it looks
/// only there: its work is then in proportion to the change, not to the repository.
pub(super) struct ChangedHint {
    /// The three lists (see `overlay::changes::Changes::encoded`): the sandbox half's
    /// standard input.
    paths: Vec<u8>,
    /// Each list's length in bytes.
    lengths: String,
    /// The lower layer's commit.
    lower: String,
}

impl ChangedHint {
    /// Sets `request` up to carry the hint.
    pub(super) fn apply(self, request: &mut crate::runtime::ExecRequest) {
        request
            .env
            .insert("PADDOCK_CHANGED_BYTES".into(), self.lengths);
        request.env.insert("PADDOCK_LOWER".into(), self.lower);
        request.stdin = crate::runtime::exec::ExecStdin::bytes(self.paths);
    }
}

impl Paddock {
    /// The hint for `record` (see [`ChangedHint`]): only for an overlay checkout on this
    /// host whose upper dir a bounded walk can read; `None` leaves the sandbox half to its
    /// full walk, which is always right.
    pub(super) async fn changed_hint(&self, record: &JobRecord) -> Option<ChangedHint> {
        if record.checkout != crate::config::CheckoutMode::Overlay
            || self.runtime_of(record).capabilities().volumes.is_some()
        {
            return None;
        }
        let pristine = record.pristine.clone()?;
        let lower = crate::overlay::Pristines::commit_of(&pristine)?;
        let upper = self.layers_of(record).join("upper");
        let started = Instant::now();
        let walked = tokio::task::spawn_blocking(move || {
            crate::overlay::changes::walk(
                &upper,
                &pristine.join("tree"),
                crate::overlay::changes::Limits::default(),
            )
        })
        .await
        .ok()?;
        match walked {
            crate::overlay::changes::Walked::Changes(changes) => {
                tracing::debug!(
                    job = %record.id,
                    paths = changes.len(),
                    bytes = changes.bytes,
                    ms = started.elapsed().as_millis(),
                    "overlay changes read"
                );
                let (paths, lengths) = changes.encoded();
                Some(ChangedHint {
                    paths,
                    lengths,
                    lower,
                })
            }
            crate::overlay::changes::Walked::Unsuited(why) => {
                tracing::debug!(job = %record.id, %why, "overlay changes: the full walk");
                None
            }
        }
    }
}

/// A sync error whose sandbox half refused the checkpoint (`sync.sh` exits 80-84) becomes
/// that refusal; anything else stays what it was.
fn refusal(record: &JobRecord, error: Error) -> Error {
    const MARK: &str = "paddock: checkpoint refused: ";
    if let Error::Sync { message, .. } = &error
        && let Some(at) = message.find(MARK)
    {
        return Error::Checkpoint {
            id: record.id.clone(),
            message: message[at + MARK.len()..].to_string(),
        };
    }
    error
}
