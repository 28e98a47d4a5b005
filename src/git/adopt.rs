//! The fast way to publish what one sync received into the user's repository: the objects
//! of the pack the scratch repository indexed (and fsck'd), then the branch moved with
//! `git update-ref`. No walk is needed: the pack passed `index-pack --strict`, which checked
//! its objects and that everything they name exists.
//!
//! A small pack (an exec's commit: a handful of objects) goes in as loose objects, as
//! `git fetch` stores a fetch under `fetch.unpackLimit` (100 objects): a pack per commit
//! would leave every git process that reads the store (the user's, and every job's, which
//! borrows it) one more index to open per commit ever synced (measured: 70 packs made a
//! `git index-pack` 2 ms slower than 3). Loose objects are written as git writes them by
//! default (`core.fsync` leaves loose objects to the kernel), and only where the store is
//! this process's user's own and not shared (`core.sharedRepository`, whose modes libgit2
//! does not follow): a directory `objects/ab/` made by another user would keep the owner's
//! git from writing there. A larger pack, or any doubt, is linked whole as before.

use std::path::Path;

use super::{GitError, GitRepo, blocking, read_err};

/// Below this many objects a pack goes in loose (git's `fetch.unpackLimit`).
const UNPACK_LIMIT: u32 = 100;
/// And only when the pack is at most this big (its objects are read into memory).
const UNPACK_MAX_BYTES: u64 = 1 << 20;

impl GitRepo {
    /// Puts `pack`'s objects (a pack of a paddock-owned scratch repository, checked when it
    /// was indexed) into this repository's object store, then moves `refname` from `old`
    /// (`None`: it must not exist) to `new`. Callers fall back to
    /// [`publish`](Self::publish) when this fails.
    pub async fn adopt_pack_and_set_ref(
        &self,
        pack: Option<&Path>,
        refname: &str,
        new: &str,
        old: Option<&str>,
    ) -> Result<(), GitError> {
        let _lock = self.lock().await?;
        if let Some(pack) = pack {
            let (from, common_dir) = (pack.to_path_buf(), self.common_dir.clone());
            let loose = blocking(move || Ok(write_loose(&from, &common_dir))).await?;
            if !loose {
                self.link_pack(pack)?;
            }
        }
        let old = match old {
            Some(old) => old.to_string(),
            None => self.null_oid().await?,
        };
        self.call(&["update-ref", "-m", "paddock: sync", refname, new, &old])
            .run()
            .await
            .map(drop)
    }

    /// Puts a checkpoint's pack (indexed and checked in the job's scratch repository) into
    /// this paddock-owned store, whole, and points `refname` at `commit` (which must then be
    /// readable here). The caller has made sure that this store already holds what the
    /// pack's objects name beyond it (what the sandbox left out of the pack): then no fetch,
    /// with its second check and walk, is needed.
    pub async fn adopt_pack_for_ref(
        &self,
        pack: &Path,
        refname: &str,
        commit: &str,
    ) -> Result<(), GitError> {
        let _lock = self.lock().await?;
        self.link_pack(pack)?;
        let (path, refname, commit) = (
            self.common_dir.clone(),
            refname.to_string(),
            commit.to_string(),
        );
        blocking(move || {
            let repo = git2::Repository::open_bare(&path).map_err(read_err(&path))?;
            let oid = git2::Oid::from_str(&commit).map_err(read_err(&path))?;
            repo.find_commit(oid).map_err(read_err(&path))?;
            repo.reference(&refname, oid, true, "paddock: checkpoint")
                .map_err(read_err(&path))?;
            Ok(())
        })
        .await
    }

    /// Links (or copies) `pack`, its reverse index and its index (last: git finds a pack
    /// through its .idx) into this repository's pack directory.
    fn link_pack(&self, pack: &Path) -> Result<(), GitError> {
        let pack_dir = self.common_dir.join("objects/pack");
        for ext in ["pack", "rev", "idx"] {
            let from = pack.with_extension(ext);
            if !from.exists() {
                continue;
            }
            let name = from.file_name().expect("a pack file has a name");
            let to = pack_dir.join(name);
            if to.exists() {
                continue;
            }
            let tmp = pack_dir.join(format!(".paddock-{}", name.to_string_lossy()));
            let linked = std::fs::hard_link(&from, &tmp)
                .or_else(|_| std::fs::copy(&from, &tmp).map(drop))
                .and_then(|()| std::fs::rename(&tmp, &to));
            if let Err(error) = linked {
                let _ = std::fs::remove_file(&tmp);
                return Err(GitError::Command {
                    args: "adopt pack".into(),
                    dir: to,
                    stderr: error.to_string(),
                });
            }
        }
        Ok(())
    }
}

/// Writes the objects of `pack` into the repository at `common_dir` as loose objects when
/// the pack is small and the repository is not shared; false when it did not (then the
/// caller links the pack). A failure part-way leaves only objects no ref names yet (git's
/// `gc` prunes them), and the caller links the pack all the same.
fn write_loose(pack: &Path, common_dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    // A loose object may need a directory of its own (`objects/ab/`); one made by another
    // user than the store's owner (root, for a repository of someone else's) would keep
    // that owner's git from writing there. A pack is a file in a directory that exists.
    let ours = std::fs::metadata(common_dir.join("objects"))
        .is_ok_and(|m| m.uid() == crate::sys::effective_ids().0);
    let small = ours && std::fs::metadata(pack).is_ok_and(|m| m.len() <= UNPACK_MAX_BYTES);
    let Some(ids) = small
        .then(|| std::fs::read(pack.with_extension("idx")).ok())
        .flatten()
        .and_then(|idx| object_ids(&idx))
    else {
        return false;
    };
    let copied = (|| -> Result<bool, git2::Error> {
        let target = git2::Repository::open(common_dir)?;
        let shared = target
            .config()?
            .get_string("core.sharedRepository")
            .is_ok_and(|v| !matches!(v.as_str(), "false" | "umask" | "0" | "no" | "off"));
        if shared {
            return Ok(false);
        }
        // The scratch repository: `<scratch>/objects/pack/pack-X.pack`.
        let scratch = pack
            .ancestors()
            .nth(3)
            .expect("a pack lies in a repository");
        let scratch = git2::Repository::open_bare(scratch)?;
        let source = scratch.odb()?;
        let odb = target.odb()?;
        for id in ids {
            // (A thin pack was completed with bases the store has: those stay untouched.)
            if odb.exists(id) {
                continue;
            }
            let object = source.read(id)?;
            let written = odb.write(object.kind(), object.data())?;
            if written != id {
                return Ok(false);
            }
        }
        Ok(true)
    })();
    copied.unwrap_or_else(|error| {
        tracing::debug!(pack = %pack.display(), %error, "linking the pack instead of its objects");
        false
    })
}

/// The object ids a version-2 pack index of SHA-1 objects lists, when it lists fewer than
/// [`UNPACK_LIMIT`]; `None` for any other shape (the pack is then linked whole).
fn object_ids(idx: &[u8]) -> Option<Vec<git2::Oid>> {
    const FANOUT: usize = 8;
    const NAMES: usize = FANOUT + 256 * 4;
    const HASH: usize = 20;
    if idx.get(..8)? != b"\xfftOc\0\0\0\x02" {
        return None;
    }
    let count = u32::from_be_bytes(idx.get(NAMES - 4..NAMES)?.try_into().ok()?);
    if count >= UNPACK_LIMIT {
        return None;
    }
    let count = count as usize;
    // Names, CRCs and 4-byte offsets, then the two trailing hashes.
    if idx.len() < NAMES + count * (HASH + 8) + 2 * HASH {
        return None;
    }
    idx[NAMES..NAMES + count * HASH]
        .chunks(HASH)
        .map(|name| git2::Oid::from_bytes(name).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::test_git::git;

    /// A bare "scratch" repository holding one commit in one pack, and an empty store.
    fn scratch_and_store() -> (
        tempfile::TempDir,
        std::path::PathBuf,
        std::path::PathBuf,
        String,
    ) {
        let dir = tempfile::tempdir().expect("temp dir");
        let work = dir.path().join("work");
        std::fs::create_dir(&work).expect("mkdir");
        git(&work, &["init", "-q"]);
        std::fs::write(work.join("f"), "one\n").expect("write");
        git(&work, &["add", "f"]);
        git(&work, &["commit", "-q", "-m", "one"]);
        let commit = git(&work, &["rev-parse", "HEAD"]);
        let scratch = dir.path().join("scratch.git");
        git(
            dir.path(),
            &["clone", "-q", "--bare", "work", "scratch.git"],
        );
        git(&scratch, &["repack", "-a", "-d", "-q"]);
        let pack = std::fs::read_dir(scratch.join("objects/pack"))
            .expect("packs")
            .map(|e| e.expect("entry").path())
            .find(|p| p.extension().is_some_and(|e| e == "pack"))
            .expect("a pack");
        let store = dir.path().join("store");
        std::fs::create_dir(&store).expect("mkdir");
        git(&store, &["init", "-q"]);
        (dir, pack, store.join(".git"), commit)
    }

    #[test]
    fn a_small_pack_goes_in_loose_where_the_store_is_ours_and_not_shared() {
        let (_dir, pack, store, commit) = scratch_and_store();
        assert!(write_loose(&pack, &store));
        let loose = store.join("objects").join(&commit[..2]).join(&commit[2..]);
        assert!(loose.is_file(), "{loose:?}");
        assert!(
            std::fs::read_dir(store.join("objects/pack")).map_or(0, Iterator::count) == 0,
            "no pack"
        );

        let (_dir, pack, store, _) = scratch_and_store();
        git(&store, &["config", "core.sharedRepository", "group"]);
        assert!(
            !write_loose(&pack, &store),
            "a shared store gets the pack whole"
        );
    }

    #[test]
    fn a_store_of_another_user_gets_the_pack_whole() {
        use std::os::unix::fs::MetadataExt as _;
        let (_dir, pack, store, _) = scratch_and_store();
        let objects = store.join("objects");
        let theirs = std::fs::metadata(&objects).expect("objects").uid() + 1;
        if std::os::unix::fs::chown(&objects, Some(theirs), None).is_err() {
            eprintln!("skipped: only root can give the store to another user");
            return;
        }
        assert!(!write_loose(&pack, &store));
        let made: Vec<_> = std::fs::read_dir(&objects)
            .expect("objects")
            .map(|e| e.expect("entry").file_name())
            .filter(|n| n.len() == 2)
            .collect();
        assert!(made.is_empty(), "no object directory was made: {made:?}");
    }

    #[test]
    fn only_small_v2_indexes_list_their_objects() {
        let mut idx = b"\xfftOc\0\0\0\x02".to_vec();
        let mut fanout = vec![0u8; 256 * 4];
        fanout[255 * 4..].copy_from_slice(&2u32.to_be_bytes());
        idx.extend(fanout);
        idx.extend([1u8; 20]);
        idx.extend([2u8; 20]);
        idx.extend([0u8; 16]);
        idx.extend([0u8; 40]);
        let ids = object_ids(&idx).expect("two objects");
        assert_eq!(ids.len(), 2);
        assert_eq!(ids[1].to_string(), "02".repeat(20));
        assert!(object_ids(&idx[..idx.len() - 1]).is_none(), "a cut index");
        let mut old = idx.clone();
        old[7] = 1;
        assert!(object_ids(&old).is_none(), "another version");
        let mut big = idx;
        big[8 + 255 * 4..8 + 256 * 4].copy_from_slice(&UNPACK_LIMIT.to_be_bytes());
        assert!(object_ids(&big).is_none(), "a pack to link whole");
    }
}
