//! Listing and pruning the shared dependency cache entries: the host's (`cache`), and this
//! install's cache volumes on each engine of the user config that answers (see
//! `runtime/docker/cache_volumes.rs`), shown as entries whose `path` is `ENGINE:VOLUME`
//! (their size is not measured: 0), each removed only with this install's cache labels,
//! looked at right before, and never while a job's record names it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use chrono::Utc;

use super::{Error, Paddock, Result};

impl Paddock {
    /// Every cache entry with its size, last use and the jobs using it.
    pub fn cache_entries(&self) -> Result<Vec<crate::cache::EntryInfo>> {
        let (records, _) = self.store.list()?;
        let mut users: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
        for record in &records {
            for cache in &record.caches {
                users
                    .entry(cache.entry.clone())
                    .or_default()
                    .push(record.id.to_string());
            }
        }
        Ok(crate::cache::list_entries(&self.home.caches_dir(), &users))
    }

    /// Removes entries no live job uses and that were last used more than `unused_for` ago.
    pub fn cache_prune(
        &self,
        unused_for: std::time::Duration,
        dry_run: bool,
    ) -> Result<(Vec<crate::cache::EntryInfo>, Vec<crate::cache::EntryInfo>)> {
        let now = Utc::now();
        let (mut pruned, mut kept) = (Vec::new(), Vec::new());
        for entry in self.cache_entries()? {
            let idle = entry.last_used_at.map_or(std::time::Duration::MAX, |t| {
                (now - t).to_std().unwrap_or_default()
            });
            if entry.jobs.is_empty() && idle >= unused_for {
                if !dry_run {
                    crate::cache::remove_entry(&entry).map_err(|source| Error::RemoveDir {
                        path: entry.path.clone(),
                        source,
                    })?;
                }
                pruned.push(entry);
            } else {
                kept.push(entry);
            }
        }
        Ok((pruned, kept))
    }
}

/// How long `cache ls` and `prune` wait for an engine's list before going on without it.
const ENGINE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Paddock {
    /// This install's cache volumes on every engine that answers (see the module docs).
    pub async fn engine_cache_entries(&self) -> Result<Vec<crate::cache::EntryInfo>> {
        let config = self.config(None)?;
        let (records, _) = self.store.list()?;
        let mut out = Vec::new();
        for engine in config.engines.keys() {
            let runtime = self.runtimes.engine(Some(engine));
            let Some(engine_volumes) = runtime.capabilities().volumes else {
                continue;
            };
            let volumes = match tokio::time::timeout(ENGINE_TIMEOUT, engine_volumes.cache_volumes())
                .await
            {
                Ok(Ok(volumes)) => volumes,
                Ok(Err(error)) => {
                    tracing::warn!(%engine, %error, "cannot list the engine's cache volumes");
                    continue;
                }
                Err(_) => {
                    tracing::warn!(%engine, "the engine did not list its cache volumes in time");
                    continue;
                }
            };
            for volume in volumes {
                let jobs = records
                    .iter()
                    .filter(|r| r.is_on_engine(engine))
                    .filter(|r| {
                        r.caches
                            .iter()
                            .any(|c| crate::engines::volume_of(c) == Some(volume.name.as_str()))
                    })
                    .map(|r| r.id.to_string())
                    .collect();
                let mark = crate::engines::last_use_mark(self.home.root(), engine, &volume.name);
                let used = std::fs::metadata(mark).and_then(|m| m.modified()).ok();
                let created = volume
                    .created_at
                    .as_deref()
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                    .map(|t| t.with_timezone(&Utc));
                out.push(crate::cache::EntryInfo {
                    repo_key: volume.repo_key,
                    cache: volume.cache,
                    key: volume
                        .name
                        .rsplit_once('-')
                        .map(|(_, hash)| hash.to_string())
                        .unwrap_or_default(),
                    path: PathBuf::from(format!("{engine}:{}", volume.name)),
                    size_bytes: 0,
                    created_at: created,
                    last_used_at: used.map(chrono::DateTime::<Utc>::from).or(created),
                    jobs,
                });
            }
        }
        Ok(out)
    }

    /// Removes the engines' cache volumes no job's record names and unused for `unused_for`
    /// (see [`Paddock::cache_prune`]); one the engine will not remove (a container still
    /// has it) is kept.
    pub async fn engine_cache_prune(
        &self,
        unused_for: std::time::Duration,
        dry_run: bool,
    ) -> Result<(Vec<crate::cache::EntryInfo>, Vec<crate::cache::EntryInfo>)> {
        let now = Utc::now();
        let (mut pruned, mut kept) = (Vec::new(), Vec::new());
        for entry in self.engine_cache_entries().await? {
            let idle = entry.last_used_at.map_or(std::time::Duration::MAX, |t| {
                (now - t).to_std().unwrap_or_default()
            });
            if !entry.jobs.is_empty() || idle < unused_for {
                kept.push(entry);
                continue;
            }
            if dry_run {
                pruned.push(entry);
                continue;
            }
            let path = entry.path.to_string_lossy().into_owned();
            let (engine, volume) = path
                .split_once(':')
                .expect("engine entries are ENGINE:VOLUME");
            let runtime = self.runtimes.engine(Some(engine));
            let removed = match runtime.capabilities().volumes {
                Some(volumes) => volumes.remove_cache_volume(volume).await,
                None => Ok(false),
            };
            match removed {
                Ok(true) => {
                    let mark = crate::engines::last_use_mark(self.home.root(), engine, volume);
                    let _ = std::fs::remove_file(mark);
                    pruned.push(entry);
                }
                Ok(false) => {}
                Err(error) => {
                    tracing::warn!(%engine, %volume, %error, "cache volume kept");
                    kept.push(entry);
                }
            }
        }
        Ok((pruned, kept))
    }
}
