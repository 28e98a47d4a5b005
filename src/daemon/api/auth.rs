//! Who may call a listener, and as whom: the Unix socket trusts its callers (mode 0600); a
//! TCP listener needs `Authorization: Bearer <token>` or a browser session.
//!
//! A browser gets a session once, through `GET /login?token=…` (the URL `paddock serve
//! --listen` or `paddock dashboard` prints): the token is checked in constant time and the
//! answer sets the cookie `paddock_session` (HttpOnly, SameSite=Strict, Path=/) holding a
//! random session secret — never the token — then redirects to `/` so the token leaves the
//! address bar. A listener opened by `paddock dashboard` has a one-time token: the first
//! login consumes it, and it is no bearer token at all.
//!
//! Invariants: a session authorizes reads of the JSON API (`GET /v1/...`, the event stream)
//! and the dashboard's pages; it never authorizes a mutating `/v1/` request (those need the
//! bearer token), and each dashboard form posts the session's CSRF token, which the handler
//! checks ([`Caller::check_csrf`]); SameSite=Strict is the second layer.

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::ApiError;

/// The session cookie's name.
pub const SESSION_COOKIE: &str = "paddock_session";
/// A session lasts this long after its login.
const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);
/// At most this many live sessions per listener; the oldest goes first.
const MAX_SESSIONS: usize = 256;

/// How a listener admits callers.
#[derive(Clone, Default)]
pub enum Access {
    /// The Unix socket: its mode is the check.
    #[default]
    Trusted,
    /// A TCP listener: the bearer token, or a session its login made.
    Token(Arc<TokenAccess>),
}

/// The token of a TCP listener and the sessions made with it.
pub struct TokenAccess {
    token: Mutex<Option<String>>,
    /// A one-time token logs one browser in and is then gone; it is never a bearer token.
    one_time: bool,
    sessions: Mutex<HashMap<String, Session>>,
}

#[derive(Clone)]
struct Session {
    csrf: Arc<str>,
    made: Instant,
}

/// Who made a request, for the handlers (a request extension).
#[derive(Clone)]
pub enum Caller {
    /// Through the Unix socket.
    Trusted,
    /// With the bearer token.
    Bearer,
    /// With a browser session; forms must carry its CSRF token.
    Session { csrf: Arc<str> },
}

impl Caller {
    /// The CSRF token forms rendered for this caller carry (empty: none is needed).
    pub fn csrf(&self) -> &str {
        match self {
            Caller::Session { csrf } => csrf,
            Caller::Trusted | Caller::Bearer => "",
        }
    }

    /// Whether `presented` is this caller's CSRF token (callers without a session need
    /// none: a browser never sends a bearer header or reaches the socket by itself).
    pub fn check_csrf(&self, presented: &str) -> bool {
        match self {
            Caller::Session { csrf } => bool::from(presented.as_bytes().ct_eq(csrf.as_bytes())),
            Caller::Trusted | Caller::Bearer => true,
        }
    }
}

impl Access {
    /// A TCP listener whose token may be sent as a bearer token and used to log in, any
    /// number of times.
    pub fn token(token: String) -> Access {
        Access::Token(Arc::new(TokenAccess::new(token, false)))
    }

    /// A listener whose token logs one browser in, once.
    pub fn one_time(token: String) -> Access {
        Access::Token(Arc::new(TokenAccess::new(token, true)))
    }

    /// Ends the token and every session (a closed dashboard listener).
    pub fn revoke(&self) {
        if let Access::Token(access) = self {
            *access
                .token
                .lock()
                .expect("the token lock is never poisoned") = None;
            access
                .sessions
                .lock()
                .expect("the session lock is never poisoned")
                .clear();
        }
    }

    /// Whether this is the Unix socket's access.
    pub fn is_trusted(&self) -> bool {
        matches!(self, Access::Trusted)
    }

    /// Who `request` comes from, or None when it is not allowed in.
    fn caller(&self, request: &Request) -> Option<Caller> {
        let access = match self {
            Access::Trusted => return Some(Caller::Trusted),
            Access::Token(access) => access,
        };
        let bearer = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if let Some(presented) = bearer {
            return (!access.one_time && access.matches(presented)).then_some(Caller::Bearer);
        }
        let session = cookie(request, SESSION_COOKIE)?;
        let csrf = access.session(session)?;
        // A session reads the JSON API; it never changes anything through it.
        let mutating_api = request.uri().path().starts_with("/v1/")
            && !matches!(*request.method(), Method::GET | Method::HEAD);
        (!mutating_api).then_some(Caller::Session { csrf })
    }

    /// Logs a browser in with `presented`: the new session's cookie, or None when the token
    /// is wrong (or a one-time token was used already).
    pub fn login(&self, presented: &str) -> Option<HeaderValue> {
        let Access::Token(access) = self else {
            return None;
        };
        let secret = access.login(presented)?;
        let cookie = format!("{SESSION_COOKIE}={secret}; HttpOnly; SameSite=Strict; Path=/");
        HeaderValue::from_str(&cookie).ok()
    }
}

impl TokenAccess {
    fn new(token: String, one_time: bool) -> TokenAccess {
        TokenAccess {
            token: Mutex::new(Some(token)),
            one_time,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    fn matches(&self, presented: &str) -> bool {
        let token = self.token.lock().expect("the token lock is never poisoned");
        // Constant time, so the comparison does not leak how much of a guess was right.
        token
            .as_deref()
            .is_some_and(|t| bool::from(presented.as_bytes().ct_eq(t.as_bytes())))
    }

    fn login(&self, presented: &str) -> Option<String> {
        {
            let mut token = self.token.lock().expect("the token lock is never poisoned");
            let ok = token
                .as_deref()
                .is_some_and(|t| bool::from(presented.as_bytes().ct_eq(t.as_bytes())));
            if !ok {
                return None;
            }
            if self.one_time {
                *token = None;
            }
        }
        let secret = random_secret()?;
        let session = Session {
            csrf: random_secret()?.into(),
            made: Instant::now(),
        };
        let mut sessions = self
            .sessions
            .lock()
            .expect("the session lock is never poisoned");
        sessions.retain(|_, s| s.made.elapsed() < SESSION_LIFETIME);
        if sessions.len() >= MAX_SESSIONS
            && let Some(oldest) = sessions
                .iter()
                .min_by_key(|(_, s)| s.made)
                .map(|(k, _)| k.clone())
        {
            sessions.remove(&oldest);
        }
        sessions.insert(secret.clone(), session);
        Some(secret)
    }

    /// The CSRF token of the live session `secret`.
    fn session(&self, secret: &str) -> Option<Arc<str>> {
        let sessions = self
            .sessions
            .lock()
            .expect("the session lock is never poisoned");
        // Look up by equal length and constant-time compare, not by hashing the guess.
        sessions
            .iter()
            .find(|(key, _)| bool::from(key.as_bytes().ct_eq(secret.as_bytes())))
            .filter(|(_, s)| s.made.elapsed() < SESSION_LIFETIME)
            .map(|(_, s)| s.csrf.clone())
    }
}

/// 32 random bytes from the kernel, as hex.
pub fn random_secret() -> Option<String> {
    let mut bytes = [0u8; 32];
    let mut random = std::fs::File::open("/dev/urandom").ok()?;
    random.read_exact(&mut bytes).ok()?;
    Some(crate::ids::hex(&bytes))
}

/// The value of cookie `name` in `request`'s `Cookie` headers.
fn cookie<'r>(request: &'r Request, name: &str) -> Option<&'r str> {
    request
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// The middleware: admits the request (recording its [`Caller`]) or answers 401. `/login`
/// is open: its handler checks the token.
pub async fn authorize(access: Access, mut request: Request, next: Next) -> Response {
    if request.uri().path() == "/login" {
        request.extensions_mut().insert(access);
        return next.run(request).await;
    }
    match access.caller(&request) {
        Some(caller) => {
            request.extensions_mut().insert(caller);
            request.extensions_mut().insert(access);
            next.run(request).await
        }
        None => unauthorized(&request),
    }
}

/// A 401: JSON for the API, a short page (no job data) for a browser.
fn unauthorized(request: &Request) -> Response {
    let browser = !request.uri().path().starts_with("/v1/")
        && request
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("text/html"));
    if browser {
        let page = "<!doctype html><meta charset=utf-8><title>paddock: sign in</title>\
            <p>Not signed in. Open the URL that <code>paddock dashboard</code> (or \
            <code>paddock serve --listen</code>) printed.</p>";
        return (
            StatusCode::UNAUTHORIZED,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            page,
        )
            .into_response();
    }
    ApiError {
        status: StatusCode::UNAUTHORIZED,
        code: "unauthorized",
        message: "missing or wrong bearer token".into(),
        retry_after: None,
    }
    .into_response()
}
