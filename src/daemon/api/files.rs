//! The file routes: `GET /v1/jobs/{id}/files?path=P` (the file's bytes,
//! `application/octet-stream`), `GET ...?path=DIR&list=true` (a `FileList`) and
//! `PUT /v1/jobs/{id}/files?path=P` (the body's bytes become the file; a `FileWritten`);
//! with `tar=true` either way a directory goes as a tar through the job's sandbox.
//! Bodies are raw bytes, not JSON, so any file goes through unchanged, streamed both ways
//! with no cap (past the API's usual body limit): a GET answers its `Content-Length` up
//! front (`?max=N` refuses a larger file, 413), a PUT needs one (a body cut short of it
//! leaves no file under the name).

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::ids::JobIdPath;
use super::{ApiError, ApiResult, ApiState, REQUEST_TIMEOUT, with_deadline};
use crate::wire::FileBytes;

#[derive(Deserialize)]
pub(super) struct FileQuery {
    /// Absent means the workspace itself (useful with `list`).
    #[serde(default)]
    path: String,
    #[serde(default)]
    list: bool,
    /// The most a read may give: a larger file is refused (413 `too_large`).
    #[serde(default)]
    max: Option<u64>,
    /// A directory as a tar (`application/x-tar`) both ways, through the job's sandbox.
    #[serde(default)]
    tar: bool,
    /// Who reads or writes (`agent`, `root`, `UID[:GID]`), as for an exec's `user`.
    #[serde(default)]
    user: crate::wire::ExecUser,
}

/// A transfer's deadline: the API's, and a second more per MiB.
fn transfer_deadline(bytes: u64) -> std::time::Duration {
    REQUEST_TIMEOUT + std::time::Duration::from_secs(bytes >> 20)
}

pub(super) async fn get_file(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
    Query(query): Query<FileQuery>,
) -> ApiResult<Response> {
    if query.list {
        let list = with_deadline(
            REQUEST_TIMEOUT,
            state.paddock.list_files(&id, &query.path, query.user),
        )
        .await?;
        return Ok(axum::Json(list).into_response());
    }
    if query.tar {
        let tar = with_deadline(
            REQUEST_TIMEOUT,
            state.paddock.read_tar(&id, &query.path, query.user),
        )
        .await?;
        // Its size is known only at its end: chunked, and a tar cut short ends without its
        // closing blocks, which an extractor tells.
        let body = Body::from_stream(tokio_util::io::ReaderStream::new(tar));
        return Ok((
            [
                (header::CONTENT_TYPE, "application/x-tar"),
                (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
                (header::CONTENT_DISPOSITION, "attachment"),
            ],
            body,
        )
            .into_response());
    }
    let file = with_deadline(
        REQUEST_TIMEOUT,
        state
            .paddock
            .read_file(&id, &query.path, query.user, query.max),
    )
    .await?;
    // The bytes stream as they are read; a transfer cut short ends the body before its
    // length, which the client tells.
    let body = Body::from_stream(tokio_util::io::ReaderStream::new(file.reader));
    // The agent's bytes, from the dashboard's origin: never sniffed into a script or a page.
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_string()),
            (header::CONTENT_DISPOSITION, "attachment".to_string()),
            (header::CONTENT_LENGTH, file.size.to_string()),
        ],
        body,
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
    use futures_util::TryStreamExt as _;
    if query.tar {
        let reader = tokio_util::io::StreamReader::new(
            body.into_data_stream().map_err(std::io::Error::other),
        );
        // No size up front: the tar's own end marks a whole one. Its deadline is the
        // sandbox's own (an hour).
        let written = state
            .paddock
            .write_tar(&id, &query.path, Box::pin(reader), query.user)
            .await?;
        return Ok(axum::Json(written).into_response());
    }
    // The size first: the write is checked whole against it (a body cut short leaves no
    // file under the name).
    let size = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .ok_or_else(|| ApiError::bad_request("a file's PUT needs a Content-Length (its size)"))?;
    let reader =
        tokio_util::io::StreamReader::new(body.into_data_stream().map_err(std::io::Error::other));
    let bytes = FileBytes {
        size,
        reader: Box::pin(reader),
    };
    let written = with_deadline(
        transfer_deadline(size),
        state
            .paddock
            .write_file(&id, &query.path, bytes, query.user),
    )
    .await?;
    Ok(axum::Json(written).into_response())
}
