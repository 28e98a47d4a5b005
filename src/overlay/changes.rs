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

/// The paths an overlay job changed, relative to its checkout's top, in three kinds that
/// the sandbox half treats each its own way (`git/changed.sh`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// Paths the lower layer has as a file or link, now changed or gone (whiteouts): the
    /// index takes each as it is now (`update-index --add --remove`), no walk.
    pub files: Vec<Vec<u8>>,
    /// Paths the lower layer lacks: new files, and directories the job made whole (new, or
    /// made again over a deleted one) named once for all below. Untracked unless the agent
    /// added them, so git's ignore rules decide (`ls-files --others --exclude-standard`).
    pub new: Vec<Vec<u8>>,
    /// Paths the lower layer has as a directory the job deleted or made again, or as a file
    /// now under a directory: the index drops what it had there first (`rm -r --cached`).
    pub dropped: Vec<Vec<u8>>,
    /// Apparent bytes of the regular files in the upper dir.
    pub bytes: u64,
}

impl Changes {
    /// The three lists, each NUL-separated, one after the other, with each list's length
    /// in bytes (`PADDOCK_CHANGED_BYTES`: "FILES NEW DROPPED").
    pub fn encoded(&self) -> (Vec<u8>, String) {
        let mut out = Vec::new();
        let mut lengths = Vec::new();
        for list in [&self.files, &self.new, &self.dropped] {
            let before = out.len();
            for path in list {
                out.extend_from_slice(path);
                out.push(0);
            }
            lengths.push((out.len() - before).to_string());
        }
        (out, lengths.join(" "))
    }

    /// How many paths in all.
    pub fn len(&self) -> usize {
        self.files.len() + self.new.len() + self.dropped.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
    /// The lower layer's directory of the same path, when it shows through (not below a
    /// directory the job made whole).
    lower: Option<OwnedFd>,
    path: Vec<u8>,
    /// Below a directory named whole in `new`: nothing below is named again.
    covered: bool,
    subdirs: Vec<CString>,
}

/// What the lower layer has at a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lower {
    Nothing,
    File,
    Dir,
}

fn lower_at(dir: Option<&OwnedFd>, name: &CStr) -> Lower {
    let Some(dir) = dir else {
        return Lower::Nothing;
    };
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Directory => Lower::Dir,
        Ok(_) => Lower::File,
        Err(_) => Lower::Nothing,
    }
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
    let mut top = Frame {
        upper: root,
        lower: open_dir(rustix::fs::CWD, lower).ok(),
        path: Vec::new(),
        covered: false,
        subdirs: Vec::new(),
    };
    if let Some(why) = scan(&mut top, &mut found, &mut entries, limits)? {
        return Ok(Walked::Unsuited(why));
    }
    let mut stack = vec![top];
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
        let mut child = Frame {
            lower: None,
            path: child_path,
            covered: frame.covered,
            subdirs: Vec::new(),
            upper: upper_child,
        };
        if !frame.covered {
            let below = lower_at(frame.lower.as_ref(), name.as_c_str());
            if below == Lower::Dir && !opaque(&child.upper) {
                // The lower directory shows through: its own changes are below.
                child.lower =
                    open_dir(frame.lower.as_ref().expect("a lower dir"), name.as_c_str()).ok();
            } else {
                // New, or made again over what the lower layer had there: the job's whole.
                if below != Lower::Nothing {
                    found.dropped.push(child.path.clone());
                }
                found.new.push(child.path.clone());
                child.covered = true;
            }
        }
        if let Some(why) = scan(&mut child, &mut found, &mut entries, limits)? {
            return Ok(Walked::Unsuited(why));
        }
        stack.push(child);
    }
    Ok(Walked::Changes(found))
}

/// Reads one directory of the upper dir: its non-directories are sorted into `found`
/// (unless covered), its subdirectories kept for the walk. `Some(reason)` past a limit.
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
        // A whiteout (a character device 0/0; fuse-overlayfs without the right to make
        // one writes `.wh.NAME`) hides the lower layer's entry of that name.
        let whiteout = kind == FileType::CharacterDevice && stat.st_rdev == 0;
        if let Some(hidden) = bytes
            .strip_prefix(b".wh.")
            .filter(|h| !h.is_empty() && *h != b".wh..opq")
        {
            let hidden = CString::new(hidden).expect("a file name holds no NUL");
            sort_gone(frame, &hidden, found);
        }
        if whiteout {
            sort_gone(frame, name, found);
            continue;
        }
        match lower_at(frame.lower.as_ref(), name) {
            Lower::File => found.files.push(path),
            Lower::Nothing => found.new.push(path),
            Lower::Dir => {
                found.dropped.push(path.clone());
                found.new.push(path);
            }
        }
    }
    Ok(None)
}

/// A path the job deleted: the index drops a file's entry, or everything below a directory.
fn sort_gone(frame: &Frame, name: &CStr, found: &mut Changes) {
    let path = join(&frame.path, name.to_bytes());
    match lower_at(frame.lower.as_ref(), name) {
        Lower::File => found.files.push(path),
        Lower::Dir => found.dropped.push(path),
        Lower::Nothing => {}
    }
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
    }) || rustix::fs::statat(dir, c".wh..wh..opq", AtFlags::SYMLINK_NOFOLLOW).is_ok()
}

fn open_dir<Fd: AsFd, P: rustix::path::Arg>(dir: Fd, name: P) -> std::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(rustix::fs::openat(dir, name, flags, Mode::empty())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(list: &[Vec<u8>]) -> Vec<String> {
        let mut out: Vec<String> = list
            .iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        out.sort();
        out
    }

    fn changes(walked: Walked) -> Changes {
        match walked {
            Walked::Changes(changes) => changes,
            Walked::Unsuited(why) => panic!("unsuited: {why}"),
        }
    }

    #[test]
    fn sorts_changed_new_and_dropped_paths() {
        let dir = tempfile::tempdir().unwrap();
        let (upper, lower) = (dir.path().join("upper"), dir.path().join("lower"));
        for d in [
            "lower/src/deep",
            "lower/src/gone-dir",
            "lower/again",
            "lower/was-dir",
            "upper/src/deep",
            "upper/fresh/a",
            "upper/again",
            "upper/file-now-dir",
        ] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        for f in [
            "lower/src/changed.rs",
            "lower/gone",
            "lower/again/old",
            "lower/file-now-dir",
        ] {
            std::fs::write(dir.path().join(f), "old").unwrap();
        }
        std::fs::write(upper.join("src/changed.rs"), "x").unwrap();
        std::fs::write(upper.join("src/deep/new.rs"), "xy").unwrap();
        std::fs::write(upper.join("fresh/a/b"), "xyz").unwrap();
        std::fs::write(upper.join("again/.wh..wh..opq"), "").unwrap();
        std::fs::write(upper.join("again/made"), "").unwrap();
        std::fs::write(upper.join("file-now-dir/x"), "").unwrap();
        std::fs::write(upper.join("was-dir"), "").unwrap();
        std::fs::write(upper.join(".wh.gone"), "").unwrap();
        std::fs::write(upper.join("src/.wh.gone-dir"), "").unwrap();
        std::fs::write(upper.join(".git"), "gitdir: /x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", upper.join("link")).unwrap();
        let found = changes(walk(&upper, &lower, Limits::default()));
        assert_eq!(sorted(&found.files), ["gone", "src/changed.rs"]);
        assert_eq!(
            sorted(&found.new),
            [
                ".wh.gone",
                "again",
                "file-now-dir",
                "fresh",
                "link",
                "src/.wh.gone-dir",
                "src/deep/new.rs",
                "was-dir"
            ]
        );
        assert_eq!(
            sorted(&found.dropped),
            ["again", "file-now-dir", "src/gone-dir", "was-dir"]
        );
        assert_eq!(
            found.bytes, 6,
            "a link's target is never read or counted, nor `.git`"
        );
        let (bytes, lengths) = found.encoded();
        let counts: Vec<usize> = lengths.split(' ').map(|n| n.parse().unwrap()).collect();
        assert_eq!(counts.iter().sum::<usize>(), bytes.len());
        assert_eq!(counts[0], "gone\0src/changed.rs\0".len());
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
