//! `merge` and `apply` never write over what is the user's alone: an ignored file (`.env`)
//! an agent's branch also adds, or uncommitted edits to a file the job changes. Each is
//! refused with the checkout, its files and the repository's refs as they were.

use crate::fixtures::{FixtureRepo, TestHome, text};

/// The user's checkout: `.env` ignored and holding a secret; `notes.txt` tracked.
fn users_repo() -> FixtureRepo {
    let repo = FixtureRepo::new();
    repo.write(".gitignore", ".env\n");
    repo.write("notes.txt", "a\nb\nc\n");
    repo.commit_all("ignore .env");
    repo.write(".env", "USER_SECRET=keep-me\n");
    repo
}

fn all_refs(repo: &FixtureRepo) -> String {
    repo.git(&["for-each-ref", "--format=%(refname) %(objectname)"])
}

#[test]
fn an_agent_s_branch_cannot_overwrite_the_user_s_ignored_files() {
    let repo = users_repo();
    let home = TestHome::new();
    let job = home.create(&repo, &["--runtime", "process", "--base", "main"]);
    let id = text(&job, "id");
    home.sh(
        &id,
        "echo AGENT=overwrote > .env && git add -f .env && git commit -qm 'the agent adds .env'",
    );
    let refs = all_refs(&repo);
    for command in [vec!["apply", id.as_str()], vec!["merge", id.as_str()]] {
        let out = home.run(&command);
        assert_ne!(out.status.code(), Some(0), "{command:?} succeeded: {out:?}");
        assert_eq!(
            std::fs::read_to_string(repo.path().join(".env")).unwrap(),
            "USER_SECRET=keep-me\n",
            "{command:?} overwrote the user's .env"
        );
        assert_eq!(all_refs(&repo), refs, "{command:?} moved a ref");
    }
    let merge = home.run(&["merge", &id]);
    assert_eq!(merge.status.code(), Some(9), "{merge:?}");
    assert!(String::from_utf8_lossy(&merge.stderr).contains(".env"));
}

#[test]
fn apply_never_moves_the_user_s_uncommitted_edits_aside() {
    let repo = users_repo();
    let home = TestHome::new();
    let job = home.create(&repo, &["--runtime", "process"]);
    let id = text(&job, "id");
    home.sh(&id, "printf 'a\\nJOB\\nc\\n' > notes.txt");
    repo.write("notes.txt", "a\nUSER\nc\n");
    let refs = all_refs(&repo);
    let out = home.run(&["apply", &id]);
    assert_ne!(out.status.code(), Some(0), "apply succeeded: {out:?}");
    assert_eq!(
        std::fs::read_to_string(repo.path().join("notes.txt")).unwrap(),
        "a\nUSER\nc\n"
    );
    assert_eq!(all_refs(&repo), refs, "a ref (refs/stash?) was written");
    assert!(repo.git(&["stash", "list"]).trim().is_empty());
}

#[test]
fn merge_leaves_other_jobs_branches_and_reused_branches_alone() {
    let repo = users_repo();
    let home = TestHome::new();
    let a = home.create(&repo, &["--runtime", "process", "--id", "a"]);
    let b = home.create(&repo, &["--runtime", "process", "--id", "b"]);
    home.sh("a", "echo a > a.txt && git add a.txt && git commit -qm a");
    // Into another job's branch: that job's next sync would put it back.
    let out = home.run(&["merge", "a", "--into", &text(&b, "branch")]);
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("is held by job `b`"));
    assert_ne!(
        repo.git(&["rev-parse", &text(&b, "branch")]),
        repo.git(&["rev-parse", &text(&a, "branch")])
    );
    // A branch the user had before the job (--reuse-branch) outlives `merge --delete`.
    repo.git(&["branch", "agent/agent/mine"]);
    let reused = home.create(
        &repo,
        &["--runtime", "process", "--task", "mine", "--reuse-branch"],
    );
    let id = text(&reused, "id");
    home.sh(&id, "echo r > r.txt && git add r.txt && git commit -qm r");
    home.ok(&["merge", &id, "--delete"]);
    assert!(repo.branches().contains(&"agent/agent/mine".to_string()));
}
