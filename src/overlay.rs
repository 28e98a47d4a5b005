//! Copy-on-write checkouts (`checkout: overlay`): pristine checkouts and overlay mounts.
//!
//! A pristine checkout is `$PADDOCK_HOME/pristine/<repo-key>/<commit>[-<uid>.<gid>]/`
//! holding `tree/` (the commit's files, owned by the agent's uid so that copy-up keeps the
//! owner a job would have) and `index` (see `git::pristine`). It is made once, under
//! `locks/pristine-<repo-key>-<name>.lock`, in a temporary directory renamed into place, so
//! it is whole or absent. Its directory is mode 0700 and paddock's: no agent uid can reach
//! the tree, and no container mounts it; a job sees it only as the lower layer of its
//! overlay, whose writes land in the job's own upper dir (`work/<id>/overlay/upper`, or
//! `work/<id>/overlay/layers/upper` inside the job's disk when it has a limit: `disk`).
//!
//! The records that name a pristine checkout (`JobRecord::pristine`) are its reference
//! count: a create names it in its record while holding the lock, and the sweep removes it,
//! under the same lock, only when no record names it and it was last used longer ago than
//! `sweep.pristine_max_age` (`used`, touched at each use).
//!
//! Mounts: kernel overlayfs through mount(2) when paddock is root (the source is
//! `paddock-<install tag>`, paddock's marker in the mount table), `fuse-overlayfs` otherwise.
//! A mount outlives a paddock that was killed; removal (rm, rollback, sweep) unmounts
//! before deleting, and finds mounts in `/proc/self/mountinfo`.

pub mod changes;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::git::GitRepo;
use crate::store::{FileLock, PaddockHome};

/// How long a create waits for another making the same pristine checkout.
const MAKE_WAIT: Duration = Duration::from_secs(600);
/// How long mounting or unmounting through `fuse-overlayfs`/`fusermount` may take.
const FUSE_TIMEOUT: Duration = Duration::from_secs(30);

/// What went wrong with an overlay checkout.
#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    #[error("`checkout: overlay` is not available on this machine: {reason}")]
    Unavailable { reason: String },
    #[error("cannot mount the overlay at `{path}`: {message}")]
    Mount { path: PathBuf, message: String },
    #[error("cannot unmount the overlay at `{path}`: {message}")]
    Unmount { path: PathBuf, message: String },
    #[error("pristine checkout `{path}`: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> OverlayError + '_ {
    move |source| OverlayError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Which overlay implementation mounts the checkouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::Display)]
pub enum Driver {
    /// Kernel overlayfs, mounted with mount(2) (paddock is root).
    #[strum(to_string = "kernel overlayfs")]
    Kernel,
    /// `fuse-overlayfs` (paddock is not root).
    #[strum(to_string = "fuse-overlayfs")]
    Fuse,
}

/// The driver this machine offers, or why there is none. `PADDOCK_OVERLAY_DRIVER=fuse`
/// makes root use `fuse-overlayfs` too (tests of that path).
pub fn driver() -> Result<Driver, OverlayError> {
    let unavailable = |reason: &str| OverlayError::Unavailable {
        reason: reason.to_string(),
    };
    let fuse = || -> Result<Driver, OverlayError> {
        if find_program("fuse-overlayfs").is_none() {
            return Err(unavailable(
                "not root and `fuse-overlayfs` is not installed (Debian package `fuse-overlayfs`)",
            ));
        }
        if !Path::new("/dev/fuse").exists() {
            return Err(unavailable("`/dev/fuse` is missing"));
        }
        // Without root, fuse mounts go through the setuid `fusermount3` (or `fusermount`).
        let setuid = ["fusermount3", "fusermount"]
            .into_iter()
            .filter_map(find_program)
            .any(|path| {
                std::fs::metadata(path).is_ok_and(|m| {
                    std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o4000 != 0
                })
            });
        if !crate::sys::is_root() && !setuid {
            return Err(unavailable(
                "not root and `fusermount3` is not setuid root, so fuse-overlayfs cannot mount",
            ));
        }
        Ok(Driver::Fuse)
    };
    let forced_fuse = std::env::var("PADDOCK_OVERLAY_DRIVER").as_deref() == Ok("fuse");
    if crate::sys::is_root() && !forced_fuse {
        let known = std::fs::read_to_string("/proc/filesystems").is_ok_and(|text| {
            text.lines()
                .any(|l| l.split_whitespace().last() == Some("overlay"))
        });
        if known {
            return Ok(Driver::Kernel);
        }
        return fuse().map_err(|_| unavailable("the kernel has no overlayfs"));
    }
    fuse()
}

/// Whether a job can use an overlay checkout mounted by `driver`, given why its runtime's
/// sandbox cannot open a FUSE one (`fuse_refusal`: gVisor's gofer cannot open a FUSE mount
/// as a bind source, a container needs `allow_other` ([`fuse_shares`]), virtiofsd serves
/// none). Checked at create, before anything is made.
pub fn check_sandbox(driver: Driver, fuse_refusal: Option<&str>) -> Result<(), OverlayError> {
    match (driver, fuse_refusal) {
        (Driver::Fuse, Some(reason)) => Err(OverlayError::Unavailable {
            reason: reason.to_string(),
        }),
        _ => Ok(()),
    }
}

/// Whether fuse-overlayfs may mount for other uids (`allow_other`): always as root, else
/// only where `/etc/fuse.conf` says `user_allow_other`.
pub fn fuse_shares() -> bool {
    crate::sys::is_root()
        || std::fs::read_to_string("/etc/fuse.conf").is_ok_and(|text| {
            text.lines()
                .any(|line| line.split('#').next().unwrap_or_default().trim() == "user_allow_other")
        })
}

pub(crate) fn find_program(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    })
}

/// The pristine checkouts of one install.
#[derive(Debug, Clone)]
pub struct Pristines {
    root: PathBuf,
    locks: PathBuf,
}

/// One pristine checkout found on disk.
#[derive(Debug, Clone)]
pub struct Found {
    pub dir: PathBuf,
    /// A directory a killed create left while making one.
    pub partial: bool,
    /// When a job last started from it (or it was made).
    pub used: SystemTime,
}

impl Pristines {
    pub fn of(home: &PaddockHome) -> Pristines {
        Pristines {
            root: home.root().join("pristine"),
            locks: home.locks_dir(),
        }
    }

    /// The directory of (repository, commit) checked out for `owner`.
    pub fn dir(&self, repo_key: &str, commit: &str, owner: Option<(u32, u32)>) -> PathBuf {
        let name = match owner {
            Some((uid, gid)) => format!("{commit}-{uid}.{gid}"),
            None => commit.to_string(),
        };
        self.root.join(repo_key).join(name)
    }

    /// The commit a pristine checkout's directory holds the files of (its name's first
    /// part, see [`Pristines::dir`]).
    pub fn commit_of(dir: &Path) -> Option<String> {
        let name = dir.file_name()?.to_str()?;
        let commit = name.split('-').next()?;
        (matches!(commit.len(), 40 | 64) && commit.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| commit.to_string())
    }

    fn lock_path(&self, dir: &Path) -> PathBuf {
        let key = dir
            .parent()
            .and_then(Path::file_name)
            .unwrap_or_default()
            .to_string_lossy();
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        self.locks.join(format!("pristine-{key}-{name}.lock"))
    }

    /// Takes the lock of the pristine checkout at `dir` (blocking up to `wait`).
    pub async fn lock(&self, dir: &Path, wait: Duration) -> Result<FileLock, OverlayError> {
        let path = self.lock_path(dir);
        tokio::task::spawn_blocking(move || FileLock::acquire(&path, wait))
            .await
            .map_err(|e| OverlayError::Io {
                path: dir.to_path_buf(),
                source: std::io::Error::other(e.to_string()),
            })?
            .map_err(OverlayError::from)
    }

    /// Makes the pristine checkout of `commit` unless it exists, and returns it with its
    /// lock held: the caller names it in its record before dropping the lock, so the sweep
    /// never removes one that a job is about to use.
    pub async fn ensure(
        &self,
        repo: &GitRepo,
        repo_key: &str,
        commit: &str,
        owner: Option<(u32, u32)>,
    ) -> Result<(PathBuf, FileLock), OverlayError> {
        let dir = self.dir(repo_key, commit, owner);
        let parent = dir.parent().expect("a pristine dir has a parent");
        std::fs::create_dir_all(parent).map_err(io(parent))?;
        let lock = self.lock(&dir, MAKE_WAIT).await?;
        if !(dir.join("tree").is_dir() && dir.join("index").is_file()) {
            let name = dir.file_name().unwrap_or_default().to_string_lossy();
            // Holding the lock, any partial one of this name is a killed create's.
            let partial = parent.join(format!(".tmp-{name}"));
            remove_tree(&partial)?;
            remove_tree(&dir)?;
            crate::git::pristine::make(repo, commit, &partial, owner).await?;
            // paddock's alone from here: no agent uid reaches the tree but through an overlay.
            set_mode(&partial, 0o700)?;
            std::fs::rename(&partial, &dir).map_err(io(&dir))?;
        }
        let used = dir.join("used");
        std::fs::write(&used, b"").map_err(io(&used))?;
        Ok((dir, lock))
    }

    /// Every pristine checkout (and partial one) on disk.
    pub fn list(&self) -> Vec<Found> {
        let mut found = Vec::new();
        let Ok(keys) = std::fs::read_dir(&self.root) else {
            return found;
        };
        for key in keys.flatten() {
            let Ok(entries) = std::fs::read_dir(key.path()) else {
                continue;
            };
            for entry in entries.flatten() {
                let dir = entry.path();
                let partial = entry.file_name().to_string_lossy().starts_with(".tmp-");
                let used = std::fs::metadata(dir.join("used"))
                    .or_else(|_| std::fs::symlink_metadata(&dir))
                    .and_then(|m| m.modified())
                    .unwrap_or(SystemTime::UNIX_EPOCH);
                found.push(Found { dir, partial, used });
            }
        }
        found
    }

    /// The pristine checkout that a partial directory would become.
    pub fn completed_name(partial: &Path) -> PathBuf {
        let name = partial.file_name().unwrap_or_default().to_string_lossy();
        partial.with_file_name(name.trim_start_matches(".tmp-"))
    }

    /// Removes a pristine checkout (or partial one); the caller holds its lock.
    pub fn remove(&self, dir: &Path) -> Result<(), OverlayError> {
        if !dir.starts_with(&self.root) {
            return Err(OverlayError::Io {
                path: dir.to_path_buf(),
                source: std::io::Error::other("not under the pristine root"),
            });
        }
        remove_tree(dir)
    }
}

fn remove_tree(dir: &Path) -> Result<(), OverlayError> {
    match crate::tree::remove_tree(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(dir)(e)),
        _ => Ok(()),
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<(), OverlayError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io(path))
}

/// The directory of a job's own layers: `work/<id>/overlay/`, holding `upper` (the job's
/// changes) and `work` (overlayfs' scratch space). With a disk limit they live one level
/// down, in the job's disk (`overlay/layers/`, see `disk`).
pub fn layers_dir(job_dir: &Path) -> PathBuf {
    job_dir.join("overlay")
}

/// Mounts `lower` (a pristine tree) with the layers in `layers` (see [`layers_dir`]) at
/// `target`, whose root (the upper dir) belongs to `owner`. With `shared`, uids other than
/// paddock's open the checkout (a container engine running as root, the agent's uid), which
/// a FUSE mount refuses unless mounted `allow_other` (see [`fuse_shares`]).
pub async fn mount(
    driver: Driver,
    home: &PaddockHome,
    lower: &Path,
    layers: &Path,
    target: &Path,
    owner: Option<(u32, u32)>,
    shared: bool,
) -> Result<(), OverlayError> {
    let (upper, work) = (layers.join("upper"), layers.join("work"));
    for dir in [&upper, &work, &target.to_path_buf()] {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(&upper, Some(uid), Some(gid)).map_err(io(&upper))?;
    }
    for path in [lower, &upper, &work] {
        let text = path.to_string_lossy();
        if text.contains([',', ':', '\\']) || text.contains('\n') {
            return Err(OverlayError::Mount {
                path: target.to_path_buf(),
                message: format!("`{text}` has a character overlay options cannot carry"),
            });
        }
    }
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    );
    let failed = |message: String| OverlayError::Mount {
        path: target.to_path_buf(),
        message,
    };
    match driver {
        Driver::Kernel => crate::sys::mount_overlay(&marker(home), target, &options)
            .map_err(|e| failed(e.to_string())),
        Driver::Fuse => {
            let mut command = tokio::process::Command::new("fuse-overlayfs");
            // The kernel still checks every access against the files' modes; the checkout
            // sits below the state root, which only paddock's user can enter.
            let options = if shared {
                format!("{options},allow_other,default_permissions")
            } else {
                options
            };
            command.arg("-o").arg(&options).arg(target);
            run_helper(command, target).await.map_err(failed)
        }
    }
}

/// The mount table's source of paddock's overlays (one install's).
fn marker(home: &PaddockHome) -> String {
    format!("paddock-{}", home.tag())
}

/// Runs a helper program (`fuse-overlayfs`, `fusermount`, `mkfs.ext4`) about `target`, with
/// a deadline; its stderr is the error.
pub(crate) async fn run_helper(
    mut command: tokio::process::Command,
    target: &Path,
) -> Result<(), String> {
    command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(FUSE_TIMEOUT, command.output())
        .await
        .map_err(|_| {
            format!(
                "no answer in {}s at `{}`",
                FUSE_TIMEOUT.as_secs(),
                target.display()
            )
        })?
        .map_err(|e| e.to_string())?;
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).trim().to_string())
    }
}

/// One overlay mount found in the mount table.
#[derive(Debug, Clone, PartialEq)]
pub struct Mounted {
    pub path: PathBuf,
    pub fstype: String,
}

/// Every mount at or under `root` (any type), deepest first.
pub fn mount_table_under(root: &Path) -> Vec<Mounted> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<Mounted> = text
        .lines()
        .filter_map(parse_mountinfo)
        .filter(|m| m.path.starts_with(root))
        .collect();
    found.sort_by_key(|m| std::cmp::Reverse(m.path.components().count()));
    found
}

/// The overlay mounts (kernel or fuse) at or under `root`, deepest first.
pub fn mounts_under(root: &Path) -> Vec<Mounted> {
    let mut found = mount_table_under(root);
    found.retain(|m| m.fstype == "overlay" || m.fstype == "fuse.fuse-overlayfs");
    found
}

/// Every mount point (of any type) at or under `root`, deepest first.
pub fn mount_points_under(root: &Path) -> Vec<PathBuf> {
    mount_table_under(root)
        .into_iter()
        .map(|m| m.path)
        .collect()
}

/// Whether an overlay is mounted at `path`.
pub fn is_mounted(path: &Path) -> bool {
    mounts_under(path).iter().any(|m| m.path == path)
}

fn parse_mountinfo(line: &str) -> Option<Mounted> {
    let (before, after) = line.split_once(" - ")?;
    let mount_point = before.split(' ').nth(4)?;
    let fstype = after.split(' ').next()?;
    Some(Mounted {
        path: PathBuf::from(unescape(mount_point)),
        fstype: fstype.to_string(),
    })
}

/// The kernel writes space, tab, newline and backslash in mount points as `\ooo`.
fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && let Some(code) = text
                .get(i + 1..i + 4)
                .and_then(|o| u8::from_str_radix(o, 8).ok())
        {
            out.push(code);
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Unmounts every overlay at `path` (a crash between two mounts may have stacked two);
/// lazily when the mount is busy (a process still inside: the directories go anyway).
pub async fn unmount(path: &Path) -> Result<(), OverlayError> {
    for _ in 0..4 {
        let Some(mounted) = mounts_under(path).into_iter().find(|m| m.path == path) else {
            return Ok(());
        };
        let failed = |message: String| OverlayError::Unmount {
            path: path.to_path_buf(),
            message,
        };
        if crate::sys::is_root() {
            match crate::sys::unmount(path, false) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    crate::sys::unmount(path, true).map_err(|e| failed(e.to_string()))?;
                }
                other => other.map_err(|e| failed(e.to_string()))?,
            }
        } else if mounted.fstype.starts_with("fuse") {
            let program = find_program("fusermount3").map_or("fusermount".into(), PathBuf::from);
            let mut command = tokio::process::Command::new(program);
            command.arg("-u").arg("-z").arg(path);
            run_helper(command, path).await.map_err(failed)?;
        } else {
            return Err(failed("a kernel overlay needs root to unmount".into()));
        }
    }
    if is_mounted(path) {
        return Err(OverlayError::Unmount {
            path: path.to_path_buf(),
            message: "still mounted".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_give_mount_point_and_type() {
        let line =
            "36 35 0:40 / /tmp/a\\040b rw,relatime shared:1 - overlay paddock-1234 rw,lowerdir=/x";
        assert_eq!(
            parse_mountinfo(line),
            Some(Mounted {
                path: PathBuf::from("/tmp/a b"),
                fstype: "overlay".into()
            })
        );
    }
}
