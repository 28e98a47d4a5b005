//! Issue 43, parts 1-3, with the real engine: `checkpoint` saves a job's workspace (a binary,
//! a link, an executable, a 50 MB file, a commit, a staged change with more edits over it,
//! an untracked file), `restore` brings back every byte, mode and link and the index after
//! the agent wiped it all and committed a rewrite (and with `--branch` the commit), `fork
//! -n 4` makes four jobs on four branches from it whose changes stay their own, no other job
//! can read a checkpoint, the checkpoint outlives `rm`, a hostile workspace (a huge sparse
//! file, a tree past PATH_MAX) is refused at once, and a paddock killed in the middle of a
//! checkpoint, a restore or a fork is converged by one sweep with nothing lost.

use std::os::unix::process::ExitStatusExt as _;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::fixtures::{FixtureRepo, TestHome, docker_available, test_image, text};

/// What the agent builds before the checkpoint.
const BUILD: &str = "set -e
head -c 1000000 /dev/urandom > blob.bin
git add blob.bin && git commit -qm binary
ln -s blob.bin link
printf '#!/bin/sh\\necho hi\\n' > tool.sh && chmod +x tool.sh
head -c 50000000 /dev/urandom > big.bin
echo staged > part.txt && git add part.txt && echo unstaged >> part.txt
echo loose > untracked.txt";

/// The workspace as the agent sees it: each file's kind, mode and hash (a link's target),
/// then the index.
const STATE: &str = r#"find . -path ./.git -prune -o \( -type f -o -type l \) -print | LC_ALL=C sort |
while IFS= read -r f; do
  if [ -L "$f" ]; then echo "L $f $(readlink "$f")"; else echo "F $f $(stat -c %a "$f") $(sha256sum < "$f" | cut -c1-16)"; fi
done
echo index; git ls-files -s"#;

/// The agent wipes everything, commits a rewrite and leaves junk around.
const WIPE: &str = "set -e; git rm -rqf . ; rm -rf ./*; echo rewrite > new.txt; git add -A; \
                    git commit -qm rewrite; mkdir junk; echo x > junk/file; echo y > stray.txt";

/// The job's record as `show --json` prints it (a paused job's show exits 12: its changes
/// are the last sync's).
fn record(home: &TestHome, id: &str) -> Value {
    let shown = home.run(&["show", id, "--json"]);
    let view: Value = serde_json::from_slice(&shown.stdout).expect("show prints JSON");
    view["job"].clone()
}

fn tip(repo: &FixtureRepo, branch: &str) -> String {
    repo.git(&["rev-parse", branch]).trim().to_string()
}

fn jobs_of(answer: &Value) -> Vec<String> {
    answer["jobs"]
        .as_array()
        .expect("a fork lists its jobs")
        .iter()
        .map(|job| text(job, "id"))
        .collect()
}

/// The whole round trip under one runtime; `isolated`: its jobs cannot see each other's
/// files (a container or VM), so what another job can read is checked too.
fn round_trip(create: &[&str], isolated: bool) {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let mut args = create.to_vec();
    args.extend(["--task", "cp"]);
    let job = home.create(&repo, &args);
    let (id, branch) = (text(&job, "id"), text(&job, "branch"));
    home.sh(&id, BUILD);
    let before = home.sh(&id, STATE);
    let built = tip(&repo, &branch);

    let started = Instant::now();
    let cp = home.json(&["checkpoint", &id, "--name", "built", "--json"]);
    eprintln!("checkpoint took {:?}", started.elapsed());
    assert_eq!(cp["tip"], built.as_str(), "{cp}");
    assert!(cp["files"].as_u64().unwrap() >= 5, "{cp}");
    assert!(cp["bytes"].as_u64().unwrap() >= 50_000_000, "{cp}");
    let commit = text(&cp, "commit");

    home.sh(&id, WIPE);
    assert_ne!(tip(&repo, &branch), built);
    let restored = home.json(&["restore", &id, "built", "--branch", "--json"]);
    assert_eq!(restored["branch_moved"], true, "{restored}");
    assert_eq!(
        home.sh(&id, STATE),
        before,
        "every byte, mode, link and the index"
    );
    assert_eq!(tip(&repo, &branch), built, "the branch is back");

    let forked = home.json(&["fork", &id, "--from", "built", "-n", "4", "--json"]);
    let forks = jobs_of(&forked);
    assert_eq!(forks.len(), 4, "{forked}");
    let mut branches = std::collections::BTreeSet::new();
    for fork in &forks {
        assert_eq!(home.sh(fork, STATE), before, "fork {fork}");
        let view = home.json(&["show", fork, "--json"]);
        assert_eq!(view["job"]["forked_from"]["job"], id.as_str(), "{view}");
        assert_eq!(view["job"]["forked_from"]["checkpoint"], "built", "{view}");
        branches.insert(text(&view["job"], "branch"));
    }
    assert_eq!(branches.len(), 4, "a branch each");
    home.sh(&forks[0], "echo mine > only-first.txt");
    for other in forks.iter().skip(1).chain([&id]) {
        assert_eq!(
            home.sh(other, "test -e only-first.txt && echo seen || echo unseen")
                .trim(),
            "unseen",
            "{other}"
        );
    }

    if isolated {
        // A job made afresh reads neither the checkpoint's objects nor the wip store.
        let plain = text(&home.create(&repo, create), "id");
        let probe = format!(
            "git cat-file -e {commit} 2>/dev/null && echo readable || echo unreadable; \
             test -e {} && echo store || echo no-store",
            text(&cp, "wip_store")
        );
        assert_eq!(home.sh(&plain, &probe).trim(), "unreadable\nno-store");
        home.ok(&["rm", &plain]);
    }

    // The checkpoint outlives its job, in the wip store.
    for job in forks.iter().chain([&id]) {
        home.ok(&["rm", job, "--force"]);
    }
    let listed = home.json(&["checkpoints", &id, "--json"]);
    assert_eq!(listed["checkpoints"][0]["name"], "built", "{listed}");
    let store = std::path::PathBuf::from(text(&cp, "wip_store"));
    let held = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&store)
        .args(["rev-parse", &text(&cp, "ref")])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&held.stdout).trim(), commit);
    home.ok(&["checkpoint", "rm", &id, "built"]);
    // Neither the job nor a checkpoint of it is left: no such job.
    assert_eq!(home.run(&["checkpoints", &id]).status.code(), Some(5));
}

#[test]
fn checkpoint_restore_and_fork_runc() {
    if !docker_available("checkpoint_restore_and_fork_runc") {
        return;
    }
    let image = test_image();
    round_trip(&["--runtime", "docker", "--image", &image], true);
}

#[test]
fn checkpoint_restore_and_fork_gvisor() {
    if !docker_available("checkpoint_restore_and_fork_gvisor") {
        return;
    }
    let image = test_image();
    round_trip(&["--runtime", "runsc", "--image", &image], true);
}

#[test]
fn checkpoint_restore_and_fork_process_runtime() {
    round_trip(&["--runtime", "process"], false);
}

/// An idle job's checkpoint runs in its container (nothing of the agent's runs to freeze);
/// one with a process the agent left running freezes it for the moment and thaws it; a
/// paused job's is read beside its frozen container, and it stays paused.
#[test]
fn a_paused_runc_job_is_checkpointed_and_stays_paused() {
    if !docker_available("a_paused_runc_job_is_checkpointed_and_stays_paused") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let image = test_image();
    let id = text(&home.create(&repo, &["--image", &image]), "id");
    home.sh(&id, "echo draft > draft.txt");
    let idle = home.json(&["checkpoint", &id, "--name", "idle", "--json"]);
    assert_eq!(idle["frozen"], false, "{idle}");
    home.sh(&id, "setsid sleep 600 >/dev/null 2>&1 </dev/null &");
    let busy = home.json(&["checkpoint", &id, "--name", "busy", "--json"]);
    assert_eq!(busy["frozen"], true, "{busy}");
    assert!(
        record(&home, &id).get("paused_at").is_none(),
        "thawed after"
    );
    assert_eq!(home.sh(&id, "echo alive"), "alive\n");
    home.ok(&["pause", &id]);
    let cp = home.json(&["checkpoint", &id, "--name", "while-paused", "--json"]);
    assert_eq!(cp["files"], 1, "{cp}");
    assert_eq!(cp["frozen"], true, "{cp}");
    let view = record(&home, &id);
    assert!(view["paused_at"].is_string(), "still paused: {view}");
    home.ok(&["resume", &id]);
    home.ok(&["rm", &id, "--force"]);
}

/// A huge sparse file and a tree deeper than PATH_MAX: refused at once, nothing kept.
#[test]
fn a_hostile_workspace_is_refused_cleanly_runc() {
    if !docker_available("a_hostile_workspace_is_refused_cleanly_runc") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let _cleanup = crate::hostile_ids::DeepCleanup(home.root());
    let image = test_image();
    let id = text(&home.create(&repo, &["--image", &image]), "id");
    home.sh(&id, "truncate -s 3G sparse.img");
    let started = Instant::now();
    let refused = home.run(&["checkpoint", &id, "--name", "sparse"]);
    assert_eq!(refused.status.code(), Some(9), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("checkpoint"));
    assert!(started.elapsed() < Duration::from_secs(30));
    home.sh(&id, "rm sparse.img");
    // Two chains of 11 directories of 200 characters, one moved to the other's bottom.
    home.sh(
        &id,
        "set -e; n=$(head -c 200 /dev/zero | tr '\\0' d); p=deep; q=aside; \
         for i in 1 2 3 4 5 6 7 8 9 10 11; do p=$p/$n; q=$q/$n; done; \
         mkdir -p $p $q; echo x > $q/f; mv aside/$n $p/more; rmdir aside",
    );
    let started = Instant::now();
    let refused = home.run(&["checkpoint", &id, "--name", "deep"]);
    assert_eq!(refused.status.code(), Some(9), "{refused:?}");
    assert!(started.elapsed() < Duration::from_secs(30));
    home.sh(&id, "rm -rf deep");
    // 20,000 levels, as deep_trees.rs makes them.
    home.sh(
        &id,
        "perl -e 'mkdir \"zz\"; chdir \"zz\"; $n = 0; while ($n < 20000) { mkdir \"d\" or last; chdir \"d\" or last; $n++ }'",
    );
    let started = Instant::now();
    let refused = home.run(&["checkpoint", &id, "--name", "levels"]);
    assert_eq!(refused.status.code(), Some(9), "{refused:?}");
    assert!(started.elapsed() < Duration::from_secs(60));
    let listed = home.json(&["checkpoints", &id, "--json"]);
    assert!(
        listed["checkpoints"].as_array().unwrap().is_empty(),
        "{listed}"
    );
    let view = record(&home, &id);
    assert!(view.get("paused_at").is_none(), "thawed: {view}");
    home.ok(&["rm", &id, "--force"]);
}

/// `paddock ARGS` with `PADDOCK_CRASH_AT=point`: it must die by SIGKILL there.
fn killed_at(home: &TestHome, point: &str, args: &[&str]) {
    let output = home
        .cmd(args)
        .env("PADDOCK_CRASH_AT", point)
        .output()
        .unwrap();
    let status = output.status;
    assert_eq!(
        status.signal(),
        Some(9),
        "{args:?} should die at {point}: {output:?}"
    );
}

/// Killed while the job is frozen for a checkpoint, after the checkpoint's ref is kept, in
/// a restore and in a fork: one sweep converges, the job and its checkpoints are intact.
#[test]
fn a_paddock_killed_in_checkpoint_restore_or_fork_is_converged_by_one_sweep() {
    if !docker_available("a_paddock_killed_in_checkpoint_restore_or_fork_is_converged_by_one_sweep")
    {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let image = test_image();
    let id = text(&home.create(&repo, &["--image", &image]), "id");
    home.sh(&id, "echo work > work.txt");
    home.ok(&["checkpoint", &id, "--name", "good"]);
    let before = home.sh(&id, STATE);
    // Something of the agent's runs, so the checkpoint freezes the job.
    home.sh(&id, "setsid sleep 600 >/dev/null 2>&1 </dev/null &");

    killed_at(
        &home,
        "checkpoint-frozen",
        &["checkpoint", &id, "--name", "frozen"],
    );
    let view = record(&home, &id);
    assert!(view["paused_at"].is_string(), "left frozen: {view}");
    home.ok(&["sweep"]);
    let view = record(&home, &id);
    assert!(
        view.get("paused_at").is_none(),
        "thawed by the sweep: {view}"
    );
    assert_eq!(home.sh(&id, "cat work.txt").trim(), "work");

    killed_at(
        &home,
        "checkpoint-published",
        &["checkpoint", &id, "--name", "half"],
    );
    home.ok(&["sweep"]);
    home.ok(&["checkpoint", &id, "--name", "half"]);

    home.sh(&id, "rm work.txt; echo junk > junk.txt");
    killed_at(&home, "restore-bundled", &["restore", &id, "good"]);
    home.ok(&["sweep"]);
    home.ok(&["restore", &id, "good"]);
    assert_eq!(
        home.sh(&id, STATE),
        before,
        "the leftover bundle went with the restore"
    );

    killed_at(
        &home,
        "restored",
        &["fork", &id, "--from", "good", "-n", "2"],
    );
    home.ok(&["sweep"]);
    let jobs = home.json(&["ls", "--json"]);
    let ids: Vec<String> = jobs
        .as_array()
        .unwrap()
        .iter()
        .map(|j| text(j, "id"))
        .collect();
    assert_eq!(ids, std::slice::from_ref(&id), "no half-made fork is left");
    let names: Vec<String> = home.json(&["checkpoints", &id, "--json"])["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| text(c, "name"))
        .collect();
    assert_eq!(names, ["good", "half"]);
    home.ok(&["rm", &id, "--force"]);
}

/// Edits of every shape an overlay records: a changed, a new, a deleted and a re-made file;
/// a new directory, a deleted one and one deleted and made again (opaque); a file turned
/// into a directory; an ignored file; a link; a mode change; an untouched file dropped from
/// the index (`git rm --cached`) and a staged edit under more edits.
const SHAPES: &str = "set -e
echo more >> README.md
mkdir -p fresh/inner && echo new > fresh/inner/a.txt
mkdir -p src/d000 && git rm -q src/d001/f00100.rs
rm -rf src/d002 && mkdir src/d002 && echo again > src/d002/only.rs
rm src/d003/f00300.rs && mkdir src/d003/f00300.rs && echo inside > src/d003/f00300.rs/x
echo noise > build.log
ln -s README.md readme-link
chmod +x src/d004/f00400.rs
git rm -q --cached src/d005/f00500.rs
echo staged >> src/lib.rs && git add src/lib.rs && echo unstaged >> src/lib.rs";

/// The workspace's tree as a full `git add -A` over a copy of the index sees it (what the
/// checkpoint's full walk would save), and the index's own tree.
const TREES: &str = "set -e; cp .git/index /tmp/oracle-index 2>/dev/null || cp \"$(git rev-parse --git-dir)/index\" /tmp/oracle-index
GIT_INDEX_FILE=/tmp/oracle-index git add -A; GIT_INDEX_FILE=/tmp/oracle-index git write-tree; git write-tree";

/// The lines only one of two listings has, marked `-` (the first) and `+` (the second).
fn diff(before: &str, after: &str) -> String {
    let (old, new): (
        std::collections::BTreeSet<&str>,
        std::collections::BTreeSet<&str>,
    ) = (before.lines().collect(), after.lines().collect());
    old.difference(&new)
        .map(|l| format!("- {l}"))
        .chain(new.difference(&old).map(|l| format!("+ {l}")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// On an overlay checkout a checkpoint and a restore look only at what the job changed (the
/// upper dir's paths, read by the host): the checkpoint's trees are exactly what the full
/// walk gives, and the restore brings every byte, mode, link and the index back, removes
/// what was made since (an empty directory too) and leaves ignored files.
#[test]
fn an_overlay_checkpoint_and_restore_look_only_where_the_job_changed() {
    if !docker_available("an_overlay_checkpoint_and_restore_look_only_where_the_job_changed") {
        return;
    }
    let repo = FixtureRepo::with_files(800, 100);
    repo.write("README.md", "# fixture\n");
    repo.write("src/lib.rs", "pub fn answer() -> u32 {\n    42\n}\n");
    repo.write(".gitignore", "*.log\n");
    repo.commit_all("the small files too");
    let home = TestHome::new();
    let image = test_image();
    let job = home.create(&repo, &["--image", &image, "--checkout", "overlay"]);
    let id = text(&job, "id");
    home.sh(&id, SHAPES);
    let trees = home.sh(&id, TREES);
    let before = home.sh(&id, STATE);
    let logged = |args: &[&str]| {
        let output = home
            .cmd(args)
            .env("PADDOCK_LOG", "paddock::engine=debug")
            .output()
            .expect("paddock runs");
        assert!(output.status.success(), "{args:?}: {output:?}");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(
            stderr.contains("overlay changes read")
                && stderr.contains("the sandbox looked only at the changed paths"),
            "{args:?} read the upper dir: {stderr}"
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let cp: Value =
        serde_json::from_str(&logged(&["checkpoint", &id, "--name", "shapes", "--json"]))
            .expect("checkpoint --json");
    let store = text(&cp, "wip_store");
    let commit = text(&cp, "commit");
    let saved = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(&store)
        .args([
            "rev-parse",
            &format!("{commit}^{{tree}}"),
            &format!("{commit}^2^{{tree}}"),
        ])
        .output()
        .expect("git runs");
    assert_eq!(
        String::from_utf8_lossy(&saved.stdout),
        trees,
        "the workspace's and the index's trees, as the full walk sees them"
    );

    // Undo it all differently, and more: restore puts it back.
    home.sh(
        &id,
        "set -e; git reset -q --hard; git clean -fdq; rm -rf fresh src/d006; \
         echo other > src/d007/f00700.rs; mkdir empty-dir; echo later > later.txt; \
         echo kept > later.log",
    );
    logged(&["restore", &id, "shapes"]);
    assert_eq!(
        home.sh(
            &id,
            "test -e empty-dir && echo dir; test -e later.txt && echo later; cat later.log; rm later.log"
        ),
        "kept\n",
        "made since: gone; ignored: kept"
    );
    let after = home.sh(&id, STATE);
    assert!(
        after == before,
        "every byte, mode, link, the index:\n{}",
        diff(&before, &after)
    );
    home.ok(&["rm", &id, "--force"]);
}
