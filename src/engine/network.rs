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

/// The most of one job's egress log read by one relay of its denials.
const RELAY_CHUNK: u64 = 4 << 20;
/// How often the relay brings remote jobs' egress logs over (a call to each job's engine).
const REMOTE_REFRESH: std::time::Duration = std::time::Duration::from_secs(5);

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
        crate::runtime::apply_network(self.runtime_of(&record).as_ref(), &record).await?;
        Ok(self.view_of(&record))
    }

    /// Emits `egress.denied` for each refusal logged by the proxies of live jobs since the
    /// last call (`read` remembers how far each log was read). Returns how many. Cheap when
    /// nothing happened: one directory listing and a `stat` per log, and only new bytes read.
    pub async fn relay_egress_denials(&self, read: &mut BTreeMap<String, u64>) -> u64 {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        self.refresh_remote_egress_logs().await;
        let Ok(mut dirs) = tokio::fs::read_dir(self.home.root().join("logs")).await else {
            return 0;
        };
        let mut denied = 0;
        let mut seen = std::collections::BTreeSet::new();
        while let Ok(Some(dir)) = dirs.next_entry().await {
            let id = dir.file_name().to_string_lossy().into_owned();
            let Ok(job) = crate::job::JobId::parse(&id) else {
                continue;
            };
            let path = dir.path().join("egress.jsonl");
            let Ok(meta) = tokio::fs::metadata(&path).await else {
                continue;
            };
            if !self.store.exists(&job) {
                continue;
            }
            seen.insert(id.clone());
            let offset = read.entry(id).or_insert(0);
            if meta.len() <= *offset {
                continue;
            }
            let mut fresh = Vec::new();
            let Ok(mut file) = tokio::fs::File::open(&path).await else {
                continue;
            };
            // At most RELAY_CHUNK per log and call: the job sets the pace of its proxy's log,
            // so a burst is relayed over several calls rather than read whole.
            if file.seek(std::io::SeekFrom::Start(*offset)).await.is_err()
                || file
                    .take(RELAY_CHUNK)
                    .read_to_end(&mut fresh)
                    .await
                    .is_err()
            {
                continue;
            }
            // Only whole lines; a line being written is read next time.
            let Some(end) = fresh.iter().rposition(|b| *b == b'\n') else {
                // A line longer than a whole chunk is no decision the proxy wrote: skipped.
                if fresh.len() as u64 >= RELAY_CHUNK {
                    *offset += RELAY_CHUNK;
                }
                continue;
            };
            for line in fresh[..end].split(|b| *b == b'\n') {
                let Ok(decision) = serde_json::from_slice::<Decision>(line) else {
                    continue;
                };
                if !decision.allowed {
                    denied += 1;
                    self.emit(
                        EventKind::EgressDenied,
                        Some(&job),
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
            *offset += u64::try_from(end + 1).unwrap_or(u64::MAX);
        }
        read.retain(|id, _| seen.contains(id));
        denied
    }

    /// Brings the host copies of remote allowlist jobs' egress logs up to date (a stat on
    /// the engine per job, a download only when the log grew), so the relay reads them as
    /// it reads local ones.
    async fn refresh_remote_egress_logs(&self) {
        // One relay loop per process (the daemon's): its last refresh, to keep the engines'
        // load to one call per job every REMOTE_REFRESH whatever the relay's own pace.
        static LAST: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
        {
            let mut last = LAST
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if last.is_some_and(|at| at.elapsed() < REMOTE_REFRESH) {
                return;
            }
            *last = Some(std::time::Instant::now());
        }
        let Ok((records, _)) = self.store.list() else {
            return;
        };
        for record in records {
            // Only a runtime whose proxy keeps the log elsewhere (a remote engine's) does
            // anything here.
            if record.limits.network != NetworkMode::Allowlist {
                continue;
            }
            let runtime = self.runtime_of(&record);
            if let Err(error) = crate::runtime::refresh_egress_log(runtime.as_ref(), &record).await
            {
                tracing::debug!(job = %record.id, %error, "egress log not refreshed");
            }
        }
    }

    /// The last `count` decisions of the job's egress proxy, oldest first (the dashboard's
    /// job page); empty for a job without a proxy. Reads at most the log's last 256 KiB.
    pub async fn egress_decisions(&self, id: &str, count: usize) -> Result<Vec<Decision>> {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};
        const TAIL: u64 = 256 * 1024;
        let record = self.load(id)?;
        // A remote job's proxy writes its log on the engine: the host copy is brought up
        // to date first (a stale copy is still shown when the engine does not answer).
        let runtime = self.runtime_of(&record);
        if let Err(error) = crate::runtime::refresh_egress_log(runtime.as_ref(), &record).await {
            tracing::debug!(job = %record.id, %error, "egress log not refreshed");
        }
        let path = self.home.logs_dir(&record.id).join("egress.jsonl");
        let Ok(mut file) = tokio::fs::File::open(&path).await else {
            return Ok(Vec::new());
        };
        let length = file.metadata().await.map_or(0, |m| m.len());
        let from = length.saturating_sub(TAIL);
        let mut tail = Vec::new();
        if file.seek(std::io::SeekFrom::Start(from)).await.is_err()
            || file.read_to_end(&mut tail).await.is_err()
        {
            return Ok(Vec::new());
        }
        // A cut first line (the tail started mid-line) does not parse and is skipped.
        let mut decisions: Vec<Decision> = tail
            .split(|b| *b == b'\n')
            .filter_map(|line| serde_json::from_slice(line).ok())
            .collect();
        let skip = decisions.len().saturating_sub(count);
        decisions.drain(..skip);
        Ok(decisions)
    }
}
