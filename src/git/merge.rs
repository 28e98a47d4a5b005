//! Merges computed without a working tree: `git merge-tree --write-tree` (git 2.38 or
//! newer, checked once) and `commit-tree`, run against the user's repository.
//!
//! A [`MergeSession`] is read-only or writing. A read-only one (what `conflicts`, the merged
//! check and every precheck use) points git's object directory at a throwaway quarantine
//! under `$PADDOCK_HOME/tmp` and reads the repository's objects (and, when asked, a job's
//! scratch repository) as alternates: the trees and blobs a merge writes land there and are
//! deleted with the session, so nothing is ever written into the user's repository. A
//! writing session (only `merge`, once its read-only twin found the merge clean) writes the
//! objects of the commit it lands into the repository itself. No session touches an index,
//! a ref or a working tree: moving the target branch is [`super::land`]'s.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub use super::merge_parse::{ConflictFile, MergeOutcome};
use super::merge_parse::{parse_merge_batch, parse_merge_tree};
use super::{GitCall, GitError, GitRepo, blocking, read_err};

/// The oldest git whose `merge-tree` has `--write-tree`.
const NEEDED: (u32, u32) = (2, 38);
/// The oldest git whose `merge-tree` takes `--stdin` (many merges in one process).
const BATCHES: (u32, u32) = (2, 40);

/// The git on `PATH`, checked once per process: its (major, minor), or `Err` with the
/// version found when it is too old.
static VERSION_CHECK: tokio::sync::OnceCell<Result<(u32, u32), String>> =
    tokio::sync::OnceCell::const_new();

impl MergeOutcome {
    pub fn clean(&self) -> bool {
        self.conflicts.is_empty()
    }
}

/// Where `merge-tree` and `commit-tree` write (see the module docs).
pub struct MergeSession {
    repo: GitRepo,
    /// The quarantine object directory of a read-only session (removed on drop).
    quarantine: Option<PathBuf>,
    /// `GIT_ALTERNATE_OBJECT_DIRECTORIES` of a read-only session.
    alternates: OsString,
}

impl Drop for MergeSession {
    fn drop(&mut self) {
        if let Some(dir) = &self.quarantine {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Fails unless the git on `PATH` has `merge-tree --write-tree`.
pub async fn require_merge_tree(dir: &Path) -> Result<(), GitError> {
    let dir = dir.to_path_buf();
    let checked = VERSION_CHECK
        .get_or_init(|| async move {
            match GitCall::new(&dir, &["--version"]).run().await {
                Ok(text) => {
                    let found = text.trim_start_matches("git version ").trim().to_string();
                    let mut parts = found.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
                    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
                    if version >= NEEDED {
                        Ok(version)
                    } else {
                        Err(found)
                    }
                }
                Err(error) => Err(format!("unknown ({error})")),
            }
        })
        .await;
    checked
        .clone()
        .map(|_| ())
        .map_err(|found| GitError::TooOld {
            found,
            needed: format!("{}.{}", NEEDED.0, NEEDED.1),
        })
}

/// Whether the git on `PATH` merges a batch in one `merge-tree --stdin` (after
/// [`require_merge_tree`] checked it).
fn batches() -> bool {
    VERSION_CHECK
        .get()
        .is_some_and(|v| v.as_ref().is_ok_and(|v| *v >= BATCHES))
}

/// `GIT_ALTERNATE_OBJECT_DIRECTORIES`: `:`-separated, a path quoted when it holds one.
fn alternates_env(dirs: &[PathBuf]) -> OsString {
    let mut joined = OsString::new();
    for (i, dir) in dirs.iter().enumerate() {
        if i > 0 {
            joined.push(":");
        }
        let text = dir.to_string_lossy();
        if text.contains([':', '"', '\\']) {
            joined.push(format!(
                "\"{}\"",
                text.replace('\\', "\\\\").replace('"', "\\\"")
            ));
        } else {
            joined.push(dir.as_os_str());
        }
    }
    joined
}

/// Who a commit paddock writes is by: the original author for a replayed commit.
#[derive(Debug, Clone)]
pub struct Author {
    pub name: String,
    pub email: String,
    /// git's raw date (`<seconds> <offset>`).
    pub date: String,
}

impl GitRepo {
    /// A read-only merge session (see the module docs): its quarantine is a new directory
    /// under `tmp_root`; `extra_objects` are object stores to read besides the repository's.
    pub async fn read_only_merges(
        &self,
        tmp_root: &Path,
        extra_objects: &[PathBuf],
    ) -> Result<MergeSession, GitError> {
        require_merge_tree(&self.root).await?;
        let quarantine = tmp_root.join(format!("merge-{}", crate::ids::random_hex(8)));
        std::fs::create_dir_all(quarantine.join("info")).map_err(|e| GitError::Command {
            args: "make a merge quarantine".into(),
            dir: quarantine.clone(),
            stderr: e.to_string(),
        })?;
        let mut dirs = super::object_dirs(&self.common_dir);
        dirs.extend(extra_objects.iter().cloned());
        Ok(MergeSession {
            repo: self.clone(),
            quarantine: Some(quarantine),
            alternates: alternates_env(&dirs),
        })
    }

    /// A session that writes the commits it makes into the repository.
    pub async fn writing_merges(&self) -> Result<MergeSession, GitError> {
        require_merge_tree(&self.root).await?;
        Ok(MergeSession {
            repo: self.clone(),
            quarantine: None,
            alternates: OsString::new(),
        })
    }
}

impl MergeSession {
    fn call<'a>(&'a self, args: &[&str]) -> GitCall<'a> {
        let call = self.repo.call(args);
        match &self.quarantine {
            Some(dir) => call
                .env("GIT_OBJECT_DIRECTORY", dir.as_os_str())
                .env("GIT_ALTERNATE_OBJECT_DIRECTORIES", self.alternates.clone()),
            None => call,
        }
    }

    /// The repository this session merges in.
    pub fn repo(&self) -> &GitRepo {
        &self.repo
    }

    /// Merges `theirs` into `ours` (with `base` as the merge base when given, else theirs
    /// and ours' own): the tree and the conflicts.
    pub async fn merge_tree(
        &self,
        ours: &str,
        theirs: &str,
        base: Option<&str>,
    ) -> Result<MergeOutcome, GitError> {
        let mut call = self.call(&["merge-tree", "--write-tree", "-z", "--name-only"]);
        if let Some(base) = base {
            call = call.arg(format!("--merge-base={base}"));
        }
        let (code, output) = call.arg(ours).arg(theirs).output(&[0, 1]).await?;
        parse_merge_tree(&output, code == 1).ok_or_else(|| GitError::Command {
            args: format!("merge-tree {ours} {theirs}"),
            dir: self.repo.root.clone(),
            stderr: "no tree in its output".into(),
        })
    }

    /// Merges each `(ours, theirs)` pair (their own merge base each), in order: one
    /// `merge-tree --stdin` for the lot in a read-only session with git 2.40 or newer, else
    /// one `merge-tree` per pair.
    pub async fn merge_trees(
        &self,
        pairs: &[(String, String)],
    ) -> Result<Vec<MergeOutcome>, GitError> {
        let Some(quarantine) = self
            .quarantine
            .as_ref()
            .filter(|_| pairs.len() > 1 && batches())
        else {
            let mut outcomes = Vec::with_capacity(pairs.len());
            for (ours, theirs) in pairs {
                outcomes.push(self.merge_tree(ours, theirs, None).await?);
            }
            return Ok(outcomes);
        };
        let input = quarantine.join(format!("batch-{}.in", crate::ids::random_hex(6)));
        let lines: String = pairs.iter().map(|(a, b)| format!("{a} {b}\n")).collect();
        let failed = |stderr: String| GitError::Command {
            args: format!("merge-tree --stdin ({} merges)", pairs.len()),
            dir: self.repo.root.clone(),
            stderr,
        };
        std::fs::write(&input, lines).map_err(|e| failed(e.to_string()))?;
        let result = self
            .call(&["merge-tree", "--stdin", "--name-only"])
            .stdin_from(&input, 0)
            .output(&[0])
            .await;
        let _ = std::fs::remove_file(&input);
        let (_, output) = result?;
        parse_merge_batch(&output, pairs.len())
            .ok_or_else(|| failed("its output does not hold one answer per merge".into()))
    }

    /// The tree of a commit this session can see (one it wrote included).
    pub async fn tree_of(&self, commit: &str) -> Result<String, GitError> {
        self.call(&["rev-parse", "--verify", "--quiet"])
            .arg(format!("{commit}^{{tree}}"))
            .run()
            .await
    }

    /// The paths that differ between two trees (or commits), sorted.
    pub async fn changed_paths(&self, from: &str, to: &str) -> Result<Vec<String>, GitError> {
        let (_, out) = self
            .call(&[
                "diff-tree",
                "-r",
                "--name-only",
                "-z",
                "--no-renames",
                from,
                to,
            ])
            .output(&[0])
            .await?;
        let mut paths: Vec<String> = out
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        paths.sort();
        Ok(paths)
    }

    /// Writes a commit of `tree` with `parents`; `author` (a replayed commit's) or the
    /// repository's configured identity, else `paddock`.
    pub async fn commit_tree(
        &self,
        tree: &str,
        parents: &[&str],
        message: &str,
        author: Option<&Author>,
    ) -> Result<String, GitError> {
        let mut call = self.call(&["commit-tree", tree, "-m", message]);
        for parent in parents {
            call = call.arg("-p").arg(*parent);
        }
        if let Some(author) = author {
            call = call
                .env("GIT_AUTHOR_NAME", author.name.clone())
                .env("GIT_AUTHOR_EMAIL", author.email.clone())
                .env("GIT_AUTHOR_DATE", author.date.clone());
        }
        if !self.repo.has_identity().await? {
            // A machine without a git identity can still land a job's work.
            call = call
                .env("GIT_COMMITTER_NAME", "paddock")
                .env("GIT_COMMITTER_EMAIL", "paddock@localhost");
            if author.is_none() {
                call = call
                    .env("GIT_AUTHOR_NAME", "paddock")
                    .env("GIT_AUTHOR_EMAIL", "paddock@localhost");
            }
        }
        call.run().await
    }
}

/// One commit to replay (`merge --rebase`), oldest first.
#[derive(Debug, Clone)]
pub struct ReplayCommit {
    pub sha: String,
    pub parents: Vec<String>,
    pub message: String,
    pub author: Author,
}

impl GitRepo {
    fn read<T: Send + 'static>(
        &self,
        work: impl FnOnce(&git2::Repository, &Path) -> Result<T, GitError> + Send + 'static,
    ) -> impl Future<Output = Result<T, GitError>> {
        let this = self.clone();
        blocking(move || {
            let repo = this.open_git2()?;
            work(&repo, &this.common_dir)
        })
    }

    /// Whether the repository's config names a committer (`user.name` and `user.email`).
    pub async fn has_identity(&self) -> Result<bool, GitError> {
        self.read(|repo, _| {
            let config = repo.config().and_then(|mut c| c.snapshot());
            Ok(config.is_ok_and(|c| {
                c.get_string("user.name").is_ok() && c.get_string("user.email").is_ok()
            }))
        })
        .await
    }

    /// The tips of `refnames` (each `None` when it does not exist), in one open.
    pub async fn ref_targets(
        &self,
        refnames: Vec<String>,
    ) -> Result<Vec<Option<String>>, GitError> {
        self.read(move |repo, _| {
            Ok(refnames
                .iter()
                .map(|name| {
                    repo.find_reference(name)
                        .ok()
                        .and_then(|r| r.peel_to_commit().ok())
                        .map(|c| c.id().to_string())
                })
                .collect())
        })
        .await
    }

    /// Whether `ancestor` is `descendant` or in its history.
    pub async fn is_ancestor(&self, ancestor: &str, descendant: &str) -> Result<bool, GitError> {
        let (a, d) = (ancestor.to_string(), descendant.to_string());
        self.read(move |repo, path| {
            let oid = |s: &str| git2::Oid::from_str(s).map_err(read_err(path));
            let (a, d) = (oid(&a)?, oid(&d)?);
            Ok(a == d || repo.graph_descendant_of(d, a).map_err(read_err(path))?)
        })
        .await
    }

    /// The tree of a commit.
    pub async fn tree_of(&self, commit: &str) -> Result<String, GitError> {
        let commit = commit.to_string();
        self.read(move |repo, path| {
            let oid = git2::Oid::from_str(&commit).map_err(read_err(path))?;
            let commit = repo.find_commit(oid).map_err(read_err(path))?;
            Ok(commit.tree_id().to_string())
        })
        .await
    }

    /// The files `tip` changes since its merge base with `base`, sorted.
    pub async fn changed_since_merge_base(
        &self,
        base: &str,
        tip: &str,
    ) -> Result<Vec<String>, GitError> {
        let (base, tip) = (base.to_string(), tip.to_string());
        self.read(move |repo, path| {
            let oid = |s: &str| git2::Oid::from_str(s).map_err(read_err(path));
            super::marks::changed_since_fork(repo, path, oid(&base)?, oid(&tip)?)
        })
        .await
    }

    /// The commits of `tip` since its merge base with `onto`, oldest first, to replay.
    pub async fn commits_to_replay(
        &self,
        onto: &str,
        tip: &str,
    ) -> Result<Vec<ReplayCommit>, GitError> {
        let (onto, tip) = (onto.to_string(), tip.to_string());
        self.read(move |repo, path| {
            let mut walk = repo.revwalk().map_err(read_err(path))?;
            walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::REVERSE)
                .map_err(read_err(path))?;
            walk.push(git2::Oid::from_str(&tip).map_err(read_err(path))?)
                .map_err(read_err(path))?;
            walk.hide(git2::Oid::from_str(&onto).map_err(read_err(path))?)
                .map_err(read_err(path))?;
            let mut commits = Vec::new();
            for oid in walk {
                let commit = repo
                    .find_commit(oid.map_err(read_err(path))?)
                    .map_err(read_err(path))?;
                let author = commit.author();
                let when = author.when();
                let offset = when.offset_minutes();
                let sign = if offset < 0 { '-' } else { '+' };
                commits.push(ReplayCommit {
                    sha: commit.id().to_string(),
                    parents: commit.parent_ids().map(|p| p.to_string()).collect(),
                    message: String::from_utf8_lossy(commit.message_bytes()).into_owned(),
                    author: Author {
                        name: String::from_utf8_lossy(author.name_bytes()).into_owned(),
                        email: String::from_utf8_lossy(author.email_bytes()).into_owned(),
                        date: format!(
                            "{} {sign}{:02}{:02}",
                            when.seconds(),
                            offset.abs() / 60,
                            offset.abs() % 60
                        ),
                    },
                });
            }
            Ok(commits)
        })
        .await
    }

    /// The branch the repository's HEAD names (`main`), if it names one.
    pub async fn head_branch(&self) -> Result<Option<String>, GitError> {
        self.read(|repo, _| {
            Ok(repo
                .find_reference("HEAD")
                .ok()
                .and_then(|r| r.symbolic_target().map(str::to_string))
                .and_then(|t| t.strip_prefix("refs/heads/").map(str::to_string)))
        })
        .await
    }

    /// The checkouts (the main one and linked worktrees) that have `branch` checked out.
    pub async fn checkouts_of(&self, branch: &str) -> Result<Vec<PathBuf>, GitError> {
        let refname = format!("refs/heads/{branch}");
        self.read(move |repo, path| {
            let head_is = |r: &git2::Repository| {
                r.find_reference("HEAD")
                    .ok()
                    .and_then(|h| h.symbolic_target().map(str::to_string))
                    .is_some_and(|t| t == refname)
            };
            let mut found = Vec::new();
            if let Some(workdir) = repo.workdir()
                && head_is(repo)
            {
                found.push(workdir.components().collect());
            }
            let names = repo.worktrees().map_err(read_err(path))?;
            for name in names.iter().flatten() {
                let Ok(worktree) = repo.find_worktree(name) else {
                    continue;
                };
                let Ok(linked) = git2::Repository::open_from_worktree(&worktree) else {
                    continue;
                };
                if head_is(&linked) {
                    found.push(worktree.path().components().collect());
                }
            }
            Ok(found)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alternates_with_colons_are_quoted() {
        let joined = alternates_env(&[PathBuf::from("/a/objects"), PathBuf::from("/b:c/objects")]);
        assert_eq!(joined, OsString::from("/a/objects:\"/b:c/objects\""));
    }
}
