//! The job page's checkpoints (issue 43): the list with a Restore button each, a form that
//! takes one and a form that forks the job; the forms' handlers call the same `Operations`
//! as the CLI, CSRF-checked like every other form, and answer back on the job page (a fork:
//! on the page of its first new job).

use std::collections::HashMap;
use std::fmt::Write;

use axum::Form;
use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Redirect, Response};

use super::html::{csrf_field, esc, seg};
use super::{Caller, Fields, back_to_job, csrf_refused, error_response};
use crate::daemon::api::ids::JobIdPath;
use crate::daemon::api::{ApiState, REQUEST_TIMEOUT, with_deadline};
use crate::ops::Operations;
use crate::units::format_size;
use crate::wire::{CheckpointRequest, CheckpointView, ForkRequest, RestoreRequest};

/// The job page's section: its checkpoints, then the checkpoint and fork forms.
pub fn section(id: &str, csrf: &str, checkpoints: &Result<Vec<CheckpointView>, String>) -> String {
    let id_url = seg(id);
    let csrf = csrf_field(csrf);
    let mut out = String::from(r#"<h2>Checkpoints</h2>"#);
    match checkpoints {
        Ok(list) if list.is_empty() => {
            out.push_str(r#"<p class="empty" id="no-checkpoints">No checkpoints yet.</p>"#);
        }
        Ok(list) => {
            out.push_str(r#"<table id="checkpoints"><thead><tr><th>name</th><th>taken</th><th>branch tip</th><th>files</th><th>bytes</th><th></th></tr></thead><tbody>"#);
            for cp in list {
                let _ = write!(
                    out,
                    r#"<tr><td><code>{name}</code></td><td>{taken}</td><td><code>{tip}</code></td><td>{files}</td><td>{bytes}</td><td><form method="post" action="/jobs/{id_url}/restore">{csrf}<input type="hidden" name="checkpoint" value="{name}"><button type="submit">Restore</button></form></td></tr>"#,
                    name = esc(&cp.name),
                    taken = cp.created_at.format("%Y-%m-%d %H:%M:%S"),
                    tip = esc(cp.tip.as_deref().map_or("-", |t| t.get(..12).unwrap_or(t))),
                    files = cp.files,
                    bytes = format_size(cp.bytes),
                );
            }
            out.push_str("</tbody></table>");
        }
        Err(message) => {
            let _ = write!(out, r#"<p class="error">{}</p>"#, esc(message));
        }
    }
    let _ = write!(
        out,
        r#"<section class="actions"><form method="post" action="/jobs/{id_url}/checkpoint">{csrf}<label>name <input name="name" placeholder="cp-…"></label> <button type="submit" id="checkpoint">Checkpoint</button> <span class="hint">saves the branch tip, index, changes and untracked files (the job is frozen for that moment).</span></form>
<form method="post" action="/jobs/{id_url}/fork">{csrf}<label>jobs <input name="count" type="number" min="1" max="64" value="2"></label> <button type="submit" id="fork">Fork</button> <span class="hint">new jobs, each on its own branch, from a checkpoint taken now.</span></form></section>"#
    );
    out
}

fn field<'a>(fields: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    fields
        .get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

pub(super) async fn checkpoint(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    JobIdPath(id): JobIdPath,
    Form(fields): Fields,
) -> Response {
    if let Some(refused) = csrf_refused(&caller, &fields) {
        return refused;
    }
    let request = CheckpointRequest {
        name: field(&fields, "name").map(str::to_string),
    };
    match with_deadline(
        REQUEST_TIMEOUT,
        Operations::checkpoint(&*state.paddock, &id, request),
    )
    .await
    {
        Ok(_) => back_to_job(&id),
        Err(error) => error_response(error),
    }
}

pub(super) async fn restore(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    JobIdPath(id): JobIdPath,
    Form(fields): Fields,
) -> Response {
    if let Some(refused) = csrf_refused(&caller, &fields) {
        return refused;
    }
    let request = RestoreRequest {
        checkpoint: field(&fields, "checkpoint").unwrap_or_default().to_string(),
        branch: false,
    };
    match with_deadline(
        REQUEST_TIMEOUT,
        Operations::restore(&*state.paddock, &id, request),
    )
    .await
    {
        Ok(_) => back_to_job(&id),
        Err(error) => error_response(error),
    }
}

pub(super) async fn fork(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    JobIdPath(id): JobIdPath,
    Form(fields): Fields,
) -> Response {
    if let Some(refused) = csrf_refused(&caller, &fields) {
        return refused;
    }
    let request = ForkRequest {
        count: field(&fields, "count")
            .and_then(|c| c.parse().ok())
            .unwrap_or(1),
        ..ForkRequest::default()
    };
    match with_deadline(
        REQUEST_TIMEOUT,
        Operations::fork(&*state.paddock, &id, request),
    )
    .await
    {
        Ok(answer) => match answer.jobs.first() {
            Some(first) => {
                Redirect::to(&format!("/jobs/{}", seg(first.id.as_str()))).into_response()
            }
            None => back_to_job(&id),
        },
        Err(error) => error_response(error),
    }
}
