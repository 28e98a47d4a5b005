//! The file routes: `GET /v1/jobs/{id}/files?path=P` (the file's bytes,
//! `application/octet-stream`), `GET ...?path=DIR&list=true` (a `FileList`) and
//! `PUT /v1/jobs/{id}/files?path=P` (the body's bytes become the file; a `FileWritten`).
//! Bodies are raw bytes, not JSON, so any file goes through unchanged; they may be as large
//! as the file API's cap (`FILE_CAP`), past the API's usual body limit.

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::ids::JobIdPath;
use super::{ApiResult, ApiState, REQUEST_TIMEOUT, with_deadline};
use crate::engine::FILE_CAP;
use crate::error::Error;

#[derive(Deserialize)]
pub(super) struct FileQuery {
    /// Absent means the workspace itself (useful with `list`).
    #[serde(default)]
    path: String,
    #[serde(default)]
    list: bool,
}

pub(super) async fn get_file(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
    Query(query): Query<FileQuery>,
) -> ApiResult<Response> {
    if query.list {
        let list =
            with_deadline(REQUEST_TIMEOUT, state.paddock.list_files(&id, &query.path)).await?;
        return Ok(axum::Json(list).into_response());
    }
    let bytes = with_deadline(REQUEST_TIMEOUT, state.paddock.read_file(&id, &query.path)).await?;
    // The agent's bytes, from the dashboard's origin: never sniffed into a script or a page.
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CONTENT_DISPOSITION, "attachment"),
        ],
        bytes,
    )
        .into_response())
}

pub(super) async fn put_file(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
    Query(query): Query<FileQuery>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    // Read up to one byte past the cap, so a larger body is refused by name, not cut.
    let limit = usize::try_from(FILE_CAP + 1).unwrap_or(usize::MAX);
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| {
        let size = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .unwrap_or(FILE_CAP + 1);
        Error::FileTooLarge {
            path: query.path.clone(),
            size,
            cap: FILE_CAP,
        }
    })?;
    let written = with_deadline(
        REQUEST_TIMEOUT,
        state.paddock.write_file(&id, &query.path, bytes.to_vec()),
    )
    .await?;
    Ok(axum::Json(written).into_response())
}
