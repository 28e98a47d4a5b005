//! Jobs on a remote Docker engine with no shared filesystem (issue 30): a second `dockerd`
//! these tests start on this machine in its own network namespace, data root and exec root,
//! reachable only by TCP with TLS (certificates `dockerd.sh` makes with openssl), and the
//! test switch `PADDOCK_TEST_FORBID_HOST_BINDS=1`, which fails any container of a remote
//! engine that would bind-mount a host path.
//!
//! The engine is started once per test process, under a machine-wide lock (starting it and loading the agent image
//! takes seconds) and left running for the next run; `dockerd.sh stop` ends it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::fixtures::{FixtureRepo, TestHome, docker_available, test_image, text};

mod auto;
mod context;
mod copy_caches;
mod egress;
mod files;
mod hostile;
mod images;
mod pool;
mod ports;
mod remote;
mod secrets;
mod ssh;
mod unprivileged;
mod unreachable;

/// A remote engine the tests started: its address and certificates.
pub struct Engine {
    pub name: &'static str,
    pub host: String,
    pub dir: PathBuf,
}

impl Engine {
    /// The engine's address on the link to this machine (`tcp://ADDR:2376`).
    pub fn address(&self) -> String {
        let rest = self.host.trim_start_matches("tcp://");
        rest.split(':').next().expect("an address").to_string()
    }

    /// The network namespace the engine runs in (`pdk-<name>`, made by `dockerd.sh`).
    pub fn netns(&self) -> String {
        format!("pdk-{}", self.name)
    }

    /// `docker` against this engine.
    pub fn docker(&self, args: &[&str]) -> std::process::Output {
        Command::new("docker")
            .args(args)
            .env("DOCKER_HOST", &self.host)
            .env("DOCKER_TLS_VERIFY", "1")
            .env("DOCKER_CERT_PATH", self.dir.join("certs"))
            .output()
            .expect("docker runs")
    }

    /// `docker` against this engine, asserting success; stdout.
    pub fn docker_ok(&self, args: &[&str]) -> String {
        let output = self.docker(args);
        assert!(
            output.status.success(),
            "docker {args:?} on {}: {}",
            self.host,
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The `engines:` entry of a user config for this engine.
    pub fn config_entry(&self) -> String {
        let certs = self.dir.join("certs");
        format!(
            "  {}:\n    host: \"{}\"\n    tls:\n      ca: {}\n      cert: {}\n      key: {}\n",
            self.name,
            self.host,
            certs.join("ca.pem").display(),
            certs.join("cert.pem").display(),
            certs.join("key.pem").display()
        )
    }

    /// Runs `dockerd.sh ACTION` for this engine; its stdout.
    pub fn script(name: &str, index: u8, dir: &Path, action: &str) -> String {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/engines/dockerd.sh");
        let output = Command::new("sh")
            .arg(script)
            .args([action, name, &index.to_string()])
            .arg(dir)
            .output()
            .expect("dockerd.sh runs");
        assert!(
            output.status.success(),
            "dockerd.sh {action} {name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }
}

/// The shared remote engine `eng1`, started (and given the agent image) when first asked for.
pub fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| Engine::start("eng1", 71))
}

/// The engine `eng4`, for the one test that removes the proxy images of an engine: on the
/// shared `eng1` that would pull them from under the other tests' sidecars and relays.
pub fn image_engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| Engine::start("eng4", 74))
}

impl Engine {
    /// Starts engine `name` (network `10.231.INDEX.0/30`; a no-op when it runs) and gives it
    /// the agent image.
    pub fn start(name: &'static str, index: u8) -> Engine {
        // Tests in processes of their own start the same engine at once: one makes its
        // certificates, network and daemon and loads the image, the others then find it.
        let _one = crate::fixtures::serial::machine_lock(&format!("engine-{name}"));
        let dir = PathBuf::from(format!("/tmp/paddock-test-engine-{name}"));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let host = Engine::script(name, index, &dir, "start");
        let engine = Engine { name, host, dir };
        ensure_image(&engine, &test_image());
        engine
    }
}

/// Loads the local image `image` into `engine` unless it has it.
pub fn ensure_image(engine: &Engine, image: &str) {
    if engine.docker(&["image", "inspect", image]).status.success() {
        return;
    }
    let status = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "docker save {image} | DOCKER_HOST={} DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH={} docker load -q",
            engine.host,
            engine.dir.join("certs").display()
        ))
        .status()
        .expect("docker save | load runs");
    assert!(status.success(), "loading {image} into the remote engine");
}

/// Puts this binary's proxy image on `engine` (it holds the egress proxy, the port bridge
/// and the secrets loader), with an agent image tagged `paddock-agent-engine-test:<tag>`
/// beside it; built by `paddock image build --engine` as `run` runs paddock.
pub fn proxy_image(engine: &Engine, tag: &str, run: impl Fn(&[&str])) {
    let base = "paddock-base:bookworm";
    ensure_image(engine, base);
    let tag = format!("paddock-agent-engine-test:{tag}");
    run(&[
        "image",
        "build",
        "--engine",
        engine.name,
        "--base-image",
        base,
        "--tag",
        &tag,
    ]);
}

/// A test home whose user config names `engine`, with the no-host-bind switch on.
pub fn home_with(engine: &Engine) -> TestHome {
    let home = TestHome::new().env("PADDOCK_TEST_FORBID_HOST_BINDS", "1");
    std::fs::write(
        home.dir.path().join("config/paddock/config.yaml"),
        format!(
            "admission:\n  memory: 1024g\n  cpus: 1000\n  max_running_execs: 1000\nengines:\n{}",
            engine.config_entry()
        ),
    )
    .expect("write the test's user config");
    home
}

/// Creates a job on `engine` with the test image.
pub fn create_on(home: &TestHome, engine: &Engine, repo: &FixtureRepo, extra: &[&str]) -> String {
    let image = test_image();
    let mut args = vec!["--engine", engine.name, "--image", image.as_str()];
    args.extend_from_slice(extra);
    let job = home.create(repo, &args);
    assert_eq!(job["runtime"], "docker", "{job}");
    text(&job, "id")
}

/// Gate: the remote engine needs Docker and root (a network namespace, a second daemon).
pub fn available(test: &str) -> bool {
    if !docker_available(test) {
        return false;
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    assert!(root, "{test}: starting a second Docker daemon needs root");
    true
}
