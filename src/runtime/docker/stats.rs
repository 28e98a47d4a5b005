//! What a job's container is doing now, for the dashboard: Docker's state and health, and one
//! stats sample (CPU over Docker's own sampling interval, memory in use). Best effort: any
//! failure or a slow daemon gives `None` (the dashboard shows "—"), never an error, and a
//! container without both of this install's labels is not reported on.

use std::time::Duration;

use bollard::query_parameters::StatsOptionsBuilder;
use futures_util::StreamExt;

use super::{LABEL_HOME, LABEL_JOB, job_container};
use crate::job::JobRecord;
use crate::runtime::SandboxStatus;
use crate::store::PaddockHome;

/// The whole look (inspect and one stats sample, which takes Docker about a second).
const STATUS_TIMEOUT: Duration = Duration::from_secs(4);

pub async fn sandbox_status(
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Option<SandboxStatus> {
    tokio::time::timeout(STATUS_TIMEOUT, look(daemon, home, record))
        .await
        .ok()
        .flatten()
}

async fn look(
    daemon: &super::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
) -> Option<SandboxStatus> {
    let docker = daemon.connect().ok()?;
    let name = job_container(record);
    let info = match docker.inspect_container(&name, None).await {
        Ok(info) => info,
        Err(_) => {
            return Some(SandboxStatus {
                status: "absent".into(),
                ..SandboxStatus::default()
            });
        }
    };
    let labels = info.config.and_then(|c| c.labels).unwrap_or_default();
    if labels.get(LABEL_JOB) != Some(&record.container_label().to_string())
        || labels.get(LABEL_HOME).map(String::as_str) != Some(home.id())
    {
        return None;
    }
    let state = info.state.unwrap_or_default();
    let mut status = SandboxStatus {
        status: state
            .status
            .map_or_else(|| "unknown".to_string(), |s| s.to_string()),
        health: state
            .health
            .and_then(|h| h.status)
            .map(|h| h.to_string())
            .filter(|h| !h.is_empty() && h != "none"),
        ..SandboxStatus::default()
    };
    if state.running != Some(true) {
        return Some(status);
    }
    let options = StatsOptionsBuilder::default()
        .stream(false)
        .one_shot(false)
        .build();
    if let Some(Ok(stats)) = docker.stats(&name, Some(options)).next().await {
        status.memory_bytes = stats.memory_stats.as_ref().and_then(|m| {
            // As `docker stats` shows it: usage minus the reclaimable page cache.
            let cache = m
                .stats
                .as_ref()
                .and_then(|s| s.get("inactive_file").copied())
                .unwrap_or(0);
            m.usage.map(|u| u.saturating_sub(cache))
        });
        status.cpu_percent = cpu_percent(&stats);
    }
    Some(status)
}

/// CPU use over the sample, in percent of one CPU (as `docker stats`).
#[allow(clippy::cast_precision_loss)]
fn cpu_percent(stats: &bollard::models::ContainerStatsResponse) -> Option<f64> {
    let now = stats.cpu_stats.as_ref()?;
    let before = stats.precpu_stats.as_ref()?;
    let used = now.cpu_usage.as_ref()?.total_usage? as f64
        - before.cpu_usage.as_ref()?.total_usage? as f64;
    let system = now.system_cpu_usage? as f64 - before.system_cpu_usage? as f64;
    let cpus = f64::from(now.online_cpus.unwrap_or(1));
    (system > 0.0 && used >= 0.0).then(|| used / system * cpus * 100.0)
}
