//! The first promise, attacked from inside the container: an agent may do anything inside its
//! job, and the user's repository (objects, refs, config, hooks, files and their owners) stays
//! as it was except for the job's own branch, and nothing the agent plants runs on the host
//! or leaks a host file into paddock's output. Each test drives the real binary against a
//! real repository and the real Docker daemon, under runc and gVisor. They fail when Docker
//! is absent unless PADDOCK_SKIP_DOCKER_TESTS=1.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::fixtures::{FixtureRepo, TestHome, docker_available, text};
use serde_json::Value;

/// Everything about a repository that must not change: every ref, and every file under it
/// (the checkout and `.git`) with its bytes, owner, group and mode.
#[derive(Debug, PartialEq)]
struct RepoState {
    refs: BTreeMap<String, String>,
    files: BTreeMap<PathBuf, (Vec<u8>, u32, u32, u32)>,
}

fn repo_state(repo: &FixtureRepo, except_refs: &[&str]) -> RepoState {
    let refs = repo
        .git(&["for-each-ref", "--format=%(refname) %(objectname)"])
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(name, _)| !except_refs.iter().any(|e| name.starts_with(e)))
        .map(|(n, o)| (n.to_string(), o.to_string()))
        .collect();
    let mut files = BTreeMap::new();
    let mut stack = vec![repo.path().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let relative = path.strip_prefix(repo.path()).unwrap().to_path_buf();
            // Objects and refs the job's sync adds are expected; their owners are not.
            let added_by_sync = relative.starts_with(".git/objects")
                || relative.starts_with(".git/refs/heads/agent")
                || relative.starts_with(".git/refs/paddock")
                || relative.starts_with(".git/logs");
            if meta.is_dir() {
                stack.push(path.clone());
            }
            let bytes = if meta.is_file() && !added_by_sync {
                std::fs::read(&path).unwrap()
            } else {
                Vec::new()
            };
            if added_by_sync && !meta.is_dir() && !relative.starts_with(".git/objects") {
                continue;
            }
            files.insert(relative, (bytes, meta.uid(), meta.gid(), meta.mode()));
        }
    }
    RepoState { refs, files }
}

/// The attack: every write an agent could try against the user's repository and against
/// what host-side git might later read, each allowed to fail. `MARK` is a host path that a
/// planted command would create if it ran on the host; `SECRET` a host file that a planted
/// symlink points at.
const ATTACK: &str = r#"
set +e
common=$(git rev-parse --git-common-dir)
gitdir=$(git rev-parse --git-dir)
echo "inside: git dir $gitdir, common dir $common"
# Every object the agent can reach, and the user's store at its own path.
for dir in "$common/objects" "$gitdir/objects" "$REPO_GIT/objects" $(cat "$gitdir/objects/info/alternates"); do
  rm -rf "$dir"/* "$dir"/.[!.]* 2>/dev/null
  chmod -R 000 "$dir" 2>/dev/null
done
# Move main and another branch, in the job's git dir and the user's.
head=$(git rev-parse HEAD)
git update-ref refs/heads/main "$head"; git update-ref refs/heads/feature "$head"
for git in "$REPO_GIT" "$common"; do
  mkdir -p "$git/refs/heads"; echo "$head" > "$git/refs/heads/main"; echo "$head" > "$git/refs/heads/feature"
  echo "$head refs/heads/main" > "$git/packed-refs"
done
# Plant commands in every config git might read, and hooks everywhere.
for config in "$gitdir/config" "$common/config" "$REPO_GIT/config" "$HOME/.gitconfig" "$gitdir/config.worktree" /workspace/.git/config; do
  git config --file "$config" core.fsmonitor "touch $MARK.fsmonitor"
  git config --file "$config" core.hooksPath /workspace/evil-hooks
  git config --file "$config" alias.status "!touch $MARK.alias"
  git config --file "$config" filter.evil.clean "touch $MARK.filter"
done
mkdir -p /workspace/evil-hooks
for hooks in "$gitdir/hooks" "$common/hooks" "$REPO_GIT/hooks" /workspace/evil-hooks; do
  for hook in pre-commit post-checkout post-merge reference-transaction fsmonitor-watchman pre-auto-gc; do
    printf '#!/bin/sh\ntouch %s.hook\n' "$MARK" > "$hooks/$hook" && chmod +x "$hooks/$hook"
  done
done
echo '* filter=evil' > .gitattributes
# Re-point the job's git dir: commondir, config.worktree, alternates.
echo "$REPO_GIT" > "$gitdir/commondir"
printf '[core]\n\tfsmonitor = touch %s.worktree\n' "$MARK" > "$gitdir/config.worktree"
git config --file "$gitdir/config" extensions.worktreeConfig true
echo /etc > "$gitdir/objects/info/alternates"
mv "$gitdir/objects/info" "$gitdir/objects/info.moved" && mkdir "$gitdir/objects/info" && echo "$REPO_GIT/objects" > "$gitdir/objects/info/alternates"
# Symlinks to host files, where host-side code might read: refs, objects, index, HEAD.
mkdir -p "$gitdir/refs/heads/agent/agent" "$gitdir/objects/ab"
ln -sf "$SECRET" "$gitdir/refs/heads/leak"
ln -sf "$SECRET" "$gitdir/refs/paddock-leak"
ln -sf "$SECRET" "$gitdir/objects/ab/cdef0123456789abcdef0123456789abcdef01"
ln -sf "$SECRET" "$gitdir/FETCH_HEAD"
ln -sf "$SECRET" /workspace/secret-link
# Replace the worktree's .git with a directory holding a planted config.
rm -f /workspace/.git; mv /workspace/.git /workspace/.git.moved
mkdir -p /workspace/.git 2>/dev/null && printf '[core]\n\tfsmonitor = touch %s.dotgit\n' "$MARK" > /workspace/.git/config
mkdir -p /workspace/nested/.git && printf '[core]\n\tfsmonitor = touch %s.nested\n' "$MARK" > /workspace/nested/.git/config
# Keep swapping whatever lands in the outbox (where a sync after an exec leaves its stream)
# for symlinks to the host file, in the background, for the execs that follow.
( while :; do
    for f in /paddock/outbox/*; do [ -e "$f" ] || continue; ln -sf "$SECRET" "$f.x" && mv -f "$f.x" "$f"; done
  done ) >/dev/null 2>&1 &
echo "attack done"
exit 0
"#;

/// A job on `runtime` (docker or runsc) with the test image.
fn create_on(home: &TestHome, repo: &FixtureRepo, runtime: &str, task: &str) -> Value {
    let image = crate::fixtures::test_image();
    create_with(
        home,
        repo,
        &["--runtime", runtime, "--image", &image, "--task", task],
    )
}

fn create_with(home: &TestHome, repo: &FixtureRepo, flags: &[&str]) -> Value {
    let mut args = vec!["create", "--repo", repo.path().to_str().unwrap(), "--json"];
    args.extend_from_slice(flags);
    home.json(&args)
}

/// Runs the attack in a job on `runtime` and checks the promise on the host.
fn attack_from_inside(runtime: &str, test: &str) {
    attack_in(runtime, test, false);
}

/// The attack in a job on `runtime`, whose image is the test image or (`devcontainer`) the
/// one built from examples/devcontainer (which asks for `privileged` and `capAdd`).
fn attack_in(runtime: &str, test: &str, devcontainer: bool) {
    if !docker_available(test) {
        return;
    }
    attack_in_home(
        &TestHome::new(),
        &FixtureRepo::new(),
        &[],
        runtime,
        devcontainer,
    );
}

/// The attack in a job of `home` made with `flags` besides the runtime's (a remote engine's
/// tests pass `--engine`), on `repo`.
pub(crate) fn attack_in_home(
    home: &TestHome,
    repo: &FixtureRepo,
    flags: &[&str],
    runtime: &str,
    devcontainer: bool,
) {
    if devcontainer {
        let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/devcontainer/.devcontainer");
        for name in ["devcontainer.json", "Dockerfile"] {
            let text = std::fs::read_to_string(example.join(name)).unwrap();
            repo.write(&format!(".devcontainer/{name}"), &text);
        }
        repo.commit_all("devcontainer");
    }
    repo.git(&["branch", "feature"]);
    repo.git(&["pack-refs", "--all"]);
    let scratch = tempfile::tempdir().unwrap();
    let mark = scratch.path().join("pwned");
    let secret = scratch.path().join("secret.txt");
    let marker = format!("SECRET-{}", std::process::id());
    std::fs::write(&secret, format!("{marker}\n")).unwrap();
    let job = if devcontainer {
        let job = create_with(home, repo, &["--runtime", runtime, "--task", "hostile"]);
        assert!(
            text(&job["devcontainer"], "image").starts_with("paddock-devc:"),
            "{job}"
        );
        job
    } else if flags.is_empty() {
        create_on(home, repo, runtime, "hostile")
    } else {
        let image = crate::fixtures::test_image();
        let mut all = vec!["--runtime", runtime, "--image", &image, "--task", "hostile"];
        all.extend_from_slice(flags);
        create_with(home, repo, &all)
    };
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    let before = repo_state(repo, &[&format!("refs/heads/{branch}")]);
    assert!(before.files.keys().any(|p| p.starts_with(".git/hooks")));

    // A legitimate commit first: the job's branch moves, and survives what follows.
    home.sh(
        &id,
        "echo work > work.txt && git add work.txt && git commit -q -m 'agent work'",
    );
    let repo_git = repo.path().join(".git").canonicalize().unwrap();
    let script = format!(
        "REPO_GIT='{}' MARK='{}' SECRET='{}'\n{ATTACK}",
        repo_git.display(),
        mark.display(),
        secret.display()
    );
    let attacked = home.json(&["exec", &id, "--json", "--", "sh", "-c", &script]);
    assert_eq!(attacked["exit_code"], 0, "{attacked}");
    assert!(
        text(&attacked, "stdout").contains("attack done"),
        "{attacked}"
    );

    // The host reads the job as a developer would, then removes it.
    let mut outputs = vec![attacked.to_string()];
    for args in [
        vec!["exec", id.as_str(), "--json", "--", "true"],
        vec!["exec", id.as_str(), "--json", "--", "sh", "-c", "sleep 0.2"],
        vec!["diff", id.as_str()],
        vec!["diff", id.as_str(), "--stat"],
        vec!["log", id.as_str()],
        vec!["log", id.as_str(), "--json"],
        vec!["show", id.as_str()],
        vec!["show", id.as_str(), "--json"],
        vec!["ls"],
        vec!["rm", id.as_str()],
    ] {
        let output = home.run(&args);
        outputs.push(String::from_utf8_lossy(&output.stdout).into_owned());
        outputs.push(String::from_utf8_lossy(&output.stderr).into_owned());
        if args[0] == "rm" {
            assert!(output.status.success(), "rm: {outputs:?}");
        }
    }

    let fsck = Command::new("git")
        .args(["fsck", "--full", "--strict"])
        .current_dir(repo.path())
        .output()
        .unwrap();
    assert!(
        fsck.status.success(),
        "git fsck: {}",
        String::from_utf8_lossy(&fsck.stderr)
    );
    let after = repo_state(repo, &[&format!("refs/heads/{branch}"), "refs/paddock/"]);
    assert_eq!(
        before.refs, after.refs,
        "refs other than the job's branch moved"
    );
    for (path, was) in &before.files {
        let now = after
            .files
            .get(path)
            .unwrap_or_else(|| panic!("{} vanished", path.display()));
        assert_eq!(
            was,
            now,
            "{} changed (bytes, owner, group or mode)",
            path.display()
        );
    }
    for (path, (_, uid, gid, _)) in &after.files {
        if !before.files.contains_key(path) {
            // New objects and refs from the sync belong to paddock's user.
            assert_eq!(
                (*uid, *gid),
                our_ids(),
                "{} has a foreign owner",
                path.display()
            );
        }
    }
    // The agent's legitimate commit is on its branch; nothing it planted ran on the host.
    assert_eq!(
        repo.git(&["log", "-1", "--format=%s", &branch]),
        "agent work"
    );
    let planted: Vec<_> = std::fs::read_dir(scratch.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("pwned"))
        .collect();
    assert!(
        planted.is_empty(),
        "planted commands ran on the host: {planted:?}"
    );
    let logs = walk_text(&home.root());
    for text in outputs.iter().chain(logs.iter()) {
        assert!(
            !text.contains(&marker),
            "a host file's bytes reached paddock's output or logs"
        );
    }
    assert_eq!(
        repo.worktree_count(),
        1,
        "jobs are not worktrees of the user's repo"
    );
}

/// This test process's uid and gid (the owner of `/proc/self`).
fn our_ids() -> (u32, u32) {
    let meta = std::fs::metadata("/proc/self").expect("procfs is mounted");
    (meta.uid(), meta.gid())
}

/// Every readable text file under `root` (paddock's logs and records).
fn walk_text(root: &Path) -> Vec<String> {
    let mut texts = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file()
                && let Ok(text) = std::fs::read_to_string(&path)
            {
                texts.push(text);
            }
        }
    }
    texts
}

#[test]
fn a_hostile_agent_under_runc_cannot_touch_the_users_repository() {
    attack_from_inside("docker", "a_hostile_agent_under_runc");
}

#[test]
fn a_hostile_agent_under_a_microvm_cannot_touch_the_users_repository() {
    if !crate::fixtures::microvm_available("a_hostile_agent_under_a_microvm") {
        return;
    }
    attack_from_inside("microvm", "a_hostile_agent_under_a_microvm");
}

#[test]
fn a_hostile_agent_under_gvisor_cannot_touch_the_users_repository() {
    attack_from_inside("runsc", "a_hostile_agent_under_gvisor");
}

#[test]
fn a_hostile_agent_in_a_devcontainer_job_cannot_touch_the_users_repository() {
    attack_in("docker", "a_hostile_agent_in_a_devcontainer_job", true);
}

#[test]
fn a_hostile_agent_in_a_gvisor_devcontainer_job_cannot_touch_the_users_repository() {
    attack_in(
        "runsc",
        "a_hostile_agent_in_a_gvisor_devcontainer_job",
        true,
    );
}

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
    git_workflow_inside("docker", "git_inside_runc");
}

#[test]
fn git_inside_gvisor_commits_rewrites_and_syncs() {
    git_workflow_inside("runsc", "git_inside_gvisor");
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
}

/// paddock run by an unprivileged user (with access to the Docker socket): the container
/// runs as that user, git inside works, `show` has its changes, and no owner changes.
fn fusermount_is_setuid() -> bool {
    std::fs::metadata("/usr/bin/fusermount3").is_ok_and(|m| m.mode() & 0o4000 != 0)
}

#[test]
fn git_inside_works_when_paddock_is_not_root() {
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
            // Without root, overlays need a setuid fusermount3; where there is none (this
            // test's machine) the overlay pass runs this test with worktree checkouts.
            .env(
                "PADDOCK_CHECKOUT",
                match std::env::var("PADDOCK_CHECKOUT") {
                    Ok(mode) if fusermount_is_setuid() => mode,
                    _ => "worktree".into(),
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
}

/// Every file under `root` with its bytes, owner, group and mode (links as their target).
fn tree_state(root: &Path) -> BTreeMap<PathBuf, (Vec<u8>, u32, u32, u32)> {
    let mut files = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let bytes = if meta.is_file() {
                std::fs::read(&path).unwrap()
            } else if meta.file_type().is_symlink() {
                std::fs::read_link(&path)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else {
                stack.push(path.clone());
                Vec::new()
            };
            let relative = path.strip_prefix(root).unwrap().to_path_buf();
            files.insert(relative, (bytes, meta.uid(), meta.gid(), meta.mode()));
        }
    }
    files
}

/// `checkout: overlay` shares one pristine checkout between the jobs of a commit: an agent
/// that deletes, rewrites, chmods and links everything it sees, and goes looking for the
/// lower layer's path, changes only its own upper dir; the pristine tree stays byte for byte
/// and owner for owner, and the next job on the commit gets the commit's files.
fn attack_the_pristine_checkout(runtime: &str, test: &str) {
    if !docker_available(test) || !crate::fixtures::overlay_available(test) {
        return;
    }
    let repo = FixtureRepo::with_files(50, 100);
    let home = TestHome::new().env("PADDOCK_CHECKOUT", "overlay");
    let first = create_on(&home, &repo, runtime, "attacker");
    let pristine_root = home.root().join("pristine");
    let before = tree_state(&pristine_root);
    assert!(before.len() > 50, "a pristine checkout exists: {before:?}");
    let id = text(&first, "id");
    let attack = r#"
        cd /workspace
        lower=$(sed -n 's/.*lowerdir=\([^,]*\).*/\1/p' /proc/self/mountinfo | head -1)
        echo "lower: $lower"
        if [ -n "$lower" ] && [ -e "$lower" ]; then echo REACHED; fi
        for f in $(git ls-files); do echo owned > "$f" 2>/dev/null; chmod 777 "$f" 2>/dev/null; done
        ln -sf /etc/passwd linked
        index="$(git rev-parse --git-dir)/index"
        printf wreck >> "$index" 2>/dev/null && echo INDEX-WRITTEN
        chmod 666 "$index" 2>/dev/null && echo INDEX-CHMOD
        umount /workspace 2>/dev/null && echo UNMOUNTED
        mount -o remount,rw /workspace 2>/dev/null && echo REMOUNTED
        find . -path ./.git -prune -o -type f -print | head -5 | xargs rm -f
        rm -rf d* 2>/dev/null
        git add -A && git commit -qm wreck && echo committed
    "#;
    let out = home.ok(&["exec", &id, "--", "sh", "-c", attack]);
    assert!(
        !out.contains("REACHED"),
        "the lower layer is reachable: {out}"
    );
    assert!(
        !out.contains("UNMOUNTED") && !out.contains("REMOUNTED"),
        "{out}"
    );
    assert!(out.contains("committed"), "{out}");
    let after = tree_state(&pristine_root);
    let changed: Vec<_> = after
        .keys()
        .chain(before.keys())
        .filter(|k| after.get(*k) != before.get(*k))
        .collect();
    assert!(
        changed.is_empty(),
        "the attack changed the pristine checkout (bytes, owner or mode): {changed:?}"
    );
    // The next job on the same commit sees the commit, not the attacker's work.
    let second = create_on(&home, &repo, runtime, "victim");
    let second_id = text(&second, "id");
    let status = home.ok(&["exec", &second_id, "--", "git", "status", "--porcelain"]);
    assert_eq!(status.trim(), "", "the second job's checkout is not clean");
    let listed = home.ok(&["exec", &second_id, "--", "sh", "-c", "git ls-files | wc -l"]);
    assert_eq!(
        listed.trim(),
        repo.git(&["ls-files"]).lines().count().to_string()
    );
    let wrecked = home.ok(&[
        "exec",
        &second_id,
        "--",
        "sh",
        "-c",
        "grep -rl owned . | grep -v '^./.git' | wc -l",
    ]);
    assert_eq!(
        wrecked.trim(),
        "0",
        "the attacker's writes reached another job"
    );
    home.ok(&["rm", &id, "--delete-branch"]);
    home.ok(&["rm", &second_id]);
    assert_eq!(home.mounts(), Vec::<String>::new(), "rm left a mount");
}

#[test]
fn a_hostile_agent_under_runc_cannot_change_the_shared_pristine_checkout() {
    attack_the_pristine_checkout(
        "docker",
        "a_hostile_agent_under_runc_cannot_change_the_shared_pristine_checkout",
    );
}

#[test]
fn a_hostile_agent_under_gvisor_cannot_change_the_shared_pristine_checkout() {
    attack_the_pristine_checkout(
        "runsc",
        "a_hostile_agent_under_gvisor_cannot_change_the_shared_pristine_checkout",
    );
}
