//! One git CLI invocation: the safe config that makes host-side git inert against anything
//! an agent wrote (no hooks, no fsmonitor), an explicit git dir, a deadline, and a child
//! that dies with paddock.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use super::GitError;

/// How long a metadata command (branch, update-ref, worktree bookkeeping) may take.
pub(super) const METADATA_TIMEOUT: Duration = Duration::from_secs(120);

/// How long a checkout or a snapshot of a large worktree may take.
pub(super) const CHECKOUT_TIMEOUT: Duration = Duration::from_secs(1800);

/// Config that makes host-side git inert against anything the agent wrote: no hooks, no
/// fsmonitor daemon, a parallel checkout sized to the machine, and blobs over 16 MiB
/// streamed rather than held whole (index-pack of a sync otherwise inflates an agent's
/// 500 MB file in memory to hash it).
const SAFE_CONFIG: &[&str] = &[
    "-c",
    "core.bigFileThreshold=16m",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "checkout.workers=0",
    "-c",
    "advice.detachedHead=false",
];

/// One git CLI invocation with the safe config, an explicit git dir and a deadline.
pub(super) struct GitCall<'a> {
    dir: &'a Path,
    git_dir: Option<&'a Path>,
    work_tree: Option<&'a Path>,
    args: Vec<OsString>,
    env: Vec<(&'static str, OsString)>,
    timeout: Duration,
    /// A file to feed on standard input, from this offset.
    stdin: Option<(PathBuf, u64)>,
}

impl<'a> GitCall<'a> {
    pub(super) fn new(dir: &'a Path, args: &[&str]) -> Self {
        GitCall {
            dir,
            git_dir: None,
            work_tree: None,
            args: args.iter().map(OsString::from).collect(),
            env: Vec::new(),
            timeout: METADATA_TIMEOUT,
            stdin: None,
        }
    }

    pub(super) fn stdin_from(mut self, file: &Path, offset: u64) -> Self {
        self.stdin = Some((file.to_path_buf(), offset));
        self
    }

    pub(super) fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub(super) fn git_dir(mut self, git_dir: &'a Path) -> Self {
        self.git_dir = Some(git_dir);
        self
    }

    pub(super) fn work_tree(mut self, work_tree: &'a Path) -> Self {
        self.work_tree = Some(work_tree);
        self
    }

    pub(super) fn env(mut self, key: &'static str, value: impl Into<OsString>) -> Self {
        self.env.push((key, value.into()));
        self
    }

    pub(super) fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub(super) async fn run(self) -> Result<String, GitError> {
        let (_, stdout) = self.output(&[0]).await?;
        Ok(String::from_utf8_lossy(&stdout).trim_end().to_string())
    }

    /// Runs git; an exit code in `accepted` is a success (`merge-tree` exits 1 for a merge
    /// with conflicts), returned with the raw standard output.
    pub(super) async fn output(self, accepted: &[i32]) -> Result<(i32, Vec<u8>), GitError> {
        // As logs and errors show it: a URL's password (a user's configured push URL) never.
        let shown = self
            .args
            .iter()
            .map(|a| super::push::redact_url(&a.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(" ");
        let mut command = Command::new("git");
        command.args(SAFE_CONFIG);
        if let Some(git_dir) = self.git_dir {
            command.arg("--git-dir").arg(git_dir);
        }
        if let Some(work_tree) = self.work_tree {
            command.arg("--work-tree").arg(work_tree);
        }
        command
            .args(&self.args)
            .current_dir(self.dir)
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env_remove("GIT_INDEX_FILE")
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_OBJECT_DIRECTORY")
            .env_remove("GIT_ALTERNATE_OBJECT_DIRECTORIES")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(match &self.stdin {
                None => Stdio::null(),
                Some((path, offset)) => {
                    use std::io::{Seek, SeekFrom};
                    let mut file =
                        std::fs::File::open(path).map_err(|source| GitError::Spawn { source })?;
                    file.seek(SeekFrom::Start(*offset))
                        .map_err(|source| GitError::Spawn { source })?;
                    Stdio::from(file)
                }
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // If paddock is killed mid-operation, git dies with it rather than finishing
        // unsupervised after a sweep has already cleaned up.
        crate::sys::ChildSetup {
            die_with_parent: true,
            ..Default::default()
        }
        .apply(&mut command);
        let started = std::time::Instant::now();
        let child = command
            .spawn()
            .map_err(|source| GitError::Spawn { source })?;
        let output = match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Ok(output) => output.map_err(|source| GitError::Spawn { source })?,
            Err(_) => {
                return Err(GitError::Timeout {
                    args: shown,
                    dir: self.dir.to_path_buf(),
                    after: self.timeout,
                });
            }
        };
        tracing::debug!(args = %shown, ms = crate::units::millis(started.elapsed()), "git");
        let code = output.status.code();
        if let Some(code) = code.filter(|code| accepted.contains(code)) {
            Ok((code, output.stdout))
        } else {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let stderr = stderr.trim();
            Err(GitError::Command {
                args: shown,
                dir: self.dir.to_path_buf(),
                stderr: if stderr.is_empty() {
                    format!("exit status {}", output.status)
                } else {
                    stderr.lines().last().unwrap_or_default().to_string()
                },
            })
        }
    }
}
