//! Shared dependency caches through the real binary: keyed entries, symlinks git never sees,
//! copies that isolate, env caches shared between containers, refusal of a malicious tracked
//! symlink, prune, and the disk cost of ten jobs.

use std::path::{Path, PathBuf};

use crate::fixtures::{FixtureRepo, TestHome, docker_available, text};
use serde_json::Value;

/// The entry of the job's cache named `name`.
fn entry(job: &Value, name: &str) -> PathBuf {
    let cache = job["caches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no cache {name} in {job}"));
    PathBuf::from(text(cache, "entry"))
}

fn node_repo(lock: &str) -> FixtureRepo {
    let repo = FixtureRepo::new();
    repo.write(
        ".paddock.yaml",
        "caches:\n  - path: node_modules\n    key: [package-lock.json]\n    strategy: symlink\n",
    );
    repo.write("package-lock.json", lock);
    repo.commit_all("add lockfile and caches");
    repo
}

/// `git status --porcelain` in the job, run inside its sandbox: host-side git never runs in
/// an agent's checkout.
fn porcelain(home: &TestHome, job: &Value) -> String {
    home.sh(&text(job, "id"), "git status --porcelain")
        .trim()
        .to_string()
}

#[test]
fn same_lockfile_shares_an_entry_through_a_link_git_never_sees() {
    crate::fixtures::each_checkout(|| {
        if !docker_available("same_lockfile_shares_an_entry_through_a_link_git_never_sees") {
            return;
        }
        let repo = node_repo("{\"lockfileVersion\": 3}\n");
        let home = TestHome::new();
        let a = home.create_docker(&repo, &["--task", "a"]);
        let b = home.create_docker(&repo, &["--task", "b"]);
        assert_eq!(entry(&a, "node_modules"), entry(&b, "node_modules"));
        let shown = home.json(&["show", &text(&a, "id"), "--json"]);
        assert_eq!(shown["job"]["caches"][0]["strategy"], "symlink");
        for job in [&a, &b] {
            let link = Path::new(&text(job, "worktree")).join("node_modules");
            assert!(
                std::fs::symlink_metadata(&link)
                    .unwrap()
                    .file_type()
                    .is_symlink()
            );
            assert_eq!(porcelain(&home, job), "", "git status is clean");
        }
        // The container sees the entry's files through the link, and `git add -A` stages no link.
        std::fs::write(
            entry(&a, "node_modules").join("left-pad.js"),
            "module.exports = 1;\n",
        )
        .unwrap();
        let output = home.run(&[
            "exec", &text(&a, "id"), "--json", "--", "sh", "-c",
            "cat node_modules/left-pad.js && echo x > app.js && git add -A && git commit -q -m app && git show --stat --format= HEAD",
        ]);
        let result: Value = serde_json::from_slice(&output.stdout).unwrap();
        let stdout = result["stdout"].as_str().unwrap();
        assert_eq!(result["exit_code"], 0, "{result}");
        assert!(stdout.contains("module.exports = 1;"), "{result}");
        assert!(
            stdout.contains("app.js") && !stdout.contains("node_modules"),
            "{result}"
        );
        let tree = repo.git(&["ls-tree", "-r", "--name-only", "agent/agent/a"]);
        assert!(!tree.contains("node_modules"), "{tree}");
        // An install inside one container lands in the shared entry, visible to the other job.
        home.sh(&text(&a, "id"), "echo installed > node_modules/new-dep.js");
        assert_eq!(
            std::fs::read_to_string(
                Path::new(&text(&b, "worktree")).join("node_modules/new-dep.js")
            )
            .unwrap(),
            "installed\n"
        );
    });
}

#[test]
fn a_new_lockfile_gets_a_new_entry_seeded_from_the_last_one() {
    crate::fixtures::each_checkout(|| {
        let repo = node_repo("v1\n");
        let home = TestHome::new();
        let first = home.create(&repo, &["--task", "first", "--runtime", "process"]);
        std::fs::write(entry(&first, "node_modules").join("react.js"), "react 18\n").unwrap();
        repo.write("package-lock.json", "v2\n");
        repo.commit_all("bump deps");
        let second = home.create(&repo, &["--task", "second", "--runtime", "process"]);
        let (one, two) = (
            entry(&first, "node_modules"),
            entry(&second, "node_modules"),
        );
        assert_ne!(one, two);
        assert_eq!(
            std::fs::read_to_string(two.join("react.js")).unwrap(),
            "react 18\n",
            "seeded"
        );
        std::fs::write(two.join("react.js"), "react 19\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(one.join("react.js")).unwrap(),
            "react 18\n",
            "entries are separate"
        );
    });
}

#[test]
fn copy_caches_isolate_jobs_from_each_other_and_from_the_entry() {
    crate::fixtures::each_checkout(|| {
        let repo = FixtureRepo::new();
        repo.write(
            ".paddock.yaml",
            "caches:\n  - path: .venv\n    key: [poetry.lock]\n    strategy: copy\n",
        );
        repo.write("poetry.lock", "lock\n");
        repo.commit_all("caches");
        let home = TestHome::new();
        let seed = home.create(&repo, &["--task", "seed", "--runtime", "process"]);
        let venv_entry = entry(&seed, "venv");
        std::fs::create_dir_all(venv_entry.join("bin")).unwrap();
        std::fs::write(venv_entry.join("bin/python"), "original\n").unwrap();
        std::os::unix::fs::symlink("python", venv_entry.join("bin/python3")).unwrap();

        let a = home.create(&repo, &["--task", "a", "--runtime", "process"]);
        let b = home.create(&repo, &["--task", "b", "--runtime", "process"]);
        let a_python = Path::new(&text(&a, "worktree")).join(".venv/bin/python");
        std::fs::write(&a_python, "changed in a\n").unwrap();
        let b_venv = Path::new(&text(&b, "worktree")).join(".venv/bin");
        assert_eq!(
            std::fs::read_to_string(b_venv.join("python")).unwrap(),
            "original\n"
        );
        assert_eq!(
            std::fs::read_to_string(venv_entry.join("bin/python")).unwrap(),
            "original\n"
        );
        // Links inside the copy stay links.
        assert!(
            std::fs::symlink_metadata(b_venv.join("python3"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(porcelain(&home, &a), "", "the copy is excluded from git");
    });
}

#[test]
fn env_caches_are_shared_between_containers() {
    if !docker_available("env_caches_are_shared_between_containers") {
        return;
    }
    let repo = FixtureRepo::new();
    repo.write(
        ".paddock.yaml",
        "caches:\n  - env: CARGO_HOME\n    name: cargo-home\n",
    );
    repo.commit_all("caches");
    let home = TestHome::new();
    let a = home.create_docker(&repo, &["--task", "a"]);
    let b = home.create_docker(&repo, &["--task", "b"]);
    home.sh(
        &text(&a, "id"),
        "mkdir -p \"$CARGO_HOME/registry\" && echo crate > \"$CARGO_HOME/registry/serde.crate\"",
    );
    let read = home.run(&[
        "exec",
        &text(&b, "id"),
        "--",
        "sh",
        "-c",
        "cat \"$CARGO_HOME/registry/serde.crate\"",
    ]);
    assert_eq!(String::from_utf8_lossy(&read.stdout), "crate\n");
}

#[test]
fn a_tracked_symlink_at_a_cache_path_is_refused_and_nothing_outside_changes() {
    crate::fixtures::each_checkout(|| {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("passwd"), "root:x:0:0\n").unwrap();
        let repo = FixtureRepo::new();
        repo.write(
            ".paddock.yaml",
            "caches:\n  - path: node_modules\n    strategy: copy\n  - path: vendor/lib\n",
        );
        std::os::unix::fs::symlink(outside.path(), repo.path().join("node_modules")).unwrap();
        repo.commit_all("a malicious link");
        let home = TestHome::new();
        let path = repo.path().display().to_string();
        let output = home.run(&["create", "--repo", &path, "--runtime", "process"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(9), "{stderr}");
        assert!(
            stderr.contains("node_modules") && stderr.contains("symlink"),
            "{stderr}"
        );
        let listing: Vec<_> = std::fs::read_dir(outside.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(listing.len(), 1, "nothing written outside: {listing:?}");
        assert_eq!(
            std::fs::read_to_string(outside.path().join("passwd")).unwrap(),
            "root:x:0:0\n"
        );
        assert_eq!(home.job_records(), 0);
        assert_eq!(home.worktree_dirs(), 0);
        assert_eq!(repo.branches(), vec!["main".to_string()]);
    });
}

#[test]
fn prune_removes_only_unused_entries() {
    crate::fixtures::each_checkout(|| {
        let repo = node_repo("v1\n");
        let home = TestHome::new();
        let old = home.create(&repo, &["--task", "old", "--runtime", "process"]);
        repo.write("package-lock.json", "v2\n");
        repo.commit_all("bump");
        let live = home.create(&repo, &["--task", "live", "--runtime", "process"]);
        home.ok(&["rm", &text(&old, "id")]);
        let listed = home.json(&["cache", "ls", "--json"]);
        assert_eq!(listed.as_array().unwrap().len(), 2);
        let pruned = home.json(&["cache", "prune", "--unused-for", "0s", "--json"]);
        let removed: Vec<String> = pruned["removed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| text(e, "path"))
            .collect();
        assert_eq!(
            removed,
            vec![entry(&old, "node_modules").display().to_string()]
        );
        assert!(!entry(&old, "node_modules").exists());
        assert!(
            entry(&live, "node_modules").exists(),
            "an entry in use is never pruned"
        );
        // A recently used entry survives the default threshold even without jobs.
        home.ok(&["rm", &text(&live, "id")]);
        let pruned = home.json(&["cache", "prune", "--json"]);
        assert!(pruned["removed"].as_array().unwrap().is_empty(), "{pruned}");
    });
}

/// `du` in bytes, not following symlinks.
fn du(path: &Path) -> u64 {
    let output = std::process::Command::new("du")
        .args(["-sb", "-P"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn ten_jobs_on_a_200_mb_node_modules_add_less_than_5_mb() {
    crate::fixtures::each_checkout(|| {
        let repo = node_repo("big\n");
        let home = TestHome::new();
        let first = home.create(&repo, &["--task", "install", "--runtime", "process"]);
        let modules = entry(&first, "node_modules");
        let chunk = vec![b'x'; 1 << 20];
        for i in 0..200 {
            std::fs::write(modules.join(format!("pkg-{i}.js")), &chunk).unwrap();
        }
        let checkout = du(Path::new(&text(&first, "worktree")));
        let caches_before = du(&home.root().join("caches"));
        let mut total = 0;
        for i in 0..10 {
            let job = home.create(
                &repo,
                &["--task", &format!("job-{i}"), "--runtime", "process"],
            );
            assert_eq!(entry(&job, "node_modules"), modules);
            total += du(Path::new(&text(&job, "worktree")));
        }
        let added = total.saturating_sub(10 * checkout)
            + du(&home.root().join("caches")).saturating_sub(caches_before);
        eprintln!("10 jobs beyond their checkouts: {added} bytes (checkout {checkout} bytes each)");
        assert!(added < 5 << 20, "10 jobs added {added} bytes");
    });
}

#[test]
fn mount_caches_appear_in_the_container_read_only_and_outside_git() {
    crate::fixtures::each_checkout(|| {
        if !docker_available("mount_caches_appear_in_the_container_read_only_and_outside_git") {
            return;
        }
        let repo = FixtureRepo::new();
        repo.write(
            ".paddock.yaml",
            "caches:\n  - path: vendor/bundle\n    strategy: mount\n    readonly: true\n",
        );
        repo.commit_all("caches");
        let home = TestHome::new();
        let job = home.create_docker(&repo, &["--task", "mounted"]);
        let bundle = entry(&job, "vendor-bundle");
        std::fs::write(bundle.join("rack.gem"), "gem\n").unwrap();
        let id = text(&job, "id");
        assert_eq!(home.sh(&id, "cat vendor/bundle/rack.gem"), "gem\n");
        let output = home.run(&[
            "exec",
            &id,
            "--",
            "sh",
            "-c",
            "echo x > vendor/bundle/new.gem",
        ]);
        assert!(
            !output.status.success(),
            "a read-only mount cannot be written"
        );
        assert_eq!(
            home.sh(&id, "git status --porcelain"),
            "",
            "the mount point is outside git"
        );
        assert!(!bundle.join("new.gem").exists());
    });
}
