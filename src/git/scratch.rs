//! The scratch repository: a paddock-owned bare repository per job that receives its syncs.
//! It borrows the user's objects through `objects/info/alternates`, so it stores only what
//! the agent made; a bundle is checked against the sync header and indexed with
//! `index-pack --strict` here before anything reaches the user's repository. Host-side reads
//! of a job (log, changes, diff) come from here, through git2.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::sync::{Received, SCRATCH_BRANCH, SCRATCH_STATE, WorkState, is_object_id, shown};
use super::{
    ChangeSummary, CommitInfo, FileChange, GitCall, GitError, blocking, commits_between,
    file_changes, read_err,
};

/// A paddock-owned bare repository per job that receives its syncs. It borrows the user's
/// objects through `objects/info/alternates`, so it stores only what the agent made.
#[derive(Debug, Clone)]
pub struct ScratchRepo {
    pub path: PathBuf,
}

impl ScratchRepo {
    pub(super) fn call(&self, args: &[&str]) -> GitCall<'_> {
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
        // Read on every exec: the loose ref files `update-ref` writes here (nothing packs
        // this repository's refs), with git2 only for a shape other than that.
        if let (Some(branch), Some(state)) = (
            self.loose_ref(SCRATCH_BRANCH),
            self.loose_ref(SCRATCH_STATE),
        ) {
            return Ok((branch, state));
        }
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

    /// A ref of this paddock-owned repository read from its loose file: `Some(None)` when
    /// the repository has no such ref (nor packed refs), `None` when the file is not the
    /// plain object id `update-ref` writes (then git2 reads it).
    fn loose_ref(&self, name: &str) -> Option<Option<String>> {
        match std::fs::read_to_string(self.path.join(name)) {
            Ok(text) => {
                let id = text.strip_suffix('\n')?;
                is_object_id(id).then(|| Some(id.to_string()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let packed = self.path.join("packed-refs").exists();
                (!packed).then_some(None)
            }
            Err(_) => None,
        }
    }

    /// Takes a checked stream in: the bundle must hold exactly the refs the header names, at
    /// the commits it names, and its objects pass fsck. Refs whose commit the host already
    /// has are set without a bundle. `refs/sync/state` follows the header's state. Returns the
    /// pack the bundle became, if one came.
    /// `limit` bounds the pack's check (an exec's sync must end by the exec's deadline).
    pub async fn receive(
        &self,
        received: &Received,
        branch: &str,
        limit: std::time::Duration,
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
            // Host-written and capped (`SyncCapture`), but read off the async workers still.
            let path = bundle.clone();
            let (heads, pack_offset, empty) = blocking(move || {
                let (heads, pack_offset) = read_bundle_header(&path)?;
                let empty = pack_is_empty(&path, pack_offset)?;
                Ok((heads, pack_offset, empty))
            })
            .await?;
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
            // A pack of no object (the branch moved to a commit the host has) is not kept:
            // the commits it names are checked below like those named without a bundle.
            if empty {
                for (commit, name) in &heads {
                    if let Some((_, _, target)) =
                        wanted.iter().find(|(source, _, _)| source == name)
                    {
                        self.set_ref(target, Some(commit)).await?;
                    }
                }
                return self
                    .receive_unbundled(received, &wanted, &fetched)
                    .await
                    .map(|()| None);
            }
            // `--strict` checks every object (as fsck does) and that everything they name
            // exists; `--fix-thin` completes deltas against objects the host already has. No
            // reverse index: a sync's pack is small, and each file index-pack writes is one
            // more fsync on the exec's path.
            let indexed = self
                .call(&[
                    "-c",
                    "pack.writeReverseIndex=false",
                    "index-pack",
                    "--stdin",
                    "--fix-thin",
                    "--strict",
                ])
                .stdin_from(bundle, pack_offset)
                .timeout(limit.min(super::CHECKOUT_TIMEOUT))
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
                    self.set_ref(target, Some(commit)).await?;
                }
            }
        }
        self.receive_unbundled(received, &wanted, &fetched).await?;
        Ok(pack)
    }

    /// The refs of a sync that came without objects: each at a commit the host must
    /// already have.
    async fn receive_unbundled(
        &self,
        received: &Received,
        wanted: &[(&str, Option<&String>, &'static str); 2],
        fetched: &BTreeSet<&'static str>,
    ) -> Result<(), GitError> {
        let header = &received.header;
        for &(_, commit, target) in wanted {
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
            if self.loose_ref(target) == Some(commit.cloned()) {
                // Already there (a sync that found nothing new): no process to start.
                continue;
            }
            self.set_ref(target, commit.map(String::as_str)).await?;
        }
        Ok(())
    }

    /// Points `name` at `commit` (which must be a commit this repository or the user's
    /// objects have), or deletes it. Through git2, in this process: the repository is
    /// paddock's own, and a git process per ref was a few ms on every sync that moved one.
    async fn set_ref(&self, name: &str, commit: Option<&str>) -> Result<(), GitError> {
        let path = self.path.clone();
        let (name, wanted) = (name.to_string(), commit.map(str::to_string));
        blocking(move || {
            let repo = git2::Repository::open_bare(&path).map_err(read_err(&path))?;
            match wanted {
                Some(wanted) => {
                    let oid = git2::Oid::from_str(&wanted).map_err(read_err(&path))?;
                    repo.find_commit(oid).map_err(read_err(&path))?;
                    repo.reference(&name, oid, true, "paddock: sync")
                        .map_err(read_err(&path))?;
                }
                None => match repo.find_reference(&name) {
                    Ok(mut reference) => reference.delete().map_err(read_err(&path))?,
                    Err(e) if e.code() == git2::ErrorCode::NotFound => {}
                    Err(e) => return Err(read_err(&path)(e)),
                },
            }
            Ok(())
        })
        .await
    }

    /// Points the scratch repository's copy of the job's branch at `commit` (which the user's
    /// repository has).
    pub async fn set_branch(&self, commit: &str) -> Result<(), GitError> {
        self.set_ref(SCRATCH_BRANCH, Some(commit)).await
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
            let tree_of = |oid: git2::Oid| commit_tree(&repo, oid, path);
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
                        .diff_tree_to_tree(
                            Some(&base_tree),
                            Some(&tree_of(newest)?),
                            Some(&mut super::reads::content_diff_options()),
                        )
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
            let tree_of = |oid: git2::Oid| commit_tree(&repo, oid, path);
            let base_tree = tree_of(git2::Oid::from_str(&base).map_err(read_err(path))?)?;
            let newest = ref_oid(&repo, SCRATCH_STATE).or_else(|| ref_oid(&repo, SCRATCH_BRANCH));
            let newest_tree = match newest {
                Some(oid) => tree_of(oid)?,
                None => base_tree.clone(),
            };
            let diff = repo
                .diff_tree_to_tree(
                    Some(&base_tree),
                    Some(&newest_tree),
                    Some(&mut super::reads::content_diff_options()),
                )
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

fn commit_tree<'r>(
    repo: &'r git2::Repository,
    oid: git2::Oid,
    path: &Path,
) -> Result<git2::Tree<'r>, GitError> {
    repo.find_commit(oid)
        .and_then(|c| c.tree())
        .map_err(read_err(path))
}

fn ref_oid(repo: &git2::Repository, name: &str) -> Option<git2::Oid> {
    repo.find_reference(name)
        .ok()
        .and_then(|r| r.peel_to_commit().ok())
        .map(|c| c.id())
}

/// Reads a bundle's header (`# v2 git bundle` or v3 with capabilities, prerequisites, refs,
/// an empty line) and returns its refs as `(commit, refname)` and where the pack starts.
/// Whether the pack at `offset` of the bundle `path` says it holds no object (a pack's
/// header: `PACK`, version, object count, big-endian). Anything else is index-pack's to judge.
fn pack_is_empty(path: &Path, offset: u64) -> Result<bool, GitError> {
    use std::io::{Read, Seek, SeekFrom};
    let mut header = [0u8; 12];
    let read = std::fs::File::open(path).and_then(|mut file| {
        file.seek(SeekFrom::Start(offset))?;
        file.read_exact(&mut header)
    });
    match read {
        Ok(()) => Ok(&header[..4] == b"PACK" && header[8..12] == [0, 0, 0, 0]),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(bad_bundle(path, e.to_string())),
    }
}

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
