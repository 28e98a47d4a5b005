//! The engine against a test double of [`Runtime`]: what create, rm and sweep do with a
//! runtime that fails or holds sandboxes, with a real repository and a real state root and
//! no Docker. (The integration tests prove the same paths against the real daemon.)

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use super::{CreateRequest, Paddock};
use crate::config::RuntimeChoice;
use crate::job::JobId;
use crate::runtime::fake::FakeRuntime;
use crate::runtime::{Runtimes, Sandbox};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// A repository with one commit, a state root, and an engine whose Docker runtime is `fake`.
fn setup(fake: &Arc<FakeRuntime>) -> (tempfile::TempDir, PathBuf, Paddock) {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README"), "hello\n").unwrap();
    git(&repo, &["add", "."]);
    git(
        &repo,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "one",
        ],
    );
    let env = BTreeMap::from([(
        "PADDOCK_HOME".to_string(),
        tmp.path().join("home").display().to_string(),
    )]);
    let paddock = Paddock::with_env(Box::new(env)).unwrap();
    let runtimes = Runtimes::registered(paddock.home(), &[&fake.register()]);
    (tmp, repo, paddock.with_runtimes(runtimes))
}

/// Every file and directory name under `root`.
fn walk_names(root: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            names.push(entry.file_name().to_string_lossy().into_owned());
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(entry.path());
            }
        }
    }
    names
}

fn docker_job(repo: &Path, id: &str) -> CreateRequest {
    CreateRequest {
        repo: repo.to_path_buf(),
        id: Some(id.to_string()),
        runtime: Some(RuntimeChoice::Docker),
        ..CreateRequest::default()
    }
}

#[tokio::test]
async fn a_runtime_that_cannot_start_leaves_nothing_behind() {
    let fake = Arc::new(FakeRuntime {
        fail_start: true,
        ..FakeRuntime::default()
    });
    let (_tmp, repo, paddock) = setup(&fake);
    let refs_before = git(&repo, &["for-each-ref"]);

    let error = paddock
        .create(docker_job(&repo, "doomed"))
        .await
        .expect_err("the runtime refuses to start");
    assert!(error.to_string().contains("the fake refuses"), "{error}");

    assert!(!paddock.store().exists_str("doomed"), "the record is gone");
    assert_eq!(git(&repo, &["for-each-ref"]), refs_before, "no branch left");
    let id = JobId::parse("doomed").unwrap();
    let job_dir = paddock.home().job_git_dir(&id);
    let job_dir = job_dir.parent().unwrap();
    assert!(
        !job_dir.exists(),
        "no job dir left at {}",
        job_dir.display()
    );
    let checkouts: Vec<_> = walk_names(paddock.home().root());
    assert!(
        !checkouts.iter().any(|name| name == "doomed"),
        "no checkout left: {checkouts:?}"
    );
    assert_eq!(*fake.destroyed.lock().unwrap(), vec!["doomed".to_string()]);
}

#[tokio::test]
async fn sweep_removes_sandboxes_no_record_names_and_keeps_the_others() {
    let fake = Arc::new(FakeRuntime::default());
    let (_tmp, repo, paddock) = setup(&fake);
    paddock.create(docker_job(&repo, "alive")).await.unwrap();
    for job in ["alive", "ghost"] {
        fake.sandboxes.lock().unwrap().push(Sandbox {
            name: format!("paddock-{job}"),
            job: job.to_string(),
            running: true,
            role: crate::runtime::SandboxRole::Job,
            created: None,
            volumes: Vec::new(),
        });
    }

    let options = crate::sweep::SweepOptions {
        dry_run: false,
        idle: Duration::from_secs(3600),
        keep_finished: Duration::from_secs(3600),
        max_age: None,
        branch_policy: super::BranchPolicy::default(),
        now: chrono::Utc::now(),
        health_check: false,
        index_lock_age: Duration::from_secs(3600),
        pristine_max_age: Duration::from_secs(3600),
        merged: false,
    };
    let report = paddock.sweep(&options).await.unwrap();

    assert_eq!(*fake.destroyed.lock().unwrap(), vec!["ghost".to_string()]);
    let left: Vec<String> = fake
        .sandboxes
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.job.clone())
        .collect();
    assert_eq!(left, ["alive"]);
    assert!(paddock.store().exists_str("alive"));
    assert!(
        serde_json::to_string(&report)
            .unwrap()
            .contains("paddock-ghost"),
        "the report names what went"
    );
    // As root its checkout is an overlay and its git dir on a disk: mounts a temp dir's
    // removal cannot undo, so the job goes the way every job does.
    let options = crate::wire::RemoveOptions::from_flags(false, false, None, true);
    paddock.remove("alive", options).await.unwrap();
}
