//! MCP over HTTP: the Streamable HTTP transport (protocol 2025-11-25) at `/mcp`, on the
//! socket and on the token-guarded TCP listener alike (the caller check is the API's), with
//! the tools and the session ownership of `paddock mcp` (see `crate::mcp`).
//!
//! A POST carries one JSON-RPC message and is answered with one `application/json` body
//! (a request) or `202 Accepted` (a notification, a response). `initialize` without a
//! session opens one: its answer carries `Mcp-Session-Id`, a 128-bit random value the
//! client sends on every later request; a request without it is a 400, with an unknown or
//! ended one a 404. `DELETE /mcp` ends the session. There are no server-initiated messages,
//! so `GET /mcp` (a stream for them) is a 405. A request from a browser page of another
//! origin (`Origin` not this loopback listener's) is a 403, against DNS rebinding.
//!
//! Each session is its own `Session`: its jobs carry its label (a value distinct from the
//! header, which is the session's secret), it reaches only them, and it creates jobs only in
//! the repositories `paddock serve --mcp-repo` names. Sessions idle for an hour end, and at
//! most [`MAX_SESSIONS`] live at once (the least recently used ends first).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::ApiState;
use crate::mcp::{SUPPORTED_VERSIONS, Session};

/// The header naming a session.
const SESSION_HEADER: &str = "mcp-session-id";
/// The header of the version the client speaks (after `initialize`).
const VERSION_HEADER: &str = "mcp-protocol-version";
/// Sessions alive at once.
pub(crate) const MAX_SESSIONS: usize = 256;
/// A session unused this long ends.
const IDLE: Duration = Duration::from_secs(3600);

struct Entry {
    session: Session,
    version: Option<&'static str>,
    used: Instant,
}

/// The MCP sessions of one daemon, shared by its listeners.
#[derive(Clone, Default)]
pub struct McpSessions {
    /// The repositories (git common dirs) a session may create jobs in.
    repos: Arc<Vec<PathBuf>>,
    live: Arc<Mutex<HashMap<String, Entry>>>,
}

impl McpSessions {
    pub fn new(repos: Vec<PathBuf>) -> McpSessions {
        McpSessions {
            repos: Arc::new(repos),
            live: Arc::default(),
        }
    }

    fn open(&self) -> (String, Session) {
        let key = crate::ids::random_hex(32);
        let session = Session::new(false, self.repos.to_vec());
        let mut live = self
            .live
            .lock()
            .expect("the session table is never poisoned");
        let now = Instant::now();
        live.retain(|_, entry| now.duration_since(entry.used) < IDLE);
        if live.len() >= MAX_SESSIONS
            && let Some(oldest) = live
                .iter()
                .min_by_key(|(_, entry)| entry.used)
                .map(|(key, _)| key.clone())
        {
            live.remove(&oldest);
        }
        live.insert(
            key.clone(),
            Entry {
                session: session.clone(),
                version: None,
                used: now,
            },
        );
        (key, session)
    }

    fn find(&self, key: &str) -> Option<(Session, Option<&'static str>)> {
        let mut live = self
            .live
            .lock()
            .expect("the session table is never poisoned");
        let entry = live.get_mut(key)?;
        if entry.used.elapsed() >= IDLE {
            live.remove(key);
            return None;
        }
        entry.used = Instant::now();
        Some((entry.session.clone(), entry.version))
    }

    fn agreed(&self, key: &str, version: Option<&'static str>) {
        if let Some(entry) = self
            .live
            .lock()
            .expect("the session table is never poisoned")
            .get_mut(key)
        {
            entry.version = version;
        }
    }

    fn close(&self, key: &str) -> bool {
        self.live
            .lock()
            .expect("the session table is never poisoned")
            .remove(key)
            .is_some()
    }
}

/// A transport-level refusal: its status and a JSON-RPC error without an id.
fn refused(status: StatusCode, code: i64, message: &str) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": Value::Null,
        "error": {"code": code, "message": message},
    });
    (status, axum::Json(body)).into_response()
}

/// Whether `Origin` (when a browser sent one) is a loopback page's.
fn origin_allowed(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    let host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or("");
    let host = host.rsplit_once(':').map_or(host, |(name, port)| {
        if port.bytes().all(|b| b.is_ascii_digit()) && !name.ends_with('[') {
            name
        } else {
            host
        }
    });
    matches!(host, "localhost" | "127.0.0.1" | "[::1]")
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

pub(super) async fn post(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !origin_allowed(&headers) {
        return refused(
            StatusCode::FORBIDDEN,
            -32600,
            "requests from another origin are refused",
        );
    }
    if let Some(version) = header_text(&headers, VERSION_HEADER)
        && !SUPPORTED_VERSIONS.contains(&version)
    {
        return refused(
            StatusCode::BAD_REQUEST,
            -32600,
            &format!(
                "unsupported MCP-Protocol-Version `{version}` (this server speaks {})",
                SUPPORTED_VERSIONS.join(", ")
            ),
        );
    }
    let line = String::from_utf8_lossy(&body);
    let initializing = serde_json::from_str::<Value>(&line)
        .ok()
        .is_some_and(|m| m.get("method").and_then(Value::as_str) == Some("initialize"));
    let sessions = &state.mcp;
    let (key, session, mut version, opened) = match header_text(&headers, SESSION_HEADER) {
        Some(key) => match sessions.find(key) {
            Some((session, version)) => (key.to_string(), session, version, false),
            None => {
                return refused(
                    StatusCode::NOT_FOUND,
                    -32001,
                    "no such MCP session (it ended): initialize a new one",
                );
            }
        },
        None if initializing => {
            let (key, session) = sessions.open();
            (key, session, None, true)
        }
        None => {
            return refused(
                StatusCode::BAD_REQUEST,
                -32600,
                "a request needs the Mcp-Session-Id that initialize answered",
            );
        }
    };
    let answer =
        crate::mcp::handle_message(state.paddock.as_ref(), &session, &mut version, &line).await;
    sessions.agreed(&key, version);
    let Some(answer) = answer else {
        if opened {
            sessions.close(&key);
        }
        return StatusCode::ACCEPTED.into_response();
    };
    let mut response = axum::Json(answer).into_response();
    if opened {
        response.headers_mut().insert(
            SESSION_HEADER,
            HeaderValue::from_str(&key).expect("hex is a header value"),
        );
    }
    response
}

pub(super) async fn delete(State(state): State<ApiState>, headers: HeaderMap) -> Response {
    if !origin_allowed(&headers) {
        return refused(
            StatusCode::FORBIDDEN,
            -32600,
            "requests from another origin are refused",
        );
    }
    match header_text(&headers, SESSION_HEADER) {
        Some(key) if state.mcp.close(key) => StatusCode::NO_CONTENT.into_response(),
        Some(_) => refused(StatusCode::NOT_FOUND, -32001, "no such MCP session"),
        None => refused(
            StatusCode::BAD_REQUEST,
            -32600,
            "DELETE /mcp needs the session's Mcp-Session-Id",
        ),
    }
}

/// No server-initiated messages: no stream to open.
pub(super) async fn get() -> Response {
    let mut response = refused(
        StatusCode::METHOD_NOT_ALLOWED,
        -32600,
        "this server sends no messages of its own: POST requests to /mcp",
    );
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_loopback_pages_origin_or_none_is_allowed() {
        let with = |origin: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
            origin_allowed(&headers)
        };
        assert!(origin_allowed(&HeaderMap::new()));
        for ok in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "http://[::1]:8080",
        ] {
            assert!(with(ok), "{ok}");
        }
        for bad in [
            "http://evil.example",
            "http://127.0.0.1.evil.example",
            "null",
            "http://localhost.evil:80",
        ] {
            assert!(!with(bad), "{bad}");
        }
    }

    #[test]
    fn a_full_table_ends_its_least_recently_used_session() {
        let sessions = McpSessions::new(Vec::new());
        let (first, _) = sessions.open();
        for _ in 1..MAX_SESSIONS {
            sessions.open();
        }
        assert!(sessions.find(&first).is_some(), "still there: used now");
        let (_newest, _) = sessions.open();
        assert!(sessions.find(&first).is_some(), "the one just used stays");
        assert_eq!(sessions.live.lock().unwrap().len(), MAX_SESSIONS);
        assert!(sessions.close(&first));
        assert!(sessions.find(&first).is_none());
    }
}
