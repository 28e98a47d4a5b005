//! `Idempotency-Key` on every mutating request (POST, DELETE): the first answer is kept
//! (see `crate::idempotency`) and a retry with the same key and body gets it again; another
//! body with the same key is a 422; a retry while the first is still at work is a 409 that
//! points at the exec when there is one.
//!
//! A keyed request runs detached from its connection: its client has said it will retry, so
//! a dropped connection must not cancel work (a create half done, an exec killed) whose
//! answer the retry is to receive. A streamed exec's answer is its last NDJSON line (the
//! result); its first line (`{"exec": id}`) is kept as the pointer meanwhile.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use serde_json::json;

use super::{ApiError, BODY_LIMIT};
use crate::idempotency::{Claim, IdempotencyStore, Pending, valid_key};

/// The header clients send.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// Set on an answer that was kept from an earlier request.
const REPLAYED: &str = "idempotent-replayed";
const NDJSON: &str = "application/x-ndjson";

fn refusal(status: StatusCode, code: &'static str, message: String) -> Response {
    ApiError {
        status,
        code,
        message,
        retry_after: None,
    }
    .into_response()
}

/// A streamed input is not kept to be compared or replayed: such a request with a key is
/// refused.
fn streamed_input(request: &Request) -> Option<Response> {
    let streamed = request
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(crate::wire::STDIN_STREAM_TYPE));
    streamed.then(|| {
        refusal(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "an exec whose stdin streams takes no Idempotency-Key (its input cannot be replayed)"
                .into(),
        )
    })
}

/// The middleware: passes requests without a key (and reads) through untouched.
pub async fn idempotent(store: Arc<IdempotencyStore>, request: Request, next: Next) -> Response {
    if !matches!(*request.method(), Method::POST | Method::DELETE) {
        return next.run(request).await;
    }
    let Some(key) = request.headers().get(IDEMPOTENCY_KEY).cloned() else {
        return next.run(request).await;
    };
    let Some(key) = key
        .to_str()
        .ok()
        .filter(|k| valid_key(k))
        .map(str::to_owned)
    else {
        return refusal(
            StatusCode::BAD_REQUEST,
            "invalid_input",
            "Idempotency-Key must be 1 to 255 visible ASCII characters".into(),
        );
    };
    if let Some(refused) = streamed_input(&request) {
        return refused;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, BODY_LIMIT).await else {
        return refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_input",
            "request body too large".into(),
        );
    };
    // Query parameters are part of the request (`DELETE ...?force=true`).
    let operation = format!(
        "{} {}",
        parts.method,
        parts.uri.path_and_query().map_or("", |p| p.as_str())
    );
    let claim = {
        let store = store.clone();
        let (key, operation, bytes) = (key.clone(), operation.clone(), bytes.clone());
        tokio::task::spawn_blocking(move || store.claim(&key, &operation, &bytes)).await
    };
    let pending = match claim {
        Ok(Ok(Claim::Fresh(pending))) => pending,
        Ok(Ok(Claim::Replay {
            status,
            content_type,
            answer,
        })) => return replay(status, content_type.as_deref(), &answer),
        Ok(Ok(Claim::InProgress { pointer })) => {
            // The error object, plus what the work in progress can be followed by.
            let body = json!({"error": {
                "code": "idempotency_in_progress",
                "message": format!("a request with Idempotency-Key `{key}` is still at work; retry shortly"),
                "pointer": pointer,
            }});
            let mut response = (StatusCode::CONFLICT, axum::Json(body)).into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(1));
            return response;
        }
        Ok(Ok(Claim::Mismatch { operation: first })) => {
            return refusal(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency_mismatch",
                format!(
                    "Idempotency-Key `{key}` was used for another request ({first}, or another body)"
                ),
            );
        }
        Ok(Err(error)) => return ApiError::from(crate::error::Error::from(error)).into_response(),
        Err(join) => {
            return refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("the idempotency store failed: {join}"),
            );
        }
    };
    let request = Request::from_parts(parts, Body::from(bytes));
    // Detached: the work and the keeping of its answer go on if the client hangs up.
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let response = next.run(request).await;
        let streamed = response
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(NDJSON.as_bytes()));
        if streamed {
            tee_stream(response, pending, tx).await;
        } else {
            let _ = tx.send(keep_whole(response, pending).await);
        }
    });
    rx.await.unwrap_or_else(|_| {
        refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the request's task ended without an answer".into(),
        )
    })
}

/// Whether an answer is final: successes and client errors are; a server error, a timeout,
/// a full queue, a conflict of the moment or a failed setup command (a registry that did not
/// answer) are worth retrying, so their claim is released.
fn is_final(status: StatusCode) -> bool {
    (status.is_success() || status.is_client_error())
        && !matches!(
            status,
            StatusCode::TOO_MANY_REQUESTS
                | StatusCode::REQUEST_TIMEOUT
                | StatusCode::CONFLICT
                | StatusCode::UNPROCESSABLE_ENTITY
        )
}

async fn keep_whole(response: Response, pending: Pending) -> Response {
    let (parts, body) = response.into_parts();
    let Ok(bytes) = body
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
    else {
        return refusal(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the answer could not be read".into(),
        );
    };
    if is_final(parts.status) {
        let answer = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let status = parts.status.as_u16();
        let _ =
            tokio::task::spawn_blocking(move || pending.finish(status, content_type, answer)).await;
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// Passes a streamed answer through while it comes, keeping its first line as the pointer
/// and its last as the answer; reads it to its end even when the client is gone.
async fn tee_stream(
    response: Response,
    mut pending: Pending,
    answer_tx: tokio::sync::oneshot::Sender<Response>,
) {
    let (parts, mut body) = response.into_parts();
    let status = parts.status;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Result<bytes::Bytes, std::io::Error>>();
    let _ = answer_tx.send(Response::from_parts(
        parts,
        Body::from_stream(tokio_stream::wrappers::UnboundedReceiverStream::new(rx)),
    ));
    let mut line = Vec::new();
    let mut last = Vec::new();
    let mut first_seen = false;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        for &byte in data.iter() {
            if byte == b'\n' {
                if !first_seen {
                    first_seen = true;
                    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&line) {
                        pending.point_at(value);
                    }
                }
                last = std::mem::take(&mut line);
            } else {
                line.push(byte);
            }
        }
        // A client that went away stops receiving; the exec and its answer go on.
        let _ = tx.send(Ok(data));
    }
    if !line.is_empty() {
        last = line;
    }
    if let Ok(answer) = serde_json::from_slice::<serde_json::Value>(&last)
        && answer.get("result").is_some()
        && is_final(status)
    {
        let _ = tokio::task::spawn_blocking(move || {
            pending.finish(status.as_u16(), Some(NDJSON.into()), answer)
        })
        .await;
    }
}

fn replay(status: u16, content_type: Option<&str>, answer: &serde_json::Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    let ndjson = content_type.is_some_and(|c| c.starts_with(NDJSON));
    let body = if ndjson {
        format!("{answer}\n")
    } else {
        answer.to_string()
    };
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(if ndjson { NDJSON } else { "application/json" }),
    );
    headers.insert(REPLAYED, HeaderValue::from_static("true"));
    response
}
