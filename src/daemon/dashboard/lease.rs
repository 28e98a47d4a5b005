//! `POST /v1/dashboard` (the Unix socket's callers only): a loopback TCP listener for one
//! browser, serving the same [`super::app`] with a fresh one-time sign-in token.
//!
//! The answer is a stream: its first NDJSON line is the [`DashboardLease`] (address and
//! sign-in URL), then a newline every few seconds. The listener lives exactly as long as
//! that stream: when the caller (`paddock dashboard`) goes away or the daemon stops, the
//! stream ends and the listener stops accepting and signs every session out. So no port
//! stays open after the command that asked for it, and no request reaches the daemon's
//! Unix socket through TCP without a session.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::{StatusCode, header};
use axum::response::Response;
use futures_util::StreamExt;

use crate::daemon::api::auth::{Access, Caller, random_secret};
use crate::daemon::api::{ApiError, ApiState};
use crate::wire::{DashboardLease, DashboardRequest};

/// How often the lease stream writes, so a caller that went away is noticed.
const BEAT: Duration = Duration::from_secs(2);

fn refused(status: StatusCode, code: &'static str, message: String) -> ApiError {
    ApiError {
        status,
        code,
        message,
        retry_after: None,
    }
}

pub(super) async fn open(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    if !matches!(caller, Caller::Trusted) {
        return Err(refused(
            StatusCode::FORBIDDEN,
            "refused",
            "a dashboard listener is opened only through the daemon's Unix socket".into(),
        ));
    }
    let request: DashboardRequest = if body.iter().all(u8::is_ascii_whitespace) {
        DashboardRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| ApiError::bad_request(e.to_string()))?
    };
    // Not 127.0.0.1, where jobs' ports are served: a browser sends a host's cookies to all
    // its ports, so the session cookie would reach an agent's dev server.
    let listen = request.listen.unwrap_or_else(|| "127.0.0.2:0".into());
    let wanted: SocketAddr = listen.parse().map_err(|_| {
        ApiError::bad_request(format!("`{listen}` is not an address like 127.0.0.2:0"))
    })?;
    if !wanted.ip().is_loopback() {
        return Err(ApiError::bad_request(format!(
            "`{listen}` is not a loopback address: the dashboard listener stays on this host"
        )));
    }
    if wanted.ip() == std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST) {
        return Err(ApiError::bad_request(format!(
            "`{listen}`: jobs' ports are served on 127.0.0.1, and a browser would send the dashboard's cookie to them; use another loopback address such as 127.0.0.2"
        )));
    }
    let listener = tokio::net::TcpListener::bind(wanted).await.map_err(|e| {
        refused(
            StatusCode::CONFLICT,
            "conflict",
            format!("cannot listen on `{listen}`: {e}"),
        )
    })?;
    let address = listener
        .local_addr()
        .map_err(|e| ApiError::bad_request(format!("no local address: {e}")))?;
    let token = random_secret().ok_or_else(|| {
        refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "cannot read /dev/urandom for a sign-in token".into(),
        )
    })?;
    let access = Access::one_time(token.clone());
    let app = super::app(state.with_access(access.clone()));
    let (close, closed) = tokio::sync::watch::channel(false);
    let mut closing = closed.clone();
    tokio::spawn(async move {
        let serving = axum::serve(listener, app).with_graceful_shutdown(async move {
            let _ = closing.wait_for(|c| *c).await;
        });
        if let Err(error) = serving.await {
            tracing::warn!(%error, "the dashboard listener failed");
        }
    });
    let lease = DashboardLease {
        address: address.to_string(),
        url: format!("http://{address}/login?token={token}"),
    };
    tracing::info!(address = %lease.address, "dashboard listener opened");
    // Ends the listener (and its sessions) when the stream is dropped.
    let guard = Lease { close, access };
    let first = format!(
        "{}\n",
        serde_json::to_string(&lease).expect("a lease serializes")
    );
    let beats = tokio_stream::wrappers::IntervalStream::new(tokio::time::interval(BEAT))
        .skip(1)
        .map(|_| "\n".to_string());
    let mut stopping = state.stopping.clone();
    let daemon_stops = async move {
        if let Some(stopping) = stopping.as_mut() {
            let _ = stopping.wait_for(|s| *s).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let stream = futures_util::stream::once(async move { first })
        .chain(beats)
        .take_until(daemon_stops)
        .map(move |line| {
            let _ = &guard;
            Ok::<_, Infallible>(line)
        });
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .body(Body::from_stream(stream))
        .expect("a streaming response builds"))
}

/// The listener's lifetime: dropped with the answer's stream.
struct Lease {
    close: tokio::sync::watch::Sender<bool>,
    access: Access,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let _ = self.close.send(true);
        self.access.revoke();
        tracing::info!("dashboard listener closed");
    }
}
