//! What an overlay job changed, read from its upper dir: the paths a checkpoint or a restore
//! has to look at, so their work is in proportion to what the agent changed rather than to
//! the repository (issue 43's targets on a 50,000-file checkout).
//!
//! An overlay's upper dir holds an entry for every path whose merged view differs from the
//! lower layer (the job's pristine checkout): files written, copied up on any change of data
//! or metadata, or made; whiteouts for paths deleted (a character device 0/0, or with
//! `fuse-overlayfs` a `.wh.NAME` file); directories, opaque when they replaced a deleted one
//! (an xattr, or a `.wh..wh..opq` entry). Every other path of the merged view is the lower
//! layer's, exactly as the pristine index describes it.
//!
//! The upper dir is the agent's: this module reads names, types and sizes only, never a
//! file's contents, beneath descriptors opened with `O_NOFOLLOW` (as `tree` does), and gives
//! up (`Unsuited`, the caller then takes the full walk it would have taken anyway) past a
//! depth, an entry count, a path length or a size, or at anything it does not understand.
//! It never fails the operation: the answer is a hint, the full walk is always right.

use std::ffi::{CStr, CString};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

/// How far a walk goes before it leaves the job to the full walk.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Entries looked at in all.
    pub entries: u64,
    /// Directory levels below the top.
    pub depth: usize,
    /// Bytes of a path relative to the top (git names every path from the top).
    pub path_bytes: usize,
    /// Apparent bytes of the regular files in the upper dir (a sparse file counts whole).
    pub bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            entries: 100_000,
            depth: 64,
            path_bytes: 2048,
            bytes: crate::git::sync::MAX_CHECKPOINT_BYTES,
        }
    }
}

/// The paths an overlay job changed, as git pathspecs relative to its checkout's top.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Files, links and whiteouts by their own path; a directory the lower layer lacks (or
    /// hides, opaque) by its path alone, since everything below it is the job's.
    pub paths: Vec<Vec<u8>>,
    /// Apparent bytes of the regular files in the upper dir.
    pub bytes: u64,
}

impl Changes {
    /// The paths NUL-separated, as `git … --pathspec-from-file --pathspec-file-nul` reads.
    pub fn nul_separated(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.paths.iter().map(|p| p.len() + 1).sum());
        for path in &self.paths {
            out.extend_from_slice(path);
            out.push(0);
        }
        out
    }
}

/// What a walk found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Walked {
    Changes(Changes),
    /// The full walk is the way (the reason, for the log).
    Unsuited(String),
}

/// One directory on the way down: its descriptors in both layers and its relative path.
struct Frame {
    upper: OwnedFd,
    /// The lower layer's directory of the same path, if it has one.
    lower: Option<OwnedFd>,
    path: Vec<u8>,
    /// Below a directory already named whole: nothing below is named again.
    covered: bool,
    subdirs: Vec<CString>,
}

/// Walks `upper` (a job's upper dir) against `lower` (its pristine tree); see the module docs.
pub fn walk(upper: &Path, lower: &Path, limits: Limits) -> Walked {
    match walk_inner(upper, lower, limits) {
        Ok(walked) => walked,
        Err(error) => Walked::Unsuited(format!("reading the upper dir: {error}")),
    }
}

fn walk_inner(upper: &Path, lower: &Path, limits: Limits) -> std::io::Result<Walked> {
    let mut found = Changes::default();
    let mut entries = 0u64;
    let root = open_dir(rustix::fs::CWD, upper)?;
    if opaque(&root) {
        return Ok(Walked::Unsuited("the upper dir's top is opaque".into()));
    }
    let mut stack = vec![Frame {
        upper: root,
        lower: open_dir(rustix::fs::CWD, lower).ok(),
        path: Vec::new(),
        covered: false,
        subdirs: Vec::new(),
    }];
    let top = stack.last_mut().expect("just pushed");
    if let Some(why) = scan(top, &mut found, &mut entries, limits)? {
        return Ok(Walked::Unsuited(why));
    }
    while let Some(frame) = stack.last_mut() {
        let Some(name) = frame.subdirs.pop() else {
            stack.pop();
            continue;
        };
        if stack.len() > limits.depth {
            return Ok(Walked::Unsuited(format!(
                "a directory over {} levels deep",
                limits.depth
            )));
        }
        let frame = stack.last().expect("a frame is open");
        let child_path = join(&frame.path, name.as_bytes());
        let upper_child = open_dir(&frame.upper, name.as_c_str())?;
        let lower_child = frame
            .lower
            .as_ref()
            .and_then(|l| open_dir(l, name.as_c_str()).ok());
        // A directory the lower layer lacks, or one that hides the lower's (opaque), is the
        // job's whole: git looks at all of it, which is all in the upper dir.
        let whole = !frame.covered && (lower_child.is_none() || opaque(&upper_child));
        if whole {
            found.paths.push(child_path.clone());
        }
        let mut child = Frame {
            upper: upper_child,
            lower: lower_child,
            path: child_path,
            covered: frame.covered || whole,
            subdirs: Vec::new(),
        };
        if let Some(why) = scan(&mut child, &mut found, &mut entries, limits)? {
            return Ok(Walked::Unsuited(why));
        }
        stack.push(child);
    }
    Ok(Walked::Changes(found))
}

/// Reads one directory of the upper dir: its non-directories become paths (unless covered),
/// its subdirectories are kept for the walk. `Some(reason)` when a limit is past.
fn scan(
    frame: &mut Frame,
    found: &mut Changes,
    entries: &mut u64,
    limits: Limits,
) -> std::io::Result<Option<String>> {
    for entry in Dir::read_from(&frame.upper)? {
        let entry = entry?;
        let name = entry.file_name();
        if matches!(name.to_bytes(), b"." | b"..") {
            continue;
        }
        *entries += 1;
        if *entries > limits.entries {
            return Ok(Some(format!("over {} entries changed", limits.entries)));
        }
        let bytes = name.to_bytes();
        let path = join(&frame.path, bytes);
        if path.len() >= limits.path_bytes {
            return Ok(Some(format!(
                "a path of {} bytes or more",
                limits.path_bytes
            )));
        }
        let stat = rustix::fs::statat(&frame.upper, name, AtFlags::SYMLINK_NOFOLLOW)?;
        let kind = FileType::from_raw_mode(stat.st_mode);
        if kind == FileType::Directory {
            frame.subdirs.push(name.to_owned());
            continue;
        }
        if frame.path.is_empty() && bytes == b".git" {
            // The checkout's `.git` link is paddock's; git never adds it.
            continue;
        }
        if kind == FileType::RegularFile {
            found.bytes = found
                .bytes
                .saturating_add(u64::try_from(stat.st_size).unwrap_or(u64::MAX));
            if found.bytes > limits.bytes {
                return Ok(Some(format!("over {} bytes changed", limits.bytes)));
            }
        }
        if frame.covered {
            continue;
        }
        if bytes == b".wh..wh..opq" {
            // fuse-overlayfs' opaque marker: the directory is the job's whole.
            if frame.path.is_empty() {
                return Ok(Some("the upper dir's top is opaque".into()));
            }
            found.paths.push(frame.path.clone());
            frame.covered = true;
            continue;
        }
        if let Some(hidden) = bytes.strip_prefix(b".wh.") {
            // fuse-overlayfs' whiteout of `hidden`; the entry itself is named too, in case
            // a kernel overlay shows it as the file it is.
            found.paths.push(join(&frame.path, hidden));
        }
        found.paths.push(path);
    }
    Ok(None)
}

fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    if parent.is_empty() {
        return name.to_vec();
    }
    let mut path = Vec::with_capacity(parent.len() + 1 + name.len());
    path.extend_from_slice(parent);
    path.push(b'/');
    path.extend_from_slice(name);
    path
}

/// Whether a directory of the upper dir hides the lower layer's (any overlay's marker).
fn opaque(dir: &OwnedFd) -> bool {
    const MARKS: [&CStr; 3] = [
        c"trusted.overlay.opaque",
        c"user.overlay.opaque",
        c"user.fuseoverlayfs.opaque",
    ];
    let mut value = [0u8; 8];
    MARKS.iter().any(|mark| {
        rustix::fs::fgetxattr(dir, *mark, &mut value).is_ok_and(|n| n > 0 && value[0] == b'y')
    })
}

fn open_dir<Fd: AsFd, P: rustix::path::Arg>(dir: Fd, name: P) -> std::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(dir, name, flags, Mode::empty())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(walked: Walked) -> Vec<String> {
        let Walked::Changes(changes) = walked else {
            panic!("unsuited: {walked:?}");
        };
        let mut out: Vec<String> = changes
            .paths
            .iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        out.sort();
        out
    }

    #[test]
    fn names_files_whiteouts_and_new_directories() {
        let dir = tempfile::tempdir().unwrap();
        let (upper, lower) = (dir.path().join("upper"), dir.path().join("lower"));
        for d in [
            "lower/src/deep",
            "lower/docs",
            "upper/src/deep",
            "upper/fresh/a",
        ] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        std::fs::write(upper.join("src/changed.rs"), "x").unwrap();
        std::fs::write(upper.join("src/deep/new.rs"), "xy").unwrap();
        std::fs::write(upper.join("fresh/a/b"), "xyz").unwrap();
        std::fs::write(upper.join(".wh.gone"), "").unwrap();
        std::fs::write(upper.join(".git"), "gitdir: /x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", upper.join("link")).unwrap();
        let got = paths(walk(&upper, &lower, Limits::default()));
        assert_eq!(
            got,
            [
                ".wh.gone",
                "fresh",
                "gone",
                "link",
                "src/changed.rs",
                "src/deep/new.rs"
            ]
        );
        let Walked::Changes(changes) = walk(&upper, &lower, Limits::default()) else {
            unreachable!()
        };
        assert_eq!(
            changes.bytes, 6,
            "the link's target is never read or counted"
        );
    }

    #[test]
    fn an_opaque_marker_names_the_directory_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (upper, lower) = (dir.path().join("upper"), dir.path().join("lower"));
        std::fs::create_dir_all(upper.join("d")).unwrap();
        std::fs::create_dir_all(lower.join("d")).unwrap();
        std::fs::write(upper.join("d/.wh..wh..opq"), "").unwrap();
        std::fs::write(upper.join("d/kept"), "").unwrap();
        assert_eq!(paths(walk(&upper, &lower, Limits::default())), ["d"]);
    }

    #[test]
    fn gives_up_past_each_limit() {
        let dir = tempfile::tempdir().unwrap();
        let (upper, lower) = (dir.path().join("upper"), dir.path().join("lower"));
        let deep = (0..10).fold(upper.clone(), |p, i| p.join(format!("d{i}")));
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::create_dir_all(&lower).unwrap();
        std::fs::write(deep.join("f"), vec![0u8; 100]).unwrap();
        let limits = Limits::default();
        assert!(matches!(walk(&upper, &lower, limits), Walked::Changes(_)));
        for tight in [
            Limits { depth: 5, ..limits },
            Limits {
                entries: 5,
                ..limits
            },
            Limits {
                path_bytes: 20,
                ..limits
            },
            Limits {
                bytes: 99,
                ..limits
            },
        ] {
            assert!(
                matches!(walk(&upper, &lower, tight), Walked::Unsuited(_)),
                "{tight:?}"
            );
        }
        assert!(matches!(
            walk(&dir.path().join("missing"), &lower, limits),
            Walked::Unsuited(_)
        ));
    }
}
