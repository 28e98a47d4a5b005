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
