//! The routes of getting work to the user's branches: `GET /v1/conflicts`, `POST
//! /v1/jobs/{id}/merge`, `POST /v1/jobs/{id}/apply` and `POST /v1/jobs/{id}/push`, each the
//! engine's method.

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::ids::JobIdPath;
use super::{ApiJson, ApiResult, ApiState, REQUEST_TIMEOUT, with_deadline};
use crate::wire::{ConflictsQuery, MergeRequest, PushRequest};

/// `?jobs=a,b&base=REF&repo=PATH`, each optional.
#[derive(Deserialize)]
pub(super) struct ConflictsParams {
    jobs: Option<String>,
    base: Option<String>,
    repo: Option<String>,
}

pub(super) async fn conflicts(
    State(state): State<ApiState>,
    Query(params): Query<ConflictsParams>,
) -> ApiResult<Response> {
    let query = ConflictsQuery {
        jobs: params
            .jobs
            .iter()
            .flat_map(|jobs| jobs.split(','))
            .filter(|id| !id.is_empty())
            .map(str::to_string)
            .collect(),
        base: params.base.filter(|b| !b.is_empty()),
        repo: params.repo.map(std::path::PathBuf::from),
    };
    let report = with_deadline(REQUEST_TIMEOUT, state.paddock.conflicts(&query)).await?;
    Ok(axum::Json(report).into_response())
}

pub(super) async fn merge_job(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
    ApiJson(request): ApiJson<MergeRequest>,
) -> ApiResult<Response> {
    let report = with_deadline(REQUEST_TIMEOUT, state.paddock.merge(&id, request)).await?;
    Ok(axum::Json(report).into_response())
}

pub(super) async fn apply_job(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
) -> ApiResult<Response> {
    let report = with_deadline(REQUEST_TIMEOUT, state.paddock.apply(&id)).await?;
    Ok(axum::Json(report).into_response())
}

/// A push may wait on the network (the remote's tip, then the pack): longer than a request.
const PUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1260);

pub(super) async fn push_job(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
    ApiJson(request): ApiJson<PushRequest>,
) -> ApiResult<Response> {
    let report = with_deadline(PUSH_TIMEOUT, state.paddock.push(&id, request)).await?;
    Ok(axum::Json(report).into_response())
}
