//! A job's private git dir: `$PADDOCK_HOME/work/<id>/git`, the only git metadata a job's
//! sandbox can write.
//!
//! It is a separate git dir (as `git init --separate-git-dir` makes) whose
//! `objects/info/alternates` names the user's object store, so reads cost nothing and no
//! object is copied; the user's store is mounted read-only in containers. It has its own
//! `HEAD`, `index`, `refs/` (the job's branch and nothing else of the user's) and `objects/`
//! for what the agent makes. paddock writes it once, before any agent runs; after that no
//! host-side git process ever uses it (see `sync`), because an agent can plant files there
//! (`commondir`, `config.worktree`, alternates, symlinked refs) that a host-side git would
//! obey.

use std::path::{Path, PathBuf};

use super::{CHECKOUT_TIMEOUT, GitCall, GitError, GitRepo};

/// The parts of a job git dir that steer git and stay read-only inside the sandbox (and
/// owned by paddock's user on the host), relative to the git dir.
pub const PROTECTED: &[&str] = &["config", "hooks", "info", "objects/info/alternates"];

/// A job's private git dir on the host.
#[derive(Debug, Clone)]
pub struct JobGitDir {
    pub path: PathBuf,
}

pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> GitError + '_ {
    move |error| GitError::Command {
        args: "prepare the job's git dir".into(),
        dir: path.to_path_buf(),
        stderr: error.to_string(),
    }
}

/// Gives every entry under `root` (itself included; links themselves, never what they
/// name) to `owner`. Iterative, so a deep tree costs no stack. Runs on a tree paddock just
/// wrote, before any agent has run, so nothing can swap an entry during the walk.
pub(crate) fn give_tree(root: &Path, (uid, gid): (u32, u32)) -> Result<(), GitError> {
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(io(&path))? {
                pending.push(entry.map_err(io(&path))?.path());
            }
        }
        std::os::unix::fs::lchown(&path, Some(uid), Some(gid)).map_err(io(&path))?;
    }
    Ok(())
}

impl JobGitDir {
    /// Writes a fresh git dir at `path` whose `HEAD` is `branch` at `tip`, borrowing
    /// `repo`'s objects.
    pub async fn create(
        path: &Path,
        repo: &GitRepo,
        branch: &str,
        tip: &str,
    ) -> Result<JobGitDir, GitError> {
        let object_format = repo.object_format().await?;
        let write = || -> std::io::Result<()> {
            for dir in [
                "objects/info",
                "objects/pack",
                "refs/tags",
                "hooks",
                "info",
                "logs",
            ] {
                std::fs::create_dir_all(path.join(dir))?;
            }
            // checkStat/trustctime: the index is written here, then the files change owner
            // (as root) and are seen through another mount; without these the first
            // `git status` inside would rehash every file.
            let mut config = format!(
                "[core]\n\trepositoryformatversion = {}\n\tfilemode = true\n\tbare = false\n\
                 \tlogallrefupdates = true\n\tcheckStat = minimal\n\ttrustctime = false\n[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n",
                u8::from(object_format.is_some())
            );
            if let Some(format) = &object_format {
                config.push_str(&format!("[extensions]\n\tobjectformat = {format}\n"));
            }
            std::fs::write(path.join("config"), config)?;
            std::fs::write(path.join("HEAD"), format!("ref: refs/heads/{branch}\n"))?;
            let branch_ref = path.join("refs/heads").join(branch);
            std::fs::create_dir_all(branch_ref.parent().expect("a ref file has a parent"))?;
            std::fs::write(&branch_ref, format!("{tip}\n"))?;
            let objects = super::object_dirs(&repo.common_dir)
                .into_iter()
                .next()
                .unwrap_or_else(|| repo.common_dir.join("objects"));
            std::fs::write(
                path.join("objects/info/alternates"),
                format!("{}\n", objects.display()),
            )?;
            std::fs::write(path.join("info/exclude"), "")?;
            // A shallow repository's boundary, so history walks inside stop where the
            // user's do.
            match std::fs::copy(repo.common_dir.join("shallow"), path.join("shallow")) {
                Ok(_) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            }
        };
        write().map_err(io(path))?;
        Ok(JobGitDir {
            path: path.to_path_buf(),
        })
    }

    /// Checks out HEAD into `worktree` (parallel checkout) and writes the worktree's `.git`
    /// link naming `link_target`, the git dir's path as the job's commands see it. Runs
    /// before any agent has, so host-side git may still use this git dir here. With `owner`
    /// (paddock is root, the agent is not) the files are then given to that uid.
    pub async fn checkout(
        &self,
        worktree: &Path,
        link_target: &Path,
        owner: Option<(u32, u32)>,
    ) -> Result<(), GitError> {
        self.check_out_files(worktree, owner).await?;
        self.write_link(worktree, link_target)
    }

    /// The files of [`checkout`](Self::checkout) without the `.git` link (a pristine
    /// checkout has none: each job writes its own).
    pub(super) async fn check_out_files(
        &self,
        worktree: &Path,
        owner: Option<(u32, u32)>,
    ) -> Result<(), GitError> {
        std::fs::create_dir_all(worktree).map_err(io(worktree))?;
        // git runs as paddock's own user, never as the agent's: the agent's uid may not
        // enter a directory above the state root or the repository (root's 0700 home, a
        // `mktemp -d` state root), and it needs to reach neither, only the files below.
        GitCall::new(worktree, &["read-tree", "--reset", "-u", "HEAD"])
            .git_dir(&self.path)
            .work_tree(worktree)
            .timeout(CHECKOUT_TIMEOUT)
            .run()
            .await?;
        if let Some(owner) = owner {
            let (root, git_dir) = (worktree.to_path_buf(), self.path.clone());
            tokio::task::spawn_blocking(move || {
                give_tree(&root, owner)?;
                std::os::unix::fs::chown(&git_dir, Some(owner.0), Some(owner.1))
                    .map_err(io(&git_dir))
            })
            .await
            .map_err(|e| GitError::Command {
                args: "give the checkout to the agent's uid".into(),
                dir: worktree.to_path_buf(),
                stderr: e.to_string(),
            })??;
        }
        Ok(())
    }

    /// Puts checkpoint `state` (ref `refname` of paddock's wip store `store`) into a fresh
    /// checkout at `worktree` that this git dir made moments ago, before any agent ran (a
    /// fork's overlay checkout): the checkpoint's objects fetched with fsck, its tree into
    /// the files by a two-tree merge from HEAD (only the paths that differ are written), its
    /// index's tree into the index. What `restore.sh` does in a sandbox for a job an agent
    /// has used, here on paddock's own git dir and files, as `check_out_files` checks out.
    pub async fn restore_fresh(
        &self,
        worktree: &Path,
        store: &Path,
        refname: &str,
        state: &str,
    ) -> Result<(), GitError> {
        GitCall::new(
            worktree,
            &[
                "-c",
                "transfer.fsckObjects=true",
                "fetch",
                "--no-tags",
                "--no-write-fetch-head",
                "--no-auto-maintenance",
                "--quiet",
            ],
        )
        .arg(store)
        .arg(format!("+{refname}:refs/paddock/restored"))
        .git_dir(&self.path)
        .timeout(CHECKOUT_TIMEOUT)
        .run()
        .await?;
        let tree = format!("{state}^{{tree}}");
        let merged = GitCall::new(worktree, &["read-tree", "-m", "-u", "HEAD", &tree])
            .git_dir(&self.path)
            .work_tree(worktree)
            .timeout(CHECKOUT_TIMEOUT)
            .run()
            .await;
        if merged.is_err() {
            GitCall::new(worktree, &["read-tree", "--reset", "-u", &tree])
                .git_dir(&self.path)
                .work_tree(worktree)
                .timeout(CHECKOUT_TIMEOUT)
                .run()
                .await?;
        }
        GitCall::new(
            worktree,
            &["read-tree", "-m", &format!("{state}^2^{{tree}}")],
        )
        .git_dir(&self.path)
        .work_tree(worktree)
        .timeout(CHECKOUT_TIMEOUT)
        .run()
        .await
        .map(drop)
    }

    /// Points the git dir's alternates at `objects`, where the repository's object store is
    /// as the job's commands see it (a container mounts it at a neutral path). After this no
    /// host-side git can use the git dir, which none does once the checkout is made.
    pub fn point_alternates(&self, objects: &Path) -> Result<(), GitError> {
        let path = self.path.join("objects/info/alternates");
        std::fs::write(&path, format!("{}\n", objects.display())).map_err(io(&path))
    }

    /// Writes the checkout's `.git` link naming `link_target`.
    pub fn write_link(&self, worktree: &Path, link_target: &Path) -> Result<(), GitError> {
        let link = worktree.join(".git");
        std::fs::write(&link, format!("gitdir: {}\n", link_target.display())).map_err(io(&link))
    }

    /// Gives the git dir `index` (the pristine checkout's index, whose entries match the
    /// files an overlay shows) and, with `owner`, hands the git dir and the checkout's root
    /// to that uid as [`checkout`](Self::checkout) does. Runs before any agent has.
    ///
    /// With `share` the index is a hard link to the pristine one, which is paddock's and
    /// read-only: git never writes an index in place (it renames `index.lock` over it), so
    /// twenty jobs cost one index. The caller shares only where the agent cannot write the
    /// shared file: it runs as another uid (it can replace the link, not write or chmod the
    /// file), or it is not isolated at all (the process runtime). Otherwise it is a copy.
    pub fn adopt_index(
        &self,
        index: &Path,
        worktree: &Path,
        owner: Option<(u32, u32)>,
        share: bool,
    ) -> Result<(), GitError> {
        let target = self.path.join("index");
        let linked = share && std::fs::hard_link(index, &target).is_ok();
        if !linked {
            std::fs::copy(index, &target).map_err(io(&target))?;
        }
        if let Some((uid, gid)) = owner {
            for path in [worktree, self.path.as_path()] {
                std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(io(path))?;
            }
        }
        Ok(())
    }

    /// Adds `patterns` to the job's own `info/exclude` (never the user's), so cache links and
    /// copies and copied untracked files stay out of `git status`, `git add -A` and the wip
    /// snapshot in the job. Called before any agent has run; each call appends.
    pub fn add_excludes(&self, patterns: &[String]) -> Result<(), GitError> {
        if patterns.is_empty() {
            return Ok(());
        }
        let path = self.path.join("info/exclude");
        let mut text = std::fs::read_to_string(&path).map_err(io(&path))?;
        if text.is_empty() {
            text.push_str("# paddock: paths paddock placed in this job (caches, copied files)\n");
        }
        for pattern in patterns {
            text.push_str(pattern);
            text.push('\n');
        }
        std::fs::write(&path, text).map_err(io(&path))
    }
}
