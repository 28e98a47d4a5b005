//! The live web dashboard, served by `paddock serve` at `/` on the same listeners and behind
//! the same caller check as the API ([`app`] puts both together): the job table, a page per
//! job (diff, commits, execs, the last exec's output), stop, remove and sweep.
//!
//! It is another front end of the same operations: pages render `wire` types that come from
//! the [`Operations`] methods (or, for sweep, the same `ApiState::sweep` as `POST
//! /v1/sweep`), and its actions call those same methods. The pages are whole HTML from the
//! server, readable with JavaScript off; a small embedded script (`assets/dashboard.js`)
//! subscribes to `/v1/events` and re-fetches `/fragments/jobs` on job events, and follows the
//! last exec's output. Assets are compiled in; a Content-Security-Policy of `'self'` keeps
//! the browser from asking any other host. Every form carries the session's CSRF token,
//! checked before anything is done.

use std::collections::HashMap;

use axum::extract::{Extension, Form, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Router, http::HeaderName};

use crate::daemon::api::auth::{self, Access, Caller};
use crate::daemon::api::ids::JobIdPath;
use crate::daemon::api::{ApiError, ApiState, REQUEST_TIMEOUT, with_deadline};
use crate::ops::Operations;
use crate::wire::RemoveOptions;

mod checkpoints;
mod html;
mod job;
mod lease;

use html::JobRow;

/// Content-Security-Policy of every dashboard answer: nothing from another host.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
    connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
/// The last exec's output shown on a job page (its tail beyond this is cut).
const OUTPUT_SHOWN: u64 = 256 * 1024;

/// Everything a listener serves: the API's routes and the dashboard's, behind the
/// listener's caller check (`state.access`).
pub fn app(state: ApiState) -> Router {
    let access = state.access.clone();
    crate::daemon::api::router(state.clone())
        .merge(routes(state))
        .layer(middleware::from_fn(move |request: Request, next: Next| {
            auth::authorize(access.clone(), request, next)
        }))
        .layer(middleware::from_fn(
            crate::daemon::api::rejections::json_errors,
        ))
        .layer(middleware::from_fn(crate::daemon::api::catch_panic))
        .layer(middleware::from_fn(
            crate::daemon::api::rejections::close_after_refused_body,
        ))
}

fn routes(state: ApiState) -> Router {
    Router::new()
        .route("/", get(jobs_page))
        .route("/login", get(login))
        .route("/fragments/jobs", get(jobs_fragment))
        .route("/jobs/{id}", get(job_page))
        .route("/jobs/{id}/stop", post(stop))
        .route("/jobs/{id}/pause", post(pause))
        .route("/jobs/{id}/resume", post(resume))
        .route("/jobs/{id}/remove", post(remove))
        .route("/jobs/{id}/checkpoint", post(checkpoints::checkpoint))
        .route("/jobs/{id}/restore", post(checkpoints::restore))
        .route("/jobs/{id}/fork", post(checkpoints::fork))
        .route("/sweep", get(sweep_dry_run).post(sweep_now))
        .route("/assets/dashboard.js", get(script))
        .route("/assets/dashboard.css", get(style))
        .layer(middleware::from_fn(guard_headers))
        .route("/v1/dashboard", post(lease::open))
        .with_state(state)
}

/// Headers of every dashboard answer: the CSP, no caching, no referrer, no sniffing.
async fn guard_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::CACHE_CONTROL, "no-store"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (HeaderName::from_static("x-frame-options"), "DENY"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

fn html(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        body,
    )
        .into_response()
}

/// An engine error as an HTML page with the API's status for it.
fn error_response(error: ApiError) -> Response {
    let ApiError {
        status, message, ..
    } = error;
    html(status, html::error_page(status.as_u16(), &message))
}

/// `GET /login?token=…`: a session cookie for a right token, then `/` without the token.
async fn login(
    Extension(access): Extension<Access>,
    axum::extract::Query(query): axum::extract::Query<HashMap<String, String>>,
) -> Response {
    if access.is_trusted() {
        return Redirect::to("/").into_response();
    }
    let presented = query.get("token").map_or("", String::as_str);
    match access.login(presented) {
        Some(cookie) => {
            let mut response = Redirect::to("/").into_response();
            response.headers_mut().insert(header::SET_COOKIE, cookie);
            response
        }
        None => html(
            StatusCode::UNAUTHORIZED,
            html::error_page(
                401,
                "this sign-in link is wrong or was used already: run `paddock dashboard` again",
            ),
        ),
    }
}

/// Every job with its sandbox's state and branch position, newest first.
async fn rows(state: &ApiState) -> Result<Vec<JobRow>, ApiError> {
    let mut views = with_deadline(REQUEST_TIMEOUT, Operations::list(&*state.paddock, None)).await?;
    views.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
    let looks = views.into_iter().map(|view| async move {
        let live = match state.paddock.load(view.id.as_str()) {
            Ok(record) => state.paddock.live_status(&record).await,
            Err(_) => crate::engine::LiveStatus::default(),
        };
        JobRow {
            view,
            sandbox: live.sandbox,
            ahead_behind: live.ahead_behind,
        }
    });
    Ok(futures_util::future::join_all(looks).await)
}

async fn jobs_page(State(state): State<ApiState>) -> Response {
    match rows(&state).await {
        Ok(rows) => html(
            StatusCode::OK,
            html::jobs_page(&html::job_table(&rows, chrono::Utc::now())),
        ),
        Err(error) => error_response(error),
    }
}

async fn jobs_fragment(State(state): State<ApiState>) -> Response {
    match rows(&state).await {
        Ok(rows) => html(StatusCode::OK, html::job_table(&rows, chrono::Utc::now())),
        Err(error) => error_response(error),
    }
}

async fn job_page(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    JobIdPath(id): JobIdPath,
) -> Response {
    let paddock = &*state.paddock;
    let view = match with_deadline(REQUEST_TIMEOUT, Operations::view(paddock, &id)).await {
        Ok(view) => view,
        Err(error) => return error_response(error),
    };
    let live = match paddock.load(&id) {
        Ok(record) => paddock.live_status(&record).await,
        Err(_) => crate::engine::LiveStatus::default(),
    };
    let message = |e: ApiError| e.message;
    // The diff first: its sync (branch and work) makes the log's cheap.
    let diff = with_deadline(REQUEST_TIMEOUT, Operations::diff(paddock, &id, false))
        .await
        .map_err(message);
    let commits = with_deadline(REQUEST_TIMEOUT, Operations::log(paddock, &id))
        .await
        .map_err(message);
    let execs = with_deadline(REQUEST_TIMEOUT, Operations::execs(paddock, &id))
        .await
        .map_err(message);
    let output = match execs.as_ref().ok().and_then(|e| e.last()) {
        Some(last) => {
            let from = last.output_bytes.saturating_sub(OUTPUT_SHOWN);
            let mut bytes = Vec::new();
            let mut keep = |chunk: &[u8]| bytes.extend_from_slice(chunk);
            let read = Operations::exec_output(paddock, &id, &last.id, from, false, &mut keep);
            let offset = with_deadline(REQUEST_TIMEOUT, read).await.unwrap_or(from);
            Some((last.id.clone(), job::output_text(&bytes), offset))
        }
        None => None,
    };
    let page = job::JobPage {
        row: JobRow {
            view,
            sandbox: live.sandbox,
            ahead_behind: live.ahead_behind,
        },
        execs,
        output,
        commits,
        diff,
        egress: paddock.egress_decisions(&id, 50).await.unwrap_or_default(),
        checkpoints: Operations::checkpoints(paddock, &id)
            .await
            .map(|list| list.checkpoints)
            .map_err(|e| ApiError::from(e).message),
        csrf: caller.csrf().to_string(),
    };
    html(StatusCode::OK, job::render(&page, chrono::Utc::now()))
}

/// A form's fields; `csrf` is checked against the caller's session first.
type Fields = Form<HashMap<String, String>>;

fn csrf_refused(caller: &Caller, fields: &HashMap<String, String>) -> Option<Response> {
    let presented = fields.get("csrf").map_or("", String::as_str);
    (!caller.check_csrf(presented)).then(|| {
        html(
            StatusCode::FORBIDDEN,
            html::error_page(
                403,
                "the form's CSRF token is missing or wrong: reload the page",
            ),
        )
    })
}

async fn stop(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    JobIdPath(id): JobIdPath,
    Form(fields): Fields,
) -> Response {
    if let Some(refused) = csrf_refused(&caller, &fields) {
        return refused;
    }
    match with_deadline(
        REQUEST_TIMEOUT,
        Operations::stop(&*state.paddock, &id, None),
    )
    .await
    {
        Ok(_) => back_to_job(&id),
        Err(error) => error_response(error),
    }
}

/// The answer to a job page's form that worked: back to that page.
fn back_to_job(id: &str) -> Response {
    Redirect::to(&format!("/jobs/{}", html::seg(id))).into_response()
}

async fn pause(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    JobIdPath(id): JobIdPath,
    Form(fields): Fields,
) -> Response {
    if let Some(refused) = csrf_refused(&caller, &fields) {
        return refused;
    }
    match with_deadline(REQUEST_TIMEOUT, Operations::pause(&*state.paddock, &id)).await {
        Ok(_) => back_to_job(&id),
        Err(error) => error_response(error),
    }
}

async fn resume(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    JobIdPath(id): JobIdPath,
    Form(fields): Fields,
) -> Response {
    if let Some(refused) = csrf_refused(&caller, &fields) {
        return refused;
    }
    match with_deadline(REQUEST_TIMEOUT, Operations::resume(&*state.paddock, &id)).await {
        Ok(_) => back_to_job(&id),
        Err(error) => error_response(error),
    }
}

async fn remove(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    JobIdPath(id): JobIdPath,
    Form(fields): Fields,
) -> Response {
    if let Some(refused) = csrf_refused(&caller, &fields) {
        return refused;
    }
    let branch = fields.get("branch").map_or("default", String::as_str);
    let options = RemoveOptions::from_flags(
        branch == "delete",
        branch == "keep",
        None,
        fields.get("force").is_some_and(|v| v == "on"),
    );
    let removal = Operations::remove(&*state.paddock, &id, options);
    match with_deadline(REQUEST_TIMEOUT, removal).await {
        Ok(report) => {
            let wip = match (report.wip_fetch(), &report.wip_commit) {
                (Some(fetch), Some(c)) => format!(
                    "Uncommitted work was saved ({}); to get it: <code>{}</code>",
                    html::esc(c),
                    html::esc(&fetch)
                ),
                _ => "There was no uncommitted work to save.".into(),
            };
            let branch = if report.branch_kept {
                format!(
                    "The branch <code>{}</code> was kept ({} commit(s) ahead).",
                    html::esc(&report.branch),
                    report.commits_ahead
                )
            } else {
                format!(
                    "The branch <code>{}</code> was deleted.",
                    html::esc(&report.branch)
                )
            };
            let body = format!(
                r#"<h1>Removed <code id="removed">{}</code></h1><p>{wip}</p><p>{branch}</p><p><a href="/">back to the jobs</a></p>"#,
                html::esc(&id)
            );
            html(StatusCode::OK, html::page("removed", &body, false))
        }
        Err(error) => error_response(error),
    }
}

async fn sweep_dry_run(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
) -> Response {
    match state.sweep(true).await {
        Ok(report) => html(StatusCode::OK, html::sweep_page(&report, caller.csrf())),
        Err(error) => error_response(error),
    }
}

async fn sweep_now(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Form(fields): Fields,
) -> Response {
    if let Some(refused) = csrf_refused(&caller, &fields) {
        return refused;
    }
    match state.sweep(false).await {
        Ok(report) => html(StatusCode::OK, html::sweep_page(&report, caller.csrf())),
        Err(error) => error_response(error),
    }
}

async fn script() -> Response {
    (
        [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
        include_str!("assets/dashboard.js"),
    )
        .into_response()
}

async fn style() -> Response {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("assets/dashboard.css"),
    )
        .into_response()
}
