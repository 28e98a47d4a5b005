//! `net`: change what an `allowlist` job may reach while it runs, and the relay of its
//! proxy's refusals to the event stream.
//!
//! A change rewrites the job's allow-list in its record and the policy file its proxy reads
//! at each new connection: it holds from the next connection, with no restart. Only jobs
//! made with `--network allowlist` (or `--allow`) can change live: their container sits on
//! the proxy's network; `none` and `open` jobs would need a new container.

use std::collections::BTreeMap;

use super::{Error, Paddock, Result};
use crate::config::NetworkMode;
use crate::egress::proxy::Decision;
use crate::wire::{EventKind, JobView, NetworkChange};

impl Paddock {
    /// Applies `change` to a live `allowlist` job; returns the job as it is now.
    pub async fn set_network(&self, id: &str, change: NetworkChange) -> Result<JobView> {
        let record = self.load(id)?;
        let network = record.limits.network;
        let refuse = |reason: &str| {
            Err(Error::Network {
                network,
                reason: reason.to_string(),
            })
        };
        if network != NetworkMode::Allowlist {
            return refuse(
                "only jobs created with `--network allowlist` (or `--allow`) change their network while they run; create a new job",
            );
        }
        if change.network == Some(NetworkMode::Open) {
            return refuse("an allowlist job cannot be opened while it runs; create a new job");
        }
        let (record, ()) = self.store.update(&record.id, |r| {
            let allow = &mut r.limits.allow;
            if change.network == Some(NetworkMode::None) {
                allow.clear();
            }
            allow.retain(|entry| {
                !change.deny.iter().any(|denied| {
                    denied.pattern == entry.pattern
                        && (denied.port.is_none() || denied.port == entry.port)
                })
            });
            for entry in &change.allow {
                if !allow.contains(entry) {
                    allow.push(entry.clone());
                }
            }
        })?;
        self.runtime_of(&record).apply_network(&record).await?;
        Ok(JobView::from(&record))
    }

    /// Emits `egress.denied` for each refusal logged by the proxies of `allowlist` jobs since
    /// the last call (`read` remembers how far each log was read). Returns how many.
    pub async fn relay_egress_denials(&self, read: &mut BTreeMap<String, u64>) -> u64 {
        let Ok((records, _)) = self.store.list() else {
            return 0;
        };
        let mut denied = 0;
        for record in records
            .iter()
            .filter(|r| r.limits.network == NetworkMode::Allowlist)
        {
            let path = self.home.logs_dir(&record.id).join("egress.jsonl");
            let Ok(text) = tokio::fs::read(&path).await else {
                continue;
            };
            let offset = read.entry(record.id.to_string()).or_insert(0);
            let start = usize::try_from(*offset)
                .unwrap_or(usize::MAX)
                .min(text.len());
            // Only whole lines; a line being written is read next time.
            let Some(end) = text[start..].iter().rposition(|b| *b == b'\n') else {
                continue;
            };
            for line in text[start..=start + end].split(|b| *b == b'\n') {
                let Ok(decision) = serde_json::from_slice::<Decision>(line) else {
                    continue;
                };
                if !decision.allowed {
                    denied += 1;
                    self.emit(
                        EventKind::EgressDenied,
                        Some(&record.id),
                        None,
                        serde_json::json!({
                            "host": decision.host,
                            "port": decision.port,
                            "method": decision.method,
                            "reason": decision.reason,
                        }),
                    );
                }
            }
            *offset = u64::try_from(start + end + 1).unwrap_or(u64::MAX);
        }
        read.retain(|id, _| records.iter().any(|r| r.id.as_str() == id));
        denied
    }
}
