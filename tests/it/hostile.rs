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
pub(crate) fn create_on(home: &TestHome, repo: &FixtureRepo, runtime: &str, task: &str) -> Value {
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
        &TestHome::new().allowing_images(&["paddock-base:*"]),
        &FixtureRepo::new(),
        &[],
        runtime,
        devcontainer,
    );
}

/// The attack in a job of `home` made with `flags` besides the runtime's (a remote engine's
/// tests pass `--engine`), on `repo`.
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
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
    // The attack runs under the runtime asked for, never a quiet fallback.
    assert_eq!(job["runtime"], runtime, "{job}");
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
pub(crate) fn our_ids() -> (u32, u32) {
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
    crate::fixtures::each_checkout(|| {
        attack_from_inside("docker", "a_hostile_agent_under_runc");
    });
}

#[test]
fn a_hostile_agent_under_a_microvm_cannot_touch_the_users_repository() {
    crate::fixtures::each_checkout(|| {
        if !crate::fixtures::microvm_available("a_hostile_agent_under_a_microvm") {
            return;
        }
        attack_from_inside("microvm", "a_hostile_agent_under_a_microvm");
    });
}

#[test]
fn a_hostile_agent_under_gvisor_cannot_touch_the_users_repository() {
    crate::fixtures::each_checkout(|| {
        attack_from_inside("runsc", "a_hostile_agent_under_gvisor");
    });
}

#[test]
fn a_hostile_agent_in_a_devcontainer_job_cannot_touch_the_users_repository() {
    crate::fixtures::each_checkout(|| {
        attack_in("docker", "a_hostile_agent_in_a_devcontainer_job", true);
    });
}

#[test]
fn a_hostile_agent_in_a_gvisor_devcontainer_job_cannot_touch_the_users_repository() {
    crate::fixtures::each_checkout(|| {
        attack_in(
            "runsc",
            "a_hostile_agent_in_a_gvisor_devcontainer_job",
            true,
        );
    });
}
