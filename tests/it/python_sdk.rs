//! Issue 45: the Python SDK (clients/python) against a real `paddock serve` on its socket
//! and its TCP listener: its own pytest suite (sync and async clients, the README's
//! example, the walk of the OpenAPI document, the models against the generator), Inspect
//! AI's sandbox conformance checks against the provider on runc and runsc, the example
//! eval, and MCP over HTTP driven by the official MCP Python SDK. The daemon runs runc jobs
//! of the test image unless a test names another runtime; pytest finds the socket through
//! PADDOCK_HOME as the CLI does.

use std::process::Command;

use crate::api::Daemon;
use crate::fixtures::{FixtureRepo, TestHome, docker_available, test_image};

const TOKEN: &str = "sdk-test-token-0123456789abcdef";

#[test]
fn the_python_sdk_passes_its_suite_against_a_real_daemon() {
    let test = "the_python_sdk_passes_its_suite_against_a_real_daemon";
    if !docker_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    // A profile with a root layer of the job's own, for the conformance checks that install
    // as root where root is contained (runsc).
    let home = TestHome::new().with_config("profiles:\n  writable:\n    rootfs: writable\n");
    let (daemon, addr, token_file) = Daemon::start_on_tcp(
        &home,
        TOKEN,
        &["--mcp-repo", repo.path().to_str().unwrap()],
        "docker",
    );
    let sdk = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/python");
    let ran = Command::new("python3")
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"])
        .arg(format!("{sdk}/tests"))
        .current_dir(sdk)
        // The checkout's SDK, whatever version pip installed.
        .env("PYTHONPATH", format!("{sdk}/src"))
        .env("PADDOCK_HOME", home.root())
        .env("SDK_TEST_URL", format!("http://{addr}"))
        .env("SDK_TEST_TOKEN_FILE", &token_file)
        .env("SDK_TEST_REPO", repo.path())
        .env("SDK_TEST_RUNTIME", "docker")
        .env("SDK_TEST_IMAGE", test_image())
        .env("SDK_TEST_INSPECT_RUNTIMES", "docker,runsc")
        .env("SDK_TEST_WRITABLE_PROFILE", "writable")
        .output()
        .expect("python3 runs");
    let said = format!(
        "{}\n{}\nserve's log:\n{}",
        String::from_utf8_lossy(&ran.stdout),
        String::from_utf8_lossy(&ran.stderr),
        std::fs::read_to_string(&daemon.log).unwrap_or_default()
    );
    assert!(ran.status.success(), "the SDK's tests failed:\n{said}");
    assert!(
        String::from_utf8_lossy(&ran.stdout).contains(" passed"),
        "{said}"
    );
    assert!(!said.contains(" skipped"), "nothing skipped: {said}");
    daemon.stop();
    assert_eq!(home.job_records(), 0, "the SDK's tests removed their jobs");
}
