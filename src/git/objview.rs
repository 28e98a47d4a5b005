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
//! the view is always a snapshot and never the live store.
//!
//! The store may change while the view is made (the user's `git gc --auto` after a big
//! commit packs tens of thousands of loose objects and prunes them; `git repack -ad` replaces
//! every pack). Git writes a complete pack (its `.idx` last) before it deletes a loose object
//! or an old pack holding the same objects. So loose objects are linked first, and one that
//! vanished between the listing and its link is skipped: its pack was complete before it
//! went, so the pack listing that follows finds it. Packs are listed again until a listing
//! links every pack it names; a pack that vanished meanwhile was replaced by one the next
//! listing finds, and what was linked of it alone (a `.pack` or `.idx` without the other) is
//! removed. A link already made is a snapshot: a later prune cannot take it from the view.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// How many times a view is restarted when the store changes under it (its own directory
/// or the store's vanishing: what the listings below cannot absorb).
const ATTEMPTS: usize = 4;

/// How many listings of the pack directory a view takes at most: each one after the first
/// follows a repack that replaced a pack between a listing and its link.
const PACK_LISTINGS: usize = 64;

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

/// `Ok(None)` for a source that vanished (`NotFound`): the store changed under the view.
fn vanished<T>(result: std::io::Result<T>) -> std::io::Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Links the loose objects; one that vanished before its link was packed meanwhile (see the
/// module docs) and is skipped, as is a fan-out directory pruned empty.
fn link_loose(
    store: &Path,
    view: &Path,
    stats: &mut ViewStats,
    copy_only: bool,
) -> std::io::Result<()> {
    for fan in std::fs::read_dir(store)? {
        let Some(fan) = vanished(fan)? else { continue };
        let name = fan.file_name();
        let Some(name) = name.to_str().filter(|n| is_hex(n, 2..=2)) else {
            continue;
        };
        if !fan.file_type()?.is_dir() {
            continue;
        }
        let Some(objects) = vanished(std::fs::read_dir(fan.path()))? else {
            continue;
        };
        let into = view.join(name);
        std::fs::create_dir_all(&into)?;
        for object in objects {
            let Some(object) = vanished(object)? else {
                continue;
            };
            let file = object.file_name();
            if file.to_str().is_some_and(|f| is_hex(f, 38..=62)) && object.file_type()?.is_file() {
                vanished(place(&object.path(), &into.join(&file), stats, copy_only))?;
            }
        }
    }
    Ok(())
}

/// Links the complete packs of `packs` into `into`, listing again after a listing in which
/// a pack vanished before its link (see the module docs).
fn link_packs(
    packs: &Path,
    into: &Path,
    stats: &mut ViewStats,
    copy_only: bool,
) -> std::io::Result<()> {
    for _ in 0..PACK_LISTINGS {
        let Some(entries) = vanished(std::fs::read_dir(packs))? else {
            return Ok(());
        };
        // Indexes last, as git writes them: a reader never sees an index without its pack.
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| pack_file_wanted(packs, n))
            .collect();
        names.sort_by_key(|n| (n.ends_with(".idx"), n.clone()));
        let mut changed = false;
        for name in names {
            let to = into.join(&name);
            if std::fs::symlink_metadata(&to).is_ok() {
                continue;
            }
            changed |= vanished(place(&packs.join(&name), &to, stats, copy_only))?.is_none();
        }
        if !changed {
            return drop_incomplete_packs(into);
        }
    }
    Err(std::io::Error::new(
        ErrorKind::NotFound,
        format!(
            "{}: the packs changed at each of {PACK_LISTINGS} listings",
            packs.display()
        ),
    ))
}

/// Removes from the view's pack directory what a vanished pack left there alone: files of a
/// pack whose `.pack` or `.idx` is missing.
fn drop_incomplete_packs(dir: &Path) -> std::io::Result<()> {
    let names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .collect();
    let has = |stem: &str, ext: &str| names.iter().any(|n| *n == format!("{stem}.{ext}"));
    for name in &names {
        let Some((stem, _)) = name.rsplit_once('.') else {
            continue;
        };
        if !(has(stem, "pack") && has(stem, "idx")) {
            std::fs::remove_file(dir.join(name))?;
        }
    }
    Ok(())
}

/// One attempt at the view; `Err` with `NotFound` means the store changed under it in a way
/// the listings cannot absorb.
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
    link_loose(store, view, &mut stats, copy_only)?;
    link_packs(
        &store.join("pack"),
        &view.join("pack"),
        &mut stats,
        copy_only,
    )?;
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

/// Proves that every object of commit `tip` can be read through `view` (and the stores its
/// `info/alternates` names) before a container starts on it: the view is complete by
/// construction (see the module docs), and a hole would otherwise show only inside the job,
/// as a checkout or a fsck that fails. `git_dir` is the job's git dir (no ref is read).
pub async fn verify(git_dir: &Path, view: &Path, tip: &str) -> Result<(), super::GitError> {
    super::call::GitCall::new(git_dir, &["rev-list", "--objects", "--quiet", tip])
        .git_dir(git_dir)
        .env("GIT_OBJECT_DIRECTORY", view.as_os_str())
        .timeout(super::call::CHECKOUT_TIMEOUT)
        .run()
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::test_git::git;

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

    /// Copies every loose object file under `from` into the store `to` (a loose copy of an
    /// object a pack holds, as a new commit of the same files would write).
    fn put_loose(from: &Path, to: &Path) {
        for fan in std::fs::read_dir(from).unwrap() {
            let fan = fan.unwrap();
            let into = to.join(fan.file_name());
            std::fs::create_dir_all(&into).unwrap();
            for object in std::fs::read_dir(fan.path()).unwrap() {
                let object = object.unwrap();
                let target = into.join(object.file_name());
                if !target.exists() {
                    std::fs::copy(object.path(), &target).unwrap();
                }
            }
        }
    }

    /// Issue 41: a view made while git packs and prunes thousands of loose objects (`gc
    /// --auto` after a big commit) and replaces every pack (`repack -ad`) in a loop holds
    /// every object of the base commit, each time, and is never refused.
    #[test]
    fn a_view_made_while_git_packs_prunes_and_repacks_holds_every_object_of_the_base() {
        let repo = tempfile::tempdir().unwrap();
        let dir = repo.path().to_path_buf();
        git(&dir, &["init", "-q", "-b", "main", "."]);
        for n in 0..3000 {
            let sub = dir.join(format!("d{}", n % 30));
            std::fs::create_dir_all(&sub).unwrap();
            std::fs::write(sub.join(format!("f{n}")), format!("file {n}\n")).unwrap();
        }
        git(&dir, &["add", "-A"]);
        git(&dir, &["commit", "-q", "-m", "big"]);
        let tip = git(&dir, &["rev-parse", "HEAD"]);
        let store = dir.join(".git/objects");
        // The loose objects as the commit left them, to put back before each pack-and-prune.
        let saved = tempfile::tempdir().unwrap();
        for fan in std::fs::read_dir(&store).unwrap() {
            let fan = fan.unwrap();
            let name = fan.file_name().into_string().unwrap();
            if is_hex(&name, 2..=2) {
                let into = saved.path().join(&name);
                std::fs::create_dir_all(&into).unwrap();
                for object in std::fs::read_dir(fan.path()).unwrap() {
                    let object = object.unwrap();
                    std::fs::copy(object.path(), into.join(object.file_name())).unwrap();
                }
            }
        }
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let churn = {
            let (dir, store, saved, stop) = (
                dir.clone(),
                store.clone(),
                saved.path().to_path_buf(),
                stop.clone(),
            );
            std::thread::spawn(move || {
                let mut rounds = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    put_loose(&saved, &store);
                    // Packs the loose objects, then deletes them (what gc --auto does) ...
                    git(&dir, &["repack", "-q", "-d"]);
                    git(&dir, &["prune-packed"]);
                    // ... and replaces every pack with one (repack -ad).
                    git(&dir, &["repack", "-q", "-a", "-d"]);
                    rounds += 1;
                }
                rounds
            })
        };
        let state = tempfile::tempdir().unwrap();
        for n in 0..25 {
            let view = state.path().join(format!("objects-{n}"));
            make_view(&store, &[], &view, n % 5 == 4)
                .unwrap_or_else(|e| panic!("view {n} refused while git repacks: {e}"));
            let probe = tempfile::tempdir().unwrap();
            git(probe.path(), &["init", "-q", "--bare", "."]);
            let out = std::process::Command::new("git")
                .args(["rev-list", "--objects", "--quiet", &tip])
                .current_dir(probe.path())
                .env("GIT_OBJECT_DIRECTORY", &view)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "view {n} lacks objects of the base: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            crate::tree::remove_tree(&view).unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let rounds = churn.join().unwrap();
        assert!(rounds > 0, "git repacked while the views were made");
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
