//! The HTTP/JSON API of `paddock serve`, for orchestrators: axum on a Unix socket (mode 0600)
//! or, with `--listen` and a bearer token, on TCP. Who may call is `auth`'s: the serving side
//! (`dashboard::app`) puts its middleware around these routes and the dashboard's.
//!
//! Every handler calls the same [`Paddock`] method the CLI calls; this module only maps JSON
//! to requests, errors to statuses (`{"error": {"code", "message"}}`), and adds what a
//! service needs: 429 with Retry-After when a `no_wait` create finds no room, a body size
//! limit, per-request deadlines, Server-Sent Events and Prometheus metrics. The streamed
//! answers (exec, an exec's output, events) are in `streams`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use crate::engine::{BranchPolicy, CreateRequest, JobView, NetworkChange, Paddock, RemoveOptions};
use crate::error::{Error, ErrorKind};
use crate::sweep::SweepOptions;
use crate::units::HumanDuration;
use ids::JobIdPath;

/// Largest request body accepted: room for an exec's command line as long as Linux takes
/// one (ARG_MAX, 2 MiB of arguments) with its JSON escaping; larger input streams.
const BODY_LIMIT: usize = 4 << 20;
/// Deadline of requests other than exec.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);
/// Exec requests get their own timeout plus this.
const EXEC_MARGIN: Duration = Duration::from_secs(60);

/// Shared state of the API.
#[derive(Clone)]
pub struct ApiState {
    pub(crate) paddock: Arc<Paddock>,
    metrics: Arc<crate::daemon::metrics::Metrics>,
    pub(crate) sweep_defaults: SweepOptions,
    /// Who may call this listener.
    pub(crate) access: auth::Access,
    idempotency: Arc<crate::idempotency::IdempotencyStore>,
    /// Becomes true when the daemon stops: long-lived answers that are no request's work
    /// (a dashboard listener's lease) end then.
    pub(crate) stopping: Option<tokio::sync::watch::Receiver<bool>>,
    /// The sessions of MCP over HTTP (`/mcp`), shared by the listeners.
    pub(crate) mcp: mcp_http::McpSessions,
}

impl ApiState {
    pub fn new(paddock: Arc<Paddock>, sweep_defaults: SweepOptions) -> Result<ApiState, Error> {
        let idempotency = Arc::new(crate::idempotency::IdempotencyStore::open(paddock.home())?);
        Ok(ApiState {
            idempotency,
            paddock,
            metrics: Arc::default(),
            sweep_defaults,
            access: auth::Access::Trusted,
            stopping: None,
            mcp: mcp_http::McpSessions::default(),
        })
    }

    /// MCP sessions over HTTP create jobs only in `repos` (git common dirs).
    pub fn with_mcp_repos(mut self, repos: Vec<std::path::PathBuf>) -> ApiState {
        self.mcp = mcp_http::McpSessions::new(repos);
        self
    }

    /// The same state for a listener that admits callers by `access`.
    pub fn with_access(&self, access: auth::Access) -> ApiState {
        let mut state = self.clone();
        state.access = access;
        state
    }

    /// Ends long-lived answers when `stopping` becomes true.
    pub fn with_stopping(mut self, stopping: tokio::sync::watch::Receiver<bool>) -> ApiState {
        self.stopping = Some(stopping);
        self
    }

    /// Counts refusals of the jobs' egress proxies, for `/metrics`.
    pub fn record_egress_denials(&self, denied: u64) {
        self.metrics.count_egress_denials(denied);
    }

    /// Counts a sweep the daemon ran on its own, for `/metrics`.
    pub fn record_sweep(&self, removed: usize) {
        self.metrics.count_sweep(removed as u64);
    }
}

/// An API error: status, a stable code and the engine's message.
pub struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) code: &'static str,
    pub(crate) message: String,
    pub(crate) retry_after: Option<u64>,
}

impl ApiError {
    pub(crate) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_input",
            message: message.into(),
            retry_after: None,
        }
    }
}

/// The HTTP status of each kind of library error: the one table of them.
fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Usage | ErrorKind::Config | ErrorKind::InvalidInput => StatusCode::BAD_REQUEST,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict | ErrorKind::Refused => StatusCode::CONFLICT,
        ErrorKind::RuntimeUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::QueueFull => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::SetupFailed => StatusCode::UNPROCESSABLE_ENTITY,
        ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorKind::PermissionDenied => StatusCode::FORBIDDEN,
        ErrorKind::Git | ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> ApiError {
        let kind = error.kind();
        let mut message = error.to_string();
        if let Some(hint) = error.hint() {
            message.push_str(&format!(" (hint: {hint})"));
        }
        ApiError {
            status: status_of(kind),
            code: kind.code(),
            message,
            // The queue moves as jobs end; a few seconds is a fair first retry.
            retry_after: (kind == ErrorKind::QueueFull).then_some(5),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

pub mod auth;
mod checkpoints;
mod files;
mod idempotency;
pub(crate) mod ids;
mod mcp_http;
mod merges;
pub(crate) mod rejections;
mod streams;

pub(crate) type ApiResult<T> = Result<T, ApiError>;

/// The outermost layer of every listener: a handler that panics answers 500 with the API's
/// error body, and the daemon goes on serving every other request (one request's bug never
/// takes the API away from every client of every job). Unwinding is caught in the request's
/// own future, so a client that goes away still cancels its handler.
pub(crate) async fn catch_panic(request: Request, next: Next) -> Response {
    use futures_util::FutureExt as _;
    let path = request.uri().path().to_string();
    match std::panic::AssertUnwindSafe(next.run(request))
        .catch_unwind()
        .await
    {
        Ok(response) => response,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            tracing::error!(%path, %what, "a request handler panicked");
            ApiError {
                status: StatusCode::INTERNAL_SERVER_ERROR,
                code: "internal",
                message: format!("the request failed inside paddock: {what}"),
                retry_after: None,
            }
            .into_response()
        }
    }
}

pub(crate) async fn with_deadline<T>(
    deadline: Duration,
    work: impl Future<Output = Result<T, Error>>,
) -> ApiResult<T> {
    match tokio::time::timeout(deadline, work).await {
        Ok(result) => result.map_err(ApiError::from),
        Err(_) => Err(ApiError {
            status: StatusCode::GATEWAY_TIMEOUT,
            code: "timeout",
            message: format!("the request did not finish within {deadline:?}"),
            retry_after: None,
        }),
    }
}

fn parse<T: std::str::FromStr<Err = crate::units::UnitError>>(
    value: &Option<String>,
) -> ApiResult<Option<T>> {
    value
        .as_deref()
        .map(|v| {
            v.parse()
                .map_err(|e: crate::units::UnitError| ApiError::bad_request(e.to_string()))
        })
        .transpose()
}

/// A JSON body of one of the wire types; a body that does not fit it is a 400 with
/// `invalid_input`, whatever was wrong (syntax, a field, a value).
struct ApiJson<T>(T);

impl<T, S> axum::extract::FromRequest<S> for ApiJson<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(ApiJson(value)),
            Err(rejection) => Err(ApiError::bad_request(rejection.body_text())),
        }
    }
}

/// The API's routes over `state`, without the caller check (`auth::authorize`, which the
/// serving side puts around these and the dashboard's routes).
pub fn router(state: ApiState) -> Router {
    let kept_answers = state.idempotency.clone();
    Router::new()
        .route(
            "/healthz",
            get(|| async { axum::Json(json!({"ok": true})) }),
        )
        .route("/metrics", get(metrics))
        .route("/v1/jobs", post(create_job).get(list_jobs))
        .route("/v1/admission", get(admission))
        .route("/v1/jobs/{id}", get(show_job).delete(remove_job))
        .route("/v1/jobs/{id}/exec", post(streams::exec_job))
        .route("/v1/jobs/{id}/execs", get(streams::list_execs))
        .route("/v1/jobs/{id}/execs/{exec}", get(streams::show_exec))
        .route(
            "/v1/jobs/{id}/execs/{exec}/output",
            get(streams::exec_output),
        )
        .route("/v1/jobs/{id}/diff", get(diff_job))
        .route("/v1/jobs/{id}/log", get(log_job))
        .route("/v1/jobs/{id}/logs", get(streams::logs_job))
        .route("/v1/jobs/{id}/stop", post(stop_job))
        .route("/v1/jobs/{id}/pause", post(pause_job))
        .route("/v1/jobs/{id}/resume", post(resume_job))
        .route(
            "/v1/jobs/{id}/checkpoints",
            post(checkpoints::take).get(checkpoints::list),
        )
        .route(
            "/v1/jobs/{id}/checkpoints/{name}",
            axum::routing::delete(checkpoints::remove),
        )
        .route("/v1/jobs/{id}/restore", post(checkpoints::restore))
        .route("/v1/jobs/{id}/fork", post(checkpoints::fork))
        .route("/v1/jobs/{id}/network", post(set_network))
        .route(
            "/v1/jobs/{id}/files",
            get(files::get_file).put(files::put_file),
        )
        .route("/v1/jobs/{id}/merge", post(merges::merge_job))
        .route("/v1/jobs/{id}/apply", post(merges::apply_job))
        .route("/v1/jobs/{id}/push", post(merges::push_job))
        .route("/v1/conflicts", get(merges::conflicts))
        .route("/v1/sweep", post(sweep))
        .route("/v1/events", get(streams::events))
        .route(
            "/mcp",
            post(mcp_http::post)
                .get(mcp_http::get)
                .delete(mcp_http::delete),
        )
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        // Inside the caller check: an unauthorized request never claims a key.
        .layer(middleware::from_fn(move |request: Request, next: Next| {
            idempotency::idempotent(kept_answers.clone(), request, next)
        }))
        .with_state(state)
}

async fn create_job(
    State(state): State<ApiState>,
    headers: axum::http::HeaderMap,
    ApiJson(mut request): ApiJson<CreateRequest>,
) -> ApiResult<Response> {
    let started = Instant::now();
    request.waiter = waiter_tag(&headers);
    // No deadline here: a create may wait in the admission queue for up to
    // `admission.max_wait`, which the engine keeps. It runs in its own task: a client that
    // gives up while it is queued gives up its place (the sender below is dropped with this
    // handler); once admitted, the job is built to the end, never left half made by a closed
    // connection.
    let (_client, gone) = tokio::sync::watch::channel(());
    let paddock = state.paddock.clone();
    let created = tokio::spawn(async move { paddock.create_for(request, Some(gone)).await })
        .await
        .map_err(|join| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            message: format!("the create task failed: {join}"),
            retry_after: None,
        })??;
    state.metrics.observe_create(started.elapsed());
    let mut body =
        serde_json::to_value(state.paddock.view_of(&created.record)).expect("views serialize");
    if let Some(warning) = created.warning {
        body["warning"] = json!(warning);
    }
    Ok((StatusCode::CREATED, axum::Json(body)).into_response())
}

/// The caller's tag for its place in a queue (`X-Paddock-Waiter`), when it is a short word.
pub(super) fn waiter_tag(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get(crate::wire::WAITER_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|tag| !tag.is_empty() && tag.len() <= 64)
        .filter(|tag| tag.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        .map(str::to_string)
}

/// The budget, what holds it and who waits (a few small files: no deadline needed).
async fn admission(State(state): State<ApiState>) -> ApiResult<Response> {
    Ok(axum::Json(state.paddock.admission_view()?).into_response())
}

#[derive(Deserialize)]
struct ListQuery {
    repo: Option<String>,
}

async fn list_jobs(
    State(state): State<ApiState>,
    Query(query): Query<ListQuery>,
) -> ApiResult<Response> {
    // A test-only failpoint: a handler that panics (see `catch_panic`).
    assert!(
        !crate::env::fail_at("api-list-panic"),
        "failpoint api-list-panic"
    );
    let repo = query.repo.map(std::path::PathBuf::from);
    let views: Vec<JobView> =
        with_deadline(REQUEST_TIMEOUT, state.paddock.list_views(repo.as_deref())).await?;
    Ok(axum::Json(views).into_response())
}

async fn show_job(State(state): State<ApiState>, JobIdPath(id): JobIdPath) -> ApiResult<Response> {
    let details = with_deadline(REQUEST_TIMEOUT, state.paddock.show(&id)).await?;
    Ok(axum::Json(details).into_response())
}

#[derive(Deserialize)]
struct DiffQuery {
    #[serde(default)]
    stat: bool,
}

async fn diff_job(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
    Query(query): Query<DiffQuery>,
) -> ApiResult<Response> {
    let diff = with_deadline(REQUEST_TIMEOUT, state.paddock.diff(&id, query.stat)).await?;
    Ok(axum::Json(diff).into_response())
}

async fn log_job(State(state): State<ApiState>, JobIdPath(id): JobIdPath) -> ApiResult<Response> {
    let commits = with_deadline(REQUEST_TIMEOUT, state.paddock.log(&id)).await?;
    Ok(axum::Json(commits).into_response())
}

#[derive(Deserialize)]
struct StopBody {
    grace: Option<String>,
}

async fn set_network(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
    ApiJson(change): ApiJson<NetworkChange>,
) -> ApiResult<Response> {
    let view = with_deadline(REQUEST_TIMEOUT, state.paddock.set_network(&id, change)).await?;
    Ok(axum::Json(view).into_response())
}

async fn pause_job(State(state): State<ApiState>, JobIdPath(id): JobIdPath) -> ApiResult<Response> {
    let answer = with_deadline(REQUEST_TIMEOUT, state.paddock.pause(&id)).await?;
    Ok(axum::Json(answer).into_response())
}

async fn resume_job(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
) -> ApiResult<Response> {
    let answer = with_deadline(REQUEST_TIMEOUT, state.paddock.resume(&id)).await?;
    Ok(axum::Json(answer).into_response())
}

async fn stop_job(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
    body: Option<axum::Json<StopBody>>,
) -> ApiResult<Response> {
    let grace = match body {
        Some(axum::Json(StopBody { grace })) => parse::<HumanDuration>(&grace)?.map(|g| g.0),
        None => None,
    };
    let stopped = with_deadline(REQUEST_TIMEOUT, state.paddock.stop(&id, grace)).await?;
    Ok(axum::Json(json!({"id": id, "stopped": stopped})).into_response())
}

/// The options of a removal: the query of `DELETE /v1/jobs/{id}`.
#[derive(Deserialize, Default)]
struct RemoveQuery {
    #[serde(default)]
    delete_branch: bool,
    #[serde(default)]
    keep_branch: bool,
    #[serde(default)]
    force: bool,
    /// Any policy by name (`delete-if-merged`); the two flags above win.
    #[serde(default)]
    branch_policy: Option<BranchPolicy>,
}

impl RemoveQuery {
    fn options(&self) -> RemoveOptions {
        RemoveOptions::from_flags(
            self.delete_branch,
            self.keep_branch,
            self.branch_policy,
            self.force,
        )
    }
}

async fn remove_job(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
    Query(query): Query<RemoveQuery>,
) -> ApiResult<Response> {
    let options = query.options();
    let report = with_deadline(REQUEST_TIMEOUT, state.paddock.remove(&id, options)).await?;
    Ok(axum::Json(report).into_response())
}

#[derive(Deserialize)]
struct SweepQuery {
    #[serde(default)]
    dry_run: bool,
}

async fn sweep(
    State(state): State<ApiState>,
    Query(query): Query<SweepQuery>,
) -> ApiResult<Response> {
    let report = state.sweep(query.dry_run).await?;
    Ok(axum::Json(report).into_response())
}

impl ApiState {
    /// A sweep with the daemon's settings (every front end of the daemon runs this one).
    pub(crate) async fn sweep(&self, dry_run: bool) -> ApiResult<crate::sweep::SweepReport> {
        let mut options = self.sweep_defaults.clone();
        options.dry_run = dry_run;
        options.now = chrono::Utc::now();
        let report = with_deadline(REQUEST_TIMEOUT * 4, self.paddock.sweep(&options)).await?;
        if !dry_run {
            self.record_sweep(report.removed.len());
        }
        Ok(report)
    }
}

async fn metrics(State(state): State<ApiState>) -> ApiResult<Response> {
    let records = with_deadline(REQUEST_TIMEOUT, state.paddock.list(None)).await?;
    let text = state
        .metrics
        .render(records.iter().map(|record| record.state));
    Ok((
        [(header::CONTENT_TYPE, crate::daemon::metrics::CONTENT_TYPE)],
        text,
    )
        .into_response())
}
