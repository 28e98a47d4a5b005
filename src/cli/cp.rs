//! `paddock cp`: copies one file between this machine and a job, in either direction
//! (`JOB:PATH` names the job's side, `-` is stdin or stdout), through the file API, as it
//! streams: no size cap, and no partial file under either side's name.

use std::io::Seek as _;
use std::os::fd::AsFd as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use clap::Args;

use super::cp_dir::{Copy, local_error};
use super::exit;
use super::render::print_json;
use crate::error::{Error, Result};
use crate::ops::Operations;
use crate::wire::{ExecUser, FileBytes};

#[derive(Debug, Args)]
pub struct CpArgs {
    /// `JOB:PATH` (a file of the job's workspace, as the agent sees it or relative to the
    /// workspace), a local file, or `-` for stdin.
    source: String,
    /// `JOB:PATH` (ending in `/`: the source's name in that directory), a local file or
    /// directory, or `-` for stdout.
    target: String,
    /// Print what was written into the job (`{"path", "size", "created"}`) as JSON.
    #[arg(long)]
    json: bool,
    /// A directory, as a tar through the job's sandbox: its contents go into the target
    /// directory (into the job: made if missing, merged if there; out of it: a new local
    /// directory). Links and special files do not come out of a job.
    #[arg(short = 'r', long)]
    recursive: bool,
    /// From a job: refuse a file larger than this (exit 4, nothing written), e.g. `50m`.
    #[arg(long, value_name = "SIZE")]
    max: Option<crate::units::ByteSize>,
    /// The job's side as `agent` (the default), `root` or UID[:GID], with that user's
    /// permissions; another user than the agent only in a runsc or microvm job.
    #[arg(short = 'u', long, value_name = "USER", default_value_t)]
    user: ExecUser,
}

pub async fn run(ops: &impl Operations, args: CpArgs) -> Result<i32> {
    let Some(copy) = Copy::of(&args.source, &args.target) else {
        return Ok(exit::USAGE);
    };
    if args.recursive {
        return super::cp_dir::run(ops, copy, args.user, args.json).await;
    }
    match copy {
        Copy::Out { job, path, .. } => {
            let bytes = ops
                .read_file(job, path, args.user, args.max.map(|m| m.0))
                .await?;
            if args.target == "-" {
                copy_to(bytes, tokio::io::stdout(), Path::new("-")).await?;
                return Ok(exit::OK);
            }
            let mut target = PathBuf::from(&args.target);
            if target.is_dir() {
                let name = Path::new(path).file_name().ok_or_else(|| Error::FileKind {
                    path: path.to_string(),
                    what: "not a file name to copy into a directory",
                })?;
                target.push(name);
            }
            // Beside the target first, renamed over it when every byte came.
            let part = part_path(&target);
            let file = tokio::fs::File::create(&part)
                .await
                .map_err(local_error("write", &part))?;
            let copied = copy_to(bytes, file, &part).await.and_then(|()| {
                std::fs::rename(&part, &target).map_err(local_error("write", &target))
            });
            if copied.is_err() {
                let _ = std::fs::remove_file(&part);
            }
            copied?;
            Ok(exit::OK)
        }
        Copy::In { job, path, .. } => {
            let source = Path::new(&args.source);
            let bytes = if args.source == "-" {
                local_source(
                    std::fs::File::from(
                        std::io::stdin()
                            .as_fd()
                            .try_clone_to_owned()
                            .map_err(local_error("read", source))?,
                    ),
                    source,
                )?
            } else {
                let file = std::fs::File::open(source).map_err(local_error("read", source))?;
                local_source(file, source)?
            };
            let mut path = path.to_string();
            if path.is_empty() || path.ends_with('/') {
                let name = source.file_name().filter(|_| args.source != "-");
                let name = name.ok_or_else(|| Error::FileKind {
                    path: path.clone(),
                    what: "a directory: name the file to write",
                })?;
                path.push_str(&name.to_string_lossy());
            }
            let written = ops.write_file(job, &path, bytes, args.user).await?;
            if args.json {
                print_json(&written);
            }
            Ok(exit::OK)
        }
    }
}

/// `target`'s partial file while a copy comes: hidden, beside it, never a name in use.
fn part_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    target.with_file_name(format!(
        ".{name}.paddock-part-{}",
        crate::ids::random_hex(6)
    ))
}

/// Copies a job's file to `out`, all of it: a transfer that ends short is an error.
pub(super) async fn copy_to(
    bytes: FileBytes,
    mut out: impl tokio::io::AsyncWrite + Unpin,
    shown: &Path,
) -> Result<()> {
    use tokio::io::AsyncWriteExt as _;
    let size = bytes.size;
    let mut reader = tokio::io::AsyncReadExt::take(bytes.reader, size);
    let copied = tokio::io::copy(&mut reader, &mut out)
        .await
        .map_err(local_error("copy", shown))?;
    out.flush().await.map_err(local_error("write", shown))?;
    if copied != size {
        return Err(Error::LocalFile {
            action: "copy",
            path: shown.to_path_buf(),
            source: crate::wire::cut_short(size, copied),
        });
    }
    Ok(())
}

/// A local source as it streams: a regular file by its size; anything else (a pipe) is
/// first kept in an unnamed file of the temporary directory, so its size is known before
/// the write starts (the job's side checks the write whole against it).
fn local_source(mut file: std::fs::File, source: &Path) -> Result<FileBytes> {
    let meta = file.metadata().map_err(local_error("read", source))?;
    if !meta.is_file() {
        let spool_path =
            std::env::temp_dir().join(format!(".paddock-cp-{}", crate::ids::random_hex(8)));
        let mut spool = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&spool_path)
            .map_err(local_error("keep", &spool_path))?;
        let _ = std::fs::remove_file(&spool_path);
        std::io::copy(&mut file, &mut spool).map_err(local_error("read", source))?;
        spool
            .seek(std::io::SeekFrom::Start(0))
            .map_err(local_error("read", source))?;
        file = spool;
    }
    let size = file.metadata().map_err(local_error("read", source))?.len();
    Ok(FileBytes {
        size,
        reader: Box::pin(tokio::fs::File::from_std(file)),
    })
}
