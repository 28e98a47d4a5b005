//! The fast tier of checkpoints, restore and fork (issue 43), against the test double
//! runtime: real repositories, real git inside the "sandbox" (host processes), the real
//! sync stream and wip store.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::Arc;

use super::Error;
use super::tests::{fake_job, git, run, setup};
use crate::runtime::fake::FakeRuntime;
use crate::wire::{CheckpointRequest, ForkRequest, RemoveOptions, RestoreRequest};

/// What the agent builds before the checkpoint: a commit, then a binary, a link, an
/// executable, a large file, a staged change with more edits over it, an untracked file.
const BUILD: &str = "set -e
echo one > committed.txt && git add committed.txt && git commit -qm one
head -c 300000 /dev/urandom > blob.bin
ln -s committed.txt link
printf '#!/bin/sh\\necho hi\\n' > tool.sh && chmod +x tool.sh
echo staged > part.txt && git add part.txt && echo unstaged >> part.txt
echo loose > untracked.txt";

/// Every file of the workspace (not `.git`) with its kind, mode and content (links: target).
fn state_of(root: &Path) -> BTreeMap<String, (String, u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            if name == ".git" {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode() & 0o111;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(
                    name,
                    ("link".into(), 0, target.display().to_string().into()),
                );
            } else if meta.is_dir() {
                stack.push(path);
            } else {
                out.insert(name, ("file".into(), mode, std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

fn job_git(record: &crate::job::JobRecord, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(record.git_dir.as_ref().unwrap())
        .arg("--work-tree")
        .arg(&record.worktree)
        .args(args)
        .current_dir(&record.worktree)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

fn named(name: &str) -> CheckpointRequest {
    CheckpointRequest {
        name: Some(name.into()),
    }
}

#[tokio::test]
async fn restore_puts_back_every_byte_mode_link_and_the_index_and_with_branch_the_commit() {
    let fake = Arc::new(FakeRuntime::default());
    let (_tmp, repo, paddock) = setup(&fake);
    let record = paddock.create(fake_job(&repo, "cp")).await.unwrap().record;
    let built = run(&paddock, "cp", BUILD).await;
    assert_eq!(built.exit_code, 0, "{built:?}");
    let before = state_of(&record.worktree);
    let index_before = job_git(&record, &["ls-files", "-s"]);
    let tip_before = git(&repo, &["rev-parse", &record.branch]);

    let view = paddock.checkpoint("cp", &named("built")).await.unwrap();
    assert_eq!(*fake.checkpoint_freezes.lock().unwrap(), ["cp"]);
    assert!(fake.frozen.lock().unwrap().is_empty(), "thawed after");
    assert!(paddock.load("cp").unwrap().paused_at.is_none());
    assert_eq!(view.tip.as_deref(), Some(tip_before.trim()));
    assert_eq!(view.head, tip_before.trim());
    // blob.bin, link, tool.sh, part.txt, untracked.txt differ from HEAD.
    assert_eq!(view.files, 5, "{view:?}");
    assert!(view.bytes >= 300_000, "{view:?}");

    // The agent wipes everything and commits a rewrite, then leaves junk around.
    let wipe = "set -e; git rm -rqf . ; rm -rf ./*; echo rewrite > new.txt; git add -A; \
                git commit -qm rewrite; mkdir junk; echo x > junk/file; echo y > stray.txt";
    assert_eq!(run(&paddock, "cp", wipe).await.exit_code, 0);
    assert_ne!(git(&repo, &["rev-parse", &record.branch]), tip_before);

    let answer = paddock
        .restore(
            "cp",
            &RestoreRequest {
                checkpoint: "built".into(),
                branch: true,
            },
        )
        .await
        .unwrap();
    assert!(answer.branch_moved);
    assert_eq!(state_of(&record.worktree), before, "every file as it was");
    assert_eq!(
        job_git(&record, &["ls-files", "-s"]),
        index_before,
        "the index"
    );
    assert_eq!(
        git(&repo, &["rev-parse", &record.branch]),
        tip_before,
        "the branch moved back in the user's repository"
    );
    assert!(
        !walk(&record.worktree)
            .iter()
            .any(|n| n.contains("paddock-restore")),
        "the bundle is gone"
    );

    // The checkpoint outlives the job, in the wip store only.
    let options = RemoveOptions::from_flags(false, false, None, false);
    paddock.remove("cp", options).await.unwrap();
    let listed = paddock.checkpoints("cp").unwrap();
    assert_eq!(listed.checkpoints.len(), 1);
    let store = &listed.checkpoints[0].wip_store;
    assert_eq!(
        git(store, &["rev-parse", &view.refname]).trim(),
        view.commit
    );
    assert!(
        std::process::Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["cat-file", "-e", &view.commit])
            .status()
            .unwrap()
            .code()
            != Some(0),
        "the checkpoint's commit is not in the user's object store"
    );
    let removed = paddock.checkpoint_remove("cp", "built").await.unwrap();
    assert!(removed.removed);
    assert!(matches!(paddock.checkpoints("cp"), Err(Error::Store(_))));
}

fn walk(root: &Path) -> Vec<String> {
    state_of(root).into_keys().collect()
}

#[tokio::test]
async fn fork_makes_jobs_with_the_checkpointed_files_and_index_apart_from_each_other() {
    let fake = Arc::new(FakeRuntime::default());
    let (_tmp, repo, paddock) = setup(&fake);
    let source = paddock.create(fake_job(&repo, "src")).await.unwrap().record;
    assert_eq!(run(&paddock, "src", BUILD).await.exit_code, 0);
    let before = state_of(&source.worktree);
    let index_before = job_git(&source, &["ls-files", "-s"]);

    let forked = paddock
        .fork(
            "src",
            &ForkRequest {
                count: 3,
                ..ForkRequest::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(forked.jobs.len(), 3);
    assert!(forked.checkpoint.name.starts_with("fork-"));
    let mut branches = std::collections::BTreeSet::new();
    for job in &forked.jobs {
        let record = paddock.load(job.id.as_str()).unwrap();
        assert_eq!(state_of(&record.worktree), before, "{}", job.id);
        assert_eq!(job_git(&record, &["ls-files", "-s"]), index_before);
        assert_eq!(record.base_commit, forked.checkpoint.head);
        let from = record.forked_from.as_ref().unwrap();
        assert_eq!(
            (from.job.as_str(), from.checkpoint.as_str()),
            ("src", forked.checkpoint.name.as_str())
        );
        branches.insert(record.branch.clone());
    }
    assert_eq!(branches.len(), 3, "a branch each");

    // One fork's change reaches neither the others nor the source.
    let first = forked.jobs[0].id.to_string();
    assert_eq!(
        run(&paddock, &first, "echo mine > only-first.txt")
            .await
            .exit_code,
        0
    );
    for job in forked.jobs.iter().skip(1) {
        let record = paddock.load(job.id.as_str()).unwrap();
        assert!(!record.worktree.join("only-first.txt").exists());
    }
    assert!(!source.worktree.join("only-first.txt").exists());
}

#[tokio::test]
async fn bad_names_unknown_checkpoints_and_fork_counts_are_refused_and_leave_nothing() {
    let fake = Arc::new(FakeRuntime::default());
    let (tmp, repo, paddock) = setup(&fake);
    paddock.create(fake_job(&repo, "bad")).await.unwrap();
    for name in [
        "a/b",
        "..",
        "../x",
        ".hidden",
        "-x",
        "x.lock",
        "",
        &"n".repeat(65),
    ] {
        let err = paddock.checkpoint("bad", &named(name)).await.unwrap_err();
        assert!(matches!(err, Error::CheckpointName { .. }), "{name}: {err}");
    }
    let err = paddock
        .restore(
            "bad",
            &RestoreRequest {
                checkpoint: "nope".into(),
                branch: false,
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoCheckpoint { .. }), "{err}");
    for count in [0, 10_000] {
        let err = paddock
            .fork(
                "bad",
                &ForkRequest {
                    count,
                    ..ForkRequest::default()
                },
            )
            .await
            .unwrap_err();
        assert!(matches!(err, Error::ForkCount { .. }), "{err}");
    }
    let err = paddock
        .fork(
            "bad",
            &ForkRequest {
                from: Some("nope".into()),
                ..ForkRequest::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NoCheckpoint { .. }), "{err}");
    assert!(paddock.fork("gone", &ForkRequest::default()).await.is_err());
    paddock.checkpoint("bad", &named("once")).await.unwrap();
    let err = paddock.checkpoint("bad", &named("once")).await.unwrap_err();
    assert!(matches!(err, Error::CheckpointExists { .. }), "{err}");
    // Only the one job and the one checkpoint exist.
    assert_eq!(paddock.store().list().unwrap().0.len(), 1);
    assert_eq!(paddock.checkpoints("bad").unwrap().checkpoints.len(), 1);
    drop(tmp);
}

#[tokio::test]
async fn a_huge_sparse_file_or_a_tree_git_cannot_read_is_refused_cleanly() {
    let fake = Arc::new(FakeRuntime::default());
    let (_tmp, repo, paddock) = setup(&fake);
    let record = paddock
        .create(fake_job(&repo, "hostile"))
        .await
        .unwrap()
        .record;
    // Apparent size past the checkpoint's cap, no blocks on disk.
    let sparse = std::fs::File::create(record.worktree.join("sparse.img")).unwrap();
    sparse
        .set_len(super::checkpoint::MAX_CHECKPOINT_BYTES + 1)
        .unwrap();
    let started = std::time::Instant::now();
    let err = paddock
        .checkpoint("hostile", &named("sparse"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Checkpoint { .. }), "{err}");
    assert!(err.to_string().contains("bytes"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    std::fs::remove_file(record.worktree.join("sparse.img")).unwrap();

    // A tree deeper than PATH_MAX: git skips it with a warning; the checkpoint refuses.
    // Two chains of 11 directories of 200 characters, one moved to the other's bottom:
    // no single call names a path over PATH_MAX, the tree's deepest file is past it.
    let name = "d".repeat(200);
    let chain = |root: &Path| {
        let mut path = root.to_path_buf();
        for _ in 0..11 {
            path.push(&name);
        }
        std::fs::create_dir_all(&path).unwrap();
        path
    };
    let top = chain(&record.worktree.join("deep"));
    let aside = record.worktree.with_extension("aside");
    let bottom = chain(&aside);
    std::fs::write(bottom.join("f"), "x").unwrap();
    std::fs::rename(aside.join(&name), top.join("more")).unwrap();
    let err = paddock
        .checkpoint("hostile", &named("deep"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Checkpoint { .. }), "{err}");
    assert!(
        paddock
            .checkpoints("hostile")
            .unwrap()
            .checkpoints
            .is_empty()
    );
    assert!(
        paddock.load("hostile").unwrap().paused_at.is_none(),
        "thawed"
    );
    assert!(fake.frozen.lock().unwrap().is_empty());
    std::fs::remove_dir_all(record.worktree.join("deep")).unwrap();

    // 20,000 levels (made relative to each parent's descriptor: no call names the path).
    let top = record.worktree.join("levels");
    nest(&top, 20_000);
    let started = std::time::Instant::now();
    let err = paddock
        .checkpoint("hostile", &named("levels"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Checkpoint { .. }), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    assert!(
        paddock
            .checkpoints("hostile")
            .unwrap()
            .checkpoints
            .is_empty()
    );
    // `rm -rf` walks it without a descriptor per level (the temp dir's own removal would not).
    let removed = std::process::Command::new("rm")
        .arg("-rf")
        .arg(&top)
        .status()
        .unwrap();
    assert!(removed.success());
}

#[tokio::test]
async fn a_paused_job_holds_memory_but_no_cpu_resumes_for_exec_and_is_swept_past_paused_max_age() {
    let fake = Arc::new(FakeRuntime::default());
    let (_tmp, repo, paddock) = setup(&fake);
    paddock.create(fake_job(&repo, "parked")).await.unwrap();
    let before = paddock.admission_view().unwrap().held;
    assert!(before.cpus > 0.0);
    paddock.pause("parked").await.unwrap();
    let paused = paddock.admission_view().unwrap().held;
    assert_eq!(paused.cpus, 0.0, "a paused job holds no CPU");
    assert_eq!(paused.memory, before.memory, "but its memory");

    // An exec with resume thaws it first; without, it is refused.
    let mut options = crate::wire::ExecOptions {
        cmd: vec!["true".into()],
        ..crate::wire::ExecOptions::default()
    };
    let err = paddock
        .exec(
            "parked",
            options.clone(),
            &mut crate::runtime::exec::Discard,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Paused { .. }), "{err}");
    options.resume = true;
    let result = paddock
        .exec("parked", options, &mut crate::runtime::exec::Discard)
        .await
        .unwrap();
    assert_eq!(result.exit_code, 0);
    assert!(paddock.load("parked").unwrap().paused_at.is_none());
    assert!(fake.frozen.lock().unwrap().is_empty());

    // Paused past sweep.paused_max_age: stale; before it, kept.
    paddock.pause("parked").await.unwrap();
    let mut options = super::tests::sweep_options(std::time::Duration::from_secs(3600));
    options.paused_max_age = Some(std::time::Duration::from_secs(600));
    options.now = chrono::Utc::now() + chrono::TimeDelta::seconds(300);
    paddock.sweep(&options).await.unwrap();
    assert!(
        paddock.store().exists_str("parked"),
        "paused 5 minutes: kept"
    );
    options.now = chrono::Utc::now() + chrono::TimeDelta::seconds(7200);
    let report = paddock.sweep(&options).await.unwrap();
    assert!(!paddock.store().exists_str("parked"), "{report:?}");
}

/// The engine of `setup`'s state root under `dir`, with `yaml` as the user's config file.
fn with_user_config(dir: &Path, fake: &Arc<FakeRuntime>, yaml: &str) -> super::Paddock {
    let user = dir.join("user.yaml");
    std::fs::write(&user, yaml).unwrap();
    let env = BTreeMap::from([
        (
            "PADDOCK_HOME".to_string(),
            dir.join("home").display().to_string(),
        ),
        ("PADDOCK_CONFIG".to_string(), user.display().to_string()),
    ]);
    let paddock = super::Paddock::with_env(Box::new(env)).unwrap();
    let runtimes = crate::runtime::Runtimes::registered(paddock.home(), &[&fake.register()]);
    paddock.with_runtimes(runtimes)
}

#[tokio::test]
async fn a_profile_checkpoints_before_each_exec_and_keeps_the_newest() {
    let fake = Arc::new(FakeRuntime::default());
    let (tmp, repo, untrusting) = setup(&fake);
    let policy = "profiles:\n  default:\n    checkpoint: {before_exec: true, keep: 2}\n";
    // A repository's file cannot turn it on: it would make paddock keep up to 50
    // checkpoints of every job on the user's disk.
    std::fs::write(repo.join(".paddock.yaml"), policy).unwrap();
    git(&repo, &["add", ".paddock.yaml"]);
    git(
        &repo,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "config",
        ],
    );
    untrusting
        .create(fake_job(&repo, "repo-says"))
        .await
        .unwrap();
    assert_eq!(run(&untrusting, "repo-says", "true").await.exit_code, 0);
    assert!(
        untrusting
            .checkpoints("repo-says")
            .unwrap()
            .checkpoints
            .is_empty()
    );
    // The user's file can.
    let paddock = with_user_config(tmp.path(), &fake, policy);
    let record = paddock
        .create(fake_job(&repo, "auto"))
        .await
        .unwrap()
        .record;
    for round in 1..=3 {
        let result = run(&paddock, "auto", &format!("echo {round} > round.txt")).await;
        assert_eq!(result.exit_code, 0);
    }
    let autos = paddock.checkpoints("auto").unwrap().checkpoints;
    assert_eq!(autos.len(), 2, "the newest two: {autos:?}");
    // The newest was taken before the third exec: round.txt said 2 then.
    let newest = autos.last().unwrap();
    let before_third = git(
        &newest.wip_store,
        &["show", &format!("{}:round.txt", newest.commit)],
    );
    assert_eq!(before_third, "2\n");
    paddock
        .restore(
            "auto",
            &RestoreRequest {
                checkpoint: newest.name.clone(),
                branch: false,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(record.worktree.join("round.txt")).unwrap(),
        "2\n"
    );
}

/// `depth` directories `d`, each in the last, under `top`.
fn nest(top: &Path, depth: usize) {
    use std::os::fd::{AsFd as _, OwnedFd};
    std::fs::create_dir(top).unwrap();
    let mut dir: OwnedFd = std::fs::File::open(top).unwrap().into();
    let name = std::ffi::OsStr::new("d");
    for _ in 0..depth {
        crate::sys::mkdirat(dir.as_fd(), name, 0o755).unwrap();
        dir = crate::sys::openat(dir.as_fd(), name, libc::O_RDONLY | libc::O_DIRECTORY, 0).unwrap();
    }
}

/// A fork is all or none: more forks than `admission.max_jobs` allows in all can never be
/// made, and are refused at once, with no checkpoint taken and no job made.
#[tokio::test]
async fn a_fork_larger_than_max_jobs_is_refused_before_anything_is_made() {
    let fake = Arc::new(FakeRuntime::default());
    let (tmp, repo, _) = setup(&fake);
    let paddock = with_user_config(tmp.path(), &fake, "admission:\n  max_jobs: 3\n");
    paddock.create(fake_job(&repo, "few")).await.unwrap();
    let started = std::time::Instant::now();
    let err = paddock
        .fork(
            "few",
            &ForkRequest {
                count: 4,
                ..ForkRequest::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ForkCount { most: 3, .. }), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(1));
    assert!(paddock.checkpoints("few").unwrap().checkpoints.is_empty());
    assert_eq!(
        paddock.store().list().unwrap().0.len(),
        1,
        "no fork was made"
    );
}
