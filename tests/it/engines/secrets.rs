//! Secrets of an allowlist job on the remote engine (issue 30), with host binds forbidden:
//! the CA bundle the job trusts is a volume there, the values go to the proxy by an exec's
//! stdin into a tmpfs-held control socket. Every server is one this test starts in the
//! engine's own network namespace (a thread of this process moved there before it binds): an
//! HTTPS server with a CA of the test's own that the secret is for, and a plain TCP server
//! that is listed but must never see the value.

use std::os::fd::AsFd;
use std::time::Duration;

use serde_json::Value;

use super::{Engine, available, engine, ensure_image, home_with};
use crate::egress::{bash, decisions};
use crate::fixtures::tls::{Seen, https_server, test_tls};
use crate::fixtures::{FixtureRepo, TestHome, test_image, text};
use crate::secrets::{bearer_reaches, bearer_request, capture_server, https_in_job};

/// One test of this file at a time (a machine-wide lock: each may run in a process of its own) on the shared engine.
fn serial() -> crate::fixtures::serial::MachineLock {
    crate::fixtures::serial::machine_lock("engines-secrets")
}

/// Runs `start` (which binds a listener and serves it from threads of its own) on a thread
/// moved into the network namespace `netns` first: the listener is the engine host's.
fn in_netns<T: Send + 'static>(netns: &str, start: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{netns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("the engine's network namespace");
        rustix::thread::move_into_link_name_space(
            file.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .expect("setns into the engine's network namespace");
        start()
    })
    .join()
    .expect("the listener starts")
}

/// Builds this binary's proxy image on `engine` (a no-op when it is there).
fn build_proxy(home: &TestHome, engine: &Engine) {
    super::proxy_image(engine, "secrets", |args| drop(home.ok(args)));
}

/// Files under the engine's own state (volumes, containers' layers, settings and logs,
/// containerd's and the runtime's state) that hold `needle`: the values must be on no disk there.
fn engine_files_with(engine: &Engine, needle: &str) -> String {
    let out = std::process::Command::new("grep")
        .args(["-rlF", "-D", "skip", needle])
        .args(["data", "exec"].map(|d| engine.dir.join(d)))
        .output()
        .expect("grep runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_secret_of_a_remote_job_reaches_only_its_host_and_rests_nowhere() {
    if !available("a_secret_of_a_remote_job_reaches_only_its_host_and_rests_nowhere") {
        return;
    }
    let _serial = serial();
    let engine = engine();
    let netns = engine.netns();
    let address = engine.address();
    let (ca_pem, config) = test_tls(&address);
    let (secret_port, secret_seen): (u16, Seen) = {
        let address = address.clone();
        in_netns(&netns, move || https_server(&address, config))
    };
    let (other_port, other_seen) = {
        let address = address.clone();
        in_netns(&netns, move || capture_server(&address))
    };
    let token = format!("tok-{}", std::process::id()) + "-Rm42sEcRtVq";
    let secret_host = format!("{address}:{secret_port}");
    let other_host = format!("{address}:{other_port}");

    let repo = FixtureRepo::new();
    let home = home_with(engine).env("IT_SECRET_TOKEN", &token);
    let ca_file = home.dir.path().join("upstream-ca.pem");
    std::fs::write(&ca_file, &ca_pem).expect("write the upstream CA");
    let config_path = home.dir.path().join("config/paddock/config.yaml");
    let mut config = std::fs::read_to_string(&config_path).expect("the user config");
    config.push_str(&format!(
        "secrets:\n  api:\n    env: IT_SECRET_TOKEN\n    hosts: ['{secret_host}']\n    variable: API_TOKEN\n\
         egress:\n  upstream_ca: {}\n",
        ca_file.display()
    ));
    std::fs::write(&config_path, config).expect("write the user config");
    build_proxy(&home, engine);

    let image = test_image();
    let job = home.create(
        &repo,
        &[
            "--engine",
            engine.name,
            "--image",
            &image,
            "--secret",
            "api",
            "--allow",
            &other_host,
        ],
    );
    let id = text(&job, "id");
    assert_eq!(job["limits"]["network"], "allowlist", "{job}");
    assert_eq!(job["engine"], engine.name, "{job}");
    let container = text(&job, "container_name");
    let sidecar = format!("{container}-egress");

    // Inside: the placeholder, never the value, and the bundle where a local job has it; no
    // control socket, no tmpfs of the sidecar's.
    let env = bash(
        &home,
        &id,
        "echo \"$API_TOKEN\"; env | grep -c Rm42sEcRtVq; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c Rm42sEcRtVq; echo \"$SSL_CERT_FILE\"; grep -c 'BEGIN CERTIFICATE' \"$SSL_CERT_FILE\"; ls /paddock/ctl 2>&1 | head -1; echo > /paddock/ca/bundle.pem 2>/dev/null && echo wrote || echo read-only",
    );
    let lines: Vec<&str> = env.lines().collect();
    assert!(lines[0].starts_with("paddock-secret-"), "{env}");
    assert_eq!(lines[1..3], ["0", "0"], "{env}");
    assert_eq!(lines[3], "/paddock/ca/bundle.pem", "{env}");
    assert!(lines[4].parse::<u32>().unwrap_or(0) >= 1, "{env}");
    assert!(lines[5].contains("No such file"), "{env}");
    assert_eq!(lines[6], "read-only", "{env}");
    let placeholder = lines[0].to_string();

    // The secret's host gets the value; what it echoes comes back as the placeholder.
    bearer_reaches(&home, &id, &secret_host, &token, &placeholder, &secret_seen);
    let request = bearer_request(&secret_host);

    // The placeholder to the other listed host: refused, logged, never sent.
    let out = bash(
        &home,
        &id,
        &format!(
            "exec 3<>/dev/tcp/$proxy_host/$proxy_port; printf 'GET http://{other_host}/ HTTP/1.1\\r\\nHost: {other_host}\\r\\nAuthorization: Bearer %s\\r\\n\\r\\n' \"$API_TOKEN\" >&3; line"
        ),
    );
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        other_seen.lock().expect("seen").is_empty(),
        "nothing reached it"
    );
    assert!(
        decisions(&home, &id)
            .iter()
            .any(|d| d["reason"] == "secret_to_unlisted_host" && d["port"] == other_port),
        "{:?}",
        decisions(&home, &id)
    );

    // The sidecar: volumes and its control tmpfs, no host path; the job: its volumes and the
    // CA volume read-only, none of the sidecar's.
    let mounts = engine.docker_ok(&["inspect", "-f", "{{json .Mounts}}", &sidecar]);
    let mounts: Value = serde_json::from_str(&mounts).expect("mounts json");
    let mounts = mounts.as_array().expect("a list");
    assert!(mounts.iter().all(|m| m["Type"] == "volume"), "{mounts:?}");
    let ca_volume = format!("{container}-egress-ca");
    assert!(
        mounts
            .iter()
            .any(|m| m["Name"] == ca_volume.as_str() && m["Destination"] == "/paddock/ca"),
        "{mounts:?}"
    );
    let tmpfs = engine.docker_ok(&["inspect", "-f", "{{json .HostConfig.Tmpfs}}", &sidecar]);
    assert!(
        tmpfs.contains("/paddock/ctl") && tmpfs.contains("mode=0700"),
        "{tmpfs}"
    );
    let job_mounts = engine.docker_ok(&["inspect", "-f", "{{json .Mounts}}", &container]);
    let job_mounts: Value = serde_json::from_str(&job_mounts).expect("mounts json");
    let job_mounts = job_mounts.as_array().expect("a list");
    assert!(
        job_mounts.iter().any(|m| m["Name"] == ca_volume.as_str()
            && m["Destination"] == "/paddock/ca"
            && m["RW"] == false),
        "{job_mounts:?}"
    );
    assert!(
        job_mounts.iter().all(|m| m["Type"] == "volume"
            && !m["Name"].as_str().unwrap_or("").contains("egress-policy")
            && !m["Name"].as_str().unwrap_or("").contains("egress-log")),
        "{job_mounts:?}"
    );

    // A sidecar the engine restarts holds no values and refuses the secret's host; paddock
    // sends them again when it starts the job again.
    engine.docker_ok(&["restart", "-t", "1", &sidecar]);
    std::thread::sleep(Duration::from_millis(500));
    let out = https_in_job(&home, &id, &secret_host, &request);
    assert!(!out.contains("200 OK"), "{out}");
    assert_eq!(secret_seen.lock().expect("seen").len(), 1);
    engine.docker_ok(&["stop", "-t", "1", &sidecar]);
    home.ok(&["stop", &id]);
    let out = https_in_job(&home, &id, &secret_host, &request);
    assert!(
        out.contains(&format!("echo: Bearer {placeholder}")),
        "{out}"
    );
    assert_eq!(secret_seen.lock().expect("seen").len(), 2);

    // Nowhere at rest: the engine's volumes and state, the containers' settings there (over
    // the engine's TLS), this install's state root.
    let found = engine_files_with(engine, &token);
    assert!(found.is_empty(), "the value is on the engine in {found}");
    for name in [&container, &sidecar] {
        let inspect = engine.docker_ok(&["inspect", name]);
        assert!(!inspect.contains(&token), "{name}: {inspect}");
    }
    let grep = std::process::Command::new("grep")
        .args(["-rlF", &token])
        .arg(home.root())
        .output()
        .expect("grep runs");
    assert!(
        grep.stdout.is_empty(),
        "the value is in {}",
        String::from_utf8_lossy(&grep.stdout)
    );
    // These looks can fail: the placeholder is in the job's settings on the engine.
    let inspect = engine.docker_ok(&["inspect", &container]);
    assert!(inspect.contains(&placeholder), "{inspect}");
    // Docker rewrites a container's config.v2.json by rename on each state change (an exec
    // just ended): a look in that moment misses it, so it looks again for a few seconds.
    let mut found = engine_files_with(engine, &placeholder);
    for _ in 0..10 {
        if found.contains("config.v2.json") {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
        found = engine_files_with(engine, &placeholder);
    }
    assert!(found.contains("config.v2.json"), "{found}");

    home.ok(&["rm", &id, "--force"]);
    let left = engine.docker_ok(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("name={ca_volume}"),
    ]);
    assert!(left.trim().is_empty(), "{left}");
}

/// The way people run it: an unprivileged user (uid 4243) with no `PADDOCK_HOME`, the
/// engine's certificates and the secret in files only that user can read, host binds
/// forbidden. The listener in the engine's network namespace gets the value; the job, the
/// state root, the engine's state and `docker inspect` there hold only the placeholder.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn an_unprivileged_user_s_secret_reaches_its_host_on_a_remote_engine() {
    use crate::default_paths::{Machine, USER_UID, Who};
    use std::os::unix::fs::PermissionsExt as _;
    if !available("an_unprivileged_user_s_secret_reaches_its_host_on_a_remote_engine") {
        return;
    }
    let _serial = serial();
    let engine = engine();
    let netns = engine.netns();
    let address = engine.address();
    let (ca_pem, config) = test_tls(&address);
    let (port, seen) = {
        let address = address.clone();
        in_netns(&netns, move || https_server(&address, config))
    };
    let host = format!("{address}:{port}");
    let token = format!("tok-user-{}-Kp9Wd4Ns", std::process::id());
    ensure_image(engine, "paddock-base:bookworm");

    let machine = Machine::new(Who::User);
    let config_dir = machine.home.join(".config/paddock");
    let certs = config_dir.join("engine");
    std::fs::create_dir_all(&certs).expect("mkdir");
    for file in ["ca.pem", "cert.pem", "key.pem"] {
        std::fs::copy(engine.dir.join("certs").join(file), certs.join(file)).expect("copy");
    }
    let entry = engine.config_entry().replace(
        &engine.dir.join("certs").display().to_string(),
        &certs.display().to_string(),
    );
    let token_file = config_dir.join("api-token");
    std::fs::write(&token_file, format!("{token}\n")).expect("write the token");
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let ca_file = config_dir.join("upstream-ca.pem");
    std::fs::write(&ca_file, &ca_pem).expect("write the upstream CA");
    std::fs::write(
        config_dir.join("config.yaml"),
        format!(
            "admission:\n  memory: 1024g\n  cpus: 1000\nengines:\n{entry}\
             secrets:\n  api:\n    file: {}\n    hosts: ['{host}']\n    header: 'Authorization: Bearer {{}}'\n\
             egress:\n  upstream_ca: {}\n",
            token_file.display(),
            ca_file.display()
        ),
    )
    .expect("write the user config");
    crate::fixtures::chown_trees(&[&config_dir], USER_UID);
    let forbid = [("PADDOCK_TEST_FORBID_HOST_BINDS", "1")];
    machine.json_with(
        &[
            "image",
            "build",
            "--engine",
            engine.name,
            "--base-image",
            "paddock-base:bookworm",
            "--tag",
            "paddock-agent-engine-test:secrets",
            "--json",
        ],
        &forbid,
    );
    let job = machine.json_with(
        &[
            "create",
            "--engine",
            engine.name,
            "--image",
            &test_image(),
            "--secret",
            "api",
            "--json",
        ],
        &forbid,
    );
    let id = text(&job, "id");
    let out = machine.json_with(
        &[
            "exec",
            &id,
            "--json",
            "--",
            "bash",
            "-c",
            &format!(
                "h=${{HTTPS_PROXY#http://}}; echo \"$API\"; printf 'GET /u HTTP/1.1\\r\\nHost: {host}\\r\\nConnection: close\\r\\n\\r\\n' | timeout 20 openssl s_client -quiet -proxy $h -connect {host} -CAfile \"$SSL_CERT_FILE\" 2>&1"
            ),
        ],
        &forbid,
    );
    let stdout = out["stdout"].as_str().unwrap_or_default().to_string();
    assert!(stdout.starts_with("paddock-secret-"), "{out}");
    assert!(stdout.contains("200 OK"), "{out}");
    assert!(!stdout.contains(&token), "{out}");
    let heads = seen.lock().expect("seen").clone();
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
    let grep = std::process::Command::new("grep")
        .args(["-rlF", &token])
        .arg(&state)
        .output()
        .expect("grep runs");
    assert!(
        grep.stdout.is_empty(),
        "the value is in {}",
        String::from_utf8_lossy(&grep.stdout)
    );
    let found = engine_files_with(engine, &token);
    assert!(found.is_empty(), "the value is on the engine in {found}");
    let container = text(&job, "container_name");
    for name in [container.clone(), format!("{container}-egress")] {
        let inspect = engine.docker_ok(&["inspect", &name]);
        assert!(!inspect.contains(&token), "{name}: {inspect}");
    }
    let removed = machine.run_with(&["rm", &id, "--force"], &forbid);
    assert!(removed.status.success(), "{removed:?}");
}
