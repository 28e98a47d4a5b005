//! TLS terminated for a `CONNECT` to a host that carries a secret, so the proxy can put the
//! secret into the request's headers and take it out of the response.
//!
//! Only for hosts a secret of the job covers; every other `CONNECT` stays a tunnel. The
//! client's ClientHello must name the `CONNECT` host (or none), as for tunnels; the job
//! trusts the install's CA, which signed the job's certificate for its secret hosts. The
//! upstream server is verified against the roots paddock sent (the host's, plus
//! `egress.upstream_ca`). Each request (HTTP/1.1, kept alive on both sides):
//!
//! - a request that does not go only to the CONNECT host (no `Host`, two, one naming
//!   another host or port, an absolute-form target with another authority or scheme:
//!   `secret_host_mismatch`), or that carries a placeholder of a secret that does not cover
//!   this host (`secret_to_unlisted_host`), is refused and logged, and nothing goes upstream;
//! - each covering secret's placeholder is replaced by its value in every header, and a
//!   secret with a `header` template sets that header; the request asks for an uncompressed
//!   answer (`Accept-Encoding: identity`);
//! - the response comes back with every value, in every form `scrub` knows (base64, hex,
//!   percent-encoding, a start cut short), replaced by its placeholder, in header bytes and
//!   body (the body streams; its `Content-Length` goes, as the length may change); trailers
//!   are dropped; an answer compressed anyway is refused (`secret_response_encoded`).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use super::policy::normalize_name;
use super::scrub::{Pattern, patterns, scrub, scrub_all};
use super::secrets::{
    ENCODED_REASON, HOST_MISMATCH_REASON, LEAK_REASON, Loaded, SecretRule, contains, leaked,
};

/// Deadline of the two TLS handshakes.
const HANDSHAKE_DEADLINE: Duration = Duration::from_secs(10);

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// One intercepted connection's target and secrets.
pub struct Target {
    pub host: String,
    pub port: u16,
    /// Every secret of the job (a placeholder of one not covering the host is a leak).
    pub rules: Vec<SecretRule>,
    pub loaded: Arc<Loaded>,
    /// The policy the connection was allowed by: a new connection upstream, when the server
    /// closed an idle one, is checked against it.
    pub policy: Option<super::EgressPolicy>,
}

/// What an intercepted connection did: bytes down, and the refusals of its requests.
#[derive(Default)]
pub struct Outcome {
    pub bytes_down: u64,
    pub refusals: Vec<String>,
}

/// Terminates the client's TLS, opens TLS to `upstream` and relays requests until either
/// side closes. `Err` when a handshake fails (the reason for the log).
pub async fn serve(
    client: TcpStream,
    upstream: TcpStream,
    target: Target,
) -> Result<Outcome, String> {
    let acceptor =
        tokio_rustls::LazyConfigAcceptor::new(rustls::server::Acceptor::default(), client);
    let accepted = async {
        let start = acceptor
            .await
            .map_err(|e| format!("TLS from the job: {e}"))?;
        if let Some(name) = start.client_hello().server_name()
            && normalize_name(name) != normalize_name(&target.host)
        {
            return Err(format!(
                "the TLS server name `{name}` differs from the CONNECT host {}",
                target.host
            ));
        }
        start
            .into_stream(target.loaded.server.clone())
            .await
            .map_err(|e| format!("TLS from the job: {e}"))
    };
    let accepted = async {
        tokio::time::timeout(HANDSHAKE_DEADLINE, accepted)
            .await
            .map_err(|_| "TLS from the job: no handshake in time".to_string())?
    };
    // Both handshakes at once: a small request pays for one round of them, not two. Nothing
    // of the job's goes upstream before its own handshake passed its checks.
    let (client_tls, sender) = tokio::try_join!(accepted, open_upstream(&target, upstream))?;
    let relay = Arc::new(Relay {
        target,
        sender: Mutex::new(sender),
        bytes_down: Arc::new(AtomicU64::new(0)),
        refusals: std::sync::Mutex::new(Vec::new()),
    });
    let service = {
        let relay = relay.clone();
        hyper::service::service_fn(move |request| {
            let relay = relay.clone();
            async move { Ok::<_, Infallible>(relay.forward(request).await) }
        })
    };
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(client_tls), service)
        .await;
    Ok(Outcome {
        bytes_down: relay.bytes_down.load(Ordering::Relaxed),
        refusals: std::mem::take(&mut relay.refusals.lock().expect("not poisoned")),
    })
}

/// TLS and HTTP/1.1 over `upstream`, the server verified against the roots paddock sent.
async fn open_upstream(target: &Target, upstream: TcpStream) -> Result<Sender, String> {
    let name = rustls::pki_types::ServerName::try_from(
        target
            .host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
    )
    .map_err(|e| format!("`{}` is no server name: {e}", target.host))?;
    let connector = tokio_rustls::TlsConnector::from(target.loaded.client.clone());
    let upstream_tls = tokio::time::timeout(HANDSHAKE_DEADLINE, connector.connect(name, upstream))
        .await
        .map_err(|_| "TLS to the server: no handshake in time".to_string())?
        .map_err(|e| format!("TLS to the server: {e}"))?;
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(upstream_tls))
        .await
        .map_err(|e| format!("HTTP to the server: {e}"))?;
    tokio::spawn(connection);
    Ok(sender)
}

type Sender = hyper::client::conn::http1::SendRequest<Incoming>;

struct Relay {
    target: Target,
    sender: Mutex<Sender>,
    bytes_down: Arc<AtomicU64>,
    refusals: std::sync::Mutex<Vec<String>>,
}

fn answer(status: StatusCode, text: &str) -> Response<ProxyBody> {
    let mut response = Response::new(
        Full::new(Bytes::from(format!("paddock egress: {text}\n")))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response
}

impl Relay {
    fn refuse(&self, status: StatusCode, reason: &str, text: &str) -> Response<ProxyBody> {
        self.refusals
            .lock()
            .expect("not poisoned")
            .push(reason.to_string());
        answer(status, text)
    }

    /// Why `request` does not go only to the CONNECT host, if it does not: exactly one
    /// `Host`, naming it, and an absolute-form target only with that same authority.
    fn misrouted(&self, request: &Request<Incoming>) -> Option<String> {
        let target = &self.target;
        let same = |name: &str, port: u16| {
            normalize_name(name.trim_start_matches('[').trim_end_matches(']'))
                == normalize_name(target.host.trim_start_matches('[').trim_end_matches(']'))
                && port == target.port
        };
        let hosts: Vec<&HeaderValue> = request
            .headers()
            .get_all(hyper::header::HOST)
            .iter()
            .collect();
        let [host] = hosts.as_slice() else {
            return Some(format!(
                "a request to a secret's host needs exactly one Host header (it had {})",
                hosts.len()
            ));
        };
        let text = host.to_str().unwrap_or_default();
        let (name, port) = match text.rsplit_once(':') {
            Some((name, port)) if !name.ends_with(']') || name.starts_with('[') => {
                (name, port.parse().unwrap_or(0))
            }
            _ => (text, 443),
        };
        if text.is_empty() || !same(name, port) {
            return Some(format!(
                "the Host header `{text}` differs from the CONNECT host"
            ));
        }
        let uri = request.uri();
        if uri
            .scheme()
            .is_some_and(|scheme| scheme != &hyper::http::uri::Scheme::HTTPS)
        {
            return Some(format!("the target `{uri}` is not https"));
        }
        if let Some(authority) = uri.authority()
            && !same(authority.host(), authority.port_u16().unwrap_or(443))
        {
            return Some(format!(
                "the target `{uri}` names another host than the CONNECT host"
            ));
        }
        None
    }

    #[expect(
        clippy::too_many_lines,
        reason = "a secret's request checked, injected and its response scrubbed in one flow (issue 42 splits it)"
    )]
    async fn forward(&self, mut request: Request<Incoming>) -> Response<ProxyBody> {
        let target = &self.target;
        if let Some(text) = self.misrouted(&request) {
            return self.refuse(StatusCode::BAD_REQUEST, HOST_MISMATCH_REASON, &text);
        }
        let mut seen = request.uri().to_string().into_bytes();
        for (key, value) in request.headers() {
            seen.extend_from_slice(key.as_str().as_bytes());
            seen.extend_from_slice(value.as_bytes());
        }
        if let Some(rule) = leaked(&target.rules, &seen, &target.host, target.port) {
            let text = format!(
                "the placeholder of secret `{}` may not go to {}",
                rule.name, target.host
            );
            return self.refuse(StatusCode::FORBIDDEN, LEAK_REASON, &text);
        }
        let mut pairs = Vec::new();
        for rule in target
            .rules
            .iter()
            .filter(|r| r.covers(&target.host, target.port))
        {
            let Some(value) = target.loaded.values.get(&rule.name) else {
                let text = format!("secret `{}` is not loaded: restart the job", rule.name);
                return self.refuse(StatusCode::SERVICE_UNAVAILABLE, &text, &text);
            };
            pairs.extend(patterns(value, &rule.placeholder));
            let headers = request.headers_mut();
            for header in headers.values_mut() {
                if contains(header.as_bytes(), rule.placeholder.as_bytes())
                    && let Ok(text) = header.to_str()
                    && let Ok(replaced) =
                        HeaderValue::from_str(&text.replace(&rule.placeholder, value))
                {
                    *header = replaced;
                }
            }
            if let Some((name, template)) = rule.header.as_deref().and_then(|h| h.split_once(':'))
                && let Ok(name) = HeaderName::from_bytes(name.trim().as_bytes())
                && let Ok(value) = HeaderValue::from_str(&template.trim().replace("{}", value))
            {
                headers.insert(name, value);
            }
        }
        request.headers_mut().remove("proxy-authorization");
        request.headers_mut().remove("proxy-connection");
        // An echoed value is taken out of what comes back: it must come back readable.
        request.headers_mut().insert(
            hyper::header::ACCEPT_ENCODING,
            HeaderValue::from_static("identity"),
        );
        let mut sender = self.sender.lock().await;
        // The server closed the connection (idle, or after a response): a new one, checked
        // as the first was.
        if sender.is_closed() || sender.ready().await.is_err() {
            let reopened = match &target.policy {
                Some(policy) => {
                    match super::upstream::connect(policy, &target.host, target.port).await {
                        Ok(stream) => open_upstream(target, stream).await,
                        Err(verdict) => Err(verdict.reason),
                    }
                }
                None => Err("no policy".to_string()),
            };
            match reopened {
                Ok(new) => *sender = new,
                Err(e) => return answer(StatusCode::BAD_GATEWAY, &format!("the server: {e}")),
            }
        }
        let sent = sender.send_request(request).await;
        drop(sender);
        let mut response = match sent {
            Ok(response) => response,
            Err(e) => {
                return answer(StatusCode::BAD_GATEWAY, &format!("the server: {e}"));
            }
        };
        let encoded = response
            .headers()
            .get_all(hyper::header::CONTENT_ENCODING)
            .iter()
            .any(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"));
        if encoded {
            let text = "the server answered compressed although asked not to: refused, as an echoed secret could not be taken out";
            return self.refuse(StatusCode::BAD_GATEWAY, ENCODED_REASON, text);
        }
        // Echoed values go back as placeholders, in every header's bytes (any encoding).
        for header in response.headers_mut().values_mut() {
            let scrubbed = scrub_all(header.as_bytes(), &pairs);
            if scrubbed != header.as_bytes() {
                *header = HeaderValue::from_bytes(&scrubbed)
                    .unwrap_or_else(|_| HeaderValue::from_static("paddock-scrubbed"));
            }
        }
        // Hop-by-hop: each side's connection is its own (a server closing its connection does
        // not close the job's; the next request gets a new one).
        for hop in [hyper::header::CONTENT_LENGTH, hyper::header::CONNECTION] {
            response.headers_mut().remove(hop);
        }
        response.headers_mut().remove("keep-alive");
        let mut firsts = [false; 256];
        for pattern in &pairs {
            if let Some(&first) = pattern.form.first() {
                firsts[usize::from(first)] = true;
            }
        }
        response.map(|body| {
            Scrub {
                inner: body,
                firsts,
                pairs,
                carry: Vec::new(),
                ended: false,
                counted: self.bytes_down.clone(),
            }
            .boxed()
        })
    }
}

/// A response body with every value replaced by its placeholder, across frame boundaries.
struct Scrub {
    inner: Incoming,
    /// Every form of every value, and its placeholder.
    pairs: Vec<Pattern>,
    /// The input's tail that may begin a value: held until the next frame.
    carry: Vec<u8>,
    ended: bool,
    counted: Arc<AtomicU64>,
    /// The bytes a value begins with.
    firsts: [bool; 256],
}

impl Body for Scrub {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        loop {
            if this.ended {
                // A start of a value the body ended in is taken out too.
                let rest = scrub_all(&std::mem::take(&mut this.carry), &this.pairs);
                return Poll::Ready((!rest.is_empty()).then(|| Ok(Frame::data(Bytes::from(rest)))));
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => this.ended = true,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                // Trailers (and anything else not data) are dropped: a value could ride there
                // past the scrub.
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        this.counted.fetch_add(data.len() as u64, Ordering::Relaxed);
                        // Most frames hold no byte that begins a value: passed on as they are.
                        let clean = this.carry.is_empty()
                            && !data.iter().any(|b| this.firsts[usize::from(*b)]);
                        if clean {
                            return Poll::Ready(Some(Ok(Frame::data(data))));
                        }
                        let out = if this.carry.is_empty() {
                            let (out, used) = scrub(&data, &this.pairs, false);
                            this.carry.extend_from_slice(&data[used..]);
                            out
                        } else {
                            this.carry.extend_from_slice(&data);
                            let (out, used) = scrub(&this.carry, &this.pairs, false);
                            this.carry.drain(..used);
                            out
                        };
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                        }
                    }
                }
            }
        }
    }
}
