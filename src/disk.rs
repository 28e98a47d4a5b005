//! Per-job disks: what a job can write on the host lands in a filesystem of its own, so
//! writing past its size fails inside the job with ENOSPC while the host and other jobs keep
//! their space.
//!
//! The mechanism (root only): a sparse image file `work/<id>/overlay/disk.img`, formatted
//! ext4 (`mkfs.ext4`, lazy inode tables and journal: milliseconds), attached to a loop
//! device with autoclear and mounted at `work/<id>/overlay/layers/` with `discard`, so a file
//! the job deletes gives its blocks back to the host (the image is only ever as large on the
//! host as what the job holds, at most its size). Two uses of the one mechanism:
//! - a disk limit (`disk: 10g`, `--disk`; `record.disk`): the overlay's upper and work dirs
//!   (`layers/upper`, `layers/work`), the job's git dir (`layers/git`) and its outbox
//!   (`layers/outbox`) all live in it, so one limit covers everything the job writes. It
//!   needs `checkout: overlay`; ext4's journal and metadata take a few percent of it.
//! - without a limit, a container job made as root gets a git disk (`git_disk: 2g`;
//!   `record.git_disk`) holding only its git dir and outbox; its checkout stays unbounded.
//!
//! Which layout a job has is read from its record (its `git_dir` is under `layers/` or not),
//! never from a global rule: records made before the git dir moved keep theirs at
//! `work/<id>/git`. Without root there are no loop devices: nothing is capped (`doctor`
//! says so).
//!
//! Invariants: the disk is mounted before the job's git dir is written (the create makes it
//! first). The loop device belongs to the mount (autoclear), so unmounting frees it and a
//! killed paddock leaves at most a mount, which removal (rm, rollback, the sweep) finds in
//! the mount table and unmounts after the overlay above it and before deleting the job dir.

use std::path::{Path, PathBuf};

use crate::units::ByteSize;

/// The smallest limit: room for ext4's own journal and metadata and a checkout's changes.
pub const MIN_LIMIT: u64 = 16 << 20;
/// The mechanism, as `doctor` and the docs name it.
pub const MECHANISM: &str = "loop-mounted ext4 image per job";
/// Options of the job's filesystem: blocks of deleted files go back to the host at once;
/// the inode tables are not zeroed in the background (a fresh image reads as zeros anyway,
/// and zeroing would allocate them on the host).
const MOUNT_OPTIONS: &str = "discard,noinit_itable";

/// What went wrong with a job's disk limit.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("a disk limit is not available on this machine: {reason}")]
    Unavailable { reason: String },
    #[error("a disk limit needs the overlay checkout, but {set_by} asks for a worktree checkout")]
    NeedsOverlay { set_by: String },
    #[error("{what} `{limit}` is too small: the least is 16m")]
    TooSmall { what: &'static str, limit: ByteSize },
    #[error("cannot make the job's disk `{path}`: {message}")]
    Make { path: PathBuf, message: String },
    #[error("cannot unmount the job's disk at `{path}`: {message}")]
    Unmount { path: PathBuf, message: String },
}

/// A job's disk limit and how much of it the job's checkout holds (`show`, the `disk` of a
/// job's JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DiskUsage {
    /// The limit: the size of the job's filesystem.
    pub limit_bytes: u64,
    /// What the job's changes take; null while the disk is not mounted (the job is queued,
    /// being created, or being removed).
    pub used_bytes: Option<u64>,
    /// What the job may still write: the limit less ext4's own journal and metadata, less
    /// `used_bytes`.
    pub free_bytes: Option<u64>,
}

impl DiskUsage {
    /// A disk of `limit` whose usage is not known (not mounted, or not looked at).
    pub fn unmounted(limit: ByteSize) -> DiskUsage {
        DiskUsage {
            limit_bytes: limit.0,
            used_bytes: None,
            free_bytes: None,
        }
    }
}

/// Whether this machine can give jobs a disk limit: root (loop devices and mounts), the
/// loop driver, ext4 and `mkfs.ext4`. Returns `mkfs.ext4`'s path.
pub fn available() -> Result<PathBuf, DiskError> {
    let unavailable = |reason: &str| DiskError::Unavailable {
        reason: reason.to_string(),
    };
    if !crate::sys::is_root() {
        return Err(unavailable(
            "paddock is not root, and loop devices and mounts need root",
        ));
    }
    if !Path::new("/dev/loop-control").exists() {
        return Err(unavailable(
            "`/dev/loop-control` is missing (the kernel's loop driver: `modprobe loop`)",
        ));
    }
    let ext4 = std::fs::read_to_string("/proc/filesystems").is_ok_and(|text| {
        text.lines()
            .any(|l| l.split_whitespace().last() == Some("ext4"))
    });
    if !ext4 {
        return Err(unavailable("the kernel has no ext4"));
    }
    mkfs().ok_or_else(|| unavailable("`mkfs.ext4` is not installed (Debian package `e2fsprogs`)"))
}

/// `mkfs.ext4` on PATH, or in the sbin directories a non-login root shell may lack.
fn mkfs() -> Option<PathBuf> {
    crate::overlay::find_program("mkfs.ext4").or_else(|| {
        ["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"]
            .into_iter()
            .map(PathBuf::from)
            .find(|path| path.is_file())
    })
}

/// Refuses a limit too small to hold a filesystem.
pub fn check_limit(limit: ByteSize) -> Result<(), DiskError> {
    check_size("disk limit", limit)
}

/// Refuses a disk of `size` too small to hold a filesystem; `what` names the setting.
pub fn check_size(what: &'static str, size: ByteSize) -> Result<(), DiskError> {
    if size.0 < MIN_LIMIT {
        return Err(DiskError::TooSmall { what, limit: size });
    }
    Ok(())
}

/// The image file of a job's disk.
pub fn image_path(job_dir: &Path) -> PathBuf {
    crate::overlay::layers_dir(job_dir).join("disk.img")
}

/// Where a job's disk is mounted (the overlay's layers dir when the job has a limit; the
/// name stays for a git disk, so removal and the sweep find every disk at one place).
pub fn layers_dir(job_dir: &Path) -> PathBuf {
    crate::overlay::layers_dir(job_dir).join("layers")
}

/// The job's git dir when it lives on the job's disk (its outbox is beside it).
pub fn git_dir(job_dir: &Path) -> PathBuf {
    layers_dir(job_dir).join("git")
}

/// Makes the job's disk of `limit` bytes and mounts it at [`layers_dir`], which it returns.
/// Its root stays root's and 0755: the agent gets only the dirs paddock makes in it.
pub async fn make(job_dir: &Path, limit: ByteSize) -> Result<PathBuf, DiskError> {
    let image = image_path(job_dir);
    let layers = layers_dir(job_dir);
    let failed = |message: String| DiskError::Make {
        path: image.clone(),
        message,
    };
    let mkfs = available()?;
    std::fs::create_dir_all(&layers).map_err(|e| failed(e.to_string()))?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&image)
        .map_err(|e| failed(e.to_string()))?;
    // Sparse: the host gives blocks only as the job writes them.
    file.set_len(limit.0).map_err(|e| failed(e.to_string()))?;
    let mut command = tokio::process::Command::new(mkfs);
    command
        .args(["-q", "-F", "-m", "0", "-E"])
        .arg("lazy_itable_init=1,lazy_journal_init=1")
        .arg(&image);
    crate::overlay::run_helper(command, &image)
        .await
        .map_err(|e| failed(format!("mkfs.ext4: {e}")))?;
    attach(&file, &image, &layers)?;
    Ok(layers)
}

/// Attaches `image` (open as `file`) to a free loop device and mounts it at `layers`.
fn attach(file: &std::fs::File, image: &Path, layers: &Path) -> Result<(), DiskError> {
    let device = crate::sys::loop_attach(file, image).map_err(|e| DiskError::Make {
        path: image.to_path_buf(),
        message: format!("loop device: {e}"),
    })?;
    mount(device, image, layers)
}

/// Mounts the ext4 of `image` from its loop device `device` at `layers`.
fn mount(device: crate::sys::LoopDevice, image: &Path, layers: &Path) -> Result<(), DiskError> {
    crate::sys::mount_device(&device.path, layers, "ext4", MOUNT_OPTIONS).map_err(|e| {
        DiskError::Make {
            path: image.to_path_buf(),
            message: format!(
                "mounting {} at {}: {e}",
                device.path.display(),
                layers.display()
            ),
        }
    })?;
    // The mount holds the device now; dropping ours arms its autoclear.
    drop(device);
    Ok(())
}

/// Mounts a job's disk again where only its image is left (a reboot keeps the image, not
/// the mount): without it the job's container would see the empty mount point as its git
/// dir. Returns whether it mounted anything; a mounted disk or a job without an image is
/// left as it is.
pub fn remount(job_dir: &Path) -> Result<bool, DiskError> {
    let image = image_path(job_dir);
    if is_mounted(job_dir) || !image.is_file() {
        return Ok(false);
    }
    available()?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&image)
        .map_err(|e| DiskError::Make {
            path: image.clone(),
            message: e.to_string(),
        })?;
    // A filesystem that another mount namespace still holds is mounted again from its own
    // device (see `loop_backed_by`); only a disk no device holds gets a new one.
    let held = crate::sys::loop_backed_by(&file, &image).map_err(|e| DiskError::Make {
        path: image.clone(),
        message: format!("looking for its loop device: {e}"),
    })?;
    match held {
        Some(device) => mount(device, &image, &layers_dir(job_dir))?,
        None => attach(&file, &image, &layers_dir(job_dir))?,
    }
    Ok(true)
}

/// Whether a job's disk is mounted.
pub fn is_mounted(job_dir: &Path) -> bool {
    let layers = layers_dir(job_dir);
    crate::overlay::mount_table_under(&layers)
        .iter()
        .any(|m| m.path == layers)
}

/// The usage of the job's disk of `limit` (statvfs of its mount; unknown when it is not
/// mounted).
pub fn usage(job_dir: &Path, limit: ByteSize) -> DiskUsage {
    let mounted = is_mounted(job_dir)
        .then(|| crate::sys::fs_usage(&layers_dir(job_dir)))
        .flatten();
    DiskUsage {
        limit_bytes: limit.0,
        used_bytes: mounted.map(|usage| usage.used),
        free_bytes: mounted.map(|usage| usage.available),
    }
}

/// Unmounts the job's disk (every mount at [`layers_dir`]), lazily when it is busy (an
/// overlay above it lazily unmounted, a process still inside): the device then goes when
/// its last user does. The overlay at the checkout must be unmounted first.
pub fn unmount(job_dir: &Path) -> Result<(), DiskError> {
    let layers = layers_dir(job_dir);
    let failed = |message: String| DiskError::Unmount {
        path: layers.clone(),
        message,
    };
    for _ in 0..4 {
        if !is_mounted(job_dir) {
            return Ok(());
        }
        match crate::sys::unmount(&layers, false) {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                crate::sys::unmount(&layers, true).map_err(|e| failed(e.to_string()))?;
            }
            other => other.map_err(|e| failed(e.to_string()))?,
        }
    }
    if is_mounted(job_dir) {
        return Err(failed("still mounted".into()));
    }
    Ok(())
}

/// The job dirs directly under `jobs_dir` (`work/` or the older `jobs/`) with a disk mounted (the sweep's look for leftovers).
pub fn mounted_job_dirs(jobs_dir: &Path) -> Vec<PathBuf> {
    crate::overlay::mount_table_under(jobs_dir)
        .into_iter()
        .filter_map(|m| {
            let job_dir = m.path.parent()?.parent()?.to_path_buf();
            (job_dir.parent() == Some(jobs_dir) && m.path == layers_dir(&job_dir))
                .then_some(job_dir)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_under_the_least_are_refused() {
        assert!(check_limit(ByteSize(MIN_LIMIT)).is_ok());
        let error = check_limit(ByteSize(1 << 20)).unwrap_err().to_string();
        assert_eq!(error, "disk limit `1m` is too small: the least is 16m");
    }

    #[test]
    fn the_disk_lives_in_the_overlay_dir() {
        let job = Path::new("/h/jobs/j1");
        assert_eq!(image_path(job), Path::new("/h/jobs/j1/overlay/disk.img"));
        assert_eq!(layers_dir(job), Path::new("/h/jobs/j1/overlay/layers"));
        assert_eq!(git_dir(job), Path::new("/h/jobs/j1/overlay/layers/git"));
    }
}
