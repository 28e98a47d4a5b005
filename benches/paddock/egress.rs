//! The egress proxy: a 10 MiB download through an allowlist job's proxy against an `open` job,
//! and the proxy's memory with 50 tunnels open.

use super::*;

pub(super) fn rss_kib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// An HTTP server on `address` for the egress rows: `GET /10m` sends 10 MiB, `GET /hold`
/// sends a head and keeps the connection open for 20 s. Returns its port.
pub(super) fn body_server(address: &str) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind((address, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                if String::from_utf8_lossy(&head).starts_with("GET /hold") {
                    let _ = stream.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
                    std::thread::sleep(Duration::from_secs(20));
                    return;
                }
                let body = vec![b'x'; 10 << 20];
                let _ = stream.write_all(
                    format!("HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes(),
                );
                let _ = stream.write_all(&body);
            });
        }
    });
    port
}

/// A 10 MiB download through an allowlist job's egress proxy against the same download
/// straight from an `open` job, both timed inside their containers (no exec overhead); then
/// the proxy's memory with 50 tunnels open.
pub(super) fn egress_overhead(rows: &mut Vec<Row>) {
    let repo = FixtureRepo::with_files(100, 200);
    let home = TestHome::new();
    let gateway = bridge_gateway();
    let port = body_server(&gateway);
    let image = test_image();
    let create = |extra: &[&str]| -> (String, String) {
        let path = repo.path().display().to_string();
        let mut args = vec![
            "create",
            "--repo",
            &path,
            "--runtime",
            "docker",
            "--image",
            &image,
            "--json",
        ];
        args.extend_from_slice(extra);
        let job: Value = serde_json::from_str(&run(&mut home.cmd(&args))).unwrap();
        (
            job["id"].as_str().unwrap().to_string(),
            fixtures::container_of(&job),
        )
    };
    let target = format!("{gateway}:{port}");
    let (proxied, proxied_container) = create(&["--task", "egress-proxied", "--allow", &target]);
    let (direct, direct_container) = create(&["--task", "egress-direct", "--network", "open"]);
    // Prints the microseconds a fetch took and the bytes it got (bash's clock: no fork of
    // `date` inside the timed span).
    let fetch_direct = format!(
        "t0=${{EPOCHREALTIME/./}}; exec 3<>/dev/tcp/{gateway}/{port}; printf 'GET /10m HTTP/1.0\\r\\n\\r\\n' >&3; n=$(cat <&3 | wc -c); echo $(( ${{EPOCHREALTIME/./}} - t0 )) $n"
    );
    let fetch_proxied = format!(
        "h=${{HTTPS_PROXY#http://}}; t0=${{EPOCHREALTIME/./}}; exec 3<>/dev/tcp/${{h%:*}}/${{h##*:}}; printf 'CONNECT {target} HTTP/1.1\\r\\n\\r\\nGET /10m HTTP/1.0\\r\\n\\r\\n' >&3; n=$(cat <&3 | wc -c); echo $(( ${{EPOCHREALTIME/./}} - t0 )) $n"
    );
    let fetch = |container: &str, script: &str| -> f64 {
        let out = run(Command::new("docker").args(["exec", container, "bash", "-c", script]));
        let mut words = out.split_whitespace();
        let micros: f64 = words.next().unwrap().parse().unwrap();
        let bytes: u64 = words.next().unwrap().parse().unwrap();
        assert!(bytes >= 10 << 20, "the whole body came through: {out}");
        micros / 1e3
    };
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for i in 0..RUNS {
        if i % 2 == 0 {
            ours.push(fetch(&proxied_container, &fetch_proxied));
            theirs.push(fetch(&direct_container, &fetch_direct));
        } else {
            theirs.push(fetch(&direct_container, &fetch_direct));
            ours.push(fetch(&proxied_container, &fetch_proxied));
        }
    }
    let ratio = median(&ours) / median(&theirs);
    rows.push(Row {
        name: "fetch 10 MiB through the egress proxy".into(),
        paddock: ours,
        baseline: Some(theirs),
        unit: "ms",
        target: "≤ 1.2 × direct (open network)".into(),
        met: ratio <= 1.2,
        note: "allowlist job: CONNECT through its sidecar proxy, then GET; baseline: the same GET from an `open` job; timed inside the containers".into(),
    });

    // 50 tunnels held open at once; the proxy's resident memory meanwhile.
    let hold = format!(
        "h=${{HTTPS_PROXY#http://}}; for i in $(seq 50); do ( exec 3<>/dev/tcp/${{h%:*}}/${{h##*:}}; printf 'CONNECT {target} HTTP/1.1\\r\\n\\r\\nGET /hold HTTP/1.0\\r\\n\\r\\n' >&3; sleep 15 ) & done; sleep 16"
    );
    let holder = Command::new("docker")
        .args(["exec", &proxied_container, "bash", "-c", &hold])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(5));
    let init: u32 = run(Command::new("docker").args([
        "inspect",
        "--format",
        "{{.State.Pid}}",
        &fixtures::container_with_role(&home, &proxied, "egress"),
    ]))
    .parse()
    .unwrap();
    // The proxy is the child of the sidecar's init.
    let proxy: u32 = std::fs::read_to_string(format!("/proc/{init}/task/{init}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .and_then(|pid| pid.parse().ok())
        .unwrap_or(init);
    let tunnels = std::fs::read_dir(format!("/proc/{proxy}/fd")).map_or(0, Iterator::count);
    let rss = rss_kib(proxy) / 1024.0;
    let mut holder = holder;
    let _ = holder.wait();
    rows.push(Row {
        name: "egress proxy resident memory, 50 open tunnels".into(),
        paddock: vec![rss],
        baseline: None,
        unit: "MB",
        target: "≤ 64 MB".into(),
        met: rss <= 64.0,
        note: format!("VmRSS of `paddock egress-proxy` in the sidecar while 50 CONNECT tunnels stay open ({tunnels} descriptors open)"),
    });
    run(&mut home.cmd(&["rm", &proxied, "--force"]));
    run(&mut home.cmd(&["rm", &direct, "--force"]));
}
