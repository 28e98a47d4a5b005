//! `paddock cp`: copies one file between this machine and a job's workspace, in either
//! direction (`JOB:PATH` names the job's side, `-` is stdin or stdout), through the file API.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use clap::Args;

use super::exit;
use super::render::print_json;
use crate::engine::FILE_CAP;
use crate::error::{Error, Result};
use crate::ops::Operations;

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
}

/// `JOB:PATH` → (job, path). A local path with a colon is written `./a:b` or absolute.
fn remote(arg: &str) -> Option<(&str, &str)> {
    let (job, path) = arg.split_once(':')?;
    (!job.is_empty() && !job.contains('/') && !job.starts_with('.')).then_some((job, path))
}

fn local_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::LocalFile {
        action,
        path,
        source,
    }
}

pub async fn run(ops: &impl Operations, args: CpArgs) -> Result<i32> {
    match (remote(&args.source), remote(&args.target)) {
        (Some((job, path)), None) => {
            let bytes = ops.read_file(job, path).await?;
            if args.target == "-" {
                let mut out = std::io::stdout().lock();
                out.write_all(&bytes)
                    .and_then(|()| out.flush())
                    .map_err(local_error("write", Path::new("-")))?;
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
            std::fs::write(&target, &bytes).map_err(local_error("write", &target))?;
            Ok(exit::OK)
        }
        (None, Some((job, path))) => {
            let source = Path::new(&args.source);
            let bytes = if args.source == "-" {
                read_capped(std::io::stdin().lock(), source)?
            } else {
                let file = std::fs::File::open(source).map_err(local_error("read", source))?;
                read_capped(file, source)?
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
            let written = ops.write_file(job, &path, bytes).await?;
            if args.json {
                print_json(&written);
            }
            Ok(exit::OK)
        }
        _ => {
            tell!(
                "error: exactly one of SOURCE and TARGET must be JOB:PATH (a local path with a colon: ./a:b)"
            );
            Ok(exit::USAGE)
        }
    }
}

/// The bytes of a local source, refused past the cap without reading more of it.
fn read_capped(reader: impl Read, source: &Path) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    reader
        .take(FILE_CAP + 1)
        .read_to_end(&mut bytes)
        .map_err(local_error("read", source))?;
    if bytes.len() as u64 > FILE_CAP {
        let size = std::fs::metadata(source).map_or(bytes.len() as u64, |m| m.len());
        return Err(Error::FileTooLarge {
            path: source.display().to_string(),
            size,
            cap: FILE_CAP,
        });
    }
    Ok(bytes)
}
