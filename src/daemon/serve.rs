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
    /// The Unix socket (default `$PADDOCK_HOME/paddock.sock`).
    pub socket: Option<PathBuf>,
    /// A TCP address, only together with `token_file`.
    pub listen: Option<String>,
    pub token_file: Option<PathBuf>,
    /// Admitted creates built at once; more wait their turn.
    pub max_concurrent_creates: usize,
    /// The repositories (git common dirs) MCP sessions over HTTP may create jobs in.
    pub mcp_repos: Vec<PathBuf>,
    /// How long in-flight requests may finish after SIGTERM.
    pub shutdown_grace: Duration,
}

/// Starts the activity watcher on the worktree root. Returns the watcher (dropping it stops
/// watching) and the stream of job ids that saw file activity.
pub fn watch_activity(
    paddock: &Paddock,
) -> Result<(notify::RecommendedWatcher, mpsc::UnboundedReceiver<JobId>)> {
    let root = paddock.home().worktrees_dir();
    let (tx, rx) = mpsc::unbounded_channel();
    let prefix = root.clone();
    // Never into a link: a worktree is the agent's, and a link it plants there (to `/`)
    // would have the daemon watch, and walk, whatever it names.
    let handler = move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        if matches!(event.kind, notify::EventKind::Access(_)) {
            return;
        }
        for path in event.paths {
            if let Some(id) = job_of(&prefix, &path) {
                let _ = tx.send(id);
            }
        }
    };
    let config = notify::Config::default().with_follow_symlinks(false);
    let mut watcher =
        notify::RecommendedWatcher::new(handler, config).map_err(|e| watch_error(&root, &e))?;
    watcher
        .watch(&root, RecursiveMode::Recursive)
        .map_err(|e| watch_error(&root, &e))?;
    Ok((watcher, rx))
}

fn watch_error(root: &std::path::Path, error: &notify::Error) -> crate::engine::Error {
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

fn serve_error(message: impl Into<String>) -> crate::engine::Error {
    crate::engine::Error::Serve {
        message: message.into(),
    }
}

fn adopt_queue(paddock: &Arc<Paddock>) {
    match paddock.adopt_queued() {
        Ok(0) => {}
        Ok(adopted) => eprintln!("paddock serve: resumed {adopted} queued create(s)"),
        Err(error) => tracing::warn!(%error, "could not adopt queued creates"),
    }
}

/// Binds the Unix socket, replacing a stale socket file no daemon answers on, mode 0600.
async fn bind_socket(path: &std::path::Path) -> Result<tokio::net::UnixListener> {
    if path.exists() {
        if tokio::net::UnixStream::connect(path).await.is_ok() {
            return Err(serve_error(format!(
                "another daemon is listening on `{}`",
                path.display()
            )));
        }
        let _ = std::fs::remove_file(path);
    }
    let listener = tokio::net::UnixListener::bind(path)
        .map_err(|e| serve_error(format!("cannot bind `{}`: {e}", path.display())))?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| serve_error(format!("cannot restrict `{}`: {e}", path.display())))?;
    Ok(listener)
}

/// Runs until SIGTERM or Ctrl-C: the HTTP API, the activity watcher, a flush of activity
/// every two seconds and a sweep every interval (the first at start, which adopts and
/// reconciles whatever earlier runs left). On SIGTERM it stops accepting, lets requests in
/// flight finish within `shutdown_grace`, and leaves job containers running.
#[expect(clippy::too_many_lines, reason = "the daemon's startup, in order")]
pub async fn serve(options: ServeOptions) -> Result<()> {
    // Refuse a TCP listener without a token before anything else happens.
    let token = match (&options.listen, &options.token_file) {
        (Some(_), None) => {
            return Err(serve_error(
                "--listen needs --token-file: a TCP API without a bearer token is refused",
            ));
        }
        (_, Some(file)) => {
            let token = std::fs::read_to_string(file)
                .map_err(|e| {
                    serve_error(format!("cannot read token file `{}`: {e}", file.display()))
                })?
                .trim()
                .to_string();
            if token.len() < 16 {
                return Err(serve_error(format!(
                    "the token in `{}` is shorter than 16 characters",
                    file.display()
                )));
            }
            Some(token)
        }
        (None, None) => None,
    };
    let (events, _) = tokio::sync::broadcast::channel(4096);
    let (refills, refill_requests) = tokio::sync::mpsc::unbounded_channel();
    let paddock = Arc::new(
        Paddock::from_env()?
            .with_events(events)
            .with_build_limit(options.max_concurrent_creates)
            .with_pool_refills(refills)
            .as_daemon(),
    );
    tokio::spawn(refill_pools(paddock.clone(), refill_requests));
    let socket = options
        .socket
        .clone()
        .unwrap_or_else(|| paddock.home().root().join("paddock.sock"));
    // SIGTERM is ours before a client can reach the socket: a caller that connects and then
    // stops the daemon at once (as a test does) must get the graceful stop, not a death by
    // the signal's default while the queue and the watcher are still being set up.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| serve_error(format!("cannot handle SIGTERM: {e}")))?;
    // The TCP listener before the socket: a client (or a test) takes the socket as the sign
    // that the daemon is up, so every listener must be up by then (a TCP request right after
    // was refused in CI, on a loaded host, in the gap between the two).
    let tcp = match &options.listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| serve_error(format!("cannot listen on `{addr}`: {e}")))?,
        ),
        None => None,
    };
    let unix = bind_socket(&socket).await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let state = crate::daemon::api::ApiState::new(paddock.clone(), options.sweep.clone())?
        .with_stopping(stop_rx.clone())
        .with_mcp_repos(options.mcp_repos.clone());
    let shutdown = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    let mut servers = Vec::new();
    // The API and the dashboard on each listener; the socket trusts its callers.
    let app = crate::daemon::dashboard::app(state.clone());
    servers.push(tokio::spawn(
        axum::serve(unix, app)
            .with_graceful_shutdown(shutdown(stop_rx.clone()))
            .into_future(),
    ));
    if let (Some(tcp), Some(token)) = (tcp, token) {
        // The sign-in URL for a browser: printed once, here (the token is the file's).
        if let Ok(address) = tcp.local_addr() {
            eprintln!("paddock serve: dashboard at http://{address}/login?token={token}");
        }
        let app = crate::daemon::dashboard::app(
            state.with_access(crate::daemon::api::auth::Access::token(token)),
        );
        servers.push(tokio::spawn(
            axum::serve(tcp, app)
                .with_graceful_shutdown(shutdown(stop_rx.clone()))
                .into_future(),
        ));
    }

    // Once both listeners are bound (a daemon that fails to start must not take over a
    // queue it then drops): the queued creates of a daemon that died keep their places.
    adopt_queue(&paddock);
    tokio::spawn(guard_job_ranges(paddock.clone()));
    let (_watcher, mut activity) = watch_activity(&paddock)?;
    let mut touched: BTreeSet<JobId> = BTreeSet::new();
    let mut egress_read = std::collections::BTreeMap::new();
    let mut flush = tokio::time::interval(ACTIVITY_FLUSH);
    let mut sweep = tokio::time::interval(options.sweep_interval);
    eprintln!("paddock serve: listening on {}", socket.display());
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
                let denied = paddock.relay_egress_denials(&mut egress_read).await;
                state.record_egress_denials(denied);
            }
            _ = sweep.tick() => {
                // Also each sweep: a daemon that died while another ran leaves its queue.
                adopt_queue(&paddock);
                let mut sweep_options = options.sweep.clone();
                sweep_options.now = chrono::Utc::now();
                match paddock.sweep(&sweep_options).await {
                    Ok(report) => {
                        state.record_sweep(report.removed.len());
                        tracing::info!(removed = report.removed.len(), errors = report.errors.len(), "sweep done");
                    }
                    Err(error) => tracing::warn!(%error, "sweep failed"),
                }
                // Bases (and branches) that moved since: job.conflict / job.conflict_resolved.
                paddock.watch_conflicts().await;
            }
            _ = tokio::signal::ctrl_c() => break,
            _ = terminate.recv() => break,
        }
    }
    eprintln!(
        "paddock serve: stopping; requests in flight get {:?}; job containers keep running",
        options.shutdown_grace
    );
    // Queued creates stop waiting and keep their places for the next daemon.
    paddock.stop_queue();
    let _ = stop_tx.send(true);
    let drained = tokio::time::timeout(options.shutdown_grace, async {
        for server in servers {
            let _ = server.await;
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!("requests still in flight after the grace period were dropped");
    }
    let _ = std::fs::remove_file(&socket);
    Ok(())
}

/// Refills the pools that creates claimed from, one fill at a time (requests that arrive
/// during a fill for the same pool are one refill).
/// At start, the job range's unreachable route (`egress::ranges`): jobs' networks may
/// outlive a reboot that cleared it. Off the start path; a failure is logged, and the next
/// job network tries again.
async fn guard_job_ranges(paddock: Arc<Paddock>) {
    let image = paddock.config(None).ok().and_then(|config| {
        let profile = config.profiles.get(&config.default_profile.value)?;
        Some(profile.image.value.clone())
    });
    let image = image.unwrap_or_else(|| crate::config::DEFAULT_IMAGE.to_string());
    let engine = paddock.runtimes().with_sandboxes();
    let guarded = match engine.capabilities().network {
        Some(network) => network.guard_job_ranges(&image).await,
        None => None,
    };
    match guarded {
        Some(Ok(true)) => {
            tracing::info!(range = %crate::egress::ranges::job_range(), "added the job range's unreachable route")
        }
        Some(Err(error)) => tracing::warn!(%error, "the job range's unreachable route is missing"),
        Some(Ok(false)) | None => {}
    }
}

async fn refill_pools(
    paddock: Arc<Paddock>,
    mut requests: tokio::sync::mpsc::UnboundedReceiver<crate::engine::PoolKey>,
) {
    while let Some(first) = requests.recv().await {
        let mut wanted = vec![first];
        while let Ok(more) = requests.try_recv() {
            if !wanted.contains(&more) {
                wanted.push(more);
            }
        }
        for (profile, repo, engine) in wanted {
            if let Err(error) = paddock
                .pool_fill(&repo, Some(&profile), engine.as_deref())
                .await
            {
                tracing::warn!(%error, profile, repo = %repo.display(), "pool refill failed");
            }
        }
    }
}
