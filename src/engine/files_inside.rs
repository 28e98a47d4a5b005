//! The file API beyond the workspace: an absolute path outside it (`/tmp/x`,
//! `/etc/hostname`) of a job that has a sandbox is read, written and listed **inside** that
//! sandbox, by a short shell script run as the job's user through the runtime's exec. So
//! the answer is the sandbox's file and the sandbox's rules: its own `/etc/hostname`, never
//! the host's file of that name; a file the agent cannot read is a permission error; a
//! read-only file is not written. No host path is opened for such a path, so nothing the
//! agent planted (a link, a mount, a swapped directory) can lead the host anywhere.
//!
//! The script answers by its exit code (the table in [`answer`]) before a byte of content
//! moves. A write goes to a temporary file beside the target that is renamed over it only
//! when every byte arrived (its size checked), so a cut transfer leaves nothing under the
//! target's name. Sizes stay within the file API's cap both ways, as for the workspace's
//! files. Jobs without a sandbox (the process runtime) have no such view: their paths stay
//! within the workspace.

use std::time::Duration;

use super::Paddock;
use crate::error::{Error, Result};
use crate::job::JobRecord;
use crate::output::{OutputSink, StreamKind};
use crate::runtime::ExecRequest;
use crate::runtime::exec::ExecStdin;
use crate::wire::{FILE_CAP, FileEntry, FileKind, FileList, FileWritten};

/// How long one file operation inside the sandbox may take.
const INSIDE_TIMEOUT: Duration = Duration::from_secs(120);

/// `$1` the operation, `$2` the path, `$3` the cap (a read gives one byte past it, which
/// tells a larger file) or the size to write. Exit codes: 80 no such file, 81 a directory,
/// 82 not a regular file (or, to list, not a directory), 83 permission denied, 85 the write
/// failed, 86 the write was cut short. Sizes are counted, not `stat`ed: gVisor refuses
/// `statx` on some of its files (`/etc/hostname`).
const SCRIPT: &str = r#"p=$2
case $1 in
read)
  [ -e "$p" ] || exit 80
  [ -d "$p" ] && exit 81
  [ -f "$p" ] || exit 82
  [ -r "$p" ] || exit 83
  exec head -c "$(($3 + 1))" -- "$p" ;;
write)
  [ -d "$p" ] && exit 81
  d=$(dirname -- "$p")
  [ -d "$d" ] || mkdir -p -- "$d" 2>/dev/null || exit 83
  if [ -e "$p" ]; then
    [ -f "$p" ] || exit 82
    [ -w "$p" ] || exit 83
    new=false
  else
    new=true
  fi
  [ -w "$d" ] && [ -x "$d" ] || exit 83
  t="$d/.paddock-put.$$"
  cat > "$t" 2>/dev/null || { rm -f -- "$t"; exit 85; }
  [ "$(($(wc -c < "$t")))" = "$3" ] || { rm -f -- "$t"; exit 86; }
  [ "$new" = true ] || chmod --reference="$p" -- "$t" 2>/dev/null
  mv -f -- "$t" "$p" 2>/dev/null || { rm -f -- "$t"; exit 85; }
  echo "$new"; exit 0 ;;
list)
  [ -e "$p" ] || exit 80
  [ -d "$p" ] || exit 82
  [ -r "$p" ] && [ -x "$p" ] || exit 83
  exec find "$p" -mindepth 1 -maxdepth 1 -printf '%y\0%s\0%f\0%l\0' ;;
esac
exit 2"#;

/// Whether `input` names a path the sandbox, not the workspace, answers for: absolute,
/// outside the workspace the agent sees, and without `..` or NUL.
pub(super) fn is_inside_path(record: &JobRecord, input: &str) -> bool {
    let path = std::path::Path::new(input);
    !input.contains('\0')
        && path.is_absolute()
        && !path.starts_with(&record.limits.workspace_dir)
        && !path.starts_with(&record.worktree)
}

/// Keeps a script's stdout, up to `cap` bytes (its stderr is the result's, capped there).
struct Collect {
    out: Vec<u8>,
    cap: usize,
    over: bool,
}

impl OutputSink for Collect {
    fn write(&mut self, stream: StreamKind, bytes: &[u8]) {
        if stream != StreamKind::Stdout {
            return;
        }
        let room = self.cap.saturating_sub(self.out.len());
        self.out.extend_from_slice(&bytes[..bytes.len().min(room)]);
        self.over |= bytes.len() > room;
    }
}

/// The error a script's exit code names (`None`: it succeeded).
fn answer(code: i64, path: &str, action: &'static str, stderr: &str) -> Option<Error> {
    let path = path.to_string();
    Some(match code {
        0 => return None,
        80 => Error::FileNotFound { path },
        81 => Error::FileKind {
            path,
            what: "a directory",
        },
        82 if action == "list" => Error::FileKind {
            path,
            what: "not a directory",
        },
        82 => Error::FileKind {
            path,
            what: "not a regular file",
        },
        83 => Error::FilePermission { path, action },
        _ => Error::FileIo {
            action,
            path,
            source: std::io::Error::other(format!(
                "the sandbox's script exited {code}: {}",
                stderr.trim().chars().take(300).collect::<String>()
            )),
        },
    })
}

impl Paddock {
    /// Runs the script in the job's sandbox, as the job's user, feeding `stdin`.
    async fn inside(
        &self,
        record: &JobRecord,
        args: [&str; 3],
        stdin: ExecStdin,
        cap: usize,
    ) -> Result<(i64, Vec<u8>, bool, String)> {
        super::checkpoint::made(record)?;
        if let Some(since) = record.paused_at {
            return Err(Error::Paused {
                id: record.id.clone(),
                since,
            });
        }
        let mut cmd = vec!["sh".into(), "-c".into(), SCRIPT.into(), "sh".into()];
        cmd.extend(args.iter().map(|a| (*a).to_string()));
        let request = ExecRequest {
            cmd,
            env: Default::default(),
            workdir: None,
            timeout: INSIDE_TIMEOUT,
            kill_policy: crate::config::KillPolicy::Hard,
            grace: Duration::ZERO,
            output_cap: 64 << 10,
            after: None,
            stdin,
        };
        let mut sink = Collect {
            out: Vec::new(),
            cap,
            over: false,
        };
        let outcome = self
            .runtime_of(record)
            .exec(record, &request, &mut sink)
            .await?;
        let result = outcome.result;
        if result.timed_out {
            return Err(Error::FileIo {
                action: "reach the sandbox for",
                path: args[1].to_string(),
                source: std::io::Error::other("the sandbox did not answer in time"),
            });
        }
        Ok((result.exit_code, sink.out, sink.over, result.stderr))
    }

    /// A file of the sandbox's own filesystem, as the job's user reads it.
    pub(super) async fn read_inside(&self, record: &JobRecord, path: &str) -> Result<Vec<u8>> {
        let cap = usize::try_from(FILE_CAP).expect("the cap fits") + 1;
        let (code, bytes, over, stderr) = self
            .inside(
                record,
                ["read", path, &FILE_CAP.to_string()],
                ExecStdin::default(),
                cap,
            )
            .await?;
        if let Some(error) = answer(code, path, "read", &stderr) {
            return Err(error);
        }
        if over || bytes.len() as u64 > FILE_CAP {
            return Err(Error::FileTooLarge {
                path: path.to_string(),
                size: bytes.len() as u64,
                cap: FILE_CAP,
            });
        }
        Ok(bytes)
    }

    /// Writes a file of the sandbox's own filesystem as the job's user, whole or not at all.
    pub(super) async fn write_inside(
        &self,
        record: &JobRecord,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<FileWritten> {
        let size = bytes.len() as u64;
        let (code, out, _, stderr) = self
            .inside(
                record,
                ["write", path, &size.to_string()],
                ExecStdin::bytes(bytes),
                64,
            )
            .await?;
        if let Some(error) = answer(code, path, "write", &stderr) {
            return Err(error);
        }
        Ok(FileWritten {
            path: path.to_string(),
            size,
            created: String::from_utf8_lossy(&out).trim() == "true",
        })
    }

    /// A directory of the sandbox's own filesystem, as the job's user lists it.
    pub(super) async fn list_inside(&self, record: &JobRecord, path: &str) -> Result<FileList> {
        let cap = usize::try_from(FILE_CAP).expect("the cap fits");
        let (code, out, over, stderr) = self
            .inside(record, ["list", path, "0"], ExecStdin::default(), cap)
            .await?;
        if let Some(error) = answer(code, path, "list", &stderr) {
            return Err(error);
        }
        if over {
            return Err(Error::FileTooLarge {
                path: path.to_string(),
                size: FILE_CAP + 1,
                cap: FILE_CAP,
            });
        }
        Ok(FileList {
            path: path.to_string(),
            entries: entries(&out),
        })
    }
}

/// The entries of `find -printf '%y\0%s\0%f\0%l\0'`, sorted by name.
fn entries(out: &[u8]) -> Vec<FileEntry> {
    let fields: Vec<&[u8]> = out.split(|b| *b == 0).collect();
    let mut entries: Vec<FileEntry> = fields
        .chunks_exact(4)
        .map(|entry| {
            let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
            let kind = match entry[0] {
                b"f" => FileKind::File,
                b"d" => FileKind::Dir,
                b"l" => FileKind::Symlink,
                _ => FileKind::Other,
            };
            FileEntry {
                name: text(entry[2]),
                kind,
                size: if kind == FileKind::File {
                    text(entry[1]).parse().unwrap_or(0)
                } else {
                    0
                },
                target: (kind == FileKind::Symlink).then(|| text(entry[3])),
            }
        })
        .collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_keeps_names_with_tabs_and_newlines_and_link_targets() {
        let out = b"f\x003\x00a\tb\nc\x00\x00l\x005\x00ln\x00/etc/x\x00d\x004096\x00dir\x00\x00";
        let listed = entries(out);
        let names: Vec<&str> = listed.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["a\tb\nc", "dir", "ln"]);
        assert_eq!(listed[0].size, 3);
        assert_eq!(listed[1].size, 0, "a directory's size is not shown");
        assert_eq!(listed[2].target.as_deref(), Some("/etc/x"));
    }

    #[test]
    fn each_exit_code_of_the_script_is_its_own_error() {
        let kind = |code| answer(code, "/p", "read", "").map(|e| e.kind());
        assert_eq!(kind(0), None);
        assert_eq!(kind(80), Some(crate::ErrorKind::NotFound));
        assert_eq!(kind(81), Some(crate::ErrorKind::InvalidInput));
        assert_eq!(kind(83), Some(crate::ErrorKind::PermissionDenied));
        assert_eq!(kind(86), Some(crate::ErrorKind::Internal));
    }
}
