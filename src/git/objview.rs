//! A job's view of the repository's object store, fixed at create: `work/<id>/objects/`,
//! mounted read-only at `/paddock-objects` in place of the live store, so a job reads the
//! objects that existed when it was made and nothing that lands later (another job's synced
//! commits).
//!
//! The view holds hard links to the store's files as they were then: loose objects
//! (`xx/<hex>`), and each pack's `.pack`, `.idx`, `.rev` and `.bitmap` (a `.pack` whose
//! `.idx` is missing is still being written and is skipped, as are `.keep`, temporary files,
//! the multi-pack index and commit-graphs, which may describe packs the view lacks). Git
//! objects never change once written, so links are a consistent snapshot. Its
//! `info/alternates` names the stores the repository borrows from by their absolute paths
//! (a relative line would resolve against the view); those stay mounted at their own paths.
//!
//! A file that cannot be linked (the state root on another filesystem: `EXDEV`; a
//! repository owned by another user under `fs.protected_hardlinks`: `EPERM`) is copied, so
//! the view is always a snapshot and never the live store. Loose objects are listed before
//! packs, and a file that vanished between the listing and its link (a `git gc` packing and
//! pruning meanwhile) restarts the whole view, so an object moved from loose to a new pack
//! is found in the one or the other.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// How many times a view is restarted when the store changes under it.
const ATTEMPTS: usize = 4;

/// What making a view did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ViewStats {
    /// Files hard-linked.
    pub linked: usize,
    /// Files copied (linking was not possible).
    pub copied: usize,
    /// Bytes copied.
    pub copied_bytes: u64,
}

/// Whether a pack-directory file belongs in the view (`name` is the file name).
fn pack_file_wanted(dir: &Path, name: &str) -> bool {
    if name.starts_with('.') || name.starts_with("tmp_") {
        return false;
    }
    let Some((stem, ext)) = name.rsplit_once('.') else {
        return false;
    };
    let wanted = matches!(ext, "pack" | "idx" | "rev" | "bitmap");
    // A pack is complete once its index exists (git writes the index last).
    wanted && (ext != "pack" || dir.join(format!("{stem}.idx")).exists())
}

/// Whether `name` is a loose object's fan-out directory (two hex digits) or file name.
fn is_hex(name: &str, len: std::ops::RangeInclusive<usize>) -> bool {
    len.contains(&name.len()) && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Links (or copies) `from` to `to`.
fn place(from: &Path, to: &Path, stats: &mut ViewStats, copy_only: bool) -> std::io::Result<()> {
    if !copy_only {
        match std::fs::hard_link(from, to) {
            Ok(()) => {
                stats.linked += 1;
                return Ok(());
            }
            Err(e)
                if e.raw_os_error() == Some(libc::EXDEV)
                    || e.kind() == ErrorKind::PermissionDenied => {}
            Err(e) => return Err(e),
        }
    }
    stats.copied_bytes += std::fs::copy(from, to)?;
    stats.copied += 1;
    Ok(())
}

/// One attempt at the view; `Err` with `NotFound` means the store changed under it.
fn build(
    store: &Path,
    nested: &[PathBuf],
    view: &Path,
    copy_only: bool,
) -> std::io::Result<ViewStats> {
    let mut stats = ViewStats::default();
    std::fs::create_dir_all(view.join("info"))?;
    std::fs::create_dir_all(view.join("pack"))?;
    // Loose objects before packs (see the module docs).
    for fan in std::fs::read_dir(store)? {
        let fan = fan?;
        let name = fan.file_name();
        let Some(name) = name.to_str().filter(|n| is_hex(n, 2..=2)) else {
            continue;
        };
        if !fan.file_type()?.is_dir() {
            continue;
        }
        let into = view.join(name);
        std::fs::create_dir_all(&into)?;
        for object in std::fs::read_dir(fan.path())? {
            let object = object?;
            let file = object.file_name();
            if file.to_str().is_some_and(|f| is_hex(f, 38..=62)) && object.file_type()?.is_file() {
                place(&object.path(), &into.join(&file), &mut stats, copy_only)?;
            }
        }
    }
    let packs = store.join("pack");
    match std::fs::read_dir(&packs) {
        Ok(entries) => {
            // Indexes last, as git writes them: a reader never sees an index without its pack.
            let mut names: Vec<String> = entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| pack_file_wanted(&packs, n))
                .collect();
            names.sort_by_key(|n| (n.ends_with(".idx"), n.clone()));
            for name in names {
                place(
                    &packs.join(&name),
                    &view.join("pack").join(&name),
                    &mut stats,
                    copy_only,
                )?;
            }
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut alternates = String::new();
    for dir in nested {
        alternates.push_str(&format!("{}\n", dir.display()));
    }
    std::fs::write(view.join("info/alternates"), alternates)?;
    Ok(stats)
}

/// Makes `view` (which must not exist) as a snapshot of the object store `store`, whose
/// borrowed stores are `nested` (absolute paths). With `copy_only` every file is copied
/// (what happens anyway where linking fails; tests use it). Blocking.
pub fn make_view(
    store: &Path,
    nested: &[PathBuf],
    view: &Path,
    copy_only: bool,
) -> std::io::Result<ViewStats> {
    let mut last = None;
    for _ in 0..ATTEMPTS {
        match build(store, nested, view, copy_only) {
            Ok(stats) => return Ok(stats),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                let _ = crate::tree::remove_tree(view);
                last = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.expect("at least one attempt ran"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    fn commit(dir: &Path, file: &str, text: &str) -> String {
        std::fs::write(dir.join(file), text).unwrap();
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-q", "-m", file]);
        git(dir, &["rev-parse", "HEAD"])
    }

    /// Whether a git dir borrowing only `view` can read `oid`.
    fn readable(view: &Path, oid: &str) -> bool {
        let probe = tempfile::tempdir().unwrap();
        git(probe.path(), &["init", "-q", "--bare", "."]);
        std::fs::write(
            probe.path().join("objects/info/alternates"),
            format!("{}\n", view.display()),
        )
        .unwrap();
        std::process::Command::new("git")
            .args(["cat-file", "-e", oid])
            .current_dir(probe.path())
            .status()
            .unwrap()
            .success()
    }

    #[test]
    fn the_view_holds_what_was_there_and_nothing_later() {
        for copy_only in [false, true] {
            let repo = tempfile::tempdir().unwrap();
            let dir = repo.path();
            git(dir, &["init", "-q", "-b", "main", "."]);
            let packed = commit(dir, "a.txt", "packed");
            git(dir, &["repack", "-q", "-a", "-d"]);
            let loose = commit(dir, "b.txt", "loose");
            // A pack still being written (no index) and a keep file stay out.
            std::fs::write(dir.join(".git/objects/pack/pack-0000.pack"), b"partial").unwrap();
            std::fs::write(dir.join(".git/objects/pack/pack-0000.keep"), b"").unwrap();
            let state = tempfile::tempdir().unwrap();
            let view = state.path().join("objects");
            let stats = make_view(&dir.join(".git/objects"), &[], &view, copy_only).unwrap();
            let later = commit(dir, "c.txt", "later");
            assert!(readable(&view, &packed), "{copy_only}");
            assert!(readable(&view, &loose), "{copy_only}");
            assert!(!readable(&view, &later), "{copy_only}");
            assert!(!view.join("pack/pack-0000.pack").exists());
            assert!(!view.join("pack/pack-0000.keep").exists());
            if copy_only {
                assert_eq!(stats.linked, 0);
                assert!(stats.copied > 3 && stats.copied_bytes > 0);
            } else {
                assert_eq!(stats.copied, 0);
                assert!(stats.linked > 3);
            }
        }
    }

    #[test]
    fn borrowed_stores_are_named_by_absolute_path() {
        let state = tempfile::tempdir().unwrap();
        let store = state.path().join("store");
        std::fs::create_dir_all(&store).unwrap();
        let view = state.path().join("view");
        let nested = vec![PathBuf::from("/srv/shared/objects")];
        make_view(&store, &nested, &view, false).unwrap();
        assert_eq!(
            std::fs::read_to_string(view.join("info/alternates")).unwrap(),
            "/srv/shared/objects\n"
        );
    }
}
