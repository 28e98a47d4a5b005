//! The host half of the sync protocol: how a job's branch and uncommitted work get from its
//! private git dir into the user's repository without any host-side git ever using a file
//! the agent could have written.
//!
//! Inside the job's sandbox, `sync.sh` prints a header, the list of untracked paths and,
//! when the host lacks something, a git bundle. Here, [`SyncCapture`] takes that stream
//! with size caps, [`ScratchRepo`] (a bare repository under `$PADDOCK_HOME` that borrows the
//! user's objects through alternates) checks that the bundle holds exactly the refs the
//! header names and fetches it with `transfer.fsckObjects`, and [`super::GitRepo::publish`]
//! then fetches from the scratch repository into the user's repository, writing only the
//! job's branch and paddock's own `refs/paddock/*`. Host-side reads of a job (log, changes,
//! diff) come from the scratch repository afterwards, through git2.
//!
//! Invariants: the agent's bytes reach the host only as this stream; a sync that fails at
//! any step leaves the user's refs where they were.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{
    ChangeSummary, CommitInfo, FileChange, GitCall, GitError, blocking, commits_between,
    file_changes, read_err,
};
use crate::output::{OutputSink, StreamKind};

/// The script the sandbox runs; its header format is documented at its top.
pub const SYNC_SCRIPT: &str = include_str!("sync.sh");

/// The most a sync may send (untracked list plus bundle) before it is refused.
pub const MAX_SYNC_BYTES: u64 = 2 << 30;
/// The most the untracked list may take.
const MAX_UNTRACKED_BYTES: u64 = 8 << 20;
/// The most of the sandbox's stderr kept for an error message.
const MAX_STDERR_BYTES: usize = 16 << 10;
/// Where the scratch repository keeps the job's branch and uncommitted-work snapshot.
pub const SCRATCH_BRANCH: &str = "refs/sync/branch";
pub const SCRATCH_STATE: &str = "refs/sync/state";

/// The uncommitted work a sync found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkState {
    /// Not asked for (a sync after an exec only brings the branch).
    Unknown,
    /// The worktree matches HEAD.
    Clean,
    /// A commit whose tree is the worktree and whose parent is HEAD.
    Snapshot(String),
}

/// The header line of a sync stream, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncHeader {
    pub tip: Option<String>,
    pub state: WorkState,
    pub bundle: bool,
    pub untracked_bytes: u64,
}

fn is_object_id(text: &str) -> bool {
    matches!(text.len(), 40 | 64)
        && text
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

impl SyncHeader {
    /// Parses `paddock-sync 1 TIP STATE BUNDLE UNTRACKED_BYTES`.
    pub fn parse(line: &str) -> Result<SyncHeader, String> {
        let fields: Vec<&str> = line.trim_end().split(' ').collect();
        let [magic, version, tip, state, bundle, untracked] = fields[..] else {
            return Err(format!("malformed sync header `{}`", shown(line)));
        };
        if magic != "paddock-sync" || version != "1" {
            return Err(format!("unknown sync header `{}`", shown(line)));
        }
        let object = |text: &str| -> Result<Option<String>, String> {
            match text {
                "-" => Ok(None),
                id if is_object_id(id) => Ok(Some(id.to_string())),
                other => Err(format!("`{}` is not an object id", shown(other))),
            }
        };
        let state = match state {
            "-" => WorkState::Unknown,
            "clean" => WorkState::Clean,
            id => WorkState::Snapshot(object(id)?.ok_or("missing state")?),
        };
        Ok(SyncHeader {
            tip: object(tip)?,
            state,
            bundle: match bundle {
                "bundle" => true,
                "-" => false,
                other => return Err(format!("bad bundle flag `{}`", shown(other))),
            },
            untracked_bytes: untracked
                .parse()
                .map_err(|_| format!("bad untracked length `{}`", shown(untracked)))?,
        })
    }
}

/// At most 80 printable characters of agent-made text, for an error message.
fn shown(text: &str) -> String {
    text.chars()
        .take(80)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// Receives the sandbox's output: the header, the untracked list (kept in memory, capped)
/// and the bundle (written to a host-owned file, capped). Anything past a cap is dropped and
/// the sync fails.
pub struct SyncCapture {
    header_line: Vec<u8>,
    header: Option<Result<SyncHeader, String>>,
    untracked: Vec<u8>,
    bundle_path: PathBuf,
    bundle: Option<std::fs::File>,
    bundle_bytes: u64,
    stderr: Vec<u8>,
    failure: Option<String>,
}

impl SyncCapture {
    /// A capture that writes the bundle, if any, to `bundle_path` (replaced).
    pub fn new(bundle_path: PathBuf) -> SyncCapture {
        SyncCapture {
            header_line: Vec::new(),
            header: None,
            untracked: Vec::new(),
            bundle_path,
            bundle: None,
            bundle_bytes: 0,
            stderr: Vec::new(),
            failure: None,
        }
    }

    fn fail(&mut self, message: String) {
        if self.failure.is_none() {
            self.failure = Some(message);
        }
    }

    fn take_stdout(&mut self, mut bytes: &[u8]) {
        if self.failure.is_some() {
            return;
        }
        if self.header.is_none() {
            let end = bytes.iter().position(|&b| b == b'\n');
            let (line, rest) = match end {
                Some(end) => (&bytes[..end], &bytes[end + 1..]),
                None => (bytes, &[][..]),
            };
            self.header_line.extend_from_slice(line);
            if self.header_line.len() > 512 {
                return self.fail("the sync header is longer than 512 bytes".into());
            }
            if end.is_none() {
                return;
            }
            let text = String::from_utf8_lossy(&self.header_line).into_owned();
            let header = SyncHeader::parse(&text);
            if let Ok(header) = &header
                && header.untracked_bytes > MAX_UNTRACKED_BYTES
            {
                return self.fail(format!(
                    "the untracked list has {} bytes (at most {MAX_UNTRACKED_BYTES})",
                    header.untracked_bytes
                ));
            }
            self.header = Some(header);
            bytes = rest;
        }
        let Some(Ok(header)) = &self.header else {
            return;
        };
        let wanted = header.untracked_bytes as usize
            - self.untracked.len().min(header.untracked_bytes as usize);
        let take = wanted.min(bytes.len());
        self.untracked.extend_from_slice(&bytes[..take]);
        bytes = &bytes[take..];
        if bytes.is_empty() {
            return;
        }
        if !header.bundle {
            return self.fail("the sandbox sent data after the sync stream".into());
        }
        self.bundle_bytes += bytes.len() as u64;
        if self.bundle_bytes > MAX_SYNC_BYTES {
            return self.fail(format!("the bundle is larger than {MAX_SYNC_BYTES} bytes"));
        }
        if self.bundle.is_none() {
            match std::fs::File::create(&self.bundle_path) {
                Ok(file) => self.bundle = Some(file),
                Err(error) => {
                    let path = self.bundle_path.display().to_string();
                    return self.fail(format!("failed to write `{path}`: {error}"));
                }
            }
        }
        if let Some(file) = &mut self.bundle
            && let Err(error) = file.write_all(bytes)
        {
            let path = self.bundle_path.display().to_string();
            self.fail(format!("failed to write `{path}`: {error}"));
        }
    }

    /// The checked stream: header, untracked paths and the bundle file (when one came), or
    /// why it is unusable. `exit_code` is the sandbox script's.
    pub fn finish(mut self, exit_code: i64) -> Result<Received, String> {
        let stderr = String::from_utf8_lossy(&self.stderr);
        let stderr = stderr.trim();
        let context = if stderr.is_empty() {
            String::new()
        } else {
            format!(": {}", shown(stderr.lines().last().unwrap_or_default()))
        };
        if let Some(failure) = self.failure.take() {
            return Err(failure);
        }
        if exit_code != 0 {
            return Err(format!("the sync script exited {exit_code}{context}"));
        }
        let header = match self.header.take() {
            Some(Ok(header)) => header,
            Some(Err(error)) => return Err(error),
            None => return Err(format!("the sandbox sent no sync header{context}")),
        };
        if (self.untracked.len() as u64) < header.untracked_bytes {
            return Err("the untracked list was cut short".into());
        }
        if header.bundle && self.bundle_bytes == 0 {
            return Err("the header announced a bundle that never came".into());
        }
        if let Some(file) = self.bundle.take() {
            file.sync_all()
                .map_err(|e| format!("failed to flush the bundle: {e}"))?;
        }
        let untracked = self
            .untracked
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        Ok(Received {
            bundle: header.bundle.then(|| self.bundle_path.clone()),
            header,
            untracked,
        })
    }
}

impl OutputSink for SyncCapture {
    fn write(&mut self, stream: StreamKind, bytes: &[u8]) {
        match stream {
            StreamKind::Stdout => self.take_stdout(bytes),
            StreamKind::Stderr => {
                let room = MAX_STDERR_BYTES.saturating_sub(self.stderr.len());
                self.stderr
                    .extend_from_slice(&bytes[..room.min(bytes.len())]);
            }
        }
    }
}

/// A sync stream that passed its checks.
#[derive(Debug, Clone)]
pub struct Received {
    pub header: SyncHeader,
    pub untracked: BTreeSet<String>,
    pub bundle: Option<PathBuf>,
}

/// A paddock-owned bare repository per job that receives its syncs. It borrows the user's
/// objects through `objects/info/alternates`, so it stores only what the agent made.
#[derive(Debug, Clone)]
pub struct ScratchRepo {
    pub path: PathBuf,
}

impl ScratchRepo {
    fn call(&self, args: &[&str]) -> GitCall<'_> {
        GitCall::new(&self.path, args).git_dir(&self.path)
    }

    /// Creates the repository unless it exists.
    pub async fn ensure(&self, user_objects: &Path) -> Result<(), GitError> {
        if self.path.join("objects").is_dir() {
            return Ok(());
        }
        let parent = self.path.parent().unwrap_or(&self.path);
        GitCall::new(parent, &["init", "--bare", "-q"])
            .arg(&self.path)
            .run()
            .await?;
        let alternates = self.path.join("objects/info/alternates");
        std::fs::write(&alternates, format!("{}\n", user_objects.display())).map_err(|e| {
            GitError::Command {
                args: "init scratch repository".into(),
                dir: alternates.clone(),
                stderr: e.to_string(),
            }
        })
    }

    /// The branch tip and uncommitted-work snapshot of the last sync, if any.
    pub async fn known(&self) -> Result<(Option<String>, Option<String>), GitError> {
        let path = self.path.clone();
        blocking(move || {
            let Ok(repo) = git2::Repository::open_bare(&path) else {
                return Ok((None, None));
            };
            let target = |name: &str| {
                repo.find_reference(name)
                    .ok()
                    .and_then(|r| r.target())
                    .map(|oid| oid.to_string())
            };
            Ok((target(SCRATCH_BRANCH), target(SCRATCH_STATE)))
        })
        .await
    }

    /// Takes a checked stream in: the bundle must hold exactly the refs the header names, at
    /// the commits it names, and its objects pass fsck. Refs whose commit the host already
    /// has are set without a bundle. `refs/sync/state` follows the header's state. Returns the
    /// pack the bundle became, if one came.
    pub async fn receive(
        &self,
        received: &Received,
        branch: &str,
    ) -> Result<Option<PathBuf>, GitError> {
        let header = &received.header;
        let branch_ref = format!("refs/heads/{branch}");
        let state = match &header.state {
            WorkState::Snapshot(commit) => Some(commit.clone()),
            _ => None,
        };
        let wanted = [
            (branch_ref.as_str(), header.tip.as_ref(), SCRATCH_BRANCH),
            ("refs/paddock/state", state.as_ref(), SCRATCH_STATE),
        ];
        let mut fetched = BTreeSet::new();
        let mut pack = None;
        if let Some(bundle) = &received.bundle {
            let (heads, pack_offset) = read_bundle_header(bundle)?;
            for (commit, name) in &heads {
                let expected = wanted.iter().find(|(source, _, _)| source == name);
                match expected {
                    Some((_, Some(want), target)) if *want == commit => {
                        fetched.insert(*target);
                    }
                    _ => {
                        return Err(bad_bundle(
                            bundle,
                            format!("unexpected ref `{}` at `{}`", shown(name), shown(commit)),
                        ));
                    }
                }
            }
            // `--strict` checks every object (as fsck does) and that everything they name
            // exists; `--fix-thin` completes deltas against objects the host already has.
            let indexed = self
                .call(&["index-pack", "--stdin", "--fix-thin", "--strict"])
                .stdin_from(bundle, pack_offset)
                .timeout(super::CHECKOUT_TIMEOUT)
                .run()
                .await?;
            let hash = indexed
                .lines()
                .find_map(|line| line.strip_prefix("pack\t"))
                .filter(|hash| is_object_id(hash))
                .ok_or_else(|| {
                    bad_bundle(bundle, format!("index-pack said `{}`", shown(&indexed)))
                })?;
            pack = Some(
                self.path
                    .join("objects/pack")
                    .join(format!("pack-{hash}.pack")),
            );
            for (commit, name) in &heads {
                if let Some((_, _, target)) = wanted.iter().find(|(source, _, _)| source == name) {
                    self.require_commit(commit).await?;
                    self.call(&["update-ref", target, commit]).run().await?;
                }
            }
        }
        for (_, commit, target) in wanted {
            if fetched.contains(target) {
                continue;
            }
            // A branch the sandbox cannot resolve keeps its last synced tip, as the user's
            // repository does.
            if target == SCRATCH_BRANCH && commit.is_none() {
                continue;
            }
            // Only after a snapshot sync does the state ref change; the branch always does.
            if target == SCRATCH_STATE && header.state == WorkState::Unknown {
                continue;
            }
            match commit {
                Some(commit) => {
                    self.require_commit(commit).await?;
                    self.call(&["update-ref", target, commit]).run().await?;
                }
                None => {
                    self.call(&["update-ref", "-d", target]).run().await?;
                }
            }
        }
        Ok(pack)
    }

    /// Points the scratch repository's copy of the job's branch at `commit` (which the user's
    /// repository has).
    pub async fn set_branch(&self, commit: &str) -> Result<(), GitError> {
        self.require_commit(commit).await?;
        self.call(&["update-ref", SCRATCH_BRANCH, commit])
            .run()
            .await
            .map(drop)
    }

    /// Fails unless `commit` is a commit the scratch repository (or the user's objects) has.
    async fn require_commit(&self, commit: &str) -> Result<(), GitError> {
        let path = self.path.clone();
        let wanted = commit.to_string();
        blocking(move || {
            let repo = git2::Repository::open_bare(&path).map_err(read_err(&path))?;
            let oid = git2::Oid::from_str(&wanted).map_err(read_err(&path))?;
            repo.find_commit(oid).map(drop).map_err(read_err(&path))
        })
        .await
    }

    /// Whether `descendant` has `ancestor` in its history (a fast-forward).
    pub async fn is_fast_forward(
        &self,
        ancestor: &str,
        descendant: &str,
    ) -> Result<bool, GitError> {
        let path = self.path.clone();
        let (ancestor, descendant) = (ancestor.to_string(), descendant.to_string());
        blocking(move || {
            let repo = git2::Repository::open_bare(&path).map_err(read_err(&path))?;
            let oid = |s: &str| git2::Oid::from_str(s).map_err(read_err(&path));
            let (a, d) = (oid(&ancestor)?, oid(&descendant)?);
            Ok(a == d || repo.graph_descendant_of(d, a).map_err(read_err(&path))?)
        })
        .await
    }

    fn open(&self) -> Result<git2::Repository, GitError> {
        git2::Repository::open_bare(&self.path).map_err(read_err(&self.path))
    }

    /// Commits on the synced branch since `base`, newest first.
    pub async fn log(&self, base: &str) -> Result<Vec<CommitInfo>, GitError> {
        let this = self.clone();
        let base = base.to_string();
        blocking(move || {
            let repo = this.open()?;
            let Some(tip) = ref_oid(&repo, SCRATCH_BRANCH) else {
                return Ok(Vec::new());
            };
            commits_between(&repo, &base, &tip.to_string(), &this.path)?
                .into_iter()
                .map(|oid| {
                    let commit = repo.find_commit(oid).map_err(read_err(&this.path))?;
                    let author = commit.author();
                    Ok(CommitInfo {
                        sha: oid.to_string(),
                        summary: commit.summary().unwrap_or_default().to_string(),
                        author: author.name().unwrap_or_default().to_string(),
                        time: chrono::DateTime::from_timestamp(commit.time().seconds(), 0)
                            .unwrap_or_default(),
                    })
                })
                .collect()
        })
        .await
    }

    /// Commits ahead of the base and files changed, committed and not, as of the last sync
    /// that took a snapshot. New files in `untracked` are reported as `untracked`.
    pub async fn changes(
        &self,
        base: &str,
        untracked: BTreeSet<String>,
    ) -> Result<ChangeSummary, GitError> {
        let this = self.clone();
        let base = base.to_string();
        blocking(move || {
            let repo = this.open()?;
            let path = &this.path;
            let tree_of = |oid: git2::Oid| {
                repo.find_commit(oid)
                    .and_then(|c| c.tree())
                    .map_err(read_err(path))
            };
            let base_oid = git2::Oid::from_str(&base).map_err(read_err(path))?;
            let base_tree = tree_of(base_oid)?;
            let tip = ref_oid(&repo, SCRATCH_BRANCH);
            let (commits_ahead, committed) = match tip {
                Some(tip) => {
                    let ahead = commits_between(&repo, &base, &tip.to_string(), path)?.len();
                    let diff = repo
                        .diff_tree_to_tree(Some(&base_tree), Some(&tree_of(tip)?), None)
                        .map_err(read_err(path))?;
                    (ahead, file_changes(&diff))
                }
                None => (0, Vec::new()),
            };
            let state = ref_oid(&repo, SCRATCH_STATE);
            let mut uncommitted = Vec::new();
            let newest = match state {
                Some(state) => {
                    let snapshot = repo.find_commit(state).map_err(read_err(path))?;
                    let parent_tree = match snapshot.parent(0) {
                        Ok(parent) => Some(parent.tree().map_err(read_err(path))?),
                        Err(_) => None,
                    };
                    let diff = repo
                        .diff_tree_to_tree(
                            parent_tree.as_ref(),
                            Some(&snapshot.tree().map_err(read_err(path))?),
                            None,
                        )
                        .map_err(read_err(path))?;
                    uncommitted = file_changes(&diff)
                        .into_iter()
                        .map(|change| mark_untracked(change, &untracked))
                        .collect();
                    Some(state)
                }
                None => tip,
            };
            let (insertions, deletions) = match newest {
                Some(newest) => {
                    let diff = repo
                        .diff_tree_to_tree(Some(&base_tree), Some(&tree_of(newest)?), None)
                        .map_err(read_err(path))?;
                    let stats = diff.stats().map_err(read_err(path))?;
                    (stats.insertions(), stats.deletions())
                }
                None => (0, 0),
            };
            Ok(ChangeSummary {
                branch_tip: tip.map(|t| t.to_string()),
                commits_ahead,
                committed,
                uncommitted,
                insertions,
                deletions,
            })
        })
        .await
    }

    /// The patch (or, with `stat`, the diffstat) from `base` to the job's newest state: the
    /// uncommitted-work snapshot when there is one, else the branch tip.
    pub async fn diff(&self, base: &str, stat: bool) -> Result<String, GitError> {
        let this = self.clone();
        let base = base.to_string();
        blocking(move || {
            let repo = this.open()?;
            let path = &this.path;
            let tree_of = |oid: git2::Oid| {
                repo.find_commit(oid)
                    .and_then(|c| c.tree())
                    .map_err(read_err(path))
            };
            let base_tree = tree_of(git2::Oid::from_str(&base).map_err(read_err(path))?)?;
            let newest = ref_oid(&repo, SCRATCH_STATE).or_else(|| ref_oid(&repo, SCRATCH_BRANCH));
            let newest_tree = match newest {
                Some(oid) => tree_of(oid)?,
                None => base_tree.clone(),
            };
            let diff = repo
                .diff_tree_to_tree(Some(&base_tree), Some(&newest_tree), None)
                .map_err(read_err(path))?;
            super::render_diff(&diff, stat, path)
        })
        .await
    }
}

fn mark_untracked(change: FileChange, untracked: &BTreeSet<String>) -> FileChange {
    if change.status == "added" && untracked.contains(&change.path) {
        FileChange {
            status: "untracked".into(),
            ..change
        }
    } else {
        change
    }
}

fn ref_oid(repo: &git2::Repository, name: &str) -> Option<git2::Oid> {
    repo.find_reference(name)
        .ok()
        .and_then(|r| r.peel_to_commit().ok())
        .map(|c| c.id())
}

/// Reads a bundle's header (`# v2 git bundle` or v3 with capabilities, prerequisites, refs,
/// an empty line) and returns its refs as `(commit, refname)` and where the pack starts.
fn read_bundle_header(path: &Path) -> Result<(Vec<(String, String)>, u64), GitError> {
    use std::io::{BufRead, BufReader, Read};
    let file = std::fs::File::open(path).map_err(|e| bad_bundle(path, e.to_string()))?;
    let mut reader = BufReader::new(file);
    let mut offset = 0u64;
    let mut heads = Vec::new();
    let mut line = Vec::new();
    let mut first = true;
    loop {
        line.clear();
        let read = reader
            .by_ref()
            .take(4096)
            .read_until(b'\n', &mut line)
            .map_err(|e| bad_bundle(path, e.to_string()))?;
        offset += read as u64;
        if read == 0 || !line.ends_with(b"\n") || offset > 1 << 20 {
            return Err(bad_bundle(
                path,
                "the bundle header is cut or too long".into(),
            ));
        }
        let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
        if first {
            if text != "# v2 git bundle" && text != "# v3 git bundle" {
                return Err(bad_bundle(
                    path,
                    format!("not a bundle: `{}`", shown(&text)),
                ));
            }
            first = false;
            continue;
        }
        if text.is_empty() {
            return Ok((heads, offset));
        }
        if text.starts_with('@') || text.starts_with('-') {
            // Capabilities and prerequisites: index-pack checks the objects themselves.
            continue;
        }
        match text.split_once(' ') {
            Some((commit, name)) if is_object_id(commit) => {
                heads.push((commit.to_string(), name.to_string()));
            }
            _ => {
                return Err(bad_bundle(
                    path,
                    format!("bad bundle line `{}`", shown(&text)),
                ));
            }
        }
    }
}

fn bad_bundle(path: &Path, message: String) -> GitError {
    GitError::BadSync {
        path: path.to_path_buf(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn headers_are_checked_field_by_field() {
        let header = SyncHeader::parse(&format!("paddock-sync 1 {A} clean - 12\n")).unwrap();
        assert_eq!(header.tip.as_deref(), Some(A));
        assert_eq!(header.state, WorkState::Clean);
        assert!(!header.bundle);
        assert_eq!(header.untracked_bytes, 12);
        for bad in [
            "paddock-sync 2 - - - 0",
            "paddock-sync 1 ../../etc/passwd - - 0",
            "paddock-sync 1 - - maybe 0",
            "paddock-sync 1 - - - -3",
            "paddock-sync 1 - - - 0 extra",
            "paddock-sync 1 0123456789ABCDEF0123456789ABCDEF01234567 - - 0",
        ] {
            assert!(SyncHeader::parse(bad).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn the_capture_splits_header_untracked_list_and_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let mut capture = SyncCapture::new(dir.path().join("b"));
        let stream = format!("paddock-sync 1 {A} - bundle 6\na\0b/c\0BUNDLE");
        for chunk in stream.as_bytes().chunks(5) {
            capture.write(StreamKind::Stdout, chunk);
        }
        let received = capture.finish(0).unwrap();
        assert_eq!(
            received.untracked.into_iter().collect::<Vec<_>>(),
            vec!["a".to_string(), "b/c".to_string()]
        );
        assert_eq!(std::fs::read(dir.path().join("b")).unwrap(), b"BUNDLE");
    }

    #[test]
    fn a_capture_refuses_extra_data_and_missing_headers() {
        let dir = tempfile::tempdir().unwrap();
        let mut capture = SyncCapture::new(dir.path().join("b"));
        capture.write(
            StreamKind::Stdout,
            format!("paddock-sync 1 {A} - - 0\nmore").as_bytes(),
        );
        assert!(capture.finish(0).is_err());
        let mut capture = SyncCapture::new(dir.path().join("b"));
        capture.write(StreamKind::Stderr, b"fatal: broken\n");
        let error = capture.finish(3).unwrap_err();
        assert!(
            error.contains("exited 3") && error.contains("fatal: broken"),
            "{error}"
        );
    }
}
