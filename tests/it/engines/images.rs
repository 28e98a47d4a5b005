//! `paddock image build --engine NAME` builds the agent image on that engine through its
//! API, and a create on an engine without the job's image fails with that hint.

use super::{available, engine, home_with};
use crate::fixtures::FixtureRepo;

#[test]
fn an_image_is_built_on_the_engine_and_a_missing_one_names_the_command() {
    if !available("an_image_is_built_on_the_engine") {
        return;
    }
    let engine = engine();
    let home = home_with(engine);
    let repo = FixtureRepo::new();

    let missing = "paddock-agent-engine-test:absent";
    let repo_path = repo.path().display().to_string();
    let refused = home.run(&[
        "create",
        "--repo",
        &repo_path,
        "--engine",
        engine.name,
        "--image",
        missing,
    ]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("paddock image build --engine eng1"),
        "{stderr}"
    );

    // The base image the machine's own agent image came from, on the engine.
    let base = "paddock-base:bookworm";
    super::ensure_image(engine, base);
    let tag = "paddock-agent-engine-test:built";
    let _ = engine.docker(&["rmi", tag]);
    let built = home.json(&[
        "image",
        "build",
        "--engine",
        engine.name,
        "--base-image",
        base,
        "--tag",
        tag,
        "--json",
    ]);
    assert_eq!(built["tag"], tag, "{built}");
    let id = engine.docker_ok(&["image", "inspect", "-f", "{{.Id}}", tag]);
    let short = built["id"].as_str().expect("an id");
    assert!(
        id.trim().trim_start_matches("sha256:").starts_with(short),
        "{id} vs {short}"
    );
    assert!(
        !std::process::Command::new("docker")
            .args(["image", "inspect", tag])
            .output()
            .expect("docker")
            .status
            .success(),
        "built on the engine, not here"
    );
    let job = home.create(
        &repo,
        &["--engine", engine.name, "--image", tag, "--task", "built"],
    );
    let job = crate::fixtures::text(&job, "id");
    let out = home.sh(&job, "cat src/lib.rs");
    assert!(out.contains("answer"), "{out}");
    home.ok(&["rm", &job, "--force"]);
}
