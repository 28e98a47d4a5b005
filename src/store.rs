//! The state root (`$PADDOCK_HOME`) and the durable job records inside it.
//!
//! Layout:
//! ```text
//! $PADDOCK_HOME/
//!   home-id                      random id of this install; labels its containers
//!                                (the install's tag in Docker names is a hash of the path)
//!   jobs/<id>.json               one record per job (atomic writes)
//!   jobs/.lock                   serializes read-modify-write of records across processes
//!   work/<id>/                   the job's own dirs: private git dir, outbox, overlay layers,
//!                                scratch repository (jobs made before this layout keep theirs
//!                                at `jobs/<id>/`); apart from the records, as the job writes here
//!   worktrees/<repo-key>/<id>/   the job's checkout
//!   worktrees/<repo-key>/.<id>.paddock   ownership marker, written before the checkout exists
//!   logs/<id>/                   exec audit log and output
//!   logs/<id>/execs/<exec>.json  one exec's status and result; `<exec>.ndjson` its output
//!   events/<first id>.jsonl      the event log's segments (see `eventlog`)
//! ```
//! Records are written to a temp file, fsynced, then renamed (or hard-linked, for a new id, so
//! two creators of one id cannot both win), and the directory is fsynced.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use crate::atomic::write_atomic;
use crate::env::EnvLookup;
use crate::ids::random_hex;
use crate::job::{JobId, JobRecord, LEGACY_RECORD_SCHEMA, RECORD_SCHEMA};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "cannot find the state root: set PADDOCK_HOME, XDG_DATA_HOME or HOME (the state root is never put under /tmp by default)"
    )]
    NoHome,
    #[error("failed to access `{path}`")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("job `{id}` already exists")]
    Exists { id: JobId },
    #[error("no job `{id}`")]
    NotFound { id: String },
    /// A name that is not a job id: no path is ever built from it.
    #[error(transparent)]
    InvalidId(#[from] crate::job::JobError),
    #[error(
        "job record `{path}` is not a regular file; a link or anything else there is never read"
    )]
    NotAFile { path: PathBuf },
    #[error("unreadable job record `{path}`: {message}")]
    Corrupt { path: PathBuf, message: String },
    #[error("job record `{path}` has schema {found}; this paddock reads schema {expected}")]
    Schema {
        path: PathBuf,
        found: u32,
        expected: u32,
    },
    #[error("timed out after {waited:?} waiting for lock `{path}`")]
    LockTimeout { path: PathBuf, waited: Duration },
}

/// Turns an I/O failure on `path` into a [`StoreError`] (for the modules that keep their own
/// files under `$PADDOCK_HOME`).
pub(crate) fn io_err(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// An exclusive advisory lock on a file, released on drop (or when the process dies).
#[derive(Debug)]
pub struct FileLock {
    _file: File,
}

impl FileLock {
    /// Waits up to `wait` for the lock, polling so the wait is bounded.
    pub fn acquire(path: &Path, wait: Duration) -> Result<FileLock, StoreError> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(io_err(path))?;
        let started = Instant::now();
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(FileLock { _file: file }),
                Err(fs::TryLockError::WouldBlock) if started.elapsed() < wait => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(StoreError::LockTimeout {
                        path: path.to_path_buf(),
                        waited: wait,
                    });
                }
                Err(fs::TryLockError::Error(source)) => {
                    return Err(StoreError::Io {
                        path: path.to_path_buf(),
                        source,
                    });
                }
            }
        }
    }
}

/// Where root keeps its state when `PADDOCK_HOME` is not set.
pub const SYSTEM_ROOT: &str = "/var/lib/paddock";

/// The state root paddock uses: `$PADDOCK_HOME`; else, as root, [`SYSTEM_ROOT`] (as system
/// tools keep theirs in `/var/lib/<name>`: root's home is mode 0700, and whether `$HOME` is
/// root's or the caller's depends on how `sudo` was run); else `$XDG_DATA_HOME/paddock`, else
/// `~/.local/share/paddock`. Nothing here needs the agent's uid to enter the state root or
/// anything above it: host-side files are made by paddock's own user and handed to the agent
/// below the root (see `runtime::docker::mounts`).
pub fn default_root(env: &dyn EnvLookup, root: bool) -> Option<PathBuf> {
    if let Some(home) = env.var("PADDOCK_HOME").filter(|h| !h.is_empty()) {
        return Some(PathBuf::from(home));
    }
    if root {
        return Some(PathBuf::from(SYSTEM_ROOT));
    }
    env.var("XDG_DATA_HOME")
        .filter(|d| Path::new(d).is_absolute())
        .map(|d| Path::new(&d).join("paddock"))
        .or_else(|| {
            env.var("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| Path::new(&h).join(".local/share/paddock"))
        })
}

/// The resolved state root of one install.
#[derive(Debug, Clone)]
pub struct PaddockHome {
    root: PathBuf,
    id: String,
    tag: String,
}

impl PaddockHome {
    /// The state root (see [`default_root`]); created with its subdirectories and a random
    /// install id on first use.
    pub fn open(env: &dyn EnvLookup) -> Result<PaddockHome, StoreError> {
        let root = default_root(env, crate::sys::is_root()).ok_or(StoreError::NoHome)?;
        Self::open_at(&root)
    }

    pub fn open_at(root: &Path) -> Result<PaddockHome, StoreError> {
        // A root paddock makes is its user's alone: it holds what agents printed and the
        // daemon's token. Nothing needs another uid to enter it (see [`default_root`]).
        if !root.exists() {
            use std::os::unix::fs::DirBuilderExt as _;
            match fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(root)
            {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(source) => {
                    return Err(StoreError::Io {
                        path: root.to_path_buf(),
                        source,
                    });
                }
            }
        }
        for sub in ["jobs", "work", "worktrees", "logs", "locks"] {
            let dir = root.join(sub);
            fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        }
        let root = fs::canonicalize(root).map_err(io_err(root))?;
        let id_path = root.join("home-id");
        let id = match fs::read_to_string(&id_path) {
            Ok(id) if !id.trim().is_empty() => id.trim().to_string(),
            _ => {
                let fresh = random_hex(16);
                match write_atomic(&id_path, fresh.as_bytes(), true) {
                    Ok(()) => fresh,
                    // Another process won the race; use its id.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        fs::read_to_string(&id_path)
                            .map_err(io_err(&id_path))?
                            .trim()
                            .to_string()
                    }
                    Err(source) => {
                        return Err(StoreError::Io {
                            path: id_path,
                            source,
                        });
                    }
                }
            }
        };
        let tag = install_tag(&root);
        Ok(PaddockHome { root, id, tag })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The id that labels this install's containers (`dev.paddock.home`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// This install's short tag in the names of its Docker objects (`paddock-<tag>-<job>`),
    /// so two installs on one daemon can use the same job id (see [`install_tag`]).
    pub fn tag(&self) -> &str {
        &self.tag
    }

    pub fn jobs_dir(&self) -> PathBuf {
        self.root.join("jobs")
    }

    /// Where jobs' own dirs live: `work/`, apart from the records in `jobs/`, so nothing a
    /// job can write (its git dir, outbox, overlay upper dir) is ever inside the directory
    /// records are read from.
    pub fn work_dir(&self) -> PathBuf {
        self.root.join("work")
    }

    /// Both places a job dir can be: `work/` and, for jobs made before it, `jobs/`.
    pub fn job_dir_roots(&self) -> [PathBuf; 2] {
        [self.work_dir(), self.jobs_dir()]
    }

    /// Host-side state of one job: its private git dir, outbox, overlay layers and scratch
    /// repository. Never mounted into a container as a whole. `work/<id>/`, except for a job
    /// made before that layout, whose dir stays at `jobs/<id>/` until it is removed (a real
    /// directory there, never a link, is what marks one).
    pub fn job_dir(&self, id: &JobId) -> PathBuf {
        let legacy = self.jobs_dir().join(id.as_str());
        if fs::symlink_metadata(&legacy).is_ok_and(|meta| meta.is_dir()) {
            return legacy;
        }
        self.work_dir().join(id.as_str())
    }

    /// The job's private git dir (see `git::jobdir`).
    pub fn job_git_dir(&self, id: &JobId) -> PathBuf {
        self.job_dir(id).join("git")
    }

    /// The job's scratch repository, which receives its syncs (see `git::sync`).
    pub fn job_scratch_repo(&self, id: &JobId) -> PathBuf {
        self.job_dir(id).join("sync.git")
    }

    /// Where paddock's per-repository locks live (never inside a user's repository).
    pub fn locks_dir(&self) -> PathBuf {
        self.root.join("locks")
    }

    pub fn worktrees_dir(&self) -> PathBuf {
        self.root.join("worktrees")
    }

    /// Where shared dependency cache entries live.
    pub fn caches_dir(&self) -> PathBuf {
        self.root.join("caches")
    }

    pub fn logs_dir(&self, id: &JobId) -> PathBuf {
        self.root.join("logs").join(id.as_str())
    }

    /// Each exec's status (`<exec>.json`) and output (`<exec>.ndjson`) of one job.
    pub fn execs_dir(&self, id: &JobId) -> PathBuf {
        self.logs_dir(id).join("execs")
    }

    /// The persisted event log (see `eventlog`).
    pub fn events_dir(&self) -> PathBuf {
        self.root.join("events")
    }

    /// Where a job's checkout goes.
    pub fn worktree_path(&self, repo_key: &str, id: &JobId) -> PathBuf {
        self.worktrees_dir().join(repo_key).join(id.as_str())
    }

    /// The ownership marker that sits beside a job's checkout. Destructive code removes a
    /// directory under the worktree root only when its marker names this install.
    pub fn worktree_marker(&self, repo_key: &str, id: &JobId) -> PathBuf {
        self.worktrees_dir()
            .join(repo_key)
            .join(format!(".{}.paddock", id.as_str()))
    }

    /// Writes the marker for a checkout about to be created.
    pub fn mark_worktree(&self, repo_key: &str, id: &JobId) -> Result<(), StoreError> {
        let dir = self.worktrees_dir().join(repo_key);
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let marker = self.worktree_marker(repo_key, id);
        write_atomic(&marker, format!("{}\n", self.id).as_bytes(), false).map_err(io_err(&marker))
    }

    /// True when `path` is `worktrees/<repo-key>/<id>` of this install and carries our marker.
    pub fn owns_worktree(&self, path: &Path) -> bool {
        let Ok(relative) = path.strip_prefix(self.worktrees_dir()) else {
            return false;
        };
        let parts: Vec<_> = relative.components().collect();
        if parts.len() != 2 {
            return false;
        }
        let (Some(key), Some(id)) = (parts[0].as_os_str().to_str(), parts[1].as_os_str().to_str())
        else {
            return false;
        };
        let Ok(id) = JobId::parse(id) else {
            return false;
        };
        fs::read_to_string(self.worktree_marker(key, &id)).is_ok_and(|text| text.trim() == self.id)
    }

    /// Remembers a repository that has had jobs, so the sweeper can reconcile it even after
    /// all its records are gone: `repos/<repo-key>` holds the common dir and the root.
    pub fn register_repo(
        &self,
        key: &str,
        root: &Path,
        common_dir: &Path,
    ) -> Result<(), StoreError> {
        let dir = self.root.join("repos");
        fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let path = dir.join(key);
        let text = format!("{}\n{}\n", common_dir.display(), root.display());
        if fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
            return Ok(());
        }
        write_atomic(&path, text.as_bytes(), false).map_err(io_err(&path))
    }

    /// Every registered repository as `(key, root, common dir)`; ones whose common dir is gone
    /// are skipped.
    pub fn repos(&self) -> Vec<(String, PathBuf, PathBuf)> {
        let Ok(entries) = fs::read_dir(self.root.join("repos")) else {
            return Vec::new();
        };
        let mut repos: Vec<_> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let text = fs::read_to_string(entry.path()).ok()?;
                let mut lines = text.lines();
                let common = PathBuf::from(lines.next()?);
                let root = PathBuf::from(lines.next()?);
                let key = entry.file_name().to_string_lossy().into_owned();
                (!key.starts_with('.') && common.is_dir()).then_some((key, root, common))
            })
            .collect();
        repos.sort();
        repos
    }

    /// The store of job records in this home.
    pub fn store(&self) -> JobStore {
        JobStore {
            dir: self.jobs_dir(),
        }
    }
}

/// The tag of the install at `root` (its canonical path): 8 hex digits of the path's
/// SHA-256. Derived, not stored, so it is stable for as long as the install stays where it
/// is; a moved install gets new names for new containers, and its existing jobs keep theirs
/// (the record holds the container's name).
pub fn install_tag(root: &Path) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(root.as_os_str().as_encoded_bytes());
    crate::ids::hex(&digest[..4])
}

/// Job records on disk.
#[derive(Debug, Clone)]
pub struct JobStore {
    dir: PathBuf,
}

impl JobStore {
    /// The one path of a record: `jobs/<id>.json`, from a validated id only (an id holds no
    /// `/`, so this is always a file directly in `jobs/`).
    fn path(&self, id: &JobId) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Serializes read-modify-write cycles of records across processes.
    pub fn lock(&self) -> Result<FileLock, StoreError> {
        FileLock::acquire(&self.dir.join(".lock"), Duration::from_secs(30))
    }

    /// Writes a record for a new id; fails with [`StoreError::Exists`] if the id is taken.
    pub fn create(&self, record: &JobRecord) -> Result<(), StoreError> {
        let path = self.path(&record.id);
        match write_atomic(&path, &to_json(record), true) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(StoreError::Exists {
                id: record.id.clone(),
            }),
            Err(source) => Err(StoreError::Io { path, source }),
        }
    }

    /// Replaces a record, under the store lock, so it never interleaves with an
    /// [`update`](Self::update) (the daemon's activity watcher) that read the old one.
    pub fn save(&self, record: &JobRecord) -> Result<(), StoreError> {
        let _lock = self.lock()?;
        self.write(record)
    }

    fn write(&self, record: &JobRecord) -> Result<(), StoreError> {
        let path = self.path(&record.id);
        write_atomic(&path, &to_json(record), false).map_err(io_err(&path))
    }

    /// Reads, changes and writes one record under the store lock.
    pub fn update<T>(
        &self,
        id: &JobId,
        change: impl FnOnce(&mut JobRecord) -> T,
    ) -> Result<(JobRecord, T), StoreError> {
        let _lock = self.lock()?;
        let mut record = self.load_id(id)?;
        let out = change(&mut record);
        self.write(&record)?;
        Ok((record, out))
    }

    /// [`update`](Self::update) for a change a crash makes stale anyway (an exec
    /// starting): written whole with its contents on disk, but without waiting for the
    /// rename to be, so after a crash the record may read as before the change.
    pub fn update_lazily<T>(
        &self,
        id: &JobId,
        change: impl FnOnce(&mut JobRecord) -> T,
    ) -> Result<(JobRecord, T), StoreError> {
        let _lock = self.lock()?;
        let mut record = self.load_id(id)?;
        let out = change(&mut record);
        let path = self.path(&record.id);
        crate::atomic::replace_atomic_lazily(&path, &to_json(&record)).map_err(io_err(&path))?;
        Ok((record, out))
    }

    pub fn exists(&self, id: &JobId) -> bool {
        fs::symlink_metadata(self.path(id)).is_ok_and(|meta| meta.is_file())
    }

    /// Whether a record exists for a name that may not be a valid id (a container label, a
    /// directory name).
    pub fn exists_str(&self, id: &str) -> bool {
        JobId::parse(id).is_ok_and(|id| self.exists(&id))
    }

    /// The record of `id`, a name from outside (an API path, an argument): it is parsed as a
    /// [`JobId`] before any path is built, so a name with `/`, `..`, a NUL or 300 bytes is an
    /// [`StoreError::InvalidId`], never a read.
    pub fn load(&self, id: &str) -> Result<JobRecord, StoreError> {
        self.load_id(&JobId::parse(id)?)
    }

    /// The record of a validated id. Only a regular file directly in `jobs/` is read, opened
    /// with `O_NOFOLLOW`; a record whose own id differs from its name is refused too.
    pub fn load_id(&self, id: &JobId) -> Result<JobRecord, StoreError> {
        let path = self.path(id);
        let bytes = match read_plain_file(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::NotFound { id: id.to_string() });
            }
            Err(e)
                if e.raw_os_error() == Some(libc::ELOOP)
                    || e.kind() == io::ErrorKind::InvalidData =>
            {
                return Err(StoreError::NotAFile { path });
            }
            Err(source) => return Err(StoreError::Io { path, source }),
        };
        let record = parse_record(&path, &bytes)?;
        if &record.id != id {
            return Err(StoreError::Corrupt {
                path,
                message: format!("the record names job `{}`", record.id),
            });
        }
        Ok(record)
    }

    /// Every record, sorted by creation time. Unreadable files are returned as errors beside
    /// the good records so one bad file does not hide the rest.
    pub fn list(&self) -> Result<(Vec<JobRecord>, Vec<StoreError>), StoreError> {
        let mut records = Vec::new();
        let mut bad = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io_err(&self.dir))? {
            let entry = entry.map_err(io_err(&self.dir))?;
            let path = entry.path();
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let Some(stem) = name.strip_suffix(".json") else {
                continue;
            };
            // Only `<valid id>.json`: anything else in `jobs/` (the lock, a job dir of the
            // layout before `work/`) is not a record.
            if JobId::parse(stem).is_err() {
                continue;
            }
            match read_plain_file(&path) {
                Ok(bytes) => match parse_record(&path, &bytes) {
                    Ok(record) => records.push(record),
                    Err(e) => bad.push(e),
                },
                // Removed between the listing and the read: not an error.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => bad.push(StoreError::Io { path, source }),
            }
        }
        records.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        Ok((records, bad))
    }

    /// Deletes a record, under the store lock (an update in flight cannot bring it back).
    pub fn remove(&self, id: &JobId) -> Result<(), StoreError> {
        let _lock = self.lock()?;
        let path = self.path(id);
        match fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StoreError::Io { path, source }),
        }
    }
}

/// The bytes of a regular file, opened without following a link at its last component
/// (`ELOOP` then); anything but a regular file is `InvalidData`.
fn read_plain_file(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::from(io::ErrorKind::InvalidData));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

fn to_json(record: &JobRecord) -> Vec<u8> {
    let mut bytes =
        serde_json::to_vec_pretty(record).expect("a job record always serializes to JSON");
    bytes.push(b'\n');
    bytes
}

fn parse_record(path: &Path, bytes: &[u8]) -> Result<JobRecord, StoreError> {
    #[derive(serde::Deserialize)]
    struct Version {
        schema: u32,
    }
    let version: Version = serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    if version.schema != RECORD_SCHEMA && version.schema != LEGACY_RECORD_SCHEMA {
        return Err(StoreError::Schema {
            path: path.to_path_buf(),
            found: version.schema,
            expected: RECORD_SCHEMA,
        });
    }
    serde_json::from_slice(bytes).map_err(|e| StoreError::Corrupt {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests;
