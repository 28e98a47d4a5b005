//! The sync after an exec (Docker): a command that leaves the job's branch where the host
//! last synced it costs no sync round; one that commits has its commit on the branch in the
//! user's repository when `exec` returns; and an agent that forges the "unchanged" report
//! hides its commit only until the next sync, never loses it.

use std::path::PathBuf;

use crate::fixtures::{FixtureRepo, TestHome, docker_available, text};
use serde_json::Value;

/// `paddock exec JOB --json -- sh -c SCRIPT`, which must exit 0 with no sync error.
fn sh(home: &TestHome, id: &str, script: &str) -> Value {
    let result = home.json(&["exec", id, "--json", "--", "sh", "-c", script]);
    assert_eq!(result["exit_code"], 0, "{script}: {result}");
    assert!(result["sync_error"].is_null(), "{script}: {result}");
    result
}

/// The last line of the job's audit log.
fn last_audit(home: &TestHome, id: &str) -> Value {
    let log = std::fs::read_to_string(home.root().join("logs").join(id).join("exec.jsonl"))
        .expect("an audit log");
    serde_json::from_str(log.lines().last().expect("an audit line")).expect("json")
}

/// The job's scratch repository, which receives its syncs.
fn scratch(home: &TestHome, id: &str) -> PathBuf {
    home.root().join("work").join(id).join("sync.git")
}

/// A Docker job of a fresh fixture repository made for `task`: the repository, the state
/// root, the job's id and branch; `None` (the test skips) without Docker.
fn docker_job(test: &str, task: &str) -> Option<(FixtureRepo, TestHome, String, String)> {
    if !docker_available(test) {
        return None;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create_docker(&repo, &["--task", task]);
    let (id, branch) = (text(&job, "id"), text(&job, "branch"));
    Some((repo, home, id, branch))
}

#[test]
fn an_exec_that_changes_nothing_syncs_nothing_and_a_commit_lands_before_exec_returns() {
    let Some((repo, home, id, branch)) =
        docker_job("an_exec_that_changes_nothing_syncs_nothing", "quiet")
    else {
        return;
    };
    let base = repo.git(&["rev-parse", &branch]);

    // Nothing changed, and uncommitted edits are not the branch's: no sync round at all,
    // so the scratch repository is not even made.
    sh(&home, &id, "true");
    let audit = last_audit(&home, &id);
    assert_eq!(audit["sync"], "unchanged", "{audit}");
    assert!(audit["sync_ms"].is_null(), "{audit}");
    sh(&home, &id, "echo draft > draft.txt");
    assert_eq!(last_audit(&home, &id)["sync"], "unchanged");
    assert!(
        !scratch(&home, &id).exists(),
        "no sync ran, so nothing received"
    );

    // A commit is on the branch in the user's repository when exec returns, its objects
    // loose there (as a small `git fetch` leaves them), not one more pack per commit.
    let packs =
        || std::fs::read_dir(repo.path().join(".git/objects/pack")).map_or(0, Iterator::count);
    let packs_before = packs();
    sh(
        &home,
        &id,
        "git add draft.txt && git commit -q -m draft && git pack-refs --all",
    );
    let audit = last_audit(&home, &id);
    assert_eq!(audit["sync"], "synced", "{audit}");
    assert!(audit["sync_ms"].is_u64(), "{audit}");
    let tip = repo.git(&["rev-parse", &branch]);
    assert_ne!(tip, base);
    assert_eq!(repo.git(&["log", "-1", "--format=%s", &branch]), "draft");
    assert_eq!(packs(), packs_before, "no pack for a commit");
    let tip_object = repo
        .path()
        .join(".git/objects")
        .join(&tip[..2])
        .join(&tip[2..]);
    assert!(tip_object.is_file(), "the commit is a loose object");

    // After it (refs now packed inside), a quiet exec leaves the scratch repository as it was.
    let scratch_ref = scratch(&home, &id).join("refs/sync/branch");
    let before = std::fs::metadata(&scratch_ref)
        .and_then(|m| m.modified())
        .expect("the scratch branch");
    sh(&home, &id, "git status --short");
    assert_eq!(last_audit(&home, &id)["sync"], "unchanged");
    assert_eq!(
        std::fs::metadata(&scratch_ref)
            .and_then(|m| m.modified())
            .expect("the scratch branch"),
        before,
        "the scratch repository was not touched"
    );

    // Back to a commit the host has: the branch moves back, and no pack (an empty one)
    // lands in the user's repository.
    let before_reset = packs();
    sh(&home, &id, "git reset -q --hard HEAD~1");
    assert_eq!(last_audit(&home, &id)["sync"], "synced");
    assert_eq!(repo.git(&["rev-parse", &branch]), base);
    assert_eq!(packs(), before_reset, "nothing new reached the repository");
    sh(&home, &id, "git reset -q --hard ORIG_HEAD");
    assert_eq!(repo.git(&["rev-parse", &branch]), tip);

    // The user's copy of the branch deleted on the host: the next exec, though it changed
    // nothing inside, syncs and puts it back.
    repo.git(&["branch", "-D", &branch]);
    sh(&home, &id, "true");
    assert_eq!(last_audit(&home, &id)["sync"], "synced");
    assert_eq!(repo.git(&["rev-parse", &branch]), tip);
    home.ok(&["rm", &id]);
}

/// The agent's command finds the outbox file its exec's report goes to (the wrapper's
/// command line names it), writes `unchanged` there and makes it read-only, so the
/// wrapper's own report cannot replace it; then it commits.
const FORGE_AND_COMMIT: &str = r#"rc=$(tr '\0' '\n' </proc/$PPID/cmdline | grep -o '/paddock/outbox/[0-9a-f]*\.rc' | head -n 1)
test -n "$rc" || exit 3
echo unchanged >"$rc" && chmod a-w "$rc"
echo hidden > hidden.txt && git add hidden.txt && git commit -q -m hidden"#;

/// A forged "unchanged" skips that exec's sync and nothing else: the host keeps the last
/// tip that came through a checked stream, so the next sync compares against it and brings
/// the commit out.
fn forged_report_is_caught(then: &str, test: &str) {
    let Some((repo, home, id, branch)) = docker_job(test, "liar") else {
        return;
    };
    let base = repo.git(&["rev-parse", &branch]);

    sh(&home, &id, FORGE_AND_COMMIT);
    assert_eq!(
        last_audit(&home, &id)["sync"],
        "unchanged",
        "the forged report was taken"
    );
    assert_eq!(
        repo.git(&["rev-parse", &branch]),
        base,
        "the hidden commit did not come out with this exec"
    );
    let record: Value = serde_json::from_slice(
        &std::fs::read(home.root().join("jobs").join(format!("{id}.json"))).expect("the record"),
    )
    .expect("json");
    assert!(
        record.get("synced_at").is_some_and(Value::is_null),
        "a skipped sync is not recorded as one: {record}"
    );

    match then {
        "exec" => {
            sh(&home, &id, "true");
            assert_eq!(last_audit(&home, &id)["sync"], "synced");
            assert_eq!(repo.git(&["log", "-1", "--format=%s", &branch]), "hidden");
            home.ok(&["rm", &id]);
        }
        _ => {
            home.ok(&["rm", &id]);
            assert_eq!(
                repo.git(&["log", "-1", "--format=%s", &branch]),
                "hidden",
                "rm keeps the branch with the hidden commit"
            );
        }
    }
    let fsck = std::process::Command::new("git")
        .args(["fsck", "--full", "--strict"])
        .current_dir(repo.path())
        .status()
        .expect("git runs");
    assert!(fsck.success());
}

#[test]
fn a_commit_hidden_by_a_forged_report_comes_out_at_the_next_exec() {
    forged_report_is_caught("exec", "a_commit_hidden_by_a_forged_report_next_exec");
}

#[test]
fn a_commit_hidden_by_a_forged_report_comes_out_at_rm() {
    forged_report_is_caught("rm", "a_commit_hidden_by_a_forged_report_rm");
}

/// After a command, the sandbox half is handed the tip the builtins read from the branch's
/// ref file and resolves nothing (`fast` in sync.sh). A ref file naming something that is not
/// a commit (an annotated tag, written there by hand: git itself refuses) makes that fast sync
/// fail on the host; the exec then syncs in full, which peels it, and reports no error.
#[test]
fn a_fast_sync_that_fails_is_followed_by_a_full_one() {
    let Some((repo, home, id, branch)) =
        docker_job("a_fast_sync_that_fails_is_followed_by_a_full_one", "tagged")
    else {
        return;
    };
    sh(
        &home,
        &id,
        r#"git commit -q --allow-empty -m tagged && git tag -a v1 -m v1 &&
           ref="$(git rev-parse --git-dir)/refs/heads/$(git symbolic-ref --short HEAD)" &&
           git rev-parse v1 >"$ref" && test "$(git cat-file -t "$(cat "$ref")")" = tag"#,
    );
    let audit = last_audit(&home, &id);
    assert_eq!(audit["sync"], "synced", "{audit}");
    assert_eq!(
        repo.git(&["log", "-1", "--format=%s", &branch]),
        "tagged",
        "the branch is at the tag's commit"
    );
    assert_eq!(repo.git(&["cat-file", "-t", &branch]), "commit");
    home.ok(&["rm", &id]);
}
