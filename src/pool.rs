//! Warm pool slots: containers of a profile started ahead of creates, each waiting with
//! empty mount points, so a create only has to make the job's files appear in one.
//!
//! A slot is `$PADDOCK_HOME/pool/<slot>/` holding `slot.json` (its versioned record, written
//! atomically), `mnt/` and `stage/`. `mnt/` is bind-mounted on itself and made shared; the
//! slot's container mounts `mnt/workspace` at the job's workspace, `mnt/paddock` at
//! `/paddock` and `mnt/objects` at `/paddock-objects` (the job's object view) with `rslave`
//! propagation, so mounts made under `mnt/` on the host later (a
//! claim's) appear inside, while nothing the container does reaches the host. A read-only
//! bind is made read-only in `stage/` (not shared) and then moved into `mnt/`: a remount's
//! flag would not reach the copy propagation already made.
//!
//! States: `starting` (its filler's pid recorded, so a sweep can tell a killed fill),
//! `ready`, `claimed` (by a job, whose record names the slot: from then on the slot's
//! container and mounts are that job's and go with it). A claimed slot is never handed
//! out again. Decisions over the set of slots (claim, fill, drain) are taken under
//! `locks/pool.lock`. Everything under `pool/` is paddock's by construction; the slot's
//! container carries the install's labels with the slot's id as its job label.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::job::{Limits, ProcessId, RuntimeKind};
use crate::store::{FileLock, PaddockHome};

/// The version of `slot.json`.
pub const SLOT_SCHEMA: u32 = 1;
/// How long a pool decision waits for another process's.
const LOCK_WAIT: Duration = Duration::from_secs(60);

/// What went wrong with a pool slot.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error("pool slot `{path}`: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot mount `{source_path}` at `{target}` in a pool slot: {source}")]
    Mount {
        source_path: PathBuf,
        target: PathBuf,
        source: std::io::Error,
    },
    #[error("pool slot `{path}` has an unreadable record: {message}")]
    Record { path: PathBuf, message: String },
    #[error("a warm pool needs root to mount into its containers")]
    NotRoot,
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> PoolError + '_ {
    move |source| PoolError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where a slot is in its life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SlotState {
    /// Being made by the process `owner`.
    Starting { owner: Option<ProcessId> },
    /// Its container runs and waits for a job.
    Ready,
    /// Handed to the job `job` (for good).
    Claimed { job: String },
    /// Being removed (a drain, a sweep, a release): never claimed again, and a sweep
    /// finishes the removal if it failed.
    Removing,
}

/// The record of one slot (`pool/<slot>/slot.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PoolSlot {
    pub schema: u32,
    /// `pool-<hex>`: the slot's directory name and its container's job label.
    pub id: String,
    pub profile: String,
    pub repo_key: String,
    /// The repository's git common dir (its object stores are mounted read-only, at their
    /// own paths, as in every job's container).
    pub git_common_dir: PathBuf,
    pub runtime: RuntimeKind,
    /// The profile's limits the container started with (a claim updates CPU, memory and
    /// pids to the job's).
    pub limits: Limits,
    /// The profile's `pool.idle`: the pool drains after this long without a claim.
    pub idle: crate::units::HumanDuration,
    /// The container's name while it waits (a claim renames it to the job's).
    pub container_name: String,
    pub container_id: Option<String>,
    pub state: SlotState,
    pub created_at: DateTime<Utc>,
    /// The container mounts `mnt/objects` at `/paddock-objects`, where a claim binds the
    /// job's object view. A slot made before views (the live store mounted there) is never
    /// claimed: its job would read objects that landed after its create.
    #[serde(default)]
    pub objects_point: bool,
    /// The remote engine of `engines:` the slot's container and volumes are on (`None`: the
    /// local engine). A remote slot has no mounts on the host: its container mounts volumes
    /// of its own there (named after its container, `engines::job_volume`), which a claim
    /// fills by the same stream as a cold create, and the job takes both as its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
}

impl PoolSlot {
    /// Whether this slot's container can become a job with `limits` of `profile` in the
    /// repository `repo_key` on `runtime` on `engine` (what a claim cannot change
    /// afterwards: the engine, image, user, workspace, network, environment; for a VM also
    /// its CPU, memory and pids).
    pub fn fits(
        &self,
        profile: &str,
        repo_key: &str,
        (runtime, engine): (RuntimeKind, Option<&str>),
        limits: &Limits,
        fixed_limits: bool,
    ) -> bool {
        self.state == SlotState::Ready
            && self.engine.as_deref() == engine
            && self.objects_point
            && self.profile == profile
            && self.repo_key == repo_key
            && self.runtime == runtime
            && self.limits.image == limits.image
            && self.limits.uid == limits.uid
            && self.limits.workspace_dir == limits.workspace_dir
            && self.limits.network == limits.network
            && self.limits.env == limits.env
            // A VM's vCPUs and memory are fixed at its boot (a container's are updated).
            && (!fixed_limits
                || (self.limits.memory, self.limits.cpus, self.limits.pids)
                    == (limits.memory, limits.cpus, limits.pids))
    }
}

/// Whether `id` is a slot's name (`pool-<hex>`), never a job's or a path.
pub fn is_slot_name(id: &str) -> bool {
    id.strip_prefix("pool-")
        .is_some_and(|hex| !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit()))
}

/// One host bind a claim makes: `source` at `target` (relative to the slot's `mnt/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostBind {
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
}

/// The install's pool slots.
#[derive(Debug, Clone)]
pub struct PoolSlots {
    root: PathBuf,
    lock: PathBuf,
}

impl PoolSlots {
    /// The slots that are, or are becoming, waiting containers: ready ones and those a live
    /// process is making.
    pub fn live(&self) -> Vec<PoolSlot> {
        self.list()
            .into_iter()
            .filter_map(|(_, slot)| slot.ok())
            .filter(|slot| match &slot.state {
                SlotState::Ready => true,
                SlotState::Starting { owner } => owner.as_ref().is_some_and(ProcessId::is_alive),
                SlotState::Claimed { .. } | SlotState::Removing => false,
            })
            .collect()
    }

    pub fn of(home: &PaddockHome) -> PoolSlots {
        PoolSlots {
            root: home.root().join("pool"),
            lock: home.locks_dir().join("pool.lock"),
        }
    }

    /// A new slot id.
    pub fn new_id() -> String {
        format!("pool-{}", crate::ids::random_hex(8))
    }

    pub fn dir(&self, id: &str) -> PathBuf {
        self.root.join(id)
    }

    /// `$PADDOCK_HOME/pool`, where every slot's directory is.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The slot's shared mount (`mnt/`), whose `workspace` and `paddock` its container mounts.
    pub fn mnt(&self, id: &str) -> PathBuf {
        self.dir(id).join("mnt")
    }

    fn record_path(&self, id: &str) -> PathBuf {
        self.dir(id).join("slot.json")
    }

    /// Takes the pool lock (blocking; call off the async workers).
    pub fn lock(&self) -> Result<FileLock, PoolError> {
        Ok(FileLock::acquire(&self.lock, LOCK_WAIT)?)
    }

    /// Writes a slot's record atomically (its directory made when missing).
    pub fn save(&self, slot: &PoolSlot) -> Result<(), PoolError> {
        let dir = self.dir(&slot.id);
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let path = self.record_path(&slot.id);
        let bytes = serde_json::to_vec_pretty(slot).map_err(|e| PoolError::Record {
            path: path.clone(),
            message: e.to_string(),
        })?;
        crate::atomic::write_atomic(&path, &bytes, false).map_err(io(&path))
    }

    pub fn load(&self, id: &str) -> Result<PoolSlot, PoolError> {
        let path = self.record_path(id);
        let bytes = std::fs::read(&path).map_err(io(&path))?;
        let slot: PoolSlot = serde_json::from_slice(&bytes).map_err(|e| PoolError::Record {
            path: path.clone(),
            message: e.to_string(),
        })?;
        if slot.schema != SLOT_SCHEMA {
            return Err(PoolError::Record {
                path,
                message: format!("schema {} (this paddock reads {SLOT_SCHEMA})", slot.schema),
            });
        }
        Ok(slot)
    }

    /// Every slot directory, with its record (or why it has none readable: a fill killed
    /// before its first write leaves a directory without one).
    pub fn list(&self) -> Vec<(String, Result<PoolSlot, PoolError>)> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        let mut slots: Vec<(String, Result<PoolSlot, PoolError>)> = entries
            .flatten()
            .filter(|e| e.path().is_dir() && !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| {
                let id = e.file_name().to_string_lossy().into_owned();
                let slot = self.load(&id);
                (id, slot)
            })
            .collect();
        slots.sort_by(|a, b| a.0.cmp(&b.0));
        slots
    }

    /// Makes the slot's directories and its mounts: `mnt/` bound on itself, made private
    /// (out of any peer group it joined: a shared host root has one) and then shared, so its
    /// only peers are the slot container's slave copies; `stage/` bound on itself and
    /// private, where a claim assembles what it moves into `mnt/`.
    pub fn prepare(&self, id: &str) -> Result<(), PoolError> {
        if !crate::sys::is_root() {
            return Err(PoolError::NotRoot);
        }
        let mnt = self.mnt(id);
        let stage = self.dir(id).join("stage");
        for dir in [
            mnt.join("workspace"),
            mnt.join("paddock"),
            mnt.join("objects"),
            stage.clone(),
            self.dir(id).join("paddock-root/git"),
            self.dir(id).join("paddock-root/outbox"),
        ] {
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        }
        let failed = |path: &Path| {
            let path = path.to_path_buf();
            move |source| PoolError::Mount {
                source_path: path.clone(),
                target: path,
                source,
            }
        };
        crate::sys::bind_mount(&mnt, &mnt).map_err(failed(&mnt))?;
        crate::sys::make_rprivate(&mnt).map_err(failed(&mnt))?;
        crate::sys::make_rshared(&mnt).map_err(failed(&mnt))?;
        crate::sys::bind_mount(&stage, &stage).map_err(failed(&stage))?;
        crate::sys::make_rprivate(&stage).map_err(failed(&stage))
    }

    /// Makes a job's files appear in the slot's container. Each of the trees
    /// (`workspace`, `paddock`, `objects`: the job's object view) is assembled in the private `stage/`, where the container
    /// sees nothing and so cannot swap a path for a link while the host mounts through it,
    /// with its read-only parts made read-only there; then it moves into `mnt/` whole, and
    /// propagation gives the container a copy with the same flags.
    pub fn attach(&self, id: &str, binds: &[HostBind]) -> Result<(), PoolError> {
        let mnt = self.mnt(id);
        let stage = self.dir(id).join("stage");
        // After a reboot both are plain directories: a move would then land nowhere a
        // container sees (or, under a shared root, the stage would propagate).
        let mounted = crate::overlay::mount_points_under(&self.dir(id));
        for point in [&mnt, &stage] {
            if !mounted.contains(point) {
                return Err(PoolError::Io {
                    path: point.clone(),
                    source: std::io::Error::other("the slot's mount is gone (a reboot?)"),
                });
            }
        }
        for top in ["workspace", "paddock", "objects"] {
            let mut tree: Vec<&HostBind> =
                binds.iter().filter(|b| b.target.starts_with(top)).collect();
            // Parents before what is mounted inside them, as Docker orders a container's.
            tree.sort_by_key(|b| b.target.components().count());
            if tree.is_empty() {
                continue;
            }
            let staged = stage.join(top);
            std::fs::create_dir_all(&staged).map_err(io(&staged))?;
            // The tree's root: the bind at `top` itself (the checkout), else the slot's own
            // skeleton of mount points (`paddock-root`: git/, outbox/).
            let skeleton = self.dir(id).join("paddock-root");
            let (root_source, root_read_only) = tree
                .iter()
                .find(|b| b.target == Path::new(top))
                .map_or((skeleton.as_path(), false), |b| {
                    (b.source.as_path(), b.read_only)
                });
            mount_private(root_source, &staged, root_read_only)?;
            for bind in tree.iter().filter(|b| b.target != Path::new(top)) {
                let relative = bind.target.strip_prefix(top).expect("filtered by prefix");
                // The host resolves the target: a link on the way (a checkout may hold
                // committed symlinks) would put the mount outside the slot.
                refuse_links(&staged, relative)?;
                let target = staged.join(relative);
                let is_dir = std::fs::metadata(&bind.source)
                    .map_err(io(&bind.source))?
                    .is_dir();
                make_mount_point(&target, is_dir)?;
                mount_private(&bind.source, &target, bind.read_only)?;
            }
            let into = mnt.join(top);
            crate::sys::move_mount(&staged, &into).map_err(|source| PoolError::Mount {
                source_path: staged.clone(),
                target: into.clone(),
                source,
            })?;
        }
        Ok(())
    }

    /// Unmounts everything under the slot's directory (deepest first; lazily when busy).
    pub fn unmount_all(&self, id: &str) -> Result<(), PoolError> {
        let dir = self.dir(id);
        for path in crate::overlay::mount_points_under(&dir) {
            match crate::sys::unmount(&path, false) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    crate::sys::unmount(&path, true).map_err(io(&path))?;
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                other => other.map_err(io(&path))?,
            }
        }
        Ok(())
    }

    /// Removes a slot's directory after unmounting what is under it; idempotent. Only the
    /// slot's own skeleton goes (its record, and directories, each removed empty): a mount
    /// still in place, or anything else found there, stops the removal rather than being
    /// deleted through.
    pub fn remove(&self, id: &str) -> Result<(), PoolError> {
        let dir = self.dir(id);
        if !is_slot_name(id) {
            return Err(PoolError::Io {
                path: dir,
                source: std::io::Error::other("not a pool slot of this install"),
            });
        }
        if !dir.exists() {
            return Ok(());
        }
        self.unmount_all(id)?;
        let table = std::fs::read_to_string("/proc/self/mountinfo").map_err(io(&dir))?;
        if table.is_empty() || !crate::overlay::mount_points_under(&dir).is_empty() {
            return Err(PoolError::Io {
                path: dir,
                source: std::io::Error::other("still mounted (or the mount table is unreadable)"),
            });
        }
        for file in ["slot.json", "slot.json.tmp"] {
            let path = dir.join(file);
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&path)(e)),
                _ => {}
            }
        }
        remove_empty_dirs(&dir)
    }

    /// When a job last claimed from the pool of (`profile`, `repo_key`), or when the pool
    /// was last filled if later: the pool drains after its `idle` time without one.
    pub fn last_used(&self, profile: &str, repo_key: &str) -> Option<std::time::SystemTime> {
        std::fs::metadata(self.used_path(profile, repo_key))
            .and_then(|m| m.modified())
            .ok()
    }

    /// Notes a claim (or a fill) of the pool of (`profile`, `repo_key`).
    pub fn touch_used(&self, profile: &str, repo_key: &str) {
        let path = self.used_path(profile, repo_key);
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = std::fs::write(&path, b"");
    }

    fn used_path(&self, profile: &str, repo_key: &str) -> PathBuf {
        self.root
            .join(".used")
            .join(format!("{repo_key}-{profile}"))
    }
}

/// Removes `dir` and the directories under it, each only once empty (rmdir): a file, or a
/// mount point in use, stops it with an error instead of being deleted.
fn remove_empty_dirs(dir: &Path) -> Result<(), PoolError> {
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        other => other.map_err(io(dir))?,
    };
    for entry in entries {
        let entry = entry.map_err(io(dir))?;
        let path = entry.path();
        if entry.file_type().map_err(io(&path))?.is_dir() {
            remove_empty_dirs(&path)?;
        } else {
            return Err(PoolError::Io {
                path,
                source: std::io::Error::other("a file in a pool slot's skeleton: left for a look"),
            });
        }
    }
    std::fs::remove_dir(dir).map_err(io(dir))
}

/// Bind-mounts `source` at `target`, private (and read-only when asked).
fn mount_private(source: &Path, target: &Path, read_only: bool) -> Result<(), PoolError> {
    let failed = |source_error| PoolError::Mount {
        source_path: source.to_path_buf(),
        target: target.to_path_buf(),
        source: source_error,
    };
    crate::sys::bind_mount(source, target).map_err(failed)?;
    crate::sys::make_rprivate(target).map_err(failed)?;
    if read_only {
        crate::sys::remount_read_only(target).map_err(failed)?;
    }
    Ok(())
}

/// Refuses a target with a symbolic link at any component below `root`.
fn refuse_links(root: &Path, relative: &Path) -> Result<(), PoolError> {
    let mut path = root.to_path_buf();
    for component in relative.components() {
        let std::path::Component::Normal(name) = component else {
            return Err(PoolError::Io {
                path: root.join(relative),
                source: std::io::Error::other("not a plain path below the slot"),
            });
        };
        path.push(name);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(PoolError::Io {
                path,
                source: std::io::Error::other("a symbolic link where a mount would go"),
            });
        }
    }
    Ok(())
}

/// Makes an empty file or directory at `path` for a mount to land on, unless one is there.
fn make_mount_point(path: &Path, dir: bool) -> Result<(), PoolError> {
    if std::fs::symlink_metadata(path).is_ok() {
        return Ok(());
    }
    if dir {
        std::fs::create_dir_all(path).map_err(io(path))
    } else {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        std::fs::File::create(path).map(drop).map_err(io(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_on_the_way_to_a_mount_target_is_refused() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("workspace/dir")).unwrap();
        std::os::unix::fs::symlink("/etc", root.path().join("workspace/node_modules")).unwrap();
        assert!(refuse_links(root.path(), Path::new("workspace/dir/x")).is_ok());
        assert!(refuse_links(root.path(), Path::new("workspace/node_modules")).is_err());
        assert!(refuse_links(root.path(), Path::new("workspace/node_modules/a")).is_err());
        assert!(refuse_links(root.path(), Path::new("workspace/../x")).is_err());
    }

    #[test]
    fn removal_takes_only_the_skeleton_and_never_a_file_found_in_it() {
        let root = tempfile::tempdir().unwrap();
        let home = PaddockHome::open_at(root.path()).unwrap();
        let slots = PoolSlots::of(&home);
        for bad in ["..", "", "pool-", "pool-xyz", "other"] {
            assert!(slots.remove(bad).is_err(), "{bad:?} accepted");
        }
        let id = "pool-0a1b";
        for dir in [
            "mnt/workspace",
            "mnt/paddock",
            "stage/workspace",
            "paddock-root/git",
        ] {
            std::fs::create_dir_all(slots.dir(id).join(dir)).unwrap();
        }
        std::fs::write(slots.dir(id).join("slot.json"), b"{}").unwrap();
        // A job's file where only an empty mount point should be: left, and the removal fails.
        std::fs::write(slots.dir(id).join("mnt/workspace/work.txt"), b"work").unwrap();
        assert!(slots.remove(id).is_err());
        assert!(slots.dir(id).join("mnt/workspace/work.txt").exists());
        std::fs::remove_file(slots.dir(id).join("mnt/workspace/work.txt")).unwrap();
        slots.remove(id).unwrap();
        assert!(!slots.dir(id).exists());
        slots.remove(id).unwrap();
    }
}
