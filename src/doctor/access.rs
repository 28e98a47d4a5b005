//! Whether the agent's uid can read what a job borrows from the repository: its object
//! store, which a container sees read-only at a neutral path (so no directory above it
//! matters), but whose own files keep the owner and mode they have on the host. paddock never
//! changes those, so doctor says what to do when the agent's uid cannot read them.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use super::{Check, Status, check};

/// How many loose object files are looked at (all pack files and directories are).
const LOOSE_SAMPLE: usize = 200;

/// The check for the repository at `common_dir` (its `.git`), for jobs whose agent runs as
/// `profile_uid` when paddock is root.
pub(super) fn object_store_check(common_dir: Option<&Path>, profile_uid: u32) -> Check {
    let Some(common_dir) = common_dir else {
        return check(
            "agent access",
            Status::Ok,
            "run doctor inside a repository to check that a job's agent can read its objects",
            None,
        );
    };
    let (uid, _) = crate::sys::effective_ids();
    if uid != 0 {
        return check(
            "agent access",
            Status::Ok,
            format!(
                "agents run as your uid {uid}, which owns `{}`",
                common_dir.display()
            ),
            None,
        );
    }
    let agent = (profile_uid, profile_uid);
    let mut denied = Vec::new();
    for objects in crate::git::object_dirs(common_dir) {
        unreadable(&objects, agent, &mut denied);
    }
    match denied.first() {
        None => check(
            "agent access",
            Status::Ok,
            format!(
                "the agent's uid {profile_uid} can read the object store of `{}` (mounted read-only at /paddock-objects in containers)",
                common_dir.display()
            ),
            None,
        ),
        Some((path, mode, owner)) => check(
            "agent access",
            Status::Fail,
            format!(
                "the agent's uid {profile_uid} cannot read `{}` (mode {mode:o}, owner uid {owner}){}: git in a container job of this repository fails",
                path.display(),
                if denied.len() > 1 {
                    format!(" and {} more", denied.len() - 1)
                } else {
                    String::new()
                }
            ),
            Some(&format!(
                "paddock never changes your repository's modes; make its objects readable (chmod -R o+rX {}), or run paddock as the repository's owner",
                common_dir.join("objects").display()
            )),
        ),
    }
}

/// Collects what under one object dir `agent` cannot read (directories also need search).
fn unreadable(objects: &Path, agent: (u32, u32), denied: &mut Vec<(PathBuf, u32, u32)>) {
    let mut look = |path: &Path| -> Option<std::fs::Metadata> {
        let meta = std::fs::metadata(path).ok()?;
        if !allowed(&meta, agent) {
            denied.push((path.to_path_buf(), meta.mode() & 0o7777, meta.uid()));
            return None;
        }
        Some(meta)
    };
    if look(objects).is_none() {
        return;
    }
    let mut loose = 0;
    let Ok(entries) = std::fs::read_dir(objects) else {
        return;
    };
    for entry in entries.filter_map(Result::ok) {
        let dir = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let pack = name == "pack";
        if !(pack
            || name == "info"
            || (name.len() == 2 && name.chars().all(|c| c.is_ascii_hexdigit())))
        {
            continue;
        }
        if !look(&dir).is_some_and(|m| m.is_dir()) {
            continue;
        }
        let Ok(files) = std::fs::read_dir(&dir) else {
            continue;
        };
        for file in files.filter_map(Result::ok) {
            if !pack && loose >= LOOSE_SAMPLE {
                break;
            }
            loose += usize::from(!pack);
            look(&file.path());
        }
    }
}

/// Whether `agent` (uid, gid, no other groups: a container's user) may read `meta`, and
/// search it when it is a directory, by its mode bits.
fn allowed(meta: &std::fs::Metadata, (uid, gid): (u32, u32)) -> bool {
    let mode = meta.mode();
    let bits = if meta.uid() == uid {
        (mode >> 6) & 0o7
    } else if meta.gid() == gid {
        (mode >> 3) & 0o7
    } else {
        mode & 0o7
    };
    let need = if meta.is_dir() { 0o5 } else { 0o4 };
    bits & need == need
}
