//! `paddock serve`: the long-running side of paddock — a file-activity watcher that moves
//! each job's `last_activity_at` when files in its worktree change, and the sweeper on an
//! interval (with container health checks).
//!
//! The watcher only moves timestamps: it never changes a job's state or removes anything, so
//! it can run beside any number of CLI invocations. Events are debounced: one record update
//! per job per flush.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::engine::{Paddock, Result};
use crate::job::JobId;
use crate::sweep::SweepOptions;

/// How often collected file events are written to records.
const ACTIVITY_FLUSH: Duration = Duration::from_secs(2);

/// Settings of one daemon run.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub sweep_interval: Duration,
    /// The sweep settings (staleness, branch policy); `now` is refreshed on every sweep.
    pub sweep: SweepOptions,
}

/// Starts the activity watcher on the worktree root. Returns the watcher (dropping it stops
/// watching) and the stream of job ids that saw file activity.
pub fn watch_activity(
    paddock: &Paddock,
) -> Result<(notify::RecommendedWatcher, mpsc::UnboundedReceiver<JobId>)> {
    let root = paddock.home().worktrees_dir();
    let (tx, rx) = mpsc::unbounded_channel();
    let prefix = root.clone();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        if matches!(event.kind, notify::EventKind::Access(_)) {
            return;
        }
        for path in event.paths {
            if let Some(id) = job_of(&prefix, &path) {
                let _ = tx.send(id);
            }
        }
    })
    .map_err(|e| watch_error(&root, e))?;
    watcher
        .watch(&root, RecursiveMode::Recursive)
        .map_err(|e| watch_error(&root, e))?;
    Ok((watcher, rx))
}

fn watch_error(root: &std::path::Path, error: notify::Error) -> crate::engine::Error {
    crate::store::StoreError::Io {
        path: root.to_path_buf(),
        source: std::io::Error::other(error.to_string()),
    }
    .into()
}

/// `worktrees/<repo-key>/<job>/...` → the job id.
fn job_of(root: &std::path::Path, path: &std::path::Path) -> Option<JobId> {
    let relative = path.strip_prefix(root).ok()?;
    let mut parts = relative.components();
    parts.next()?;
    let id = parts.next()?.as_os_str().to_str()?;
    // Changes inside a job's checkout only, not the creation of the directory itself.
    parts.next()?;
    JobId::parse(id).ok()
}

/// Runs until SIGTERM or Ctrl-C: the watcher, a flush of activity every two seconds and a
/// sweep every interval.
pub async fn serve(paddock: Arc<Paddock>, options: ServeOptions) -> Result<()> {
    let (_watcher, mut activity) = watch_activity(&paddock)?;
    let mut touched: BTreeSet<JobId> = BTreeSet::new();
    let mut flush = tokio::time::interval(ACTIVITY_FLUSH);
    let mut sweep = tokio::time::interval(options.sweep_interval);
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|source| crate::store::StoreError::Io {
        path: PathBuf::from("SIGTERM"),
        source,
    })?;
    tracing::info!(home = %paddock.home().root().display(), "paddock serve: watching worktrees");
    loop {
        tokio::select! {
            Some(id) = activity.recv() => {
                touched.insert(id);
            }
            _ = flush.tick() => {
                let now = chrono::Utc::now();
                for id in std::mem::take(&mut touched) {
                    if paddock.store().exists(&id) {
                        let _ = paddock.store().update(&id, |r| {
                            r.last_activity_at = r.last_activity_at.max(now);
                        });
                    }
                }
            }
            _ = sweep.tick() => {
                let mut sweep_options = options.sweep.clone();
                sweep_options.now = chrono::Utc::now();
                match paddock.sweep(&sweep_options).await {
                    Ok(report) => tracing::info!(
                        removed = report.removed.len(),
                        errors = report.errors.len(),
                        "sweep done"
                    ),
                    Err(error) => tracing::warn!(%error, "sweep failed"),
                }
            }
            _ = tokio::signal::ctrl_c() => break,
            _ = terminate.recv() => break,
        }
    }
    tracing::info!("paddock serve: stopping; job containers keep running");
    Ok(())
}
