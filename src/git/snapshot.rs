//! Files of a commit read straight from git objects, for what paddock itself reads from a
//! job's base commit (its devcontainer.json, a build context): never the working tree,
//! which the user (or an agent, through a synced branch) could have changed since.

use super::{GitError, GitRepo, blocking, read_err};

/// The most a build context read from a commit may hold (its blobs' sizes added up): a
/// build context is sources, not the repository's history or binaries.
const MAX_CONTEXT_BYTES: u64 = 512 << 20;

impl GitRepo {
    /// The blob at `path` in `commit`, if there is one (a tree or a missing path: `None`).
    /// [`read_at`](Self::read_at) of a file that must be at most `max` bytes (a
    /// repository's config: anyone's to make huge); its size is read from the object's
    /// header, so a bigger one is refused without being loaded.
    pub async fn read_at_most(
        &self,
        commit: &str,
        path: &str,
        max: u64,
    ) -> Result<Option<Vec<u8>>, GitError> {
        let this = self.clone();
        let (owned_commit, owned_path) = (commit.to_string(), path.to_string());
        let size = blocking(move || {
            let (commit, path) = (owned_commit, owned_path);
            let repo = this.open_git2()?;
            let tree = tree_of(&repo, &commit, &this)?;
            let Ok(entry) = tree.get_path(std::path::Path::new(&path)) else {
                return Ok(None);
            };
            let odb = repo.odb().map_err(read_err(&this.common_dir))?;
            Ok(odb
                .read_header(entry.id())
                .ok()
                .filter(|(_, kind)| *kind == git2::ObjectType::Blob)
                .map(|(size, _)| size as u64))
        })
        .await?;
        match size {
            None => Ok(None),
            Some(size) if size > max => Err(GitError::Snapshot {
                what: format!(
                    "`{path}` at {commit} is {size} bytes, more than the {max} paddock reads of it"
                ),
            }),
            Some(_) => self.read_at(commit, path).await,
        }
    }

    pub async fn read_at(&self, commit: &str, path: &str) -> Result<Option<Vec<u8>>, GitError> {
        let this = self.clone();
        let (commit, path) = (commit.to_string(), path.to_string());
        blocking(move || {
            let repo = this.open_git2()?;
            let tree = tree_of(&repo, &commit, &this)?;
            let Ok(entry) = tree.get_path(std::path::Path::new(&path)) else {
                return Ok(None);
            };
            match entry.to_object(&repo).map(git2::Object::into_blob) {
                Ok(Ok(blob)) => Ok(Some(blob.content().to_vec())),
                _ => Ok(None),
            }
        })
        .await
    }

    /// The file mode of each of `paths` in `commit` (`0o040000` a tree, `0o100644` or
    /// `0o100755` a file, `0o120000` a link, `0o160000` a submodule), `None` where the path
    /// is missing: for checks of where a remote job's copies and caches land, made on the
    /// host before the tree is checked out on the engine.
    pub async fn modes_at(
        &self,
        commit: &str,
        paths: Vec<String>,
    ) -> Result<Vec<Option<i32>>, GitError> {
        let this = self.clone();
        let commit = commit.to_string();
        blocking(move || {
            let repo = this.open_git2()?;
            let tree = tree_of(&repo, &commit, &this)?;
            Ok(paths
                .iter()
                .map(|path| {
                    tree.get_path(std::path::Path::new(path))
                        .ok()
                        .map(|entry| entry.filemode())
                })
                .collect())
        })
        .await
    }

    /// The directory `dir` ("" for the root) of `commit` as a tar archive (files with their
    /// executable bit, links as links; submodules left out), with the tree's id, which names
    /// its content.
    pub async fn tar_at(&self, commit: &str, dir: &str) -> Result<(String, Vec<u8>), GitError> {
        let this = self.clone();
        let (commit, dir) = (commit.to_string(), dir.to_string());
        blocking(move || {
            let repo = this.open_git2()?;
            let root = tree_of(&repo, &commit, &this)?;
            let tree = if dir.is_empty() {
                root
            } else {
                let missing = || GitError::Snapshot {
                    what: format!("`{dir}` is not a directory of {commit}"),
                };
                let entry = root
                    .get_path(std::path::Path::new(&dir))
                    .map_err(|_| missing())?;
                entry
                    .to_object(&repo)
                    .map_err(read_err(&this.common_dir))?
                    .into_tree()
                    .map_err(|_| missing())?
            };
            let id = tree.id().to_string();
            let mut builder = tar::Builder::new(Vec::new());
            let mut total = 0u64;
            let mut failure = None;
            tree.walk(git2::TreeWalkMode::PreOrder, |parent, entry| {
                let (Some(name), Some(kind)) = (entry.name(), entry.kind()) else {
                    return git2::TreeWalkResult::Ok;
                };
                if kind != git2::ObjectType::Blob {
                    return git2::TreeWalkResult::Ok;
                }
                let path = format!("{parent}{name}");
                let result = (|| -> Result<(), String> {
                    let blob = repo.find_blob(entry.id()).map_err(|e| e.to_string())?;
                    total += blob.size() as u64;
                    if total > MAX_CONTEXT_BYTES {
                        return Err(format!(
                            "the build context is over {MAX_CONTEXT_BYTES} bytes"
                        ));
                    }
                    let mut header = tar::Header::new_gnu();
                    header.set_mtime(0);
                    if entry.filemode() == 0o120_000 {
                        let target = String::from_utf8_lossy(blob.content()).to_string();
                        header.set_entry_type(tar::EntryType::Symlink);
                        header.set_size(0);
                        header.set_mode(0o777);
                        builder
                            .append_link(&mut header, &path, target)
                            .map_err(|e| e.to_string())
                    } else {
                        header.set_size(blob.size() as u64);
                        header.set_mode(if entry.filemode() == 0o100_755 {
                            0o755
                        } else {
                            0o644
                        });
                        builder
                            .append_data(&mut header, &path, blob.content())
                            .map_err(|e| e.to_string())
                    }
                })();
                match result {
                    Ok(()) => git2::TreeWalkResult::Ok,
                    Err(what) => {
                        failure = Some(what);
                        git2::TreeWalkResult::Abort
                    }
                }
            })
            .or_else(|e| if failure.is_some() { Ok(()) } else { Err(e) })
            .map_err(read_err(&this.common_dir))?;
            if let Some(what) = failure {
                return Err(GitError::Snapshot { what });
            }
            let tar = builder.into_inner().map_err(|e| GitError::Snapshot {
                what: e.to_string(),
            })?;
            Ok((id, tar))
        })
        .await
    }
}

fn tree_of<'r>(
    repo: &'r git2::Repository,
    commit: &str,
    this: &GitRepo,
) -> Result<git2::Tree<'r>, GitError> {
    let unknown = || GitError::UnknownRevision {
        rev: commit.to_string(),
        repo: this.root.clone(),
    };
    let oid = git2::Oid::from_str(commit).map_err(|_| unknown())?;
    repo.find_commit(oid)
        .and_then(|c| c.tree())
        .map_err(|_| unknown())
}
