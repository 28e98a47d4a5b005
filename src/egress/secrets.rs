//! The proxy's side of a job's secrets: the rules it matches (in the policy file, without
//! values), the values and TLS material it holds in memory only, and its control socket.
//!
//! paddock sends a [`Load`] (the values, the job's leaf certificate and key for the secret
//! hosts, the roots to verify upstream servers with) over a Unix socket in a directory only
//! the sidecar and paddock's user can reach (`/paddock/ctl/ctl.sock` inside; never mounted
//! into the job; on a remote engine a tmpfs of the sidecar, reached by an exec of
//! `paddock egress-load` whose stdin carries the load, see `runtime/docker/remote/secrets.rs`),
//! each time it starts the sidecar. Nothing of it is written to disk: a
//! restarted proxy holds no values until paddock sends them again (the job's next start), and
//! until then refuses requests to secret hosts rather than send them without the secret.
//!
//! A rule "covers" a request when one of its hosts allows the request's host and port. A
//! placeholder of a rule that does not cover the request is an exfiltration attempt: the
//! request is refused with the reason [`LEAK_REASON`].

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::allow::AllowEntry;

/// The reason logged (and relayed as `egress.denied`) for a placeholder sent elsewhere.
pub const LEAK_REASON: &str = "secret_to_unlisted_host";

/// The reason logged for a request to a secret's host that does not go only there: no
/// `Host`, two, one naming another site, or an absolute-form target with another authority.
pub const HOST_MISMATCH_REASON: &str = "secret_host_mismatch";

/// The reason logged for a secret host's answer that came compressed although paddock asked
/// for none (an echoed value could not be taken out of it).
pub const ENCODED_REASON: &str = "secret_response_encoded";
/// Largest [`Load`] accepted (the roots are most of it).
const MAX_LOAD: u64 = 8 << 20;
/// Deadline for reading a [`Load`].
const LOAD_DEADLINE: Duration = Duration::from_secs(10);

/// One secret as the proxy matches it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretRule {
    pub name: String,
    pub placeholder: String,
    pub hosts: Vec<AllowEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
}

impl SecretRule {
    /// Whether the secret may go to `host:port`.
    pub fn covers(&self, host: &str, port: u16) -> bool {
        self.hosts.iter().any(|h| h.allows_request(host, port))
    }
}

/// The rules among `rules` that cover `host:port`.
pub fn covering(rules: &[SecretRule], host: &str, port: u16) -> Vec<SecretRule> {
    rules
        .iter()
        .filter(|r| r.covers(host, port))
        .cloned()
        .collect()
}

/// The first rule whose placeholder `bytes` carry although it does not cover `host:port`.
pub fn leaked<'a>(
    rules: &'a [SecretRule],
    bytes: &[u8],
    host: &str,
    port: u16,
) -> Option<&'a SecretRule> {
    rules
        .iter()
        .find(|r| !r.covers(host, port) && contains(bytes, r.placeholder.as_bytes()))
}

/// Whether `needle` occurs in `haystack`.
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// What paddock sends over the control socket.
#[derive(Serialize, Deserialize)]
pub struct Load {
    /// Secret name to value.
    pub values: BTreeMap<String, String>,
    /// The job's certificate for its secret hosts, signed by the install's CA (PEM).
    pub cert_pem: String,
    pub key_pem: String,
    /// The roots upstream servers are verified against (PEM).
    pub roots_pem: String,
}

/// What the proxy holds after a [`Load`].
pub struct Loaded {
    pub values: BTreeMap<String, String>,
    pub server: Arc<rustls::ServerConfig>,
    pub client: Arc<rustls::ClientConfig>,
}

impl Loaded {
    /// Builds the TLS configurations of a load.
    pub fn new(load: Load) -> Result<Loaded, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain = CertificateDer::pem_slice_iter(load.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("the certificate: {e}"))?;
        let key = PrivateKeyDer::from_pem_slice(load.key_pem.as_bytes())
            .map_err(|e| format!("the key: {e}"))?;
        let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| format!("the certificate: {e}"))?;
        server.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut roots = rustls::RootCertStore::empty();
        let certs =
            CertificateDer::pem_slice_iter(load.roots_pem.as_bytes()).filter_map(Result::ok);
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err("no usable root certificates".into());
        }
        let mut client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        client.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Loaded {
            values: load.values,
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }
}

/// The values and TLS material of the running proxy, once paddock sent them.
#[derive(Default)]
pub struct Store(RwLock<Option<Arc<Loaded>>>);

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values.
        f.write_str("Store(..)")
    }
}

impl Store {
    pub fn get(&self) -> Option<Arc<Loaded>> {
        self.0
            .read()
            .expect("the store lock is not poisoned")
            .clone()
    }

    pub(super) fn set(&self, loaded: Loaded) {
        *self.0.write().expect("the store lock is not poisoned") = Some(Arc::new(loaded));
    }
}

/// Serves the control socket: each connection sends one [`Load`] (JSON, then end of
/// stream), answered `ok` or `error: ...` (never naming a value).
pub async fn serve_control(
    listener: tokio::net::UnixListener,
    store: Arc<Store>,
) -> std::io::Result<()> {
    loop {
        let (mut stream, _) = listener.accept().await?;
        let store = store.clone();
        tokio::spawn(async move {
            let mut text = Vec::new();
            let read = tokio::time::timeout(
                LOAD_DEADLINE,
                (&mut stream).take(MAX_LOAD).read_to_end(&mut text),
            )
            .await;
            let answer = match read {
                Ok(Ok(_)) => match serde_json::from_slice::<Load>(&text)
                    .map_err(|e| {
                        format!("not a load ({:?} error at line {})", e.classify(), e.line())
                    })
                    .and_then(Loaded::new)
                {
                    Ok(loaded) => {
                        store.set(loaded);
                        "ok\n".to_string()
                    }
                    Err(e) => format!("error: {e}\n"),
                },
                _ => "error: the load did not arrive in time\n".to_string(),
            };
            let _ = stream.write_all(answer.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Hands `text` (one [`Load`]) to the proxy listening on `socket`, waiting for the socket
/// to appear (the proxy makes it as it starts), all within `within`: the proxy's answer
/// (`ok`, or `error: ...`). Used by paddock on the host (a local job's control directory)
/// and by `paddock egress-load` inside a remote engine's sidecar.
pub async fn deliver(
    socket: &std::path::Path,
    text: &[u8],
    within: Duration,
) -> Result<String, String> {
    let sent = tokio::time::timeout(within, async {
        let mut stream = loop {
            match tokio::net::UnixStream::connect(socket).await {
                Ok(stream) => break stream,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        stream.write_all(text).await?;
        stream.shutdown().await?;
        let mut answer = String::new();
        (&mut stream).take(4096).read_to_string(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    })
    .await;
    match sent {
        Ok(Ok(answer)) => Ok(answer.trim().to_string()),
        Ok(Err(e)) => Err(format!("sending them to the proxy: {e}")),
        Err(_) => Err(format!(
            "the proxy's control socket did not answer in {within:?}"
        )),
    }
}

/// Reads one [`Load`] line (as `paddock egress-load` gets it on its stdin): at most
/// [`MAX_LOAD`] bytes, up to a newline or the end, within [`LOAD_DEADLINE`].
pub async fn read_load_line(input: impl tokio::io::AsyncRead + Unpin) -> Result<Vec<u8>, String> {
    use tokio::io::AsyncBufReadExt;
    let mut reader = tokio::io::BufReader::new(input.take(MAX_LOAD + 1));
    let mut line = Vec::new();
    match tokio::time::timeout(LOAD_DEADLINE, reader.read_until(b'\n', &mut line)).await {
        Ok(Ok(_)) if line.len() as u64 > MAX_LOAD => Err(format!("a load over {MAX_LOAD} bytes")),
        Ok(Ok(0)) => Err("no load on stdin".into()),
        Ok(Ok(_)) => Ok(line),
        Ok(Err(e)) => Err(format!("reading the load: {e}")),
        Err(_) => Err("the load did not arrive in time".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_leaks_only_off_their_hosts() {
        let rule = SecretRule {
            name: "gh".into(),
            placeholder: "paddock-secret-abc".into(),
            hosts: vec!["api.example.org".parse().unwrap()],
            header: None,
        };
        let rules = vec![rule];
        let head = b"GET / HTTP/1.1\r\nAuthorization: Bearer paddock-secret-abc\r\n\r\n";
        assert!(leaked(&rules, head, "api.example.org", 443).is_none());
        assert_eq!(
            leaked(&rules, head, "other.example", 80).map(|r| r.name.as_str()),
            Some("gh")
        );
        assert!(leaked(&rules, b"GET / HTTP/1.1\r\n\r\n", "other.example", 80).is_none());
        assert_eq!(covering(&rules, "api.example.org", 443).len(), 1);
        assert!(covering(&rules, "api.example.org", 8443).is_empty());
    }

    #[tokio::test]
    async fn a_load_line_ends_at_its_newline_and_has_a_cap() {
        let line = read_load_line(&b"{\"values\":{}}\nrest"[..]).await.unwrap();
        assert_eq!(line, b"{\"values\":{}}\n");
        assert!(read_load_line(&b""[..]).await.is_err());
        let big = vec![b'x'; usize::try_from(MAX_LOAD).unwrap() + 10];
        assert!(read_load_line(&big[..]).await.unwrap_err().contains("over"));
    }

    #[tokio::test]
    async fn a_load_delivered_to_a_control_socket_is_answered() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("ctl.sock");
        let store = Arc::new(Store::default());
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        tokio::spawn(serve_control(listener, store.clone()));
        let answer = deliver(&socket, b"not json\n", Duration::from_secs(5)).await;
        assert!(answer.unwrap().starts_with("error: not a load"));
        assert!(store.get().is_none());
        let missing = dir.path().join("none.sock");
        let late = deliver(&missing, b"{}", Duration::from_millis(200)).await;
        assert!(late.unwrap_err().contains("did not answer"));
    }
}
