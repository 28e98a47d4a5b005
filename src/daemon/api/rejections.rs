//! Every API error answer has the API's JSON body (`{"error": {"code", "message"}}`), also the
//! ones no handler writes: axum's own rejections (a query string or path that does not fit,
//! a body over the size limit, a wrong content type: `text/plain`), an unknown route (404,
//! empty) and a method a route does not take (405, empty). A generated client handles one
//! error shape, whatever refused the request.
//!
//! Invariant: only API paths (`/v1/...`, `/healthz`, `/metrics`) are rewritten, and only
//! error answers (4xx, 5xx) that are not JSON already; the dashboard's pages keep theirs, and
//! a success is never touched. The text axum wrote becomes the message; headers such as
//! `Allow` (405) and `Retry-After` stay. axum's 422 (a JSON body of the wrong shape) is a 400,
//! as every other malformed request is.

use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt as _;

use super::ApiError;

/// Bytes of a rejection's text kept as the message (axum's are a line or two).
const MESSAGE_CAP: usize = 4096;

/// Whether a path belongs to the JSON API (not the dashboard's pages).
fn is_api_path(path: &str) -> bool {
    path.starts_with("/v1/") || path == "/v1" || path == "/healthz" || path == "/metrics"
}

/// The stable code of an error status that no handler named.
pub(crate) fn code_of(status: StatusCode) -> &'static str {
    match status {
        StatusCode::UNAUTHORIZED => "unauthorized",
        StatusCode::FORBIDDEN => "forbidden",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::CONFLICT => "conflict",
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::TOO_MANY_REQUESTS => "queue_full",
        StatusCode::SERVICE_UNAVAILABLE => "runtime_unavailable",
        StatusCode::GATEWAY_TIMEOUT => "timeout",
        status if status.is_server_error() => "internal",
        _ => "invalid_input",
    }
}

/// The middleware: rewrites a non-JSON error answer of an API path into the API's body.
/// An error answer to a request that came with a body says `Connection: close`: a handler
/// that refused before reading it all (a file the job's user may not write, a caller
/// without the token) leaves the rest unread, so the server ends the connection after the
/// answer, and a client must not send its next request on it (it would find it closed).
pub(crate) async fn close_after_refused_body(request: Request, next: Next) -> Response {
    let has_body = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v != "0")
        || request.headers().contains_key(header::TRANSFER_ENCODING);
    let mut response = next.run(request).await;
    let status = response.status();
    if has_body && (status.is_client_error() || status.is_server_error()) {
        response.headers_mut().insert(
            header::CONNECTION,
            header::HeaderValue::from_static("close"),
        );
    }
    response
}

pub(crate) async fn json_errors(request: Request, next: Next) -> Response {
    let api = is_api_path(request.uri().path());
    let response = next.run(request).await;
    let status = response.status();
    if !api || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if json {
        return response;
    }
    // A non-JSON 422 is axum's (a JSON body of the wrong shape): the API calls that a 400,
    // as `ApiJson` does; paddock's own 422s (setup_failed, idempotency_mismatch) are JSON.
    let status = if status == StatusCode::UNPROCESSABLE_ENTITY {
        StatusCode::BAD_REQUEST
    } else {
        status
    };
    let (parts, body) = response.into_parts();
    // axum's rejections are short texts; a body that cannot be read is named by its status.
    let text = match tokio::time::timeout(std::time::Duration::from_secs(5), body.collect()).await {
        Ok(Ok(collected)) => {
            let bytes = collected.to_bytes();
            let end = bytes.len().min(MESSAGE_CAP);
            String::from_utf8_lossy(&bytes[..end]).trim().to_string()
        }
        Ok(Err(_)) | Err(_) => String::new(),
    };
    let message = if text.is_empty() {
        match status {
            StatusCode::NOT_FOUND => "no such route".to_string(),
            StatusCode::METHOD_NOT_ALLOWED => "the route does not take this method".to_string(),
            other => other
                .canonical_reason()
                .unwrap_or("request refused")
                .to_string(),
        }
    } else {
        text
    };
    let mut answer = ApiError {
        status,
        code: code_of(status),
        message,
        retry_after: None,
    }
    .into_response();
    for name in [header::ALLOW, header::RETRY_AFTER, header::WWW_AUTHENTICATE] {
        if let Some(value) = parts.headers.get(&name) {
            answer.headers_mut().insert(name, value.clone());
        }
    }
    answer
}
