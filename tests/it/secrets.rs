//! Secrets injected at the egress proxy, against the real daemon. Every server is one this
//! test starts on this machine's address on Docker's default bridge: an HTTPS server with a
//! CA of the test's own (given to the proxy as `egress.upstream_ca`) that the secret is for,
//! a plain HTTP server that must never see a placeholder, and a second HTTPS server without a
//! secret (still a tunnel). Fails when Docker is absent unless PADDOCK_SKIP_DOCKER_TESTS=1.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use crate::api::Daemon;
use crate::egress::{bash, collect_denials, decisions};
use crate::fixtures::tls::{Seen, https_server, test_tls};
use crate::fixtures::{FixtureRepo, TestHome, bridge_gateway, docker_available, text};

/// A request to `host` with `Authorization: Bearer $API_TOKEN` (the job's shell expands it).
pub(crate) fn bearer_request(host: &str) -> String {
    format!(
        "GET /api HTTP/1.1\\r\\nHost: {host}\\r\\nAuthorization: Bearer $API_TOKEN\\r\\nConnection: close\\r\\n\\r\\n"
    )
}

/// The job sends `Authorization: Bearer $API_TOKEN` to `host`: it gets 200 and the echo back
/// with the placeholder, never the value; the listener (`seen`) got the value, once. Returns
/// the head it got, lower-cased.
pub(crate) fn bearer_reaches(
    home: &TestHome,
    id: &str,
    host: &str,
    token: &str,
    placeholder: &str,
    seen: &Seen,
) -> String {
    let out = https_in_job(home, id, host, &bearer_request(host));
    assert!(out.contains("200 OK"), "{out}");
    assert!(
        out.contains(&format!("echo: Bearer {placeholder}")),
        "{out}"
    );
    assert!(!out.contains(token), "{out}");
    let heads = seen.lock().expect("seen").clone();
    assert_eq!(heads.len(), 1, "{heads:?}");
    let head = heads[0].to_ascii_lowercase();
    assert!(
        head.contains(&format!(
            "authorization: bearer {}",
            token.to_ascii_lowercase()
        )),
        "{head}"
    );
    head
}

/// A plain TCP server on `address` that records every byte it receives.
pub(crate) fn capture_server(address: &str) -> (u16, Seen) {
    let listener = TcpListener::bind((address, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Seen = Arc::default();
    let record = seen.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let record = record.clone();
            std::thread::spawn(move || {
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                let mut buffer = vec![0u8; 4096];
                let n = stream.read(&mut buffer).unwrap_or(0);
                record
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&buffer[..n]).into_owned());
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
            });
        }
    });
    (port, seen)
}

/// Runs `openssl s_client` through the job's proxy to `target` (IP:PORT), sending `request`;
/// prints what came back.
pub(crate) fn https_in_job(home: &TestHome, id: &str, target: &str, request: &str) -> String {
    let ip = target.rsplit_once(':').unwrap().0;
    bash(
        home,
        id,
        &format!(
            "printf \"{request}\" | timeout 20 openssl s_client -quiet -proxy $proxy_host:$proxy_port -connect {target} -CAfile \"$SSL_CERT_FILE\" -verify_return_error -verify_ip {ip} 2>&1"
        ),
    )
}

#[test]
fn secrets_reach_only_their_hosts_under_runc() {
    if docker_available("secrets_reach_only_their_hosts_under_runc") {
        secrets_hold("docker");
    }
}

#[test]
fn secrets_reach_only_their_hosts_under_gvisor() {
    if docker_available("secrets_reach_only_their_hosts_under_gvisor") {
        secrets_hold("runsc");
    }
}

fn secrets_hold(runtime: &str) {
    let gateway = bridge_gateway();
    let (ca_pem, config) = test_tls(&gateway);
    let (secret_port, secret_seen) = https_server(&gateway, config.clone());
    let (tunnel_port, tunnel_seen) = https_server(&gateway, config);
    let (other_port, other_seen) = capture_server(&gateway);
    let token = format!("tok-{}", std::process::id()) + "-Zq81xVbT2mWk";
    let key = format!("key-{}", std::process::id()) + "-Hh3Yp0Lr";
    let secret_host = format!("{gateway}:{secret_port}");
    let other_host = format!("{gateway}:{other_port}");
    let tunnel_host = format!("{gateway}:{tunnel_port}");

    let repo = FixtureRepo::new();
    let home = TestHome::new()
        .env("IT_SECRET_TOKEN", &token)
        .env("IT_SECRET_KEY", &key);
    let ca_file = home.dir.path().join("upstream-ca.pem");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    std::fs::write(
        home.dir.path().join("config/paddock/config.yaml"),
        format!(
            "admission:\n  memory: 1024g\n  cpus: 1000\n  max_running_execs: 1000\n\
             secrets:\n  api:\n    env: IT_SECRET_TOKEN\n    hosts: ['{secret_host}']\n    variable: API_TOKEN\n\
             \x20 registry:\n    env: IT_SECRET_KEY\n    hosts: ['{secret_host}']\n    header: 'X-Api-Key: {{}}'\n\
             egress:\n  upstream_ca: {}\n",
            ca_file.display()
        ),
    )
    .unwrap();
    // Through a daemon (with the same environment), so refusals reach its event stream.
    let daemon = Daemon::start(&home, &[]);
    let denials = collect_denials(&daemon, 2);
    let image = crate::fixtures::test_image();
    let job = home.create(
        &repo,
        &[
            "--runtime",
            runtime,
            "--image",
            &image,
            "--secret",
            "api",
            "--secret",
            "registry",
            "--allow",
            &other_host,
            "--allow",
            &tunnel_host,
        ],
    );
    let id = text(&job, "id");
    assert_eq!(job["limits"]["network"], "allowlist", "{job}");

    // Inside: the placeholder, never the value.
    let env = bash(
        &home,
        &id,
        // (Parts of the values only: an exec's command is kept in its log.)
        "echo \"$API_TOKEN\"; env | grep -c -e Zq81xVbT2mWk -e Hh3Yp0Lr; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c -e Zq81xVbT2mWk -e Hh3Yp0Lr; echo \"$SSL_CERT_FILE\"",
    );
    let lines: Vec<&str> = env.lines().collect();
    assert!(lines[0].starts_with("paddock-secret-"), "{env}");
    assert_eq!(lines[1..3], ["0", "0"], "{env}");
    assert_eq!(lines[3], "/paddock/ca/bundle.pem", "{env}");
    let placeholder = lines[0].to_string();

    // The secret's host gets the value (placeholder swapped, template header added); what
    // it echoes comes back as the placeholder.
    let head = bearer_reaches(&home, &id, &secret_host, &token, &placeholder, &secret_seen);
    let request = bearer_request(&secret_host);
    assert!(
        head.contains(&format!("x-api-key: {}", key.to_ascii_lowercase())),
        "{head}"
    );
    assert!(!head.contains("paddock-secret-"), "{head}");

    // A restarted sidecar has no values (they were in its memory only) and refuses the
    // secret's host; paddock sends them again when it starts the job again.
    let sidecar = crate::fixtures::container_with_role(&home, &id, "egress");
    let restarted = Command::new("docker")
        .args(["restart", "-t", "1", &sidecar])
        .output()
        .unwrap();
    assert!(restarted.status.success(), "{restarted:?}");
    std::thread::sleep(Duration::from_millis(500));
    let out = https_in_job(&home, &id, &secret_host, &request);
    assert!(!out.contains("200 OK"), "{out}");
    assert_eq!(
        secret_seen.lock().unwrap().len(),
        1,
        "nothing went without the value"
    );
    for name in [crate::fixtures::container_of(&job), sidecar] {
        let stopped = Command::new("docker")
            .args(["stop", "-t", "1", &name])
            .output()
            .unwrap();
        assert!(stopped.status.success(), "{stopped:?}");
    }
    let out = https_in_job(&home, &id, &secret_host, &request);
    assert!(
        out.contains(&format!("echo: Bearer {placeholder}")),
        "{out}"
    );
    assert_eq!(secret_seen.lock().unwrap().len(), 2);

    // The placeholder to another allowed host: refused, logged, never sent.
    let out = bash(
        &home,
        &id,
        &format!(
            "exec 3<>/dev/tcp/$proxy_host/$proxy_port; printf 'GET http://{other_host}/ HTTP/1.1\\r\\nHost: {other_host}\\r\\nAuthorization: Bearer %s\\r\\n\\r\\n' \"$API_TOKEN\" >&3; line"
        ),
    );
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(other_seen.lock().unwrap().is_empty(), "nothing reached it");
    let logged = decisions(&home, &id);
    assert!(
        logged
            .iter()
            .any(|d| d["reason"] == "secret_to_unlisted_host" && d["port"] == other_port),
        "{logged:?}"
    );
    let denied = denials.join().unwrap();
    assert!(
        denied
            .iter()
            .any(|d| d["detail"]["reason"] == "secret_to_unlisted_host"),
        "{denied:?}"
    );

    // A host without a secret is still a tunnel: the job sees the server's own certificate.
    let out = bash(
        &home,
        &id,
        &format!(
            "timeout 20 openssl s_client -proxy $proxy_host:$proxy_port -connect {tunnel_host} </dev/null 2>/dev/null | openssl x509 -noout -issuer"
        ),
    );
    assert!(out.contains("paddock test upstream CA"), "{out}");
    let _ = tunnel_seen;

    // Nowhere: files of the install, containers' settings, logs, events, show.
    let grep = Command::new("grep")
        .args(["-rlF", &token])
        .arg(home.root())
        .output()
        .unwrap();
    assert!(
        grep.stdout.is_empty(),
        "the value is in {}",
        String::from_utf8_lossy(&grep.stdout)
    );
    for object in home.docker_objects() {
        let inspect = Command::new("docker")
            .args(["inspect", &object])
            .output()
            .unwrap();
        let inspect = String::from_utf8_lossy(&inspect.stdout);
        assert!(
            !inspect.contains(&token) && !inspect.contains(&key),
            "{object}"
        );
    }
    let job_inspect = Command::new("docker")
        .args(["inspect", &crate::fixtures::container_of(&job)])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&job_inspect.stdout).contains(&placeholder));
    for args in [
        vec!["logs", id.as_str()],
        vec!["events", "--json"],
        vec!["show", id.as_str(), "--json"],
    ] {
        let out = home.run(&args);
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !all.contains(&token) && !all.contains(&key),
            "{args:?}: {all}"
        );
    }
    let page = dashboard_page(&home, &format!("/jobs/{id}"));
    assert!(page.contains(&id), "{page}");
    assert!(!page.contains(&token) && !page.contains(&key), "{page}");
    home.ok(&["rm", &id, "--force"]);
    daemon.stop();
}

/// A page of the dashboard (`paddock dashboard`), signed in with its link.
fn dashboard_page(home: &TestHome, path: &str) -> String {
    use std::io::BufRead;
    let mut child = home
        .cmd(&["dashboard", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut text = String::new();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap());
    while !text.trim_end().ends_with('}') {
        let mut line = String::new();
        assert!(lines.read_line(&mut line).unwrap() > 0, "dashboard: {text}");
        text.push_str(&line);
    }
    let lease: serde_json::Value = serde_json::from_str(&text).unwrap();
    let address = lease["address"].as_str().unwrap().to_string();
    let url = lease["url"].as_str().unwrap();
    let login = &url[url.find("/login").unwrap()..];
    let get = |path: &str, cookie: &str| {
        let mut stream = std::net::TcpStream::connect(&address).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {address}\r\nCookie: {cookie}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    };
    let signed_in = get(login, "");
    let cookie = signed_in
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .starts_with("set-cookie:")
                .then(|| l[11..].trim())
        })
        .and_then(|c| c.split(';').next())
        .unwrap_or_default()
        .to_string();
    let page = get(path, &cookie);
    let _ = child.kill();
    let _ = child.wait();
    page
}

#[test]
fn secrets_are_refused_in_a_repository_s_file() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    repo.write(
        ".paddock.yaml",
        "secrets:\n  gh:\n    env: HOME\n    hosts: [evil.example]\n",
    );
    let out = home.run(&[
        "config",
        "show",
        "--repo",
        &repo.path().display().to_string(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("user config file"), "{stderr}");
    repo.write(
        ".paddock.yaml",
        "profiles:\n  default:\n    secrets: [gh]\n",
    );
    let out = home.run(&[
        "config",
        "show",
        "--repo",
        &repo.path().display().to_string(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("profiles.default.secrets"), "{stderr}");
}

#[test]
fn a_secret_that_cannot_be_read_fails_the_create_and_leaves_nothing() {
    if !docker_available("a_secret_that_cannot_be_read_fails_the_create_and_leaves_nothing") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    std::fs::write(
        home.dir.path().join("config/paddock/config.yaml"),
        "secrets:\n  api:\n    env: IT_SECRET_UNSET\n    hosts: [api.example.org]\n",
    )
    .unwrap();
    let image = crate::fixtures::test_image();
    let repo_path = repo.path().display().to_string();
    let output = home.run(&[
        "create",
        "--repo",
        &repo_path,
        "--runtime",
        "docker",
        "--image",
        &image,
        "--secret",
        "api",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("secret `api`") && stderr.contains("IT_SECRET_UNSET"),
        "{stderr}"
    );
    assert!(
        home.docker_objects().is_empty(),
        "{:?}",
        home.docker_objects()
    );
    assert_eq!(home.job_records(), 0);
    let output = home.run(&[
        "create", "--repo", &repo_path, "--image", &image, "--secret", "nope",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no secret `nope`"), "{stderr}");
}

/// The way people run it: an unprivileged user (uid 4243, in the docker group) with no
/// `PADDOCK_HOME` (so `~/.local/share/paddock` in a 0700 home), the secret in a file only
/// that user can read. The test's HTTPS server gets the value; the job, the state root and
/// `docker inspect` hold only the placeholder.
#[test]
fn an_unprivileged_user_s_secret_file_reaches_its_host_and_nothing_else() {
    use crate::default_paths::{Machine, USER_UID, Who};
    use std::os::unix::fs::PermissionsExt as _;
    if !docker_available("an_unprivileged_user_s_secret_file_reaches_its_host_and_nothing_else") {
        return;
    }
    let gateway = bridge_gateway();
    let (ca_pem, config) = test_tls(&gateway);
    let (port, seen) = https_server(&gateway, config);
    let host = format!("{gateway}:{port}");
    let token = format!("tok-user-{}-Rr7Qm2Kx", std::process::id());
    let machine = Machine::new(Who::User);
    let config_dir = machine.home.join(".config/paddock");
    let token_file = config_dir.join("api-token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let ca_file = config_dir.join("upstream-ca.pem");
    std::fs::write(&ca_file, &ca_pem).unwrap();
    std::fs::write(
        config_dir.join("config.yaml"),
        format!(
            "admission:\n  memory: 1024g\n  cpus: 1000\n\
             secrets:\n  api:\n    file: {}\n    hosts: ['{host}']\n    header: 'Authorization: Bearer {{}}'\n\
             egress:\n  upstream_ca: {}\n",
            token_file.display(),
            ca_file.display()
        ),
    )
    .unwrap();
    crate::fixtures::chown_trees(&[&config_dir], USER_UID);
    let image = crate::fixtures::test_image();
    let job = machine.json(&[
        "create",
        "--runtime",
        "docker",
        "--image",
        &image,
        "--secret",
        "api",
        "--json",
    ]);
    let id = text(&job, "id");
    let out = machine.json(&[
        "exec",
        &id,
        "--json",
        "--",
        "bash",
        "-c",
        &format!(
            "h=${{HTTPS_PROXY#http://}}; echo \"$API\"; printf 'GET /u HTTP/1.1\\r\\nHost: {host}\\r\\nConnection: close\\r\\n\\r\\n' | timeout 20 openssl s_client -quiet -proxy $h -connect {host} -CAfile \"$SSL_CERT_FILE\" 2>&1"
        ),
    ]);
    let stdout = out["stdout"].as_str().unwrap_or_default().to_string();
    assert!(stdout.starts_with("paddock-secret-"), "{out}");
    assert!(stdout.contains("200 OK"), "{out}");
    assert!(!stdout.contains(&token), "{out}");
    let heads = seen.lock().unwrap().clone();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(
        heads[0].to_ascii_lowercase().contains(&format!(
            "authorization: bearer {}",
            token.to_ascii_lowercase()
        )),
        "{heads:?}"
    );
    let state = machine.state_root();
    assert!(state.starts_with(&machine.home), "{}", state.display());
    let grep = Command::new("grep")
        .args(["-rlF", &token])
        .arg(&state)
        .output()
        .unwrap();
    assert!(
        grep.stdout.is_empty(),
        "the value is in {}",
        String::from_utf8_lossy(&grep.stdout)
    );
    let inspect = Command::new("docker")
        .args(["inspect", &crate::fixtures::container_of(&job)])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&inspect.stdout).contains(&token));
    let removed = machine.run(&["rm", &id, "--force"]);
    assert!(removed.status.success(), "{removed:?}");
}
