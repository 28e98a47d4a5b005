//! A repository's devcontainer.json as the job's environment, against the real engine: the
//! image built from its Dockerfile (a `FROM` of the local base image) with paddock's agent
//! layer, its env, its setup before the first exec, its port served; the second create
//! reuses the image; the hardening fields it asks for are ignored and the job is as
//! hardened as any; an invalid file fails the create naming file and line, leaving nothing.
//! Fails when Docker is absent unless PADDOCK_SKIP_DOCKER_TESTS=1.

use std::path::Path;
use std::time::Instant;

use serde_json::Value;

use crate::fixtures::{FixtureRepo, TestHome, docker_available, text};

/// A repository holding examples/devcontainer, plus `extra` files; committed.
fn example_repo(extra: &[(&str, &str)]) -> FixtureRepo {
    let repo = FixtureRepo::new();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/devcontainer");
    for name in ["devcontainer.json", "Dockerfile"] {
        let text = std::fs::read_to_string(example.join(".devcontainer").join(name)).unwrap();
        repo.write(&format!(".devcontainer/{name}"), &text);
    }
    for (path, text) in extra {
        repo.write(path, text);
    }
    repo.commit_all("devcontainer");
    repo
}

fn create(home: &TestHome, repo: &FixtureRepo, task: &str) -> Value {
    home.create(repo, &["--runtime", "docker", "--task", task])
}

fn remove_image(tag: &str) {
    for image in [tag.to_string(), format!("{tag}-base")] {
        let _ = std::process::Command::new("docker")
            .args(["rmi", "-f", &image])
            .output();
    }
}

#[test]
fn a_devcontainer_build_defines_the_job_and_is_reused() {
    if !docker_available("a_devcontainer_build_defines_the_job_and_is_reused") {
        return;
    }
    // A file of this run in the build context: a new context, so the first create builds.
    let run = format!("{}-{:?}", std::process::id(), Instant::now());
    let repo = example_repo(&[(".devcontainer/run-id", &run)]);
    let home = TestHome::new();

    let started = Instant::now();
    let job = create(&home, &repo, "first");
    let first_ms = started.elapsed().as_millis();
    let dc = &job["devcontainer"];
    let image = text(dc, "image");
    assert!(image.starts_with("paddock-devc:"), "{job}");
    assert_eq!(dc["built"], true, "{job}");
    assert_eq!(job["limits"]["image"], image.as_str(), "{job}");
    assert_eq!(dc["file"], ".devcontainer/devcontainer.json", "{job}");
    let ignored = dc["ignored"].to_string();
    for key in [
        "privileged",
        "capAdd: SYS_ADMIN",
        "bind mounts",
        "hostRequirements.cpus: 64",
    ] {
        assert!(ignored.contains(key), "{key} not named: {job}");
    }
    let id = text(&job, "id");

    // The setup ran before the first exec, with the image's tool on PATH and the env set.
    let made = home.sh(&id, "cat .made-by-setup");
    assert_eq!(made.trim(), "greet 1.2.3: hello from devcontainer.json");
    let env = home.sh(&id, "echo \"$GREETING|$TOOL_HOME\"; command -v greet");
    assert_eq!(
        env.trim(),
        "hello from devcontainer.json|/opt/tool\n/opt/tool/bin/greet"
    );

    // As hardened as any job: not root, no capabilities, no mount, no host `/`.
    let hardened = home.sh(
        &id,
        "id -u; grep CapEff /proc/self/status; mount -t tmpfs x /tmp 2>/dev/null && echo mounted; ls /host 2>/dev/null | head -1; echo end",
    );
    let lines: Vec<&str> = hardened.lines().collect();
    assert_ne!(lines[0], "0", "{hardened}");
    assert!(lines[1].ends_with("0000000000000000"), "{hardened}");
    assert_eq!(lines[2..], ["end"], "{hardened}");
    let runtime = std::process::Command::new("docker")
        .args([
            "inspect",
            "--format",
            "{{.HostConfig.Privileged}} {{.HostConfig.CapAdd}} {{.HostConfig.ReadonlyRootfs}}",
            &crate::fixtures::container_of(&job),
        ])
        .output()
        .unwrap();
    let inspect = String::from_utf8_lossy(&runtime.stdout);
    assert_eq!(inspect.trim(), "false [] true", "{inspect}");

    // Its forwardPorts entry is served on the host.
    crate::ports::serve_hello(&home, &id);
    let address = home.ok(&["port", &id, "3000"]).trim().to_string();
    assert!(crate::ports::fetch(&address, &id).contains(&format!("hello from {id}")));

    // The second create of the same repository builds nothing.
    let started = Instant::now();
    let second = create(&home, &repo, "second");
    let second_ms = started.elapsed().as_millis();
    assert_eq!(second["devcontainer"]["built"], false, "{second}");
    assert_eq!(second["devcontainer"]["image"], image.as_str(), "{second}");
    eprintln!("devcontainer create: first (build) {first_ms} ms, second (reuse) {second_ms} ms");

    // `show` says what was read and ignored.
    let shown = home.ok(&["show", &id]);
    assert!(shown.contains(".devcontainer/devcontainer.json"), "{shown}");
    assert!(shown.contains("ignored: privileged"), "{shown}");
    for job in [&id, &text(&second, "id")] {
        home.ok(&["rm", job, "--force"]);
    }
    remove_image(&image);
}

#[test]
fn an_invalid_devcontainer_json_fails_the_create_and_leaves_nothing() {
    // The file is read before the runtime is chosen: the process runtime shows it too.
    let repo = FixtureRepo::new();
    repo.write(
        ".devcontainer/devcontainer.json",
        "{\n  // a comment\n  \"image\": \"x\",\n  \"forwardPorts\": [true]\n}\n",
    );
    repo.commit_all("bad devcontainer");
    let home = TestHome::new();
    let output = home.run(&[
        "create",
        "--repo",
        repo.path().to_str().unwrap(),
        "--runtime",
        "process",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(".devcontainer/devcontainer.json") && stderr.contains("line 4"),
        "{stderr}"
    );
    assert_eq!(repo.branches(), vec!["main".to_string()]);
    assert_eq!(home.job_records(), 0);
    assert_eq!(home.job_dirs(), 0);
    assert_eq!(home.worktree_dirs(), 0);

    // `environment: image` ignores the file; and the working tree is never read: only the
    // base commit's file counts.
    repo.write(
        ".paddock.yaml",
        "profiles:\n  default:\n    environment: image\n",
    );
    repo.commit_all("environment: image");
    let job = home.create(&repo, &["--runtime", "process"]);
    assert!(job.get("devcontainer").is_none(), "{job}");
}

#[test]
fn the_file_is_read_from_the_base_commit_not_the_checkout() {
    let repo = FixtureRepo::new();
    repo.write(
        ".devcontainer.json",
        "{\"image\": \"some-image\", \"containerEnv\": {\"FROM\": \"commit\"}}",
    );
    repo.commit_all("devcontainer");
    // An uncommitted change (as an agent's or the user's edit) is not what the job gets.
    repo.write(".devcontainer.json", "{ not json");
    let home = TestHome::new();
    let job = home.create(&repo, &["--runtime", "process"]);
    let dc = &job["devcontainer"];
    assert_eq!(dc["file"], ".devcontainer.json", "{job}");
    assert_eq!(job["limits"]["env"]["FROM"], "commit", "{job}");
    assert!(
        dc["ignored"].to_string().contains("process runtime"),
        "{job}"
    );
}
