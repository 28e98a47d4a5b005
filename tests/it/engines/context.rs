//! An engine named by a Docker CLI context (`engines: {eng1: {context: NAME}}`): paddock
//! reads the context's endpoint and TLS files from the Docker CLI's store (`DOCKER_CONFIG`),
//! so a machine set up for `docker --context NAME` needs nothing else; a job runs there.

use std::process::Command;

use super::{available, engine};
use crate::fixtures::{FixtureRepo, TestHome, test_image, text};

#[test]
fn an_engine_given_as_a_docker_context_runs_a_job() {
    if !available("an_engine_given_as_a_docker_context_runs_a_job") {
        return;
    }
    let engine = engine();
    let home = TestHome::new().env("PADDOCK_TEST_FORBID_HOST_BINDS", "1");
    let docker_config = home.dir.path().join("docker-config");
    std::fs::create_dir_all(&docker_config).expect("mkdir");
    let certs = engine.dir.join("certs");
    let endpoint = format!(
        "host={},ca={},cert={},key={}",
        engine.host,
        certs.join("ca.pem").display(),
        certs.join("cert.pem").display(),
        certs.join("key.pem").display()
    );
    let made = Command::new("docker")
        .args(["context", "create", "the-build-box", "--docker", &endpoint])
        .env("DOCKER_CONFIG", &docker_config)
        .output()
        .expect("docker context create runs");
    assert!(made.status.success(), "{made:?}");
    let home = home.env("DOCKER_CONFIG", docker_config.to_str().expect("utf-8"));
    std::fs::write(
        home.dir.path().join("config/paddock/config.yaml"),
        "admission:\n  memory: 1024g\n  cpus: 1000\nengines:\n  eng1:\n    context: the-build-box\n",
    )
    .expect("write the user config");
    let repo = FixtureRepo::new();
    let job = home.create(
        &repo,
        &[
            "--engine",
            "eng1",
            "--image",
            &test_image(),
            "--task",
            "ctx",
        ],
    );
    let id = text(&job, "id");
    assert_eq!(job["engine"], "eng1", "{job}");
    let said = home.sh(&id, "cat src/lib.rs");
    assert!(said.contains("pub fn answer"), "{said}");
    home.ok(&["rm", &id, "--force"]);
}
