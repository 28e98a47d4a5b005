//! A remote job's `copy` files and caches, prepared on the host before its fill (see
//! `remote::fill_remote`): what `setup::place_copies` and `cache::place` do in a local
//! checkout, checked here against the job's commit, whose tree is exactly what the fill
//! checks out on the engine before any agent has run.
//!
//! Copies: the sources are checked as locally (`copy_files::tar_of`: nothing read outside
//! the repository, no link leaving it, special files refused, set-id bits dropped); each
//! destination in the commit may have no link or file on the way and must not be tracked
//! itself. The tar is staged in the job dir (`engines::staged_copies`) for the fill, which
//! unpacks it into the workspace volume and gives it to the agent's uid.
//!
//! Caches: whatever the `strategy:`, a volume of the engine per (install, repository,
//! cache, key hash) (`engines::cache_volume`), the key hash over the key files of the
//! commit as locally over those of the checkout. It is mounted at the cache's path in the
//! workspace (read-only with `readonly`), or, for an `env` cache, at
//! `engines::CACHE_MOUNTS/<volume>`, the path its variable names. The record's
//! `JobCache::entry` is that path, so it names the volume. The fill makes and seeds it.
//!
//! Both get `/path` lines in the job's own `info/exclude`, as locally.

use super::{Paddock, Result};
use crate::cache::{CacheError, CacheSpec, JobCache, Strategy};
use crate::config::JobSetup;
use crate::copy_files::CopyError;
use crate::git::GitRepo;
use crate::git::jobdir::JobGitDir;
use crate::job::JobRecord;

const TREE: i32 = 0o040_000;
const LINK: i32 = 0o120_000;

/// The paths leading to `path` (`a`, `a/b`, then `a/b/c` itself).
fn prefixes(path: &str) -> Vec<String> {
    let parts: Vec<&str> = path.split('/').collect();
    (1..=parts.len()).map(|n| parts[..n].join("/")).collect()
}

/// Where `path` would land in the commit: `Ok` when nothing is there and only directories
/// lead to it; else the first prefix in the way with its mode.
async fn landing(repo: &GitRepo, tip: &str, path: &str) -> Result<Result<(), (String, i32)>> {
    let ways = prefixes(path);
    let modes = repo.modes_at(tip, ways.clone()).await?;
    let last = ways.len() - 1;
    for (i, (way, mode)) in ways.into_iter().zip(modes).enumerate() {
        match mode {
            None => return Ok(Ok(())),
            Some(TREE) if i < last => {}
            Some(mode) => return Ok(Err((way, mode))),
        }
    }
    Ok(Ok(()))
}

impl Paddock {
    /// Stages a remote job's copies and plans its caches (see the module docs); the record
    /// keeps what was copied and the caches, the staged git dir their excludes.
    pub(super) async fn prepare_remote(
        &self,
        repo: &GitRepo,
        record: &mut JobRecord,
        tip: &str,
        specs: &[CacheSpec],
        setup: &JobSetup,
        job_git: &JobGitDir,
    ) -> Result<()> {
        let staged = crate::engines::staged_copies(&self.home.job_dir(&record.id));
        if !setup.copy.is_empty() {
            for entry in &setup.copy {
                match landing(repo, tip, entry).await? {
                    Ok(()) => {}
                    Err((way, _)) if way == *entry => {
                        return Err(CopyError::Tracked {
                            entry: entry.clone(),
                            path: entry.into(),
                        }
                        .into());
                    }
                    Err((way, _)) => {
                        return Err(CopyError::UnsafeTarget {
                            entry: entry.clone(),
                            path: way.into(),
                        }
                        .into());
                    }
                }
            }
            let owner = self
                .runtime_of(record)
                .layout()
                .files_owner(record)
                .unwrap_or((record.limits.uid, record.limits.uid));
            let (root, entries) = (record.repo.clone(), setup.copy.clone());
            let (tar, copied) = tokio::task::spawn_blocking(move || {
                crate::copy_files::tar_of(&root, &entries, owner)
            })
            .await
            .expect("taring the copies does not panic")?;
            std::fs::write(&staged, tar).map_err(|source| crate::store::StoreError::Io {
                path: staged.clone(),
                source,
            })?;
            record.copied = copied;
        }
        let mut caches = Vec::new();
        for spec in specs {
            caches.push(self.plan_cache(repo, record, tip, spec).await?);
        }
        record.caches = caches;
        let mut excludes = crate::copy_files::exclude_patterns(&record.copied);
        excludes.extend(crate::cache::exclude_patterns(&record.caches));
        job_git.add_excludes(&excludes)?;
        Ok(())
    }

    /// One cache of a remote job: its volume, where it is mounted, refused where the commit
    /// (or a copied file) already has something at its path or a link on the way.
    async fn plan_cache(
        &self,
        repo: &GitRepo,
        record: &JobRecord,
        tip: &str,
        spec: &CacheSpec,
    ) -> Result<JobCache> {
        let (name, strategy) = spec.resolve()?;
        if let Some(path) = &spec.path {
            let exists = || CacheError::PathExists {
                name: name.clone(),
                path: path.into(),
            };
            match landing(repo, tip, path).await? {
                Ok(()) => {}
                Err((way, LINK)) => {
                    let target = repo.read_at(tip, &way).await?.unwrap_or_default();
                    return Err(CacheError::TrackedSymlink {
                        name,
                        path: way.into(),
                        target: String::from_utf8_lossy(&target).into_owned(),
                    }
                    .into());
                }
                Err(_) => return Err(exists().into()),
            }
            let over = |a: &str, b: &str| {
                std::path::Path::new(a).starts_with(b) || std::path::Path::new(b).starts_with(a)
            };
            if record.copied.iter().any(|copied| over(path, copied)) {
                return Err(exists().into());
            }
        }
        let modes = repo.modes_at(tip, spec.key.clone()).await?;
        let mut contents = std::collections::BTreeMap::new();
        for (key, mode) in spec.key.iter().zip(modes) {
            if matches!(mode, Some(0o100_644 | 0o100_755))
                && let Some(bytes) = repo.read_at(tip, key).await?
            {
                contents.insert(key.clone(), bytes);
            }
        }
        let hash = crate::cache::key_hash_with(&spec.key, |key| contents.get(key).cloned());
        let volume = crate::engines::cache_volume(self.home.tag(), &record.repo_key, &name, &hash);
        Ok(JobCache {
            name,
            strategy: match strategy {
                Strategy::Env => Strategy::Env,
                _ => Strategy::Mount,
            },
            path: spec.path.clone(),
            env: spec.env.clone(),
            entry: std::path::Path::new(crate::engines::CACHE_MOUNTS).join(volume),
            readonly: spec.readonly,
        })
    }
}
