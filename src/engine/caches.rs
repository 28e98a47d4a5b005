//! Listing and pruning the shared dependency cache entries.

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
