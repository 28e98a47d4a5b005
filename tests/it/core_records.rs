//! The core, continued: `config show` and its sources, jobs of the old shared git layout,
//! and labels, through the real binary against real temporary repositories (process
//! runtime). The first part is `core_commands.rs`.

use std::path::Path;

use crate::fixtures::{FixtureRepo, TestHome, text};
use serde_json::Value;

#[test]
fn config_show_reports_sources_and_bad_files_name_the_key() {
    let repo = FixtureRepo::new();
    repo.write(
        ".paddock.yaml",
        "profiles:\n  default:\n    memory: 1g\n  big:\n    cpus: 4\nrouting:\n  agents:\n    'claude*': big\n",
    );
    // Trusted: its `big` profile widens `cpus` (tests/it/hostile_repo.rs has the untrusted).
    let home = TestHome::new()
        .env("PADDOCK_PIDS", "99")
        .trusting(repo.path());
    let path = repo.path().display().to_string();
    let shown = home.json(&["config", "show", "--repo", &path, "--json"]);
    let find = |key: &str| {
        shown["values"]
            .as_array()
            .unwrap()
            .iter()
            .find(|row| row["key"] == key)
            .unwrap_or_else(|| panic!("no {key} in {shown}"))
            .clone()
    };
    assert_eq!(find("profiles.default.memory")["value"], "1g");
    assert!(
        find("profiles.default.memory")["source"]
            .as_str()
            .unwrap()
            .starts_with("repo file")
    );
    assert_eq!(find("profiles.default.pids")["source"], "env PADDOCK_PIDS");
    assert_eq!(find("profiles.default.image")["source"], "default");
    assert_eq!(find("routing.agents.claude*")["value"], "big");

    // Routing picks the profile from the agent name.
    let job = home.create(&repo, &["--agent", "claude-3", "--runtime", "process"]);
    assert_eq!(text(&job, "profile"), "big");
    assert_eq!(job["limits"]["cpus"], "4");
    assert_eq!(job["limits"]["pids"], 99);

    repo.write(".paddock.yaml", "profiles:\n  default:\n    memroy: 1g\n");
    let output = home.run(&["config", "show", "--repo", &path]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(".paddock.yaml") && stderr.contains("memroy"),
        "{stderr}"
    );
}

/// A job made by paddock before private git dirs (a linked worktree of the user's repository,
/// record schema 1) is reported by `doctor` with the command that fixes it, is not run
/// again, and `rm` removes it without losing its work.
#[test]
fn jobs_of_the_old_shared_git_layout_are_reported_and_removed_safely() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    // The old layout had no overlay checkouts (this test rebuilds one by hand).
    let job = home.create(
        &repo,
        &[
            "--task",
            "old",
            "--runtime",
            "process",
            "--checkout",
            "worktree",
        ],
    );
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    let worktree = text(&job, "worktree");
    // Rebuild it as the old layout made it: a worktree registered in the user's repository,
    // its admin dir recorded as the job's git dir, record schema 1.
    std::fs::remove_dir_all(&worktree).unwrap();
    std::fs::remove_dir_all(home.root().join("work").join(&id)).unwrap();
    repo.git(&["worktree", "add", "-q", &worktree, &branch]);
    let record_path = home.root().join("jobs").join(format!("{id}.json"));
    let mut record: Value = serde_json::from_slice(&std::fs::read(&record_path).unwrap()).unwrap();
    let admin = repo
        .path()
        .join(".git/worktrees")
        .join(Path::new(&worktree).file_name().unwrap())
        .canonicalize()
        .unwrap();
    record["schema"] = Value::from(1);
    record["git_dir"] = Value::from(admin.display().to_string());
    std::fs::write(&record_path, serde_json::to_vec(&record).unwrap()).unwrap();
    std::fs::write(Path::new(&worktree).join("unsaved.txt"), "old work\n").unwrap();

    let doctor = home.json(&["doctor", "--json"]);
    let layout = doctor
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "job layout")
        .unwrap_or_else(|| panic!("{doctor}"));
    assert_eq!(layout["status"], "warn", "{layout}");
    assert!(
        text(layout, "fix").starts_with(&format!("paddock rm {id}")),
        "{layout}"
    );
    let exec = home.run(&["exec", &id, "--", "true"]);
    assert_eq!(
        exec.status.code(),
        Some(125),
        "exec refuses an old-layout job"
    );
    assert!(String::from_utf8_lossy(&exec.stderr).contains("paddock doctor"));
    assert_eq!(home.json(&["ls", "--json"]).as_array().unwrap().len(), 1);

    let removed = home.json(&["rm", &id, "--json"]);
    let wip = format!("refs/paddock/wip/{id}");
    assert_eq!(removed["wip_ref"], wip.as_str(), "{removed}");
    assert_eq!(
        repo.git(&["show", &format!("{wip}:unsaved.txt")]),
        "old work"
    );
    assert_eq!(repo.worktree_count(), 1);
    assert_eq!(repo.worktree_admin_dirs(), 0);
    let doctor = home.json(&["doctor", "--json"]);
    let layout = doctor
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "job layout")
        .unwrap();
    assert_eq!(layout["status"], "ok");
}

/// Labels given at create are kept with the job and shown by `ls` and `show`; a malformed
/// one is refused before anything is made.
#[test]
fn labels_given_at_create_are_kept_and_shown() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create(
        &repo,
        &[
            "--task",
            "labelled",
            "--runtime",
            "process",
            "--label",
            "ticket=FR-7",
            "--label",
            "team=infra",
        ],
    );
    assert_eq!(job["labels"]["ticket"], "FR-7", "{job}");
    let listed = home.json(&["ls", "--json"]);
    assert_eq!(listed[0]["labels"]["team"], "infra", "{listed}");
    let shown = home.json(&["show", &text(&job, "id"), "--json"]);
    assert_eq!(shown["job"]["labels"]["ticket"], "FR-7");
    let refused = home.run(&[
        "create",
        "--repo",
        repo.path().to_str().unwrap(),
        "--runtime",
        "process",
        "--label",
        "no equals sign",
    ]);
    assert_eq!(refused.status.code(), Some(2));
    assert_eq!(home.job_records(), 1);
}
