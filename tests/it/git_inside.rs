//! git inside a job, as an agent uses it: commits, rewrites and syncs under runc and gVisor;
//! a branch pointing nowhere or a corrupt commit from inside leaves the user's branch where
//! it was (refused by fsck); jobs created while `git gc` packs the repository; and git inside
//! when paddock is not root. Split from `hostile.rs`, whose helpers it uses. They fail when
//! Docker is absent unless PADDOCK_SKIP_DOCKER_TESTS=1.

use std::os::unix::fs::MetadataExt;
use std::process::Command;

use crate::fixtures::{FixtureRepo, TestHome, docker_available, text};
use crate::hostile::{create_on, our_ids};
use serde_json::Value;

/// Git inside works as an agent uses it, and history rewrites reach the user's repository as
/// a forced update of the job's branch only.
fn git_workflow_inside(runtime: &str, test: &str) {
    if !docker_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    repo.git(&["branch", "feature"]);
    let home = TestHome::new();
    let job = create_on(&home, &repo, runtime, "workflow");
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    let main_before = repo.git(&["rev-parse", "main"]);
    let feature_before = repo.git(&["rev-parse", "feature"]);

    let run = |script: &str| -> Value {
        let result = home.json(&["exec", &id, "--json", "--", "sh", "-c", script]);
        assert_eq!(result["exit_code"], 0, "{script}: {result}");
        assert!(result["sync_error"].is_null(), "{script}: {result}");
        result
    };
    // status, add, commit, log, diff, stash: each commit is on the branch when exec returns.
    run("git status --short && echo one > one.txt && git add one.txt && git commit -q -m one");
    assert_eq!(repo.git(&["log", "-1", "--format=%s", &branch]), "one");
    run(
        "echo two > two.txt && git add two.txt && git commit -q -m two && git log --oneline | head -3 && git diff HEAD~1 --stat",
    );
    assert_eq!(repo.git(&["log", "-1", "--format=%s", &branch]), "two");
    run(
        "echo stashed >> one.txt && git stash -q && git stash list | grep -q . && git stash pop -q && git diff --stat | grep -q one.txt && git checkout -q -- one.txt",
    );
    let before_rewrite = repo.git(&["rev-parse", &branch]);

    // Amend and rebase: a forced update of the job's branch, nothing else moves.
    run("git commit -q --amend -m 'two, amended'");
    let amended = repo.git(&["rev-parse", &branch]);
    assert_ne!(amended, before_rewrite);
    assert_eq!(
        repo.git(&["log", "-1", "--format=%s", &branch]),
        "two, amended"
    );
    let is_ancestor = Command::new("git")
        .args(["merge-base", "--is-ancestor", &before_rewrite, &branch])
        .current_dir(repo.path())
        .status()
        .unwrap();
    assert!(
        !is_ancestor.success(),
        "the rewrite was published as a forced update"
    );
    run(
        "GIT_SEQUENCE_EDITOR='sed -i 1s/^pick/reword/' GIT_EDITOR='sed -i 1s/.*/one,\\ reworded/' git rebase -q -i HEAD~2 && git log --format=%s | head -2",
    );
    assert_eq!(
        repo.git(&["log", "-2", "--format=%s", &branch]),
        "two, amended\none, reworded"
    );
    assert_eq!(repo.git(&["rev-parse", "main"]), main_before);
    assert_eq!(repo.git(&["rev-parse", "feature"]), feature_before);

    // show has the changes; rm keeps the branch with every commit.
    let shown = home.json(&["show", &id, "--json"]);
    assert_eq!(shown["changes"]["commits_ahead"], 2, "{shown}");
    assert!(shown["changes_error"].is_null(), "{shown}");
    home.ok(&["rm", &id]);
    assert_eq!(
        repo.git(&["rev-list", "--count", &format!("main..{branch}")]),
        "2"
    );
    assert!(
        !repo.git(&["worktree", "list"]).contains("workflow"),
        "jobs are not worktrees of the user's repository"
    );
}

#[test]
fn git_inside_runc_commits_rewrites_and_syncs() {
    crate::fixtures::each_checkout(|| {
        git_workflow_inside("docker", "git_inside_runc");
    });
}

#[test]
fn git_inside_gvisor_commits_rewrites_and_syncs() {
    crate::fixtures::each_checkout(|| {
        git_workflow_inside("runsc", "git_inside_gvisor");
    });
}

/// A branch the sandbox cannot resolve is not published: the user's branch stays.
#[test]
fn a_branch_pointing_nowhere_leaves_the_users_branch_where_it_was() {
    if !docker_available("a_branch_pointing_nowhere") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create_docker(&repo, &["--task", "forged"]);
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    let base = repo.git(&["rev-parse", &branch]);
    // The agent points its branch at a commit that exists nowhere.
    let result = home.json(&[
        "exec",
        &id,
        "--json",
        "--",
        "sh",
        "-c",
        "echo 0123456789abcdef0123456789abcdef01234567 > \"$(git rev-parse --git-dir)/refs/heads/$(git symbolic-ref --short HEAD)\"",
    ]);
    assert_eq!(result["exit_code"], 0, "{result}");
    // git inside cannot resolve the branch, so the sync reports no tip and the host keeps it.
    assert_eq!(repo.git(&["rev-parse", &branch]), base);
    let shown = home.json(&["show", &id, "--json"]);
    assert_eq!(shown["changes"]["branch_tip"], base.as_str(), "{shown}");
    // With no commit of the agent's on it, rm deletes the branch as for any job.
    home.ok(&["rm", &id]);
    assert!(!repo.branches().contains(&branch));
    assert_eq!(repo.git(&["rev-parse", "main"]), base);
}

/// Objects the agent wrote that fail fsck never reach the user's repository.
#[test]
fn a_corrupt_commit_from_inside_is_refused_by_fsck() {
    if !docker_available("a_corrupt_commit_from_inside_is_refused_by_fsck") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create_docker(&repo, &["--task", "corrupt"]);
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    let base = repo.git(&["rev-parse", &branch]);
    let script = r#"tree=$(git rev-parse HEAD^{tree}); tip=$(git rev-parse HEAD)
bad=$(printf 'tree %s\nparent %s\nauthor bad <a@b 1 +0000\ncommitter a <a@b> 1 +0000\n\nbad\n' "$tree" "$tip" | git hash-object -t commit -w --literally --stdin)
git update-ref "refs/heads/$(git symbolic-ref --short HEAD)" "$bad""#;
    let result = home.json(&["exec", &id, "--json", "--", "sh", "-c", script]);
    assert_eq!(result["exit_code"], 0, "{result}");
    let error = result["sync_error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        error.contains("fsck") || error.contains("index-pack"),
        "{result}"
    );
    assert_eq!(repo.git(&["rev-parse", &branch]), base, "the branch stayed");
    // `show` says the state is unknown (exit 12) rather than passing the old one off.
    let shown = home.run(&["show", &id, "--json"]);
    assert_eq!(shown.status.code(), Some(12), "{shown:?}");
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("show --json");
    assert!(shown["job"]["sync_error"].is_string(), "{shown}");
    assert!(shown["changes_error"].is_string(), "{shown}");
    let fsck = Command::new("git")
        .args(["fsck", "--full", "--strict"])
        .current_dir(repo.path())
        .status()
        .unwrap();
    assert!(fsck.success());
    home.ok(&["rm", &id, "--force"]);
}

/// Git's background housekeeping in the user's repository does not race a create or a sync:
/// the repository stays whole while `git gc` repacks it again and again. gc runs as auto-gc
/// does (default prune expiry; `--prune=now` is documented by git as unsafe beside any
/// concurrent writer, a plain `git fetch` included). A gc may still fail when a sync moves
/// the branch mid-repack ("does not point to a valid object", as beside a concurrent
/// fetch); that run changes nothing, the next succeeds, and the last one must.
#[test]
fn docker_jobs_are_created_while_git_gc_packs_the_repository() {
    crate::fixtures::each_checkout(|| {
        if !docker_available("docker_jobs_are_created_while_git_gc_packs_the_repository") {
            return;
        }
        let repo = FixtureRepo::with_files(3000, 300);
        let home = TestHome::new();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let gc = {
            let stop = stop.clone();
            let path = repo.path().to_path_buf();
            std::thread::spawn(move || {
                let mut runs = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let out = Command::new("git")
                        .args(["gc", "-q"])
                        .current_dir(&path)
                        .output()
                        .unwrap();
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    if out.status.success() {
                        runs += 1;
                    } else {
                        assert!(
                            stderr.contains("does not point to a valid object")
                                || stderr.contains("cannot lock ref"),
                            "git gc failed for another reason than a concurrent ref update: {stderr}"
                        );
                    }
                }
                runs
            })
        };
        for n in 0..4 {
            let job = home.create_docker(&repo, &["--task", &format!("gc-{n}")]);
            let id = text(&job, "id");
            home.sh(
                &id,
                &format!("echo {n} > gc.txt && git add gc.txt && git commit -q -m 'during gc {n}'"),
            );
            let shown = home.json(&["show", &id, "--json"]);
            assert_eq!(shown["changes"]["commits_ahead"], 1, "{shown}");
            home.ok(&["rm", &id]);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let runs = gc.join().unwrap();
        assert!(runs >= 1, "gc ran during the creates");
        let last_gc = Command::new("git")
            .args(["gc", "-q"])
            .current_dir(repo.path())
            .status()
            .unwrap();
        assert!(last_gc.success(), "gc succeeds once the jobs are gone");
        let fsck = Command::new("git")
            .args(["fsck", "--full", "--strict"])
            .current_dir(repo.path())
            .status()
            .unwrap();
        assert!(fsck.success());
    });
}

/// paddock run by an unprivileged user (with access to the Docker socket): the container
/// runs as that user, git inside works, `show` has its changes, and no owner changes.
fn fusermount_is_setuid() -> bool {
    std::fs::metadata("/usr/bin/fusermount3").is_ok_and(|m| m.mode() & 0o4000 != 0)
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn git_inside_works_when_paddock_is_not_root() {
    crate::fixtures::each_checkout(|| {
        if !docker_available("git_inside_works_when_paddock_is_not_root") {
            return;
        }
        if our_ids().0 != 0 {
            // Already unprivileged: the other tests in this file cover this case.
            return;
        }
        let socket_group = std::fs::metadata("/var/run/docker.sock")
            .expect("the Docker socket")
            .gid();
        let uid = 4242;
        let repo = FixtureRepo::new();
        let home = TestHome::new();
        let user_home = home.dir.path().join("user");
        std::fs::create_dir_all(&user_home).unwrap();
        crate::fixtures::chown_trees(&[repo.dir.path(), home.dir.path()], uid);
        let as_user = |args: &[&str]| -> Value {
            let output = Command::new("setpriv")
                .args([
                    &format!("--reuid={uid}"),
                    &format!("--regid={uid}"),
                    &format!("--groups={socket_group}"),
                    "--",
                    env!("CARGO_BIN_EXE_paddock"),
                ])
                .arg(args[0])
                .arg("--json")
                .args(&args[1..])
                .envs(home.envs.iter().map(|(k, v)| (k, v)))
                .env("HOME", &user_home)
                .env_remove("PADDOCK_RUNTIME")
                // Without root, overlays need a setuid fusermount3 and a user with a name
                // (uid 4242 has none here): worktree checkouts, as root's default run did,
                // except in the overlay run of a machine where paddock's default is a worktree.
                .env(
                    "PADDOCK_CHECKOUT",
                    match crate::fixtures::checkouts::chosen_checkout() {
                        Some("overlay") if fusermount_is_setuid() => "overlay",
                        _ => "worktree",
                    },
                )
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "paddock {args:?} as uid {uid}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            serde_json::from_slice(&output.stdout).unwrap()
        };
        let image = crate::fixtures::test_image();
        let repo_path = repo.path().to_str().unwrap();
        let job = as_user(&[
            "create",
            "--repo",
            repo_path,
            "--runtime",
            "docker",
            "--image",
            &image,
            "--task",
            "user",
        ]);
        let id = text(&job, "id");
        let result = as_user(&[
            "exec",
            &id,
            "--",
            "sh",
            "-c",
            "test \"$(id -u)\" = 4242 && echo u > u.txt && git add u.txt && git commit -q -m 'as a user' && echo wip > wip.txt",
        ]);
        assert_eq!(result["exit_code"], 0, "{result}");
        assert!(result["sync_error"].is_null(), "{result}");
        let shown = as_user(&["show", &id]);
        assert_eq!(shown["changes"]["commits_ahead"], 1, "{shown}");
        assert_eq!(
            shown["changes"]["uncommitted"][0]["path"], "wip.txt",
            "{shown}"
        );
        as_user(&["rm", &id]);
        let git = |args: &[&str]| {
            let output = Command::new("git")
                .args(["-c", "safe.directory=*"])
                .args(args)
                .current_dir(repo.path())
                .output()
                .unwrap();
            assert!(output.status.success(), "git {args:?}");
            String::from_utf8_lossy(&output.stdout).trim().to_string()
        };
        assert_eq!(
            git(&["log", "-1", "--format=%s", "agent/agent/user"]),
            "as a user"
        );
        let foreign = Command::new("find")
            .args([repo_path, "!", "-uid", &uid.to_string()])
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&foreign.stdout).trim(),
            "",
            "files in the repository changed owner"
        );
    });
}
