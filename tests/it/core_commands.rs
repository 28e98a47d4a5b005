//! The core: jobs, branches, worktrees, records and the CLI, driven through the real binary
//! against real temporary repositories (process runtime, so no Docker needed here).

use std::collections::BTreeSet;
use std::path::Path;

use crate::fixtures::{FixtureRepo, TestHome, git, text};
use serde_json::Value;

#[test]
fn create_ls_show_diff_log_rm() {
    crate::fixtures::each_checkout(|| {
        let repo = FixtureRepo::new();
        let home = TestHome::new();
        let job = home.create(
            &repo,
            &[
                "--agent",
                "claude",
                "--task",
                "FR-7",
                "--runtime",
                "process",
            ],
        );
        let id = text(&job, "id");
        assert!(id.starts_with("fr-7-"), "{id}");
        assert_eq!(text(&job, "branch"), "agent/claude/FR-7");
        assert_eq!(text(&job, "state"), "ready");
        assert_eq!(text(&job, "runtime"), "process");
        assert_eq!(text(&job, "base_commit"), repo.git(&["rev-parse", "HEAD"]));
        for key in ["repo", "base", "worktree", "profile", "created_at"] {
            assert!(job.get(key).is_some(), "create object lacks {key}: {job}");
        }
        let worktree = text(&job, "worktree");
        assert!(worktree.starts_with(home.root().to_str().unwrap()));
        assert!(Path::new(&worktree).join("src/lib.rs").exists());
        // Each of `each_checkout`'s runs made the kind it announced.
        assert_eq!(
            crate::fixtures::checkouts::checkout_kind_at(Path::new(&worktree)),
            crate::fixtures::current_checkout(),
            "{job}"
        );
        assert!(repo.branches().contains(&"agent/claude/FR-7".to_string()));

        let listed = home.json(&["ls", "--json"]);
        assert_eq!(listed.as_array().unwrap().len(), 1);
        assert_eq!(text(&listed[0], "id"), id);
        let table = home.ok(&["ls"]);
        assert!(
            table.contains(&id) && table.contains("agent/claude/FR-7"),
            "{table}"
        );

        // The agent commits one change and leaves another uncommitted.
        let wt = Path::new(&worktree);
        std::fs::write(
            wt.join("src/lib.rs"),
            "pub fn answer() -> u32 {\n    43\n}\n",
        )
        .unwrap();
        git(wt, &["commit", "-q", "-am", "change the answer"]);
        std::fs::write(wt.join("notes.txt"), "draft\n").unwrap();

        let shown = home.json(&["show", &id, "--json"]);
        let changes = &shown["changes"];
        assert_eq!(changes["commits_ahead"], 1);
        assert_eq!(changes["committed"][0]["path"], "src/lib.rs");
        assert_eq!(changes["uncommitted"][0]["path"], "notes.txt");
        assert_eq!(changes["uncommitted"][0]["status"], "untracked");
        let human = home.ok(&["show", &id]);
        assert!(human.contains("1 ahead of base"), "{human}");

        let diff = home.ok(&["diff", &id]);
        assert!(
            diff.contains("+    43") && diff.contains("-    42"),
            "{diff}"
        );
        assert!(
            diff.contains("+draft"),
            "untracked files are in the diff: {diff}"
        );
        let stat = home.ok(&["diff", &id, "--stat"]);
        assert!(stat.contains("2 files changed"), "{stat}");

        let log = home.json(&["log", &id, "--json"]);
        assert_eq!(log.as_array().unwrap().len(), 1);
        assert_eq!(log[0]["summary"], "change the answer");

        let removed = home.json(&["rm", &id, "--json"]);
        assert_eq!(removed["branch_kept"], true);
        assert!(!wt.exists(), "worktree directory is gone");
        assert_eq!(repo.worktree_count(), 1);
        assert_eq!(home.job_records(), 0);
        assert_eq!(home.json(&["ls", "--json"]).as_array().unwrap().len(), 0);
        assert_eq!(
            repo.git(&["log", "-1", "--format=%s", "agent/claude/FR-7"]),
            "change the answer"
        );
    });
}

#[test]
fn parallel_creates_on_one_repo_all_succeed() {
    crate::fixtures::each_checkout(|| {
        let repo = FixtureRepo::with_files(300, 400);
        let home = TestHome::new();
        let repo_path = repo.path().display().to_string();
        let children: Vec<_> = (0..24)
            .map(|i| {
                home.cmd(&[
                    "create",
                    "--repo",
                    &repo_path,
                    "--task",
                    &format!("task-{i}"),
                    "--runtime",
                    "process",
                    "--json",
                ])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn paddock")
            })
            .collect();
        let mut branches = BTreeSet::new();
        let mut worktrees = BTreeSet::new();
        for child in children {
            let output = child.wait_with_output().unwrap();
            assert!(
                output.status.success(),
                "a parallel create failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            let job: Value = serde_json::from_slice(&output.stdout).unwrap();
            branches.insert(text(&job, "branch"));
            let worktree = text(&job, "worktree");
            assert!(Path::new(&worktree).join("src/d002/f00299.rs").exists());
            worktrees.insert(worktree);
        }
        assert_eq!(branches.len(), 24);
        assert_eq!(worktrees.len(), 24);
        // Jobs have private git dirs: the user's repository registers no worktree for them.
        assert_eq!(repo.worktree_count(), 1);
        assert_eq!(home.json(&["ls", "--json"]).as_array().unwrap().len(), 24);
        // No tracking config was written to the shared config.
        let config = std::fs::read_to_string(repo.path().join(".git/config")).unwrap();
        assert!(!config.contains("[branch"), "{config}");
    });
}

#[test]
fn rm_deletes_a_branch_without_commits_and_keeps_one_with_commits() {
    crate::fixtures::each_checkout(|| {
        let repo = FixtureRepo::new();
        let home = TestHome::new();
        let idle = home.create(&repo, &["--task", "idle", "--runtime", "process"]);
        let busy = home.create(&repo, &["--task", "busy", "--runtime", "process"]);
        let wt = text(&busy, "worktree");
        std::fs::write(Path::new(&wt).join("feature.txt"), "feature\n").unwrap();
        git(Path::new(&wt), &["add", "feature.txt"]);
        git(Path::new(&wt), &["commit", "-q", "-m", "add feature"]);

        let idle_rm = home.json(&["rm", &text(&idle, "id"), "--json"]);
        assert_eq!(idle_rm["branch_kept"], false);
        let busy_rm = home.json(&["rm", &text(&busy, "id"), "--json"]);
        assert_eq!(busy_rm["branch_kept"], true);
        assert_eq!(busy_rm["commits_ahead"], 1);

        let branches = repo.branches();
        assert!(
            !branches.contains(&"agent/agent/idle".to_string()),
            "{branches:?}"
        );
        assert!(
            branches.contains(&"agent/agent/busy".to_string()),
            "{branches:?}"
        );
        assert_eq!(
            repo.git(&["show", "agent/agent/busy:feature.txt"]),
            "feature"
        );

        // --delete-branch deletes even a branch with commits.
        let forced = home.create(&repo, &["--task", "forced", "--runtime", "process"]);
        let wt = text(&forced, "worktree");
        std::fs::write(Path::new(&wt).join("x.txt"), "x\n").unwrap();
        git(Path::new(&wt), &["add", "x.txt"]);
        git(Path::new(&wt), &["commit", "-q", "-m", "x"]);
        let rm = home.json(&["rm", &text(&forced, "id"), "--delete-branch", "--json"]);
        assert_eq!(rm["branch_kept"], false);
        assert!(!repo.branches().contains(&"agent/agent/forced".to_string()));
    });
}

#[test]
fn uncommitted_and_untracked_work_survives_rm() {
    crate::fixtures::each_checkout(|| {
        let repo = FixtureRepo::new();
        let home = TestHome::new();
        let job = home.create(&repo, &["--task", "wip", "--runtime", "process"]);
        let id = text(&job, "id");
        let wt = Path::new(&text(&job, "worktree")).to_path_buf();
        std::fs::write(wt.join("README.md"), "# edited, not committed\n").unwrap();
        std::fs::write(wt.join("brand-new.txt"), "untracked work\n").unwrap();
        std::fs::write(wt.join("debug.log"), "ignored\n").unwrap();
        git(&wt, &["add", "README.md"]);
        std::fs::write(wt.join("src/lib.rs"), "// unstaged edit\n").unwrap();
        let index_before = std::fs::read(s_git_dir(&home, &id).join("index")).unwrap();

        let removed = home.json(&["rm", &id, "--json"]);
        let wip = format!("refs/paddock/wip/{id}");
        assert_eq!(removed["wip_ref"], wip.as_str());
        // The snapshot is in paddock's wip store, never the user's object store (which every
        // job reads); `git fetch <store> <ref>` brings it over.
        let store = std::path::PathBuf::from(text(&removed, "wip_store"));
        assert!(store.starts_with(home.root().join("wip")), "{removed}");
        let wip_commit = text(&removed, "wip_commit");
        let in_user_store = std::process::Command::new("git")
            .args(["cat-file", "-e", &wip_commit])
            .current_dir(repo.path())
            .status()
            .expect("git runs");
        assert!(
            !in_user_store.success(),
            "the snapshot is not in the user's repository"
        );
        assert_eq!(
            git(&store, &["show", &format!("{wip}:README.md")]),
            "# edited, not committed"
        );
        assert_eq!(
            git(&store, &["show", &format!("{wip}:brand-new.txt")]),
            "untracked work"
        );
        assert_eq!(
            git(&store, &["show", &format!("{wip}:src/lib.rs")]),
            "// unstaged edit"
        );
        let tree = git(&store, &["ls-tree", "-r", "--name-only", &wip]);
        assert!(
            !tree.contains("debug.log"),
            "ignored files are not snapshotted: {tree}"
        );
        // The snapshot's parent is the branch tip, and the branch itself did not move.
        assert_eq!(
            git(&store, &["rev-parse", &format!("{wip}^")]),
            repo.git(&["rev-parse", "main"])
        );
        assert!(!index_before.is_empty());
        // The branch had no commits, so it is gone, but the work is reachable from the wip ref.
        assert!(!repo.branches().contains(&"agent/agent/wip".to_string()));
    });
}

fn s_git_dir(home: &TestHome, id: &str) -> std::path::PathBuf {
    let record: Value = serde_json::from_slice(
        &std::fs::read(home.root().join("jobs").join(format!("{id}.json"))).unwrap(),
    )
    .unwrap();
    std::path::PathBuf::from(text(&record, "git_dir"))
}

/// Asserts that a failed create left nothing behind.
fn assert_nothing_left(home: &TestHome, repo: &FixtureRepo, branches_before: &[String]) {
    assert_eq!(home.job_records(), 0, "a job record was left behind");
    assert_eq!(home.job_dirs(), 0, "a job git dir was left behind");
    assert_eq!(
        home.worktree_dirs(),
        0,
        "a worktree directory was left behind"
    );
    assert_eq!(
        repo.worktree_count(),
        1,
        "a git worktree entry was left behind"
    );
    assert_eq!(
        repo.worktree_admin_dirs(),
        0,
        "a worktree admin dir was left behind"
    );
    assert_eq!(repo.branches(), branches_before, "a branch was left behind");
}

fn assert_fails(home: &TestHome, args: &[&str], code: i32, needle: &str) {
    let output = home.run(args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(code),
        "paddock {args:?}: {stderr}"
    );
    assert!(
        stderr.contains(needle),
        "paddock {args:?} should name `{needle}`: {stderr}"
    );
    assert!(stderr.starts_with("error: "), "{stderr}");
    assert!(output.stdout.is_empty(), "nothing on stdout on failure");
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn bad_input_fails_cleanly_and_leaves_nothing_behind() {
    crate::fixtures::each_checkout(|| {
        let repo = FixtureRepo::new();
        let home = TestHome::new();
        let path = repo.path().display().to_string();
        let plain_dir = tempfile::tempdir().unwrap();
        let plain = plain_dir.path().display().to_string();
        let before = repo.branches();

        assert_fails(
            &home,
            &["create", "--repo", &plain],
            4,
            "is not a git repository",
        );
        assert_fails(
            &home,
            &["create", "--repo", "/no/such/path"],
            4,
            "/no/such/path",
        );
        assert_fails(
            &home,
            &["create", "--repo", &path, "--base", "nope"],
            4,
            "`nope`",
        );
        assert_fails(
            &home,
            &["create", "--repo", &path, "--id", "Bad ID"],
            4,
            "`Bad ID`",
        );
        assert_fails(
            &home,
            &["create", "--repo", &path, "--task", "a..b"],
            4,
            "a..b",
        );
        assert_fails(
            &home,
            &["create", "--repo", &path, "--memory", "12q"],
            2,
            "12q",
        );
        assert_fails(
            &home,
            &["create", "--repo", &path, "--profile", "ghost"],
            4,
            "ghost",
        );
        assert_nothing_left(&home, &repo, &before);

        // An existing branch is refused unless --reuse-branch.
        repo.git(&["branch", "agent/agent/taken"]);
        let before = repo.branches();
        assert_fails(
            &home,
            &[
                "create",
                "--repo",
                &path,
                "--task",
                "taken",
                "--runtime",
                "process",
            ],
            6,
            "agent/agent/taken",
        );
        assert_nothing_left(&home, &repo, &before);
        let reused = home.create(
            &repo,
            &["--task", "taken", "--reuse-branch", "--runtime", "process"],
        );
        assert_eq!(text(&reused, "branch"), "agent/agent/taken");
        // ...but never a branch a live job holds (their syncs would rewrite each other's work).
        let before = repo.branches();
        assert_fails(
            &home,
            &[
                "create",
                "--repo",
                &path,
                "--task",
                "taken",
                "--id",
                "second-holder",
                "--reuse-branch",
                "--runtime",
                "process",
            ],
            6,
            "is held by job",
        );
        assert_eq!(repo.branches(), before);
        // rm of a reused branch with no new commits keeps the branch that existed before.
        home.ok(&["rm", &text(&reused, "id")]);
        assert!(repo.branches().contains(&"agent/agent/taken".to_string()));

        // A job id that exists is refused, and the existing job is untouched.
        let job = home.create(&repo, &["--id", "dup", "--runtime", "process"]);
        let branches = repo.branches();
        assert_fails(
            &home,
            &[
                "create",
                "--repo",
                &path,
                "--id",
                "dup",
                "--task",
                "other",
                "--runtime",
                "process",
            ],
            6,
            "`dup`",
        );
        assert_eq!(repo.branches(), branches);
        assert_eq!(home.job_records(), 1);
        assert!(Path::new(&text(&job, "worktree")).exists());

        // Unknown jobs.
        assert_fails(&home, &["show", "ghost"], 5, "ghost");
        assert_fails(&home, &["rm", "ghost"], 5, "ghost");
    });
}

#[test]
fn planted_hooks_are_never_executed() {
    crate::fixtures::each_checkout(|| {
        let repo = FixtureRepo::new();
        let home = TestHome::new();
        let marker_dir = tempfile::tempdir().unwrap();
        let marker = marker_dir.path().join("hook-ran");
        let script = format!("#!/bin/sh\necho \"$0\" >> {}\n", marker.display());
        let plant = |dir: &Path| {
            std::fs::create_dir_all(dir).unwrap();
            for hook in [
                "post-checkout",
                "pre-commit",
                "post-commit",
                "reference-transaction",
                "post-index-change",
                "pre-auto-gc",
                "post-rewrite",
            ] {
                let path = dir.join(hook);
                std::fs::write(&path, &script).unwrap();
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        };
        plant(&repo.path().join(".git/hooks"));
        // An fsmonitor hook in the shared config, as an agent with write access would plant it.
        let fsmonitor = marker_dir.path().join("fsmonitor.sh");
        std::fs::write(&fsmonitor, &script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&fsmonitor, std::fs::Permissions::from_mode(0o755)).unwrap();
        repo.git(&["config", "core.fsmonitor", fsmonitor.to_str().unwrap()]);

        let job = home.create(&repo, &["--task", "hooks", "--runtime", "process"]);
        let id = text(&job, "id");
        let wt = Path::new(&text(&job, "worktree")).to_path_buf();
        // The agent points its `.git` file at a directory of its own with more hooks in it.
        let evil = marker_dir.path().join("evil-gitdir");
        plant(&evil.join("hooks"));
        std::fs::write(wt.join("file.txt"), "work\n").unwrap();
        let real_link = std::fs::read_to_string(wt.join(".git")).unwrap();
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", evil.display())).unwrap();
        // And a hooks dir inside the worktree's own admin dir, with core.hooksPath in config.worktree.
        let admin = s_git_dir(&home, &id);
        plant(&admin.join("hooks"));
        std::fs::write(
            admin.join("config.worktree"),
            format!("[core]\n\thooksPath = {}\n", admin.join("hooks").display()),
        )
        .unwrap();

        home.ok(&["show", &id]);
        home.ok(&["diff", &id]);
        home.ok(&["log", &id]);
        home.ok(&["ls"]);
        let removed = home.json(&["rm", &id, "--json"]);
        assert!(
            removed["wip_commit"].is_string(),
            "the work was still snapshotted: {removed}"
        );
        assert!(
            !marker.exists(),
            "a planted hook ran: {}",
            std::fs::read_to_string(&marker).unwrap_or_default()
        );
        assert!(real_link.starts_with("gitdir: "));
    });
}
