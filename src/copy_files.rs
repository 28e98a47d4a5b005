//! Untracked files copied from the user's checkout into a new job's checkout (`copy:` in
//! `.paddock.yaml`: `.env`, `config/local.toml`), so a job starts with the local settings
//! its commands need, without those files ever reaching a commit.
//!
//! Invariants:
//! - An entry is a relative path inside the repository: no absolute path, no `..`, no `.git`
//!   component ([`check_entry`], at config load).
//! - Nothing outside the repository is read: the entry's parent directory must resolve
//!   inside the repository root, and every symlink copied (the entry itself or one inside a
//!   copied directory) must be relative and resolve inside it; absolute links and links that
//!   leave the repository are refused before anything is written.
//! - Nothing outside the job's checkout is written: no component of a destination may be a
//!   symlink (a tracked `config -> /etc` is refused), files are created with
//!   `O_CREAT | O_EXCL | O_NOFOLLOW`, sources are opened with `O_NOFOLLOW`.
//! - Only untracked paths: a destination that already exists in the fresh checkout (a
//!   tracked file) is refused, so no copied byte can reach a commit through a tracked path;
//!   each entry gets a `/path` line in the job's own `info/exclude` ([`exclude_patterns`]),
//!   so `git add -A` and the wip snapshot leave it out.
//! - Special files (fifos, sockets, devices) are refused; set-id bits are dropped.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("copy entry `{entry}` does not exist in the repository `{repo}`")]
    Missing { entry: String, repo: PathBuf },
    #[error(
        "copy entry `{entry}`: `{path}` is a symlink to `{target}`, which leads out of the repository (only relative links that stay inside are copied)"
    )]
    OutsideLink {
        entry: String,
        path: PathBuf,
        target: String,
    },
    #[error("copy entry `{entry}`: `{path}` resolves outside the repository `{repo}`")]
    OutsideParent {
        entry: String,
        path: PathBuf,
        repo: PathBuf,
    },
    #[error("copy entry `{entry}`: `{path}` is not a regular file, directory or symlink")]
    Special { entry: String, path: PathBuf },
    #[error(
        "copy entry `{entry}`: `{path}` already exists in the job's checkout (tracked in the repository); `copy` is for untracked files"
    )]
    Tracked { entry: String, path: PathBuf },
    #[error(
        "copy entry `{entry}`: `{path}` is a symlink or not a directory in the job's checkout; refusing to write through it"
    )]
    UnsafeTarget { entry: String, path: PathBuf },
    #[error("copy entry `{entry}`: failed at `{path}`: {source}")]
    Io {
        entry: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Checks one `copy` entry's shape and returns it normalized (`a/b`, no trailing slash).
pub fn check_entry(entry: &str) -> Result<String, String> {
    let path = Path::new(entry);
    let parts: Vec<&str> = path
        .components()
        .map(|c| match c {
            Component::Normal(name) if name != ".git" => name.to_str(),
            _ => None,
        })
        .collect::<Option<_>>()
        .unwrap_or_default();
    if entry.is_empty() || parts.is_empty() || path.is_absolute() {
        return Err(format!(
            "`{entry}` must be a relative path inside the repository, without `..`, `.` or `.git`"
        ));
    }
    Ok(parts.join("/"))
}

/// The `info/exclude` lines that keep copied paths out of git: `/path`, anchored at the top,
/// matching a file, a directory or a link, with git's pattern characters escaped.
pub fn exclude_patterns(entries: &[String]) -> Vec<String> {
    entries
        .iter()
        .map(|entry| {
            let mut line = String::from("/");
            for c in entry.chars() {
                if matches!(c, '\\' | '*' | '?' | '[') {
                    line.push('\\');
                }
                line.push(c);
            }
            if line.ends_with(' ') {
                line.pop();
                line.push_str("\\ ");
            }
            line
        })
        .collect()
}

/// Entries in order, without repeats and without one that lies inside an earlier one (it is
/// copied with its directory already).
fn distinct(entries: &[String]) -> Vec<&String> {
    let mut kept: Vec<&String> = Vec::new();
    for entry in entries {
        let covered = kept
            .iter()
            .any(|k| Path::new(entry.as_str()).starts_with(k.as_str()));
        if !covered {
            kept.retain(|k| !Path::new(k.as_str()).starts_with(entry.as_str()));
            kept.push(entry);
        }
    }
    kept
}

/// Checks every entry's sources in `repo` (they exist, stay inside, hold no special file or
/// outside link) without writing anything: a create refuses a bad entry before it reserves
/// anything.
pub fn check_sources(repo: &Path, entries: &[String]) -> Result<(), CopyError> {
    let root = canonical_root(repo, entries)?;
    for entry in distinct(entries) {
        let source = source_of(&root, entry)?;
        walk(&root, entry, &source, None)?;
    }
    Ok(())
}

/// Copies every entry from `repo` into `worktree` (see the module docs for what is refused)
/// and returns the entries copied. With `owner`, everything written is given to that uid and
/// gid (paddock runs as root, the agent does not).
pub fn copy_into(
    repo: &Path,
    worktree: &Path,
    entries: &[String],
    owner: Option<(u32, u32)>,
) -> Result<Vec<String>, CopyError> {
    let root = canonical_root(repo, entries)?;
    let mut copied = Vec::new();
    for entry in distinct(entries) {
        let source = source_of(&root, entry)?;
        // The whole source is checked before the first byte is written.
        walk(&root, entry, &source, None)?;
        let target = prepare_target(worktree, entry, owner)?;
        walk(
            &root,
            entry,
            &source,
            Some(Target {
                path: &target,
                owner,
            }),
        )?;
        copied.push(entry.clone());
    }
    Ok(copied)
}

/// The entries as a tar, for a job on a remote engine, whose checkout is not on this host:
/// the checks of [`copy_into`] on the sources (nothing read outside the repository, no link
/// leaving it, special files refused), files and directories with their permission bits and
/// no set-id bit, owned by `owner`, links as links. Returns the tar and the entries in it.
/// Where they land (nothing tracked, no link on the way) the caller checks in the commit.
pub fn tar_of(
    repo: &Path,
    entries: &[String],
    owner: (u32, u32),
) -> Result<(Vec<u8>, Vec<String>), CopyError> {
    let root = canonical_root(repo, entries)?;
    let mut builder = tar::Builder::new(Vec::new());
    let mut copied = Vec::new();
    for entry in distinct(entries) {
        let source = source_of(&root, entry)?;
        // The whole source is checked before the first byte is taken.
        walk(&root, entry, &source, None)?;
        append(&mut builder, &root, entry, &source, Path::new(entry), owner)?;
        copied.push(entry.clone());
    }
    let tar = builder
        .into_inner()
        .map_err(io(entries[0].as_str(), repo))?;
    Ok((tar, copied))
}

/// Adds `source` (named `name` in the tar) and everything under it; never follows a link.
fn append(
    builder: &mut tar::Builder<Vec<u8>>,
    root: &Path,
    entry: &str,
    source: &Path,
    name: &Path,
    owner: (u32, u32),
) -> Result<(), CopyError> {
    let meta = std::fs::symlink_metadata(source).map_err(io(entry, source))?;
    let kind = meta.file_type();
    let mut header = tar::Header::new_gnu();
    header.set_uid(u64::from(owner.0));
    header.set_gid(u64::from(owner.1));
    header.set_mtime(u64::try_from(meta.mtime()).unwrap_or(0));
    // Set-id and sticky bits are dropped, as in a local copy.
    header.set_mode(meta.mode() & 0o777);
    header.set_size(0);
    let added = if kind.is_symlink() {
        let link = std::fs::read_link(source).map_err(io(entry, source))?;
        check_link(root, entry, source, &link)?;
        header.set_entry_type(tar::EntryType::Symlink);
        builder.append_link(&mut header, name, &link)
    } else if kind.is_file() {
        let mut from = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(source)
            .map_err(io(entry, source))?;
        let mut bytes = Vec::new();
        if !from.metadata().is_ok_and(|m| m.is_file()) {
            return Err(io(entry, source)(std::io::Error::other(
                "changed while it was copied",
            )));
        }
        std::io::Read::read_to_end(&mut from, &mut bytes).map_err(io(entry, source))?;
        header.set_entry_type(tar::EntryType::Regular);
        header.set_size(bytes.len() as u64);
        builder.append_data(&mut header, name, bytes.as_slice())
    } else if kind.is_dir() {
        header.set_entry_type(tar::EntryType::Directory);
        builder
            .append_data(&mut header, name, std::io::empty())
            .map_err(io(entry, source))?;
        let mut children: Vec<_> = std::fs::read_dir(source)
            .map_err(io(entry, source))?
            .map(|child| child.map(|c| c.file_name()))
            .collect::<Result<_, _>>()
            .map_err(io(entry, source))?;
        children.sort();
        for child in children {
            let (source, name) = (source.join(&child), name.join(&child));
            append(builder, root, entry, &source, &name, owner)?;
        }
        Ok(())
    } else {
        return Err(CopyError::Special {
            entry: entry.to_string(),
            path: source.strip_prefix(root).unwrap_or(source).to_path_buf(),
        });
    };
    added.map_err(io(entry, source))
}

fn io(entry: &str, path: &Path) -> impl FnOnce(std::io::Error) -> CopyError {
    let entry = entry.to_string();
    let path = path.to_path_buf();
    move |source| CopyError::Io {
        entry,
        path,
        source,
    }
}

fn canonical_root(repo: &Path, entries: &[String]) -> Result<PathBuf, CopyError> {
    let entry = entries.first().map(String::as_str).unwrap_or_default();
    std::fs::canonicalize(repo).map_err(io(entry, repo))
}

/// The entry's path in the repository, its parent directory resolved (through any links)
/// and checked to lie inside the repository.
fn source_of(root: &Path, entry: &str) -> Result<PathBuf, CopyError> {
    let relative = Path::new(entry);
    let name = relative.file_name().expect("checked entries have a name");
    let parent = root.join(relative.parent().unwrap_or(Path::new("")));
    let missing = || CopyError::Missing {
        entry: entry.to_string(),
        repo: root.to_path_buf(),
    };
    let parent = match std::fs::canonicalize(&parent) {
        Ok(parent) => parent,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing()),
        Err(e) => return Err(io(entry, &parent)(e)),
    };
    if !parent.starts_with(root) {
        return Err(CopyError::OutsideParent {
            entry: entry.to_string(),
            path: relative.parent().unwrap_or(Path::new("")).to_path_buf(),
            repo: root.to_path_buf(),
        });
    }
    let source = parent.join(name);
    if std::fs::symlink_metadata(&source).is_err() {
        return Err(missing());
    }
    Ok(source)
}

/// Makes the directories leading to `entry` in the checkout (none of them may be a symlink)
/// and checks the entry itself does not exist there; returns its path.
fn prepare_target(
    worktree: &Path,
    entry: &str,
    owner: Option<(u32, u32)>,
) -> Result<PathBuf, CopyError> {
    let parts: Vec<_> = Path::new(entry).components().collect();
    let mut current = worktree.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        current.push(part);
        let last = i + 1 == parts.len();
        match std::fs::symlink_metadata(&current) {
            Ok(_) if last => {
                return Err(CopyError::Tracked {
                    entry: entry.to_string(),
                    path: PathBuf::from(entry),
                });
            }
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(CopyError::UnsafeTarget {
                    entry: entry.to_string(),
                    path: current.strip_prefix(worktree).unwrap_or(&current).into(),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if !last {
                    std::fs::create_dir(&current).map_err(io(entry, &current))?;
                    give(&current, owner).map_err(io(entry, &current))?;
                }
            }
            Err(e) => return Err(io(entry, &current)(e)),
        }
    }
    Ok(current)
}

/// Where a walk writes: the destination of the current source, and whose it becomes.
#[derive(Clone, Copy)]
struct Target<'a> {
    path: &'a Path,
    owner: Option<(u32, u32)>,
}

/// Checks (and, with a target, copies) `source` and everything under it. Never follows a
/// symlink: links are checked and recreated as links.
fn walk(
    root: &Path,
    entry: &str,
    source: &Path,
    target: Option<Target<'_>>,
) -> Result<(), CopyError> {
    let meta = std::fs::symlink_metadata(source).map_err(io(entry, source))?;
    let kind = meta.file_type();
    let mode = meta.mode() & 0o777;
    if kind.is_symlink() {
        let link = std::fs::read_link(source).map_err(io(entry, source))?;
        check_link(root, entry, source, &link)?;
        if let Some(target) = target {
            std::os::unix::fs::symlink(&link, target.path).map_err(io(entry, target.path))?;
            give(target.path, target.owner).map_err(io(entry, target.path))?;
        }
    } else if kind.is_file() {
        if let Some(target) = target {
            copy_file(source, target, mode).map_err(io(entry, source))?;
        }
    } else if kind.is_dir() {
        if let Some(target) = target {
            std::fs::create_dir(target.path).map_err(io(entry, target.path))?;
            give(target.path, target.owner).map_err(io(entry, target.path))?;
        }
        let mut children: Vec<_> = std::fs::read_dir(source)
            .map_err(io(entry, source))?
            .map(|child| child.map(|c| c.file_name()))
            .collect::<Result<_, _>>()
            .map_err(io(entry, source))?;
        children.sort();
        for name in children {
            let child_target = target.map(|t| (t.path.join(&name), t.owner));
            walk(
                root,
                entry,
                &source.join(&name),
                child_target.as_ref().map(|(path, owner)| Target {
                    path,
                    owner: *owner,
                }),
            )?;
        }
        if let Some(target) = target {
            // Set last, so a read-only directory still took its children.
            std::fs::set_permissions(target.path, std::fs::Permissions::from_mode(mode))
                .map_err(io(entry, target.path))?;
        }
    } else {
        return Err(CopyError::Special {
            entry: entry.to_string(),
            path: source.strip_prefix(root).unwrap_or(source).to_path_buf(),
        });
    }
    Ok(())
}

/// A link is copied only when it is relative and what it names stays inside the repository,
/// both by its words (`..` counted from the link's directory) and, when it exists, by the
/// path the system resolves (links through other links).
fn check_link(root: &Path, entry: &str, source: &Path, link: &Path) -> Result<(), CopyError> {
    let outside = || CopyError::OutsideLink {
        entry: entry.to_string(),
        path: source.strip_prefix(root).unwrap_or(source).to_path_buf(),
        target: link.display().to_string(),
    };
    if link.is_absolute() {
        return Err(outside());
    }
    let dir = source.parent().unwrap_or(root);
    let mut depth: Vec<_> = dir
        .strip_prefix(root)
        .map_err(|_| outside())?
        .components()
        .collect();
    for part in link.components() {
        match part {
            Component::ParentDir => {
                depth.pop().ok_or_else(outside)?;
            }
            Component::Normal(_) => depth.push(part),
            _ => {}
        }
    }
    match std::fs::canonicalize(dir.join(link)) {
        Ok(resolved) if !resolved.starts_with(root) => Err(outside()),
        _ => Ok(()),
    }
}

/// Copies one regular file: the source opened without following a link, the target created
/// new (`O_EXCL`, never through a link) with the source's permission bits.
fn copy_file(source: &Path, target: Target<'_>, mode: u32) -> std::io::Result<()> {
    let mut from = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(source)?;
    if !from.metadata()?.is_file() {
        return Err(std::io::Error::other("changed while it was copied"));
    }
    let mut to: File = OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(target.path)?;
    std::io::copy(&mut from, &mut to)?;
    if let Some((uid, gid)) = target.owner {
        std::os::unix::fs::fchown(&to, Some(uid), Some(gid))?;
    }
    to.set_permissions(std::fs::Permissions::from_mode(mode))
}

/// Gives a path paddock wrote to the agent's uid (a link itself, not what it names).
fn give(path: &Path, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    match owner {
        Some((uid, gid)) => std::os::unix::fs::lchown(path, Some(uid), Some(gid)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_relative_paths_inside() {
        assert_eq!(check_entry(".env").unwrap(), ".env");
        assert_eq!(
            check_entry("config/local.toml").unwrap(),
            "config/local.toml"
        );
        assert_eq!(check_entry("config/").unwrap(), "config");
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../../x",
            ".git/config",
            "./.env",
            ".",
        ] {
            assert!(check_entry(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn exclude_lines_are_anchored_and_escaped() {
        assert_eq!(
            exclude_patterns(&[".env".into(), "a*b/[x]".into(), "#x ".into()]),
            vec!["/.env", "/a\\*b/\\[x]", "/#x\\ "]
        );
    }

    #[test]
    fn nested_entries_are_copied_once() {
        let entries: Vec<String> = vec!["a/b".into(), "a".into(), "c".into(), "c".into()];
        assert_eq!(distinct(&entries), vec!["a", "c"]);
    }

    #[test]
    fn copies_files_dirs_and_inside_links_and_refuses_the_rest() {
        let repo = tempfile::tempdir().unwrap();
        let job = tempfile::tempdir().unwrap();
        let r = repo.path();
        std::fs::write(r.join(".env"), "SECRET=1\n").unwrap();
        std::fs::set_permissions(r.join(".env"), std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::create_dir_all(r.join("conf/sub")).unwrap();
        std::fs::write(r.join("conf/sub/a.toml"), "a").unwrap();
        std::os::unix::fs::symlink("sub/a.toml", r.join("conf/link")).unwrap();
        let entries = vec![".env".to_string(), "conf".to_string()];
        check_sources(r, &entries).unwrap();
        let copied = copy_into(r, job.path(), &entries, None).unwrap();
        assert_eq!(copied, entries);
        let env = job.path().join(".env");
        assert_eq!(std::fs::read_to_string(&env).unwrap(), "SECRET=1\n");
        assert_eq!(std::fs::metadata(&env).unwrap().mode() & 0o777, 0o600);
        assert_eq!(
            std::fs::read_link(job.path().join("conf/link")).unwrap(),
            Path::new("sub/a.toml")
        );
        // Copying again: the targets exist now, as tracked files would.
        assert!(matches!(
            copy_into(r, job.path(), &entries[..1], None),
            Err(CopyError::Tracked { .. })
        ));

        std::os::unix::fs::symlink("../../etc/passwd", r.join("conf/out")).unwrap();
        assert!(matches!(
            check_sources(r, &["conf".into()]),
            Err(CopyError::OutsideLink { .. })
        ));
        std::os::unix::fs::symlink("/etc/hostname", r.join("abs")).unwrap();
        assert!(matches!(
            check_sources(r, &["abs".into()]),
            Err(CopyError::OutsideLink { .. })
        ));
        std::os::unix::fs::symlink("/etc", r.join("etc")).unwrap();
        assert!(matches!(
            check_sources(r, &["etc/hostname".into()]),
            Err(CopyError::OutsideParent { .. })
        ));
        assert!(matches!(
            check_sources(r, &["nope".into()]),
            Err(CopyError::Missing { .. })
        ));
    }

    #[test]
    fn a_tar_of_the_copies_drops_set_id_bits_and_refuses_outside_links() {
        let repo = tempfile::tempdir().unwrap();
        let r = repo.path();
        std::fs::write(r.join("tool"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(r.join("tool"), std::fs::Permissions::from_mode(0o4755)).unwrap();
        std::fs::create_dir(r.join("conf")).unwrap();
        std::os::unix::fs::symlink("../tool", r.join("conf/link")).unwrap();
        let (tar, copied) = tar_of(r, &["tool".into(), "conf".into()], (1000, 1001)).unwrap();
        assert_eq!(copied, vec!["tool", "conf"]);
        let mut seen = Vec::new();
        for entry in tar::Archive::new(tar.as_slice()).entries().unwrap() {
            let h = entry.unwrap().header().clone();
            let path = h.path().unwrap().display().to_string();
            seen.push((path, h.mode().unwrap(), h.uid().unwrap(), h.gid().unwrap()));
        }
        assert_eq!(seen[0], ("tool".into(), 0o755, 1000, 1001));
        assert_eq!(seen[1].0, "conf");
        assert_eq!(seen[2].0, "conf/link");
        std::os::unix::fs::symlink("/etc/passwd", r.join("conf/out")).unwrap();
        assert!(matches!(
            tar_of(r, &["conf".into()], (0, 0)),
            Err(CopyError::OutsideLink { .. })
        ));
    }

    #[test]
    fn never_writes_through_a_link_in_the_checkout() {
        let repo = tempfile::tempdir().unwrap();
        let job = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::create_dir(repo.path().join("config")).unwrap();
        std::fs::write(repo.path().join("config/local.toml"), "x").unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), job.path().join("config")).unwrap();
        assert!(matches!(
            copy_into(repo.path(), job.path(), &["config/local.toml".into()], None),
            Err(CopyError::UnsafeTarget { .. })
        ));
        assert!(!elsewhere.path().join("local.toml").exists());
    }
}
