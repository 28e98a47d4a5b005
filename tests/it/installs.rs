//! Orchestrator-grade control: two installs on one Docker daemon — through the real binary,
//! real repositories and the real Docker daemon.

use std::process::{Command, Stdio};

use crate::fixtures::{FixtureRepo, TestHome, container_of, docker_available};

fn docker_ok(args: &[&str]) -> bool {
    Command::new("docker")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn container_running(name: &str) -> bool {
    let out = Command::new("docker")
        .args(["inspect", "-f", "{{.State.Running}}", name])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "true"
}

/// Names of the containers and networks labelled with this install's home id.
fn labelled(home: &TestHome) -> Vec<String> {
    let Ok(id) = std::fs::read_to_string(home.root().join("home-id")) else {
        return Vec::new();
    };
    let filter = format!("label=dev.paddock.home={}", id.trim());
    let mut names = Vec::new();
    for args in [
        vec!["ps", "-a", "--format", "{{.Names}}", "--filter", &filter],
        vec![
            "network",
            "ls",
            "--format",
            "{{.Name}}",
            "--filter",
            &filter,
        ],
    ] {
        let out = Command::new("docker").args(&args).output().unwrap();
        names.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_string),
        );
    }
    names
}

#[test]
fn two_installs_on_one_daemon_each_run_and_remove_their_own_job_of_the_same_id() {
    if !docker_available("two_installs_on_one_daemon") {
        return;
    }
    let (repo_a, repo_b) = (FixtureRepo::new(), FixtureRepo::new());
    let (home_a, home_b) = (TestHome::new(), TestHome::new());
    let job_a = home_a.create_docker(&repo_a, &["--id", "twin"]);
    let job_b = home_b.create_docker(&repo_b, &["--id", "twin"]);
    let (name_a, name_b) = (container_of(&job_a), container_of(&job_b));
    assert_ne!(name_a, name_b, "each install names its own container");
    // The name is the one the library makes for that install (one function, one place).
    let id = paddock::job::JobId::parse("twin").unwrap();
    let install_a = paddock::store::PaddockHome::open_at(&home_a.root()).unwrap();
    assert_eq!(name_a, paddock::runtime::container_name(&install_a, &id));
    assert!(
        name_a.starts_with("paddock-") && name_a.ends_with("-twin"),
        "{name_a}"
    );

    assert_eq!(home_a.sh("twin", "echo a $PADDOCK_JOB_ID"), "a twin\n");
    assert_eq!(home_b.sh("twin", "echo b $PADDOCK_JOB_ID"), "b twin\n");
    assert_eq!(
        home_a.json(&["show", "twin", "--json"])["job"]["container_name"],
        name_a.as_str()
    );

    home_a.ok(&["rm", "twin", "--force"]);
    assert!(
        !docker_ok(&["container", "inspect", &name_a]),
        "A's container is gone"
    );
    assert!(container_running(&name_b), "B's container is untouched");
    assert_eq!(home_b.sh("twin", "echo still"), "still\n");
    home_b.ok(&["rm", "twin", "--force"]);
    assert!(
        !docker_ok(&["container", "inspect", &name_b]),
        "B's container is gone"
    );
    assert!(labelled(&home_a).is_empty() && labelled(&home_b).is_empty());
}
