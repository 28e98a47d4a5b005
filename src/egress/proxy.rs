//! The egress proxy: an HTTP proxy that lets a job reach only what its policy allows.
//!
//! It runs as `paddock egress-proxy` in a sidecar container, the only other member of the
//! job's internal network (which has no route out), so everything the job sends off its
//! network passes here. Per connection it reads one request head (deadline, size cap), then:
//!
//! - `CONNECT host:port`: the name check, then resolution here (the job has no resolver),
//!   the address check on every address, a connect with a deadline, `200`; the first bytes
//!   the client sends are read before any of them goes upstream, and a TLS ClientHello whose
//!   SNI names another host than the CONNECT target is refused (domain fronting); what the
//!   server says first comes down meanwhile (server-first protocols work).
//! - `GET http://host/...` (absolute form): the same checks, and the `Host` header must name
//!   the same host; the request goes upstream in origin form with `Connection: close`, so a
//!   second request with another `Host` cannot follow on that connection.
//! - anything else: `400`.
//!
//! The ClientHello is read by [`super::tls`].
//!
//! Every decision is one JSON line in the log (`egress.jsonl`): time, client, method, host,
//! port, allowed, reason, and bytes each way once a tunnel ends. The policy file is read
//! again for each connection, so `paddock net` changes apply to the next connection.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::policy::{EgressPolicy, Verdict, normalize_name};
use super::secrets::{LEAK_REASON, contains, covering, leaked};
use super::tls::check_sni;
#[cfg(test)]
use super::tls::client_hello;
use super::tunnel::{close, pipe_one_way, read_first, write_all};
use super::upstream::{connect, deny};

/// Longest request head accepted.
const MAX_HEAD: usize = 16 * 1024;
/// Deadline for the client's request head.
const CLIENT_DEADLINE: Duration = Duration::from_secs(10);
/// Longest life of one tunnel.
const TUNNEL_DEADLINE: Duration = Duration::from_secs(6 * 3600);

/// Where the proxy reads its policy and writes its decisions, and the secrets it holds.
#[derive(Debug, Clone)]
pub struct ProxyFiles {
    pub policy: PathBuf,
    pub log: PathBuf,
    pub secrets: Arc<super::secrets::Store>,
}

/// One line of `egress.jsonl`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Decision {
    pub at: chrono::DateTime<chrono::Utc>,
    pub client: String,
    pub method: String,
    pub host: String,
    pub port: u16,
    pub allowed: bool,
    pub reason: String,
    #[serde(default)]
    pub bytes_up: u64,
    #[serde(default)]
    pub bytes_down: u64,
}

/// Accepts connections until the listener fails; each is handled on its own task.
pub async fn serve(listener: TcpListener, files: ProxyFiles) -> std::io::Result<()> {
    let files = Arc::new(files);
    loop {
        let (client, peer) = listener.accept().await?;
        let files = files.clone();
        tokio::spawn(async move {
            let _ = client.set_nodelay(true);
            handle(client, peer, &files).await;
        });
    }
}

struct Request {
    method: String,
    host: String,
    port: u16,
    /// For plain HTTP: the head to send upstream (origin form, `Connection: close`).
    upstream_head: Option<Vec<u8>>,
    /// Bytes the client sent after the head.
    rest: Vec<u8>,
}

#[expect(
    clippy::too_many_lines,
    reason = "one connection's life: parse, check, connect, relay, log"
)]
async fn handle(mut client: TcpStream, peer: SocketAddr, files: &ProxyFiles) {
    let decision = |method: &str, host: &str, port: u16, verdict: &Verdict| Decision {
        at: chrono::Utc::now(),
        client: peer.ip().to_string(),
        method: method.to_string(),
        host: host.to_string(),
        port,
        allowed: verdict.allowed,
        reason: verdict.reason.clone(),
        bytes_up: 0,
        bytes_down: 0,
    };
    let request = match tokio::time::timeout(CLIENT_DEADLINE, read_request(&mut client)).await {
        Ok(Ok(request)) => request,
        Ok(Err(refused)) => {
            let verdict = deny(refused.reason);
            respond(&mut client, 400, &verdict.reason).await;
            let (method, host, port) = refused.asked.unwrap_or(("?".into(), "?".into(), 0));
            log(files, &decision(&method, &host, port, &verdict)).await;
            return;
        }
        Err(_) => return,
    };
    let policy = load_policy(files).await;
    let mut verdict = match &policy {
        Ok(policy) => policy.check_request(&request.host, request.port),
        Err(reason) => deny(reason.clone()),
    };
    // Secrets: a placeholder never goes where its secret may not, and never in clear text.
    let rules = policy
        .as_ref()
        .map(|p| p.secrets.clone())
        .unwrap_or_default();
    if verdict.allowed && request.upstream_head.is_some() {
        let mut sent = request.upstream_head.clone().unwrap_or_default();
        sent.extend_from_slice(&request.rest);
        if leaked(&rules, &sent, &request.host, request.port).is_some() {
            verdict = deny(LEAK_REASON);
        } else if rules
            .iter()
            .any(|r| contains(&sent, r.placeholder.as_bytes()))
        {
            verdict = deny("secrets go over https only");
        }
    }
    let upstream = if verdict.allowed {
        let policy = policy.as_ref().expect("checked above");
        match connect(policy, &request.host, request.port).await {
            Ok(stream) => Some(stream),
            Err(refusal) => {
                verdict = refusal;
                None
            }
        }
    } else {
        None
    };
    let Some(mut upstream) = upstream else {
        let status = if verdict.reason.starts_with("cannot") {
            502
        } else {
            403
        };
        respond(&mut client, status, &verdict.reason).await;
        log(
            files,
            &decision(&request.method, &request.host, request.port, &verdict),
        )
        .await;
        return;
    };

    let connect = request.upstream_head.is_none();
    if connect && !covering(&rules, &request.host, request.port).is_empty() {
        if client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
            .is_err()
        {
            return;
        }
        let mut done = decision(&request.method, &request.host, request.port, &verdict);
        let outcome = match files.secrets.get() {
            Some(loaded) => {
                let target = super::intercept::Target {
                    host: request.host.clone(),
                    port: request.port,
                    rules,
                    loaded,
                    policy: policy.as_ref().ok().cloned(),
                };
                tokio::time::timeout(
                    TUNNEL_DEADLINE,
                    super::intercept::serve(client, upstream, target),
                )
                .await
                .unwrap_or_else(|_| Err("the connection outlived its deadline".into()))
            }
            None => Err(
                "the job's secrets are not loaded: paddock sends them when it starts the job"
                    .into(),
            ),
        };
        match outcome {
            Ok(outcome) => {
                for reason in outcome.refusals {
                    log(
                        files,
                        &decision(&request.method, &request.host, request.port, &deny(reason)),
                    )
                    .await;
                }
                done.reason.push_str("; TLS terminated for its secrets");
                done.bytes_down = outcome.bytes_down;
            }
            Err(reason) => {
                done = decision(&request.method, &request.host, request.port, &deny(reason))
            }
        }
        log(files, &done).await;
        return;
    }
    let mut first = request.rest;
    if let Some(head) = &request.upstream_head {
        if upstream.write_all(head).await.is_err() {
            return;
        }
    } else if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    // Up: after a CONNECT, the client's first bytes (for TLS, the whole ClientHello) are
    // checked before any of them goes upstream. Down starts at once, so a server that speaks
    // first (a greeting, an SSH or SMTP banner) is heard while the client waits for it.
    let mut refused = None;
    let up = async {
        if connect {
            let checked = match read_first(&client, &mut first).await {
                Ok(()) => check_sni(&first, &request.host).map_err(Some),
                Err(_) => Err(None),
            };
            if let Err(reason) = checked {
                refused = reason;
                close(&client);
                close(&upstream);
                return 0;
            }
        }
        if !first.is_empty() && write_all(&upstream, &first).await.is_err() {
            close(&client);
            close(&upstream);
            return 0;
        }
        first.len() as u64 + pipe_one_way(&client, &upstream).await.unwrap_or(0)
    };
    let down = pipe_one_way(&upstream, &client);
    let piped = tokio::time::timeout(TUNNEL_DEADLINE, async { tokio::join!(up, down) }).await;
    if let Some(reason) = refused {
        let verdict = deny(reason);
        log(
            files,
            &decision(&request.method, &request.host, request.port, &verdict),
        )
        .await;
        return;
    }
    let (bytes_up, bytes_down) = match piped {
        Ok((up, down)) => (up, down.unwrap_or(0)),
        Err(_) => (0, 0),
    };
    let mut done = decision(&request.method, &request.host, request.port, &verdict);
    done.bytes_up = bytes_up;
    done.bytes_down = bytes_down;
    log(files, &done).await;
}

async fn load_policy(files: &ProxyFiles) -> Result<EgressPolicy, String> {
    let text = tokio::fs::read(&files.policy)
        .await
        .map_err(|e| format!("the policy cannot be read: {e}"))?;
    serde_json::from_slice(&text).map_err(|e| format!("the policy cannot be read: {e}"))
}

/// A request refused before any policy check, with what it asked for when that is known.
struct Malformed {
    reason: String,
    asked: Option<(String, String, u16)>,
}

impl From<String> for Malformed {
    fn from(reason: String) -> Malformed {
        Malformed {
            reason,
            asked: None,
        }
    }
}

impl From<&str> for Malformed {
    fn from(reason: &str) -> Malformed {
        reason.to_string().into()
    }
}

/// Reads and parses one request head.
async fn read_request(client: &mut TcpStream) -> Result<Request, Malformed> {
    let mut buffer = Vec::with_capacity(1024);
    let end = loop {
        if let Some(at) = find(&buffer, b"\r\n\r\n") {
            break at + 4;
        }
        if buffer.len() > MAX_HEAD {
            return Err(format!("request head over {MAX_HEAD} bytes").into());
        }
        let mut chunk = [0u8; 4096];
        let read = client
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading the request: {e}"))?;
        if read == 0 {
            return Err("the client closed before a request".into());
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let rest = buffer.split_off(end);
    let head = String::from_utf8(buffer).map_err(|_| "the request head is not text".to_string())?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (method, target, version) = match (parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(t), Some(v)) if v.starts_with("HTTP/1.") => (m, t, v),
        _ => return Err("not an HTTP/1 request".into()),
    };
    let headers: Vec<(&str, &str)> = lines
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect();
    if method == "CONNECT" {
        let (host, port) = split_host_port(target, None)
            .ok_or_else(|| format!("CONNECT target `{target}` is not host:port"))?;
        return Ok(Request {
            method: method.into(),
            host,
            port,
            upstream_head: None,
            rest,
        });
    }
    let Some(after_scheme) = target.strip_prefix("http://") else {
        return Err(format!(
            "`{method} {target}`: only CONNECT and absolute http:// requests go through this proxy"
        )
        .into());
    };
    let (authority, path) = match after_scheme.find('/') {
        Some(at) => (&after_scheme[..at], &after_scheme[at..]),
        None => (after_scheme, "/"),
    };
    let (host, port) = split_host_port(authority, Some(80))
        .ok_or_else(|| format!("request target `{target}` has no valid host"))?;
    let host_header = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("host"))
        .map(|(_, v)| *v);
    if let Some(value) = host_header {
        let named = split_host_port(value, Some(80));
        if named.as_ref().map(|(h, p)| (normalize_name(h), *p))
            != Some((normalize_name(&host), port))
        {
            return Err(Malformed {
                reason: format!(
                    "the Host header `{value}` differs from the request's host `{authority}`"
                ),
                asked: Some((method.to_string(), host, port)),
            });
        }
    }
    let mut upstream = format!("{method} {path} {version}\r\n");
    for (key, value) in &headers {
        let lower = key.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "connection" | "proxy-connection" | "proxy-authorization" | "keep-alive"
        ) {
            continue;
        }
        upstream.push_str(key);
        upstream.push_str(": ");
        upstream.push_str(value);
        upstream.push_str("\r\n");
    }
    if host_header.is_none() {
        upstream.push_str(&format!("Host: {authority}\r\n"));
    }
    upstream.push_str("Connection: close\r\n\r\n");
    Ok(Request {
        method: method.into(),
        host,
        port,
        upstream_head: Some(upstream.into_bytes()),
        rest,
    })
}

/// `host:port`, `[v6]:port`, or `host` with `default` port.
fn split_host_port(text: &str, default: Option<u16>) -> Option<(String, u16)> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (addr, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(port) => port.parse().ok()?,
            None if after.is_empty() => default?,
            None => return None,
        };
        (addr.to_string(), port)
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host.to_string(), port.parse().ok()?),
            Some(_) => return None,
            None => (text.to_string(), default?),
        }
    };
    (!host.is_empty() && port != 0).then_some((host, port))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn respond(client: &mut TcpStream, status: u16, reason: &str) {
    let text = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        _ => "Bad Gateway",
    };
    let body = format!("paddock egress: {reason}\n");
    let response = format!(
        "HTTP/1.1 {status} {text}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(response.as_bytes()).await;
    let _ = client.shutdown().await;
}

/// The most of a job's egress log (16 MiB): an agent decides how many requests it makes.
/// Past it, one `{"truncated": true, "limit"}` line, then nothing more is logged (the
/// proxy's decisions still hold; only their record stops).
pub const EGRESS_LOG_CAP: u64 = 16 << 20;

async fn log(files: &ProxyFiles, decision: &Decision) {
    let mut line = serde_json::to_string(decision).expect("decisions serialize");
    line.push('\n');
    // One write per line on an O_APPEND file: lines from concurrent connections do not mix.
    let written = async {
        let mut file = tokio::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&files.log)
            .await?;
        let len = file.metadata().await?.len();
        if len >= EGRESS_LOG_CAP {
            return Ok(());
        }
        if len + line.len() as u64 > EGRESS_LOG_CAP {
            line = format!("{{\"truncated\":true,\"limit\":{EGRESS_LOG_CAP}}}\n");
        }
        file.write_all(line.as_bytes()).await
    }
    .await;
    if let Err(error) = written {
        tracing::warn!(%error, "cannot write the egress log");
    }
}

#[cfg(test)]
#[path = "proxy_tests.rs"]
mod tests;
