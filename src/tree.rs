//! Removing and measuring trees an agent made, without recursion.
//!
//! A job's git dir, outbox, checkout and overlay upper dir are written by the agent, which can
//! make a directory chain 100,000 levels deep. `std::fs::remove_dir_all` recurses once per
//! level: on a 2 MiB tokio worker stack that aborted the whole daemon (a stack overflow is
//! not a panic; nothing catches it). Paths that deep are also far past `PATH_MAX`, so every
//! step here is relative to an open directory (`openat`, `unlinkat`), and the way down is
//! an explicit stack of names, not the call stack. At most two directories are open at a
//! time, so depth costs memory (a name per level), never descriptors.
//!
//! Nothing here follows a symlink: directories are opened with `O_NOFOLLOW | O_DIRECTORY`,
//! links are unlinked as entries. The way back up goes through `..`, checked against the
//! device and inode remembered on the way down, so a tree moved under the removal is
//! refused instead of followed somewhere else.
//!
//! These calls block; async code runs them through [`remove_tree_async`] (a blocking
//! thread), never on a runtime worker.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

/// Removes `path` and everything below it, never following a symlink; `path` itself may be
/// a file or a link (then only it goes). `NotFound` when `path` does not exist.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        return std::fs::remove_file(path);
    }
    let root = open_dir(rustix::fs::CWD, path)?;
    empty_dir(root)?;
    match std::fs::remove_dir(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// [`remove_tree`] on a blocking thread, retried for a few seconds while the tree is not
/// empty (a create that was killed can leave git's checkout workers finishing their batch
/// for a moment: they outlive their killed parent).
pub async fn remove_tree_async(path: &Path) -> io::Result<()> {
    let mut tries = 0;
    loop {
        let owned: PathBuf = path.to_path_buf();
        let result = tokio::task::spawn_blocking(move || remove_tree(&owned))
            .await
            .map_err(io::Error::other)?;
        match result {
            Err(error) if error.kind() == io::ErrorKind::DirectoryNotEmpty && tries < 50 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// Total apparent size of the regular files below `path`, never following a symlink, with
/// no recursion (one open directory at a time; the way back up is `..`); 0 when it cannot
/// be read.
pub fn size(path: &Path) -> u64 {
    sizes(path).apparent
}

/// What the regular files of a tree take: the bytes a reader would read (`apparent`) and
/// the bytes their blocks hold (`allocated`). Far more of the first than of the second is a
/// tree of sparse files, which a copy would write out in full.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeSizes {
    pub apparent: u64,
    pub allocated: u64,
}

/// The [`TreeSizes`] of the regular files below `path`, walked as [`size`] does.
pub fn sizes(path: &Path) -> TreeSizes {
    let Ok(mut current) = open_dir(rustix::fs::CWD, path) else {
        return std::fs::symlink_metadata(path).map_or(TreeSizes::default(), |m| TreeSizes {
            apparent: m.len(),
            allocated: std::os::unix::fs::MetadataExt::blocks(&m).saturating_mul(512),
        });
    };
    let mut total = TreeSizes::default();
    // Per level: the subdirectories not yet visited.
    let mut levels = vec![scan(&current, &mut total)];
    while let Some(top) = levels.last_mut() {
        if let Some(name) = top.pop() {
            if let Ok(child) = open_dir(&current, name.as_c_str()) {
                current = child;
                levels.push(scan(&current, &mut total));
            }
            continue;
        }
        levels.pop();
        if levels.is_empty() {
            break;
        }
        match open_dir(&current, c"..") {
            Ok(parent) => current = parent,
            Err(_) => break,
        }
    }
    total
}

/// Adds the sizes of the regular files in `dir` to `total`; returns its subdirectories.
fn scan(dir: &OwnedFd, total: &mut TreeSizes) -> Vec<CString> {
    let mut subdirs = Vec::new();
    let Ok(entries) = Dir::read_from(dir) else {
        return subdirs;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if is_dot(name) {
            continue;
        }
        let Ok(stat) = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) else {
            continue;
        };
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => subdirs.push(name.to_owned()),
            FileType::RegularFile => {
                let apparent = u64::try_from(stat.st_size).unwrap_or(0);
                let blocks = u64::try_from(stat.st_blocks).unwrap_or(0);
                total.apparent = total.apparent.saturating_add(apparent);
                total.allocated = total.allocated.saturating_add(blocks.saturating_mul(512));
            }
            _ => {}
        }
    }
    subdirs
}

fn is_dot(name: &CStr) -> bool {
    matches!(name.to_bytes(), b"." | b"..")
}

fn open_dir<Fd: AsFd, P: rustix::path::Arg>(dir: Fd, name: P) -> io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(dir, name, flags, Mode::empty())?)
}

/// Makes a directory of ours that the agent made unreadable (mode 0, same uid) usable
/// again. As root this is never needed. `dir` is already open (no path is resolved again).
fn allow_owner(dir: &OwnedFd) -> io::Result<()> {
    Ok(rustix::fs::fchmod(dir, Mode::RWXU)?)
}

/// Opens `name` in `parent` as a directory; one the agent made unreadable is opened as a
/// path first (`O_PATH` needs no read right), given back its owner's rights through
/// `/proc/self/fd`, then opened.
fn open_child(parent: &OwnedFd, name: &CStr) -> io::Result<OwnedFd> {
    match open_dir(parent, name) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let handle = rustix::fs::openat(parent, name, flags, Mode::empty())?;
            let through = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&handle));
            rustix::fs::chmod(through.as_str(), Mode::RWXU)?;
            open_dir(&handle, c".")
        }
        other => other,
    }
}

/// Empties the open directory `root` depth-first with an explicit stack.
fn empty_dir(root: OwnedFd) -> io::Result<()> {
    // Per level below `root`: the parent's (dev, ino) and this directory's name in it.
    let mut way_down: Vec<(u64, u64, CString)> = Vec::new();
    let mut current = root;
    loop {
        match first_subdir_after_clearing(&current)? {
            Some(name) => {
                let child = open_child(&current, &name)?;
                let here = rustix::fs::fstat(&current)?;
                way_down.push((here.st_dev, here.st_ino, name));
                current = child;
            }
            None => {
                let Some((dev, ino, name)) = way_down.pop() else {
                    return Ok(());
                };
                let parent = open_dir(&current, c"..")?;
                let there = rustix::fs::fstat(&parent)?;
                if (there.st_dev, there.st_ino) != (dev, ino) {
                    return Err(io::Error::other(
                        "a directory was moved while its tree was being removed",
                    ));
                }
                drop(current);
                match rustix::fs::unlinkat(&parent, name.as_c_str(), AtFlags::REMOVEDIR) {
                    Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                    Err(e) => return Err(e.into()),
                }
                current = parent;
            }
        }
    }
}

/// Unlinks every entry of `dir` that is not a directory, up to its first subdirectory,
/// whose name it returns; `None` when `dir` is now empty.
fn first_subdir_after_clearing(dir: &OwnedFd) -> io::Result<Option<CString>> {
    let mut granted = false;
    loop {
        let entries = Dir::read_from(dir)?;
        let mut denied = false;
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            if is_dot(name) {
                continue;
            }
            let is_dir = match entry.file_type() {
                FileType::Directory => true,
                FileType::Unknown => {
                    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                        Ok(stat) => FileType::from_raw_mode(stat.st_mode) == FileType::Directory,
                        Err(rustix::io::Errno::NOENT) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                _ => false,
            };
            if is_dir {
                return Ok(Some(name.to_owned()));
            }
            match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(rustix::io::Errno::ACCESS | rustix::io::Errno::PERM) if !granted => {
                    denied = true;
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if !denied {
            return Ok(None);
        }
        // A directory the agent made read-only (its own uid): give the owner write back.
        allow_owner(dir)?;
        granted = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain of `depth` directories named `d` below `root`, made relative to open
    /// directories (the path is far longer than PATH_MAX), with a file at the bottom.
    fn chain(root: &Path, depth: usize) {
        let mut dir = open_dir(rustix::fs::CWD, root).expect("root opens");
        for _ in 0..depth {
            rustix::fs::mkdirat(&dir, c"d", Mode::RWXU).expect("mkdir");
            dir = open_dir(&dir, c"d").expect("open");
        }
        let file = rustix::fs::openat(
            &dir,
            c"f",
            OFlags::CREATE | OFlags::WRONLY | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )
        .expect("file");
        rustix::io::write(&file, b"hello").expect("write");
    }

    #[test]
    fn removes_a_chain_of_100000_levels_on_a_small_stack() {
        let tmp = tempfile::tempdir().expect("tmp");
        let root = tmp.path().join("deep");
        std::fs::create_dir(&root).expect("mkdir");
        chain(&root, 100_000);
        assert_eq!(size(&root), 5);
        // A small stack: recursion of any kind would overflow it.
        let target = root.clone();
        std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || remove_tree(&target))
            .expect("thread")
            .join()
            .expect("no panic")
            .expect("removed");
        assert!(!root.exists());
    }

    #[test]
    fn removes_many_entries_links_and_unreadable_dirs_without_following_links() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir().expect("tmp");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(outside.join("keep"), "x").expect("write");
        let root = tmp.path().join("tree");
        for i in 0..50 {
            let dir = root.join(format!("d{i}"));
            std::fs::create_dir_all(&dir).expect("mkdir");
            for j in 0..200 {
                std::fs::write(dir.join(format!("f{j}")), "x").expect("write");
            }
        }
        std::os::unix::fs::symlink(&outside, root.join("link")).expect("link");
        std::os::unix::fs::symlink(&outside, root.join("d3/link")).expect("link");
        let locked = root.join("d7/locked");
        std::fs::create_dir_all(locked.join("inner")).expect("mkdir");
        std::fs::write(locked.join("inner/f"), "x").expect("write");
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).expect("chmod");
        std::fs::set_permissions(root.join("d9"), std::fs::Permissions::from_mode(0o500))
            .expect("chmod");
        assert_eq!(size(&root), 50 * 200 + size(&locked));
        remove_tree(&root).expect("removed");
        assert!(!root.exists());
        assert!(outside.join("keep").exists(), "a link was followed");
        assert!(matches!(
            remove_tree(&root).map_err(|e| e.kind()),
            Err(io::ErrorKind::NotFound)
        ));
    }

    #[test]
    fn a_file_or_a_link_is_removed_alone() {
        let tmp = tempfile::tempdir().expect("tmp");
        let target = tmp.path().join("target");
        std::fs::create_dir(&target).expect("mkdir");
        std::fs::write(target.join("f"), "x").expect("write");
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&target, &link).expect("link");
        remove_tree(&link).expect("removed");
        assert!(target.join("f").exists());
        remove_tree(&target.join("f")).expect("removed");
        assert!(!target.join("f").exists());
    }
}
