//! Tests of the proxy against loopback servers of their own.

use super::*;

/// A loopback echo server; returns its port.
async fn echo_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    port
}

/// Sends `head` to the proxy; returns the stream and the status line it answered.
async fn ask(proxy: u16, head: &str) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", proxy)).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        answer.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    (stream, text.lines().next().unwrap_or_default().to_string())
}

fn write_policy(path: &std::path::Path, allow: &[String]) {
    let policy = EgressPolicy {
        allow: allow.iter().map(|a| a.parse().unwrap()).collect(),
        host_addresses: vec![],
        secrets: vec![],
    };
    std::fs::write(path, serde_json::to_vec(&policy).unwrap()).unwrap();
}

#[tokio::test]
async fn the_proxy_tunnels_what_is_allowed_and_logs_every_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let files = ProxyFiles {
        policy: dir.path().join("policy.json"),
        log: dir.path().join("egress.jsonl"),
        secrets: Arc::default(),
    };
    let echo = echo_server().await;
    write_policy(
        &files.policy,
        &[format!("127.0.0.1:{echo}"), format!("localhost:{echo}")],
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = listener.local_addr().unwrap().port();
    tokio::spawn(serve(listener, files.clone()));

    // Allowed, by address and by name: 200 and data both ways.
    for host in ["127.0.0.1", "localhost"] {
        let (mut tunnel, status) =
            ask(proxy, &format!("CONNECT {host}:{echo} HTTP/1.1\r\n\r\n")).await;
        assert!(status.contains(" 200 "), "{host}: {status}");
        tunnel.write_all(b"ping").await.unwrap();
        let mut back = [0u8; 4];
        tunnel.read_exact(&mut back).await.unwrap();
        assert_eq!(&back, b"ping");
    }
    // Another port of an allowed host, and a host not listed: 403.
    let (_, status) = ask(proxy, "CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n").await;
    assert!(status.contains(" 403 "), "{status}");
    let (_, status) = ask(proxy, "CONNECT unlisted.invalid:443 HTTP/1.1\r\n\r\n").await;
    assert!(status.contains(" 403 "), "{status}");
    // Domain fronting: TLS for another name inside an allowed CONNECT is cut.
    let (mut tunnel, status) =
        ask(proxy, &format!("CONNECT localhost:{echo} HTTP/1.1\r\n\r\n")).await;
    assert!(status.contains(" 200 "), "{status}");
    tunnel
        .write_all(&client_hello("evil.example"))
        .await
        .unwrap();
    let mut back = Vec::new();
    let _ = tunnel.read_to_end(&mut back).await;
    assert!(back.is_empty(), "nothing came back from upstream");
    // A plain request whose Host names another host: 400.
    let (_, status) = ask(
        proxy,
        &format!("GET http://127.0.0.1:{echo}/ HTTP/1.1\r\nHost: other.example\r\n\r\n"),
    )
    .await;
    assert!(status.contains(" 400 "), "{status}");
    // Tightened policy, next connection: the name alone no longer admits loopback.
    write_policy(&files.policy, &[format!("localhost:{echo}")]);
    let (_, status) = ask(proxy, &format!("CONNECT localhost:{echo} HTTP/1.1\r\n\r\n")).await;
    assert!(status.contains(" 403 "), "{status}");

    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = std::fs::read_to_string(&files.log).unwrap();
    let decisions: Vec<Decision> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let denied: Vec<&str> = decisions
        .iter()
        .filter(|d| !d.allowed)
        .map(|d| d.reason.as_str())
        .collect();
    assert_eq!(denied.len(), 5, "{log}");
    for expected in [
        "port 1 is not allowed",
        "unlisted.invalid is not in the allow-list",
        "differs from the CONNECT host",
        "Host header",
        "not listed by IP",
    ] {
        assert!(
            denied.iter().any(|r| r.contains(expected)),
            "no refusal says `{expected}`: {log}"
        );
    }
    assert!(
        decisions
            .iter()
            .any(|d| d.allowed && d.bytes_up == 4 && d.bytes_down == 4),
        "tunnels log their bytes: {log}"
    );
}

#[test]
fn hosts_and_ports_split() {
    assert_eq!(
        split_host_port("a.org:443", None),
        Some(("a.org".into(), 443))
    );
    assert_eq!(split_host_port("[::1]:80", None), Some(("::1".into(), 80)));
    assert_eq!(
        split_host_port("a.org", Some(80)),
        Some(("a.org".into(), 80))
    );
    assert_eq!(split_host_port("a.org", None), None);
    assert_eq!(split_host_port("a.org:0", None), None);
    assert_eq!(split_host_port("::1:80", None), None);
}

/// What a test's TLS upstream answers to one request.
type Answer =
    hyper::Response<http_body_util::combinators::BoxBody<bytes::Bytes, std::convert::Infallible>>;

/// A TLS server on loopback with a certificate of its own CA, answering each request (one
/// per connection) with `answer`; its allow entry, port, CA and the requests it saw (path
/// and `Authorization`).
async fn tls_upstream(
    dir: &std::path::Path,
    answer: fn(&str, &str) -> Answer,
) -> (
    crate::egress::AllowEntry,
    u16,
    super::super::ca::InstallCa,
    Arc<std::sync::Mutex<Vec<(String, String)>>>,
) {
    use rustls::pki_types::pem::PemObject;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let host: crate::egress::AllowEntry = format!("127.0.0.1:{port}").parse().unwrap();
    let upstream_ca = super::super::ca::InstallCa::load_or_create(&dir.join("up")).unwrap();
    let (server_cert, server_key) = upstream_ca.sign(std::slice::from_ref(&host)).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        rustls::pki_types::CertificateDer::pem_slice_iter(server_cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap(),
        rustls::pki_types::PrivateKeyDer::from_pem_slice(server_key.as_bytes()).unwrap(),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, log) = (acceptor.clone(), log.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        let auth = request
                            .headers()
                            .get("authorization")
                            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                            .unwrap_or_default();
                        let path = request.uri().path().to_string();
                        log.lock().unwrap().push((path.clone(), auth.clone()));
                        async move { Ok::<_, std::convert::Infallible>(answer(&path, &auth)) }
                    },
                );
                // One request per connection: the proxy must open another for the next.
                let _ = hyper::server::conn::http1::Builder::new()
                    .keep_alive(false)
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (host, port, upstream_ca, seen)
}

const PLACEHOLDER: &str = "paddock-secret-0123456789";
const VALUE: &str = "s3cr3t-value-0123456789";

/// The proxy with one secret, `VALUE` behind `PLACEHOLDER`, for `host`; its port and the
/// install's CA the job trusts.
async fn secret_proxy(
    dir: &std::path::Path,
    host: &crate::egress::AllowEntry,
    upstream_ca: &super::super::ca::InstallCa,
) -> (u16, super::super::ca::InstallCa) {
    let install_ca = super::super::ca::InstallCa::load_or_create(&dir.join("in")).unwrap();
    let files = ProxyFiles {
        policy: dir.join("policy.json"),
        log: dir.join("egress.jsonl"),
        secrets: Arc::default(),
    };
    let policy = EgressPolicy {
        allow: vec![host.clone()],
        host_addresses: vec![],
        secrets: vec![super::super::secrets::SecretRule {
            name: "api".into(),
            placeholder: PLACEHOLDER.into(),
            hosts: vec![host.clone()],
            header: None,
        }],
    };
    std::fs::write(&files.policy, serde_json::to_vec(&policy).unwrap()).unwrap();
    let (cert_pem, key_pem) = install_ca.sign(std::slice::from_ref(host)).unwrap();
    let loaded = super::super::secrets::Loaded::new(super::super::secrets::Load {
        values: [("api".to_string(), VALUE.to_string())].into(),
        cert_pem,
        key_pem,
        roots_pem: upstream_ca.cert_pem.clone(),
    })
    .unwrap();
    files.secrets.set(loaded);
    let proxy_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = proxy_listener.local_addr().unwrap().port();
    tokio::spawn(serve(proxy_listener, files));
    (proxy, install_ca)
}

type JobSender = hyper::client::conn::http1::SendRequest<http_body_util::Empty<bytes::Bytes>>;

/// The job's side: CONNECT to `port` through `proxy`, TLS trusting the install's CA.
async fn job_sender(proxy: u16, port: u16, install_ca: &super::super::ca::InstallCa) -> JobSender {
    use rustls::pki_types::pem::PemObject;
    let (tunnel, status) = ask(proxy, &format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n")).await;
    assert!(status.contains(" 200 "), "{status}");
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(
        rustls::pki_types::CertificateDer::pem_slice_iter(install_ca.cert_pem.as_bytes())
            .map(Result::unwrap),
    );
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(client))
        .connect(
            rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap(),
            tunnel,
        )
        .await
        .unwrap();
    let (sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(connection);
    sender
}

fn full(text: impl Into<bytes::Bytes>) -> Answer {
    use http_body_util::BodyExt;
    hyper::Response::new(http_body_util::Full::new(text.into()).boxed())
}

#[tokio::test]
async fn a_secret_host_gets_the_value_on_every_request_and_never_echoes_it() {
    use http_body_util::BodyExt;
    let dir = tempfile::tempdir().unwrap();
    // A server that answers with the `Authorization` it got.
    let (host, port, upstream_ca, seen) =
        tls_upstream(dir.path(), |_, auth| full(format!("got {auth}"))).await;
    let (proxy, install_ca) = secret_proxy(dir.path(), &host, &upstream_ca).await;
    let mut sender = job_sender(proxy, port, &install_ca).await;
    for _ in 0..2 {
        let request = hyper::Request::builder()
            .uri("/")
            .header("host", format!("127.0.0.1:{port}"))
            .header("authorization", format!("Bearer {PLACEHOLDER}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        sender.ready().await.unwrap();
        let response = sender.send_request(request).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        // The server got the value; what it echoed came back as the placeholder.
        assert_eq!(body, format!("got Bearer {PLACEHOLDER}").as_bytes());
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter()
            .all(|(_, auth)| auth == &format!("Bearer {VALUE}"))
    );
}

/// A hostile upstream echoes the value back in every way the issue found it came back: the
/// answer's `path` picks the way.
fn hostile_answer(path: &str, auth: &str) -> Answer {
    use base64::Engine as _;
    use http_body_util::BodyExt;
    let value = auth.trim_start_matches("Bearer ");
    let mut response = match path {
        "/gzip" | "/deflate" => {
            let mut response = full(value.to_string());
            let encoding = if path == "/gzip" { "gzip" } else { "deflate" };
            response
                .headers_mut()
                .insert("content-encoding", encoding.parse().unwrap());
            response
        }
        "/base64" => full(
            base64::engine::general_purpose::STANDARD.encode(format!("{{\"token\": \"{value}\"}}")),
        ),
        "/hex" => full(
            value
                .bytes()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
        ),
        "/truncated" => full(format!("echo: {}", &value[..value.len() - 1])),
        "/split" => {
            // The value cut short at a frame's end, then other bytes.
            let frames = vec![
                Ok(hyper::body::Frame::data(bytes::Bytes::from(format!(
                    "a{}",
                    &value[..12]
                )))),
                Ok(hyper::body::Frame::data(bytes::Bytes::from_static(b"!zzz"))),
            ];
            hyper::Response::new(
                http_body_util::StreamBody::new(futures_util::stream::iter(frames)).boxed(),
            )
        }
        "/trailer" => {
            let mut trailers = hyper::HeaderMap::new();
            trailers.insert("x-echo", value.parse().unwrap());
            let frames = vec![
                Ok(hyper::body::Frame::data(bytes::Bytes::from_static(b"ok"))),
                Ok(hyper::body::Frame::trailers(trailers)),
            ];
            hyper::Response::new(
                http_body_util::StreamBody::new(futures_util::stream::iter(frames)).boxed(),
            )
        }
        _ => full("ok"),
    };
    if path == "/header" {
        // A header that is not ASCII text: one byte past it.
        let mut bytes = value.as_bytes().to_vec();
        bytes.push(0xff);
        response.headers_mut().insert(
            "x-echo",
            hyper::header::HeaderValue::from_bytes(&bytes).unwrap(),
        );
    }
    response
}

/// Issue 40, item 3: the value goes only where its request truly goes, and never comes back.
/// Requests that do not go only to the secret's host (absolute-form to another host, no
/// Host, two Hosts) are refused before anything goes upstream; echoes compressed (gzip,
/// deflate), base64, hex, in a trailer, in a non-ASCII header, cut short at the end or at a
/// frame's end come back without the value or any 8-byte start of it.
#[tokio::test]
async fn a_hostile_upstream_gets_the_value_only_for_its_own_requests_and_never_echoes_it() {
    use http_body_util::BodyExt;
    let dir = tempfile::tempdir().unwrap();
    let (host, port, upstream_ca, seen) = tls_upstream(dir.path(), hostile_answer).await;
    let (proxy, install_ca) = secret_proxy(dir.path(), &host, &upstream_ca).await;
    let own = format!("127.0.0.1:{port}");
    let misrouted: [(&str, Vec<&str>); 4] = [
        ("https://evil.example/abs", vec![own.as_str()]),
        ("/nohost", vec![]),
        ("/twohosts", vec![own.as_str(), "evil.example"]),
        ("/otherhost", vec!["evil.example"]),
    ];
    for (uri, hosts) in misrouted {
        let mut sender = job_sender(proxy, port, &install_ca).await;
        let mut request = hyper::Request::builder().uri(uri);
        for host in hosts {
            request = request.header("host", host);
        }
        let request = request
            .header("authorization", format!("Bearer {PLACEHOLDER}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), 400, "{uri}");
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "a misrouted request went upstream: {seen:?}"
    );
    // Each refusal is logged when its connection ends.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let log = loop {
        let log = std::fs::read_to_string(dir.path().join("egress.jsonl")).unwrap_or_default();
        if log.matches("secret_host_mismatch").count() >= 4 || std::time::Instant::now() > deadline
        {
            break log;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(log.matches("secret_host_mismatch").count(), 4, "{log}");

    let forms = {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut forms = vec![
            VALUE.to_string(),
            VALUE[..8].to_string(),
            VALUE.bytes().map(|b| format!("{b:02x}")).collect(),
        ];
        // Base64 of the value at each of the three alignments inside a longer text, less
        // the characters its neighbours share.
        for skip in 0..3 {
            let rest = &VALUE.as_bytes()[skip..];
            forms.push(b64.encode(&rest[..rest.len() / 3 * 3]));
        }
        forms
    };
    for path in [
        "/gzip",
        "/deflate",
        "/base64",
        "/hex",
        "/truncated",
        "/split",
        "/trailer",
        "/header",
    ] {
        let mut sender = job_sender(proxy, port, &install_ca).await;
        let request = hyper::Request::builder()
            .uri(path)
            .header("host", own.as_str())
            .header("authorization", format!("Bearer {PLACEHOLDER}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        let mut all = format!("{:?}", response.headers()).into_bytes();
        let collected = response.into_body().collect().await.unwrap();
        if let Some(trailers) = collected.trailers() {
            all.extend_from_slice(format!("{trailers:?}").as_bytes());
        }
        let body = collected.to_bytes();
        all.extend_from_slice(&body);
        // The base64 echo decoded: the value is not in it either.
        if path == "/base64" {
            use base64::Engine as _;
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(&body)
                .unwrap_or_default();
            all.extend_from_slice(&decoded);
        }
        let text = String::from_utf8_lossy(&all).into_owned();
        for form in &forms {
            assert!(
                !text.contains(form.as_str()),
                "{path}: `{form}` came back: {text}"
            );
        }
    }
    // Each of those requests did carry the value upstream (the proxy refused none of them).
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 8, "{seen:?}");
    assert!(
        seen.iter()
            .all(|(_, auth)| auth == &format!("Bearer {VALUE}"))
    );
}
