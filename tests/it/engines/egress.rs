//! An allowlist job on the remote engine (issue 30): its egress proxy runs there from the
//! proxy image `paddock image build --engine` builds (no host path is mounted: the test
//! switch is on), its policy and log are volumes of the engine, and the job reaches only its
//! listed listener. Every destination is a listener this test starts in the engine's own
//! network namespace (an echo server on all of that host's addresses), never an outside one.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use super::{available, engine, ensure_image, home_with};
use crate::default_paths::{Machine, USER_UID, Who};
use crate::egress::{PRELUDE, bash, decisions};
use crate::fixtures::{FixtureRepo, test_image, text};

/// The tests of this file, one at a time (a machine-wide lock: each may run in a process of its own): the first removes the engine's proxy images.
fn serial() -> crate::fixtures::serial::MachineLock {
    crate::fixtures::serial::machine_lock("engines-egress")
}

/// An echo server the test runs in a network namespace (python3, on all addresses there);
/// stopped on drop.
struct Listener {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

const ECHO: &str = r#"
import os, socket, sys, threading
s = socket.socket()
s.bind(("0.0.0.0", 0))
s.listen(16)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
def serve(c):
    while True:
        d = c.recv(4096)
        if not d:
            break
        c.sendall(d)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

impl Listener {
    fn start_in(netns: &str) -> Listener {
        let dir = tempfile::tempdir().expect("tempdir");
        let port_file: PathBuf = dir.path().join("port");
        let child = Command::new("nsenter")
            .arg(format!("--net=/var/run/netns/{netns}"))
            .args(["python3", "-c", ECHO])
            .arg(&port_file)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("nsenter python3 runs");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let port = loop {
            if let Ok(port) = std::fs::read_to_string(&port_file) {
                break port.trim().parse().expect("a port");
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the echo server did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        Listener {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn an_allowlist_job_on_a_remote_engine_reaches_only_its_listed_listener() {
    if !available("an_allowlist_job_on_a_remote_engine_reaches_only_its_listed_listener") {
        return;
    }
    let _serial = serial();
    let engine = super::image_engine();
    let netns = engine.netns();
    let address = engine.address();
    let (allowed, other) = (Listener::start_in(&netns), Listener::start_in(&netns));
    let repo = FixtureRepo::new();
    let home = home_with(engine);
    let image = test_image();
    let allow = format!("{address}:{}", allowed.port);
    let create = |task: &str| {
        let repo_path = repo.path().display().to_string();
        home.run(&[
            "create",
            "--repo",
            &repo_path,
            "--engine",
            engine.name,
            "--image",
            &image,
            "--allow",
            &allow,
            "--task",
            task,
            "--json",
        ])
    };

    // Without the proxy image of this binary on the engine: refused, naming the command.
    let old = engine.docker_ok(&["images", "-q", "paddock-proxy"]);
    for id in old.split_whitespace() {
        engine.docker_ok(&["rmi", "-f", id]);
    }
    let refused = create("no-proxy");
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("paddock-proxy:")
            && stderr.contains(&format!("paddock image build --engine {}", engine.name)),
        "{stderr}"
    );

    // `image build --engine` builds it there (from the base the agent image uses), and not here.
    let base = "paddock-base:bookworm";
    ensure_image(engine, base);
    let built = home.run(&[
        "image",
        "build",
        "--engine",
        engine.name,
        "--base-image",
        base,
        "--tag",
        "paddock-agent-engine-test:egress",
    ]);
    let said = String::from_utf8_lossy(&built.stderr).into_owned();
    assert!(built.status.success(), "{said}");
    let proxies = engine.docker_ok(&[
        "images",
        "--format",
        "{{.Repository}}:{{.Tag}}",
        "paddock-proxy",
    ]);
    let proxy = proxies.lines().next().expect("a proxy image").to_string();
    assert!(said.contains(&proxy), "{said}");
    let here = Command::new("docker")
        .args(["image", "inspect", &proxy])
        .output()
        .expect("docker");
    assert!(!here.status.success(), "built on the engine, not here");

    // Through a daemon, so the proxy's refusals reach its event stream (its relay reads
    // the log copied from the engine).
    let daemon = crate::api::Daemon::start_with_runtime(&home, &[], "docker");
    let denials = crate::egress::collect_denials(&daemon, 5);
    let doctor = home.run(&["doctor", "--json"]);
    let doctor = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.contains("allowlist proxy image present"), "{doctor}");

    let job = create("allowlist");
    assert!(
        job.status.success(),
        "{}",
        String::from_utf8_lossy(&job.stderr)
    );
    let job: Value = serde_json::from_slice(&job.stdout).expect("create json");
    let id = text(&job, "id");
    assert_eq!(job["limits"]["network"], "allowlist", "{job}");
    let container = text(&job, "container_name");
    let sidecar = format!("{container}-egress");

    // The sidecar runs from the proxy image, with volumes only; the guard put the job
    // range's unreachable route on the engine's host.
    let sidecar_image = engine.docker_ok(&["inspect", "-f", "{{.Config.Image}}", &sidecar]);
    assert_eq!(sidecar_image.trim(), proxy);
    let mounts = engine.docker_ok(&["inspect", "-f", "{{json .Mounts}}", &sidecar]);
    let mounts: Value = serde_json::from_str(&mounts).expect("mounts json");
    let mounts = mounts.as_array().expect("a list");
    assert_eq!(mounts.len(), 2, "{mounts:?}");
    assert!(mounts.iter().all(|m| m["Type"] == "volume"), "{mounts:?}");
    // The proxy's own uid cannot write its policy (the volume's root is root's).
    let planted = engine.docker(&[
        "exec",
        &sidecar,
        "sh",
        "-c",
        "echo '{\"allow\":[]}' > /paddock/egress/policy.json",
    ]);
    assert!(
        !planted.status.success(),
        "the sidecar's user rewrote its policy"
    );
    let routes = Command::new("ip")
        .args(["-n", &netns, "route", "show"])
        .output()
        .expect("ip runs");
    let routes = String::from_utf8_lossy(&routes.stdout);
    assert!(routes.contains("unreachable 198.18.0.0/15"), "{routes}");

    // The policy's host addresses are the engine host's (its guard reported them), which
    // are not this machine's.
    let policy = home
        .root()
        .join("work")
        .join(&id)
        .join("egress/policy.json");
    let policy: Value =
        serde_json::from_slice(&std::fs::read(&policy).expect("the policy's host copy"))
            .expect("policy json");
    let refused: Vec<&str> = policy["host_addresses"]
        .as_array()
        .expect("host addresses")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(refused.contains(&address.as_str()), "{policy}");
    assert!(
        !refused
            .iter()
            .any(|a| a.starts_with("10.231.") && a.ends_with(".1")),
        "{policy}"
    );

    // Listed: 200, and bytes both ways.
    let out = bash(
        &home,
        &id,
        &format!("connect {allow}; printf ping >&3; take 4; echo"),
    );
    assert_eq!(out, "HTTP/1.1 200 Connection established\nping", "{out}");
    // Another port of the same host, the engine host's other addresses (its bridge, this
    // machine's end of the link, loopback by name) and a name: 403.
    let index = address.split('.').nth(2).expect("a third octet");
    let (bridge, host_end) = (format!("10.232.{index}.1"), format!("10.231.{index}.1"));
    for target in [
        format!("{address}:{}", other.port),
        format!("{bridge}:{}", allowed.port),
        format!("{host_end}:{}", allowed.port),
        format!("localhost:{}", allowed.port),
        "unlisted.example:443".to_string(),
    ] {
        let out = bash(&home, &id, &format!("connect {target}"));
        assert!(out.starts_with("HTTP/1.1 403"), "{target}: {out}");
    }
    // Past the proxy: a raw connect to the listed address itself fails (no route out).
    let out = bash(
        &home,
        &id,
        &format!(
            "timeout 5 bash -c 'exec 3<>/dev/tcp/{address}/{}' 2>/dev/null && echo open || echo blocked",
            allowed.port
        ),
    );
    assert_eq!(out, "blocked", "{out}");
    // Names: none resolves but the proxy's alias; the job reaches the proxy by address.
    let out = bash(
        &home,
        &id,
        "getent hosts unlisted.example || echo unresolved; getent hosts example.org || echo unresolved",
    );
    assert_eq!(out, "unresolved\nunresolved", "{out}");

    // The proxy's decisions reach the host's egress.jsonl (copied after each exec).
    let log = decisions(&home, &id);
    assert!(
        log.iter()
            .any(|d| d["allowed"] == true && d["port"] == allowed.port),
        "{log:?}"
    );
    assert!(
        log.iter()
            .any(|d| d["allowed"] == false && d["port"] == other.port),
        "{log:?}"
    );

    let events = denials.join().expect("the event reader");
    assert_eq!(events.len(), 5, "{events:?}");
    assert!(events.iter().all(|e| e["job"] == id.as_str()), "{events:?}");

    // Stopped and started again (the sidecar too): the policy is put back before it starts.
    engine.docker_ok(&["stop", &sidecar]);
    home.ok(&["stop", &id]);
    let out = bash(
        &home,
        &id,
        &format!("connect {allow}; printf ping >&3; take 4; echo"),
    );
    assert_eq!(out, "HTTP/1.1 200 Connection established\nping", "{out}");

    // A live change goes through the engine's policy volume: the other port opens.
    let extra = format!("{address}:{}", other.port);
    home.ok(&["net", &id, "--allow", &extra]);
    let out = bash(
        &home,
        &id,
        &format!("connect {extra}; printf pong >&3; take 4; echo"),
    );
    assert_eq!(out, "HTTP/1.1 200 Connection established\npong", "{out}");

    // A sidecar made anew on an engine without this paddock's proxy image (as after an
    // upgrade) fails naming the command that builds it.
    engine.docker_ok(&["rm", "-f", &sidecar]);
    engine.docker_ok(&["rmi", &proxy]);
    home.ok(&["stop", &id]);
    let failed = home.run(&["exec", &id, "--", "true"]);
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success());
    assert!(
        stderr.contains(&format!("paddock image build --engine {}", engine.name)),
        "{stderr}"
    );

    // rm takes the sidecar, the network and the egress volumes; the log stays on the host.
    home.ok(&["rm", &id, "--force"]);
    assert!(!engine.docker(&["inspect", &sidecar]).status.success());
    let networks = engine.docker_ok(&["network", "ls", "--format", "{{.Name}}"]);
    assert!(!networks.contains(&container), "{networks}");
    let volumes = engine.docker_ok(&["volume", "ls", "-q"]);
    assert!(
        !volumes.lines().any(|v| v.starts_with(&container)),
        "{volumes}"
    );
    assert!(!decisions(&home, &id).is_empty());
}

/// The way people run it: no `PADDOCK_HOME` (the default state root), as root and as an
/// unprivileged user (uid 4243, its certificates in its 0700 home), the repository under a
/// closed directory: the allowlist job on the engine reaches its listener and no other port,
/// and its decisions reach that user's `logs/<job>/egress.jsonl`.
#[test]
fn an_allowlist_job_on_a_remote_engine_holds_on_the_default_state_root_as_root_and_a_user() {
    if !available("an_allowlist_job_on_a_remote_engine_holds_on_the_default_state_root") {
        return;
    }
    let _serial = serial();
    let engine = engine();
    let netns = engine.netns();
    let address = engine.address();
    let (allowed, other) = (Listener::start_in(&netns), Listener::start_in(&netns));
    ensure_image(engine, "paddock-base:bookworm");
    for who in [Who::Root, Who::User] {
        let machine = Machine::new(who);
        // Every command with the no-host-bind switch; its JSON on success.
        let json = |args: &[&str]| -> Value {
            let output = machine.run_with(args, &[("PADDOCK_TEST_FORBID_HOST_BINDS", "1")]);
            assert!(
                output.status.success(),
                "paddock {args:?} as {who:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            serde_json::from_slice(&output.stdout).expect("JSON")
        };
        let config = machine.home.join(".config/paddock");
        let certs = config.join("engine");
        std::fs::create_dir_all(&certs).expect("mkdir");
        for file in ["ca.pem", "cert.pem", "key.pem"] {
            std::fs::copy(engine.dir.join("certs").join(file), certs.join(file)).expect("copy");
        }
        let entry = engine.config_entry().replace(
            &engine.dir.join("certs").display().to_string(),
            &certs.display().to_string(),
        );
        std::fs::write(
            config.join("config.yaml"),
            format!("admission:\n  memory: 1024g\n  cpus: 1000\nengines:\n{entry}"),
        )
        .expect("write the user config");
        if who == Who::User {
            crate::fixtures::chown_trees(&[&machine.home], USER_UID);
        }
        json(&[
            "image",
            "build",
            "--engine",
            engine.name,
            "--base-image",
            "paddock-base:bookworm",
            "--tag",
            "paddock-agent-engine-test:egress",
            "--json",
        ]);
        let allow = format!("{address}:{}", allowed.port);
        let job = json(&[
            "create",
            "--engine",
            engine.name,
            "--image",
            &test_image(),
            "--allow",
            &allow,
            "--json",
        ]);
        let id = text(&job, "id");
        let script = format!(
            "connect {allow}; printf ping >&3; take 4; echo; connect {address}:{}",
            other.port
        );
        let out = json(&[
            "exec",
            &id,
            "--json",
            "--",
            "bash",
            "-c",
            &format!("{PRELUDE}{script}"),
        ]);
        let stdout = out["stdout"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_string();
        assert!(
            stdout.starts_with("HTTP/1.1 200 Connection established\nping\nHTTP/1.1 403"),
            "{who:?}: {out}"
        );
        let log = machine
            .state_root()
            .join("logs")
            .join(&id)
            .join("egress.jsonl");
        let log = std::fs::read_to_string(&log).expect("the egress log on the host");
        assert!(
            log.contains(&format!("\"port\":{}", allowed.port)),
            "{who:?}: {log}"
        );
        let removed = machine.run_with(
            &["rm", &id, "--force"],
            &[("PADDOCK_TEST_FORBID_HOST_BINDS", "1")],
        );
        assert!(removed.status.success(), "{who:?}: {removed:?}");
    }
}
