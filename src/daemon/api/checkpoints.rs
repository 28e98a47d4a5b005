//! The checkpoint routes (issue 43): take, list and remove a job's checkpoints, restore one,
//! fork a job. Each calls the one engine operation the CLI and MCP call; mutating routes take
//! an `Idempotency-Key` like every other (the layer in `mod.rs`). A fork waits in the
//! admission queue as a create does, so it has no request deadline and runs in a task of its
//! own (a client that goes away does not leave half a fork).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::ids::JobIdPath;
use super::{ApiError, ApiJson, ApiResult, ApiState, REQUEST_TIMEOUT, with_deadline};
use crate::wire::{CheckpointRequest, ForkRequest, RestoreRequest};

pub(super) async fn take(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
    ApiJson(request): ApiJson<CheckpointRequest>,
) -> ApiResult<Response> {
    let view = with_deadline(REQUEST_TIMEOUT, state.paddock.checkpoint(&id, &request)).await?;
    Ok((StatusCode::CREATED, axum::Json(view)).into_response())
}

pub(super) async fn list(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
) -> ApiResult<Response> {
    let list = state.paddock.checkpoints(&id)?;
    Ok(axum::Json(list).into_response())
}

pub(super) async fn remove(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
    Path((_, name)): Path<(String, String)>,
) -> ApiResult<Response> {
    let removed =
        with_deadline(REQUEST_TIMEOUT, state.paddock.checkpoint_remove(&id, &name)).await?;
    Ok(axum::Json(removed).into_response())
}

pub(super) async fn restore(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
    ApiJson(request): ApiJson<RestoreRequest>,
) -> ApiResult<Response> {
    let answer = with_deadline(REQUEST_TIMEOUT, state.paddock.restore(&id, &request)).await?;
    Ok(axum::Json(answer).into_response())
}

pub(super) async fn fork(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
    headers: axum::http::HeaderMap,
    ApiJson(mut request): ApiJson<ForkRequest>,
) -> ApiResult<Response> {
    request.waiter = super::waiter_tag(&headers);
    let paddock = state.paddock.clone();
    let id = id.to_string();
    let answer = tokio::spawn(async move { paddock.fork(&id, &request).await })
        .await
        .map_err(|join| ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            message: format!("the fork task failed: {join}"),
            retry_after: None,
        })??;
    Ok((StatusCode::CREATED, axum::Json(answer)).into_response())
}
