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

#[tokio::test]
async fn a_secret_host_gets_the_value_on_every_request_and_never_echoes_it() {
    use http_body_util::BodyExt;
    use rustls::pki_types::pem::PemObject;
    let dir = tempfile::tempdir().unwrap();
    // A server that answers with the `Authorization` it got, one request per connection.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let host: crate::egress::AllowEntry = format!("127.0.0.1:{port}").parse().unwrap();
    // The server's CA and the install's CA.
    let upstream_ca = super::super::ca::InstallCa::load_or_create(&dir.path().join("up")).unwrap();
    let install_ca = super::super::ca::InstallCa::load_or_create(&dir.path().join("in")).unwrap();
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
    let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, count) = (acceptor.clone(), count.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let auth = request
                            .headers()
                            .get("authorization")
                            .map(|v| v.to_str().unwrap().to_string())
                            .unwrap_or_default();
                        async move {
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(
                                http_body_util::Full::new(bytes::Bytes::from(format!(
                                    "got {auth}"
                                ))),
                            ))
                        }
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

    let placeholder = "paddock-secret-0123456789";
    let files = ProxyFiles {
        policy: dir.path().join("policy.json"),
        log: dir.path().join("egress.jsonl"),
        secrets: Arc::default(),
    };
    let policy = EgressPolicy {
        allow: vec![host.clone()],
        host_addresses: vec![],
        secrets: vec![super::super::secrets::SecretRule {
            name: "api".into(),
            placeholder: placeholder.into(),
            hosts: vec![host.clone()],
            header: None,
        }],
    };
    std::fs::write(&files.policy, serde_json::to_vec(&policy).unwrap()).unwrap();
    let (cert_pem, key_pem) = install_ca.sign(std::slice::from_ref(&host)).unwrap();
    let loaded = super::super::secrets::Loaded::new(super::super::secrets::Load {
        values: [("api".to_string(), "s3cr3t-value".to_string())].into(),
        cert_pem,
        key_pem,
        roots_pem: upstream_ca.cert_pem.clone(),
    })
    .unwrap();
    files.secrets.set(loaded);
    let proxy_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = proxy_listener.local_addr().unwrap().port();
    tokio::spawn(serve(proxy_listener, files.clone()));

    // The job's side: CONNECT, TLS trusting the install's CA, two requests on one connection.
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
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(connection);
    for _ in 0..2 {
        let request = hyper::Request::builder()
            .uri("/")
            .header("host", format!("127.0.0.1:{port}"))
            .header("authorization", format!("Bearer {placeholder}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        sender.ready().await.unwrap();
        let response = sender.send_request(request).await.unwrap();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        // The server got the value; what it echoed came back as the placeholder.
        assert_eq!(body, format!("got Bearer {placeholder}").as_bytes());
    }
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 2);
}
