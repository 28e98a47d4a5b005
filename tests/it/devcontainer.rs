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
    let home = TestHome::new().allowing_images(&["paddock-base:*"]);

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

/// A devcontainer.json asking for everything that would loosen a sandbox, at the root
/// (`.devcontainer.json`) so the build context holds only the example's Dockerfile: every
/// test of this shape shares one image.
const GREEDY: &str = r#"{
  "build": {"dockerfile": ".devcontainer/Dockerfile", "context": ".devcontainer",
            "args": {"TOOL_VERSION": "1.2.3"}},
  "privileged": true,
  "capAdd": ["SYS_ADMIN", "ALL"],
  "securityOpt": ["seccomp=unconfined", "apparmor=unconfined", "no-new-privileges=false"],
  "runArgs": ["--privileged", "--network=host", "--pid=host", "-v", "/:/host"],
  "init": false,
  "containerUser": "root",
  "remoteUser": "root",
  "mounts": ["source=/,target=/host,type=bind",
             {"type": "bind", "source": "/var/run/docker.sock", "target": "/var/run/docker.sock"}]
}"#;

fn greedy_repo() -> FixtureRepo {
    let repo = FixtureRepo::new();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/devcontainer");
    let dockerfile = std::fs::read_to_string(example.join(".devcontainer/Dockerfile")).unwrap();
    repo.write(".devcontainer/Dockerfile", &dockerfile);
    repo.write(".devcontainer.json", GREEDY);
    repo.commit_all("a greedy devcontainer");
    repo
}

/// A job from [`GREEDY`] on `runtime` passes the isolation checks every container job
/// passes (tests/it/docker.rs), and each loosening key is named as ignored.
fn greedy_job_is_as_isolated_as_any(runtime: &str) {
    let repo = greedy_repo();
    let home = TestHome::new().allowing_images(&["paddock-base:*"]);
    let mut flags = vec!["--runtime", runtime, "--task", "greedy"];
    flags.extend(crate::isolation::LIMIT_FLAGS);
    let job = home.create(&repo, &flags);
    let dc = &job["devcontainer"];
    assert!(text(dc, "image").starts_with("paddock-devc:"), "{job}");
    let ignored = dc["ignored"].to_string();
    for key in [
        "privileged",
        "capAdd: SYS_ADMIN ALL",
        "securityOpt: seccomp=unconfined",
        "runArgs: --privileged",
        "init: false",
        "containerUser: `root`",
        "remoteUser: `root`",
        "/var/run/docker.sock",
    ] {
        assert!(ignored.contains(key), "{key} not named: {job}");
    }
    assert_eq!(ignored.matches("refused: bind mounts").count(), 2, "{job}");
    // The image ends as `nobody`, the file asks for root: the agent is paddock's agent uid.
    let uid = home.sh(&text(&job, "id"), "id -u");
    assert!(!["0", "65534"].contains(&uid.trim()), "uid {uid}");
    crate::isolation::check_isolated_and_limited(&home, &job, runtime);
}

#[test]
fn a_devcontainer_job_asking_for_privileges_is_as_isolated_as_any() {
    if docker_available("a_devcontainer_job_asking_for_privileges_is_as_isolated_as_any") {
        greedy_job_is_as_isolated_as_any("docker");
    }
}

#[test]
fn a_gvisor_devcontainer_job_asking_for_privileges_is_as_isolated_as_any() {
    if docker_available("a_gvisor_devcontainer_job_asking_for_privileges_is_as_isolated_as_any") {
        greedy_job_is_as_isolated_as_any("runsc");
    }
}

/// The lifecycle of [`greedy_repo`]'s image with variables, a named volume and a
/// `postStartCommand`.
const LIFECYCLE: &str = r#"{
  "build": {"dockerfile": ".devcontainer/Dockerfile", "context": ".devcontainer",
            "args": {"TOOL_VERSION": "1.2.3"}},
  "workspaceFolder": "/work/${localWorkspaceFolderBasename}",
  "containerEnv": {"LEAK": "${localEnv:DEVC_HOST_SECRET}", "WS": "${containerWorkspaceFolder}",
                   "EXTRA": "/opt/extra"},
  "remoteEnv": {"PATH": "${containerEnv:PATH}:${containerEnv:EXTRA}/bin"},
  "mounts": ["source=deps,target=${containerWorkspaceFolder}/deps,type=volume"],
  "postStartCommand": "echo start >> deps/starts && touch /tmp/started"
}"#;

#[test]
fn variables_volumes_and_post_start_follow_the_spec_and_the_host_env_stays_out() {
    if !docker_available("variables_volumes_and_post_start_follow_the_spec") {
        return;
    }
    let repo = FixtureRepo::new();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/devcontainer");
    let dockerfile = std::fs::read_to_string(example.join(".devcontainer/Dockerfile")).unwrap();
    repo.write(".devcontainer/Dockerfile", &dockerfile);
    repo.write(".devcontainer.json", LIFECYCLE);
    repo.commit_all("lifecycle");
    let secret = format!("devc-secret-{}", std::process::id());
    let home = TestHome::new()
        .env("DEVC_HOST_SECRET", &secret)
        .allowing_images(&["paddock-base:*"]);
    let job = create(&home, &repo, "life");
    let id = text(&job, "id");
    let basename = repo
        .path()
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let workspace = format!("/work/{basename}");
    assert_eq!(job["limits"]["workspace_dir"], workspace.as_str(), "{job}");
    assert!(
        job["devcontainer"]["ignored"]
            .to_string()
            .contains("localEnv: DEVC_HOST_SECRET"),
        "{job}"
    );

    // Variables: the job's folder, the image's PATH, and nothing of the host's environment.
    let env = home.sh(&id, "pwd; echo \"$WS|$LEAK|$PATH\"; env");
    let mut lines = env.lines();
    assert_eq!(lines.next(), Some(workspace.as_str()), "{env}");
    let vars = lines.next().unwrap_or_default();
    assert!(vars.starts_with(&format!("{workspace}||")), "{env}");
    assert!(
        vars.contains("/opt/tool/bin") && vars.ends_with(":/opt/extra/bin"),
        "{env}"
    );
    assert!(!env.contains(&secret), "{env}");
    let shown = home.ok(&["show", &id, "--json"]);
    assert!(!shown.contains(&secret), "{shown}");
    let shown = home.ok(&["show", &id]);
    assert!(
        shown.contains("volume: devcontainer-deps at deps"),
        "{shown}"
    );
    assert!(shown.contains("at each start: echo start"), "{shown}");

    // postStartCommand: once at create, again after each start, not on every exec; the
    // named volume is a cache: kept out of git, and shared with the next job.
    let starts = |home: &TestHome, id: &str| home.sh(id, "cat deps/starts").lines().count();
    assert_eq!(starts(&home, &id), 1);
    assert_eq!(starts(&home, &id), 1);
    home.ok(&["stop", &id]);
    assert_eq!(starts(&home, &id), 2);
    assert_eq!(
        home.sh(&id, "ls /tmp/started && git status --porcelain")
            .trim(),
        "/tmp/started"
    );
    let second = create(&home, &repo, "life2");
    let second_id = text(&second, "id");
    assert_eq!(
        starts(&home, &second_id),
        3,
        "the volume is shared like a named volume"
    );
    for job in [&id, &second_id] {
        home.ok(&["rm", job, "--force"]);
    }
}

/// Whether the engine has the image `tag`.
fn image_exists(tag: &str) -> bool {
    std::process::Command::new("docker")
        .args(["image", "inspect", tag])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn the_sweep_removes_devcontainer_images_long_unused_and_nothing_else() {
    if !docker_available("the_sweep_removes_devcontainer_images_long_unused") {
        return;
    }
    // `image` form: the job's image is paddock's layer on the local base image.
    let repo = FixtureRepo::new();
    repo.write(
        ".devcontainer.json",
        r#"{"image": "paddock-base:bookworm"}"#,
    );
    repo.commit_all("devcontainer");
    let home = TestHome::new().allowing_images(&["paddock-base:*"]);
    let mut job = create(&home, &repo, "swept");
    if job["devcontainer"]["built"] == false {
        // Left by an earlier run (another install's labels): this install builds its own.
        home.ok(&["rm", &text(&job, "id"), "--force"]);
        remove_image(&text(&job["devcontainer"], "image"));
        job = create(&home, &repo, "swept");
        assert_eq!(job["devcontainer"]["built"], true, "{job}");
    }
    let id = text(&job, "id");
    let image = text(&job["devcontainer"], "image");
    // Another install sees none of it: its labels are this install's.
    let other = TestHome::new().allowing_images(&["paddock-base:*"]);
    // A tag of the same repository name that paddock did not build (no label).
    let foreign = format!("paddock-devc:not-ours-{}", std::process::id());
    assert!(
        std::process::Command::new("docker")
            .args(["tag", "paddock-base:bookworm", &foreign])
            .status()
            .unwrap()
            .success()
    );
    let names = |report: &Value, list: &str| -> Vec<String> {
        report[list]
            .as_array()
            .unwrap()
            .iter()
            .filter(|item| item["kind"] == "image")
            .map(|item| text(item, "name"))
            .collect()
    };
    let use_file = home
        .root()
        .join("devcontainer-images")
        .join(image.replace(':', "_"));
    let make_old = || {
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(10 * 86400);
        std::fs::File::options()
            .write(true)
            .open(&use_file)
            .unwrap()
            .set_modified(old)
            .unwrap();
    };
    make_old();

    // Named by a job: kept, however old.
    let report = home.json(&["sweep", "--json"]);
    assert!(names(&report, "kept").contains(&image), "{report}");
    assert!(image_exists(&image));

    // No job names it, but it was used lately: kept, and not even listed.
    home.ok(&["rm", &id, "--force"]);
    let again = create(&home, &repo, "again");
    home.ok(&["rm", &text(&again, "id"), "--force"]);
    let report = home.json(&["sweep", "--json"]);
    assert!(!names(&report, "removed").contains(&image), "{report}");
    assert!(image_exists(&image));

    // Unused for ten days: a dry run names it, the sweep removes it; the foreign tag stays.
    make_old();
    // Even one that notes an old use of it (without the home label, it would remove it).
    let other_uses = other.root().join("devcontainer-images");
    std::fs::create_dir_all(&other_uses).unwrap();
    std::fs::copy(&use_file, other_uses.join(use_file.file_name().unwrap())).unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(10 * 86400);
    std::fs::File::options()
        .write(true)
        .open(other_uses.join(use_file.file_name().unwrap()))
        .unwrap()
        .set_modified(old)
        .unwrap();
    let report = other.json(&["sweep", "--json"]);
    assert!(!report.to_string().contains(&image), "{report}");
    let dry = home.json(&["sweep", "--json", "--dry-run"]);
    assert!(names(&dry, "removed").contains(&image), "{dry}");
    assert!(image_exists(&image));
    let report = home.json(&["sweep", "--json"]);
    assert!(names(&report, "removed").contains(&image), "{report}");
    assert!(!image_exists(&image));
    assert!(image_exists(&foreign));
    let _ = std::process::Command::new("docker")
        .args(["rmi", &foreign])
        .output();
}
