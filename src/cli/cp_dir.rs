//! `paddock cp -r`: a directory between this machine and a job, as a tar that streams
//! through the job's sandbox (made and unpacked there as the job's user).
//!
//! Into a job, the local directory's contents go into the job's directory (made if
//! missing, merged if there), links kept as links. Out of a job, the tar is the agent's
//! work, so it is unpacked here as untrusted: only directories and regular files, each
//! by a path of plain names beneath a new local directory (no `..`, no absolute path),
//! modes without setuid or setgid bits; a link, a hard link or a device is skipped and
//! counted. It is unpacked into a hidden directory beside the target, renamed to the
//! target's name only when the whole tar came.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use super::exit;
use super::render::print_json;
use crate::error::{Error, Result};
use crate::ops::Operations;
use crate::wire::ExecUser;

/// `JOB:PATH` → (job, path). A local path with a colon is written `./a:b` or absolute.
fn remote(arg: &str) -> Option<(&str, &str)> {
    let (job, path) = arg.split_once(':')?;
    (!job.is_empty() && !job.contains('/') && !job.starts_with('.')).then_some((job, path))
}

pub(super) fn local_error(
    action: &'static str,
    path: &Path,
) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::LocalFile {
        action,
        path,
        source,
    }
}

/// A copy's direction: which side is the job's (`JOB:PATH`), exactly one of the two.
pub(super) enum Copy<'a> {
    Out {
        job: &'a str,
        path: &'a str,
        local: &'a str,
    },
    In {
        local: &'a str,
        job: &'a str,
        path: &'a str,
    },
}

impl<'a> Copy<'a> {
    /// The copy `SOURCE TARGET` names, or `None` (told on the terminal) when not exactly
    /// one side is a job's.
    pub(super) fn of(source: &'a str, target: &'a str) -> Option<Copy<'a>> {
        match (remote(source), remote(target)) {
            (Some((job, path)), None) => Some(Copy::Out {
                job,
                path,
                local: target,
            }),
            (None, Some((job, path))) => Some(Copy::In {
                local: source,
                job,
                path,
            }),
            _ => {
                tell!(
                    "error: exactly one of SOURCE and TARGET must be JOB:PATH (a local path with a colon: ./a:b)"
                );
                None
            }
        }
    }
}

pub(super) async fn run(
    ops: &impl Operations,
    copy: Copy<'_>,
    user: ExecUser,
    json: bool,
) -> Result<i32> {
    match copy {
        Copy::Out { job, path, local } => {
            let skipped = from_job(ops, (job, path, user), Path::new(local)).await?;
            if skipped > 0 {
                tell!("paddock: skipped {skipped} links and special files of the job's directory");
            }
        }
        Copy::In { local, job, path } => {
            let written = into_job(ops, Path::new(local), (job, path, user)).await?;
            if json {
                print_json(&written);
            }
        }
    }
    Ok(exit::OK)
}

/// Streams `local` (a directory) as a tar into the job's `path`.
async fn into_job(
    ops: &impl Operations,
    local: &Path,
    (job, path, user): (&str, &str, ExecUser),
) -> Result<crate::wire::FileWritten> {
    if !local.is_dir() {
        return Err(Error::FileKind {
            path: local.display().to_string(),
            what: "not a directory (without -r, cp copies one file)",
        });
    }
    let (writer, reader) = tokio::io::duplex(1 << 16);
    let dir = local.to_path_buf();
    // The tar is made on a thread as the job's side reads it.
    let making = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        let mut builder = tar::Builder::new(tokio_util::io::SyncIoBridge::new(writer));
        builder.follow_symlinks(false);
        builder.append_dir_all(".", &dir)?;
        builder.into_inner()?.shutdown()
    });
    let written = ops.write_tar(job, path, Box::pin(reader), user).await;
    let made = making
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|made| made);
    match made {
        // The job's side stopped reading (it refused, or failed): its answer says why.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe && written.is_err() => written,
        // Else the local side's own failure says more than the job's (a cut tar).
        Err(error) => Err(local_error("read", local)(error)),
        Ok(()) => written,
    }
}

/// Streams the job's directory `path` out and unpacks it as a new local directory
/// `target`; the count of entries skipped (links, special files).
async fn from_job(
    ops: &impl Operations,
    (job, path, user): (&str, &str, ExecUser),
    target: &Path,
) -> Result<usize> {
    if target.exists() {
        return Err(Error::LocalFile {
            action: "make",
            path: target.to_path_buf(),
            source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        });
    }
    let tar = ops.read_tar(job, path, user).await?;
    let name = target
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let part = target.with_file_name(format!(
        ".{name}.paddock-part-{}",
        crate::ids::random_hex(6)
    ));
    std::fs::create_dir(&part).map_err(local_error("make", &part))?;
    let into = part.clone();
    let unpacked =
        tokio::task::spawn_blocking(move || unpack(tokio_util::io::SyncIoBridge::new(tar), &into))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|unpacked| unpacked);
    let finished = unpacked.and_then(|skipped| std::fs::rename(&part, target).map(|()| skipped));
    if finished.is_err() {
        let _ = std::fs::remove_dir_all(&part);
    }
    finished.map_err(local_error("copy into", target))
}

/// The plain-name path of a tar entry beneath the target, or `None` (the root itself, or
/// a path with `..`, a root or a prefix: never followed).
fn entry_path(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// Unpacks an untrusted tar beneath `into` (see the module docs); the count skipped.
fn unpack(reader: impl Read, into: &Path) -> std::io::Result<usize> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut archive = tar::Archive::new(reader);
    let mut skipped = 0;
    for entry in archive.entries()? {
        let mut entry = entry?;
        let kind = entry.header().entry_type();
        let Some(relative) = entry_path(&entry.path()?) else {
            if !kind.is_dir() {
                skipped += 1;
            }
            continue;
        };
        let path = into.join(&relative);
        let mode = entry.header().mode().unwrap_or(0o644) & 0o777;
        match kind {
            tar::EntryType::Directory => {
                std::fs::create_dir_all(&path)?;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode | 0o700))?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                // A new file of its own: nothing the tar made before is a link (links are
                // never unpacked), so no name here leads out.
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&path)?;
                std::io::copy(&mut entry, &mut file)?;
                file.set_permissions(std::fs::Permissions::from_mode(mode))?;
            }
            _ => skipped += 1,
        }
    }
    Ok(skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_untrusted_tar_unpacks_only_plain_files_and_directories_beneath_the_target() {
        let mut builder = tar::Builder::new(Vec::new());
        let mut add = |path: &str, kind: tar::EntryType, body: &[u8], link: Option<&str>| {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(kind);
            header.set_mode(if kind.is_dir() { 0o755 } else { 0o4755 });
            header.set_size(body.len() as u64);
            if let Some(link) = link {
                header.set_link_name(link).unwrap();
            }
            // Set by hand: `set_path` refuses `..`, which a hostile tar holds.
            let name = &mut header.as_old_mut().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
            header.set_cksum();
            builder.append(&header, body).unwrap();
        };
        add("./", tar::EntryType::Directory, b"", None);
        add("./src/", tar::EntryType::Directory, b"", None);
        add("./src/a.txt", tar::EntryType::Regular, b"a", None);
        add("./out", tar::EntryType::Symlink, b"", Some("/etc"));
        add("./out/passwd", tar::EntryType::Regular, b"x", None);
        add("../escape.txt", tar::EntryType::Regular, b"x", None);
        add("./hard", tar::EntryType::Link, b"", Some("/etc/passwd"));
        let tar = builder.into_inner().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let into = dir.path().join("into");
        std::fs::create_dir(&into).unwrap();
        let skipped = unpack(tar.as_slice(), &into).unwrap();
        assert_eq!(std::fs::read(into.join("src/a.txt")).unwrap(), b"a");
        let mode = std::fs::metadata(into.join("src/a.txt"))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o7777,
            0o755
        );
        assert!(!dir.path().join("escape.txt").exists());
        assert!(std::fs::symlink_metadata(into.join("out")).is_err() || into.join("out").is_dir());
        assert!(!into.join("hard").exists());
        // The link, the hard link and the `..` entry.
        assert_eq!(skipped, 3);
    }
}
