//! The fast tier: the engine against the test double runtime (`runtime/fake/`), with a real
//! repository and a real state root and no daemon. What create, exec and its sync, stop, rm
//! and the sweep do, and what they leave when the runtime fails or holds sandboxes no record
//! names, in milliseconds each. (The integration tests keep one end-to-end test per behaviour
//! that needs the real engine: isolation, hostile agents, mounts, networks.)

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

pub(super) fn git(dir: &Path, args: &[&str]) -> String {
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
pub(super) fn setup(fake: &Arc<FakeRuntime>) -> (tempfile::TempDir, PathBuf, Paddock) {
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

pub(super) fn docker_job(repo: &Path, id: &str) -> CreateRequest {
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
        paused_max_age: None,
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

/// A job of the fake runtime with a worktree checkout (no mount a temp dir cannot undo).
pub(super) fn fake_job(repo: &Path, id: &str) -> CreateRequest {
    CreateRequest {
        checkout: Some(crate::config::CheckoutMode::Worktree),
        ..docker_job(repo, id)
    }
}

pub(super) async fn run(paddock: &Paddock, id: &str, script: &str) -> crate::runtime::ExecResult {
    let options = crate::wire::ExecOptions {
        cmd: vec!["sh".into(), "-c".into(), script.into()],
        ..crate::wire::ExecOptions::default()
    };
    paddock
        .exec(id, options, &mut crate::runtime::exec::Discard)
        .await
        .expect("the exec runs")
}

pub(super) fn sweep_options(idle: Duration) -> crate::sweep::SweepOptions {
    crate::sweep::SweepOptions {
        dry_run: false,
        idle,
        keep_finished: idle,
        max_age: None,
        branch_policy: super::BranchPolicy::default(),
        now: chrono::Utc::now(),
        health_check: false,
        index_lock_age: Duration::from_secs(3600),
        pristine_max_age: Duration::from_secs(3600),
        paused_max_age: None,
        merged: false,
    }
}

#[tokio::test]
async fn create_makes_the_branch_and_checkout_and_starts_the_sandbox_once() {
    let fake = Arc::new(FakeRuntime::default());
    let (_tmp, repo, paddock) = setup(&fake);
    let created = paddock.create(fake_job(&repo, "one")).await.unwrap();
    let record = created.record;
    assert_eq!(*fake.started.lock().unwrap(), ["one"]);
    assert!(fake.execs.lock().unwrap().is_empty(), "nothing ran yet");
    assert_eq!(
        git(&repo, &["rev-parse", &record.branch]),
        git(&repo, &["rev-parse", "main"]),
        "the branch starts at the base"
    );
    assert_eq!(
        std::fs::read_to_string(record.worktree.join("README")).unwrap(),
        "hello\n"
    );
    assert_eq!(record.container_id.as_deref(), Some("fake-one"));
}

#[tokio::test]
async fn an_exec_reports_its_exit_code_and_its_commit_reaches_the_branch() {
    let fake = Arc::new(FakeRuntime::default());
    let (_tmp, repo, paddock) = setup(&fake);
    let record = paddock
        .create(fake_job(&repo, "work"))
        .await
        .unwrap()
        .record;
    let done = run(
        &paddock,
        "work",
        "echo new > new.txt && git add new.txt && git commit -qm 'from the agent'",
    )
    .await;
    assert_eq!(done.exit_code, 0);
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s", &record.branch]).trim(),
        "from the agent",
        "the exec's sync brought the commit to the branch"
    );
    let failed = run(&paddock, "work", "exit 3").await;
    assert_eq!(failed.exit_code, 3);
    let state = paddock.store().load("work").unwrap().state;
    assert_eq!(state, crate::job::JobState::Exited);
    assert_eq!(fake.execs.lock().unwrap().len(), 2, "one runtime call each");
}

#[tokio::test]
async fn an_execs_stdin_comes_inline_as_text_or_base64_or_streamed_and_bad_input_runs_nothing() {
    use crate::runtime::exec::ExecStdin;
    let fake = Arc::new(FakeRuntime::default());
    let (_tmp, repo, paddock) = setup(&fake);
    paddock.create(fake_job(&repo, "input")).await.unwrap();
    let exec = |options: crate::wire::ExecOptions| {
        let paddock = &paddock;
        async move {
            let options = crate::wire::ExecOptions {
                cmd: vec!["od".into(), "-An".into(), "-tx1".into()],
                ..options
            };
            paddock
                .exec("input", options, &mut crate::runtime::exec::Discard)
                .await
        }
    };
    let text = exec(crate::wire::ExecOptions {
        stdin: Some("hi".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(text.stdout.trim(), "68 69");
    let bytes = exec(crate::wire::ExecOptions {
        stdin_base64: Some("AP8=".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(bytes.stdout.trim(), "00 ff");
    let (mut writer, reader) = tokio::io::duplex(64);
    let feeder = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt as _;
        writer.write_all(&[7u8; 3]).await.unwrap();
    });
    let streamed = exec(crate::wire::ExecOptions {
        stdin_stream: ExecStdin::reader(Box::pin(reader)),
        ..Default::default()
    })
    .await
    .unwrap();
    feeder.await.unwrap();
    assert_eq!(streamed.stdout.trim(), "07 07 07");
    let none = exec(crate::wire::ExecOptions::default()).await.unwrap();
    assert_eq!(none.stdout.trim(), "", "no stdin: end-of-file at once");
    let runs = fake.execs.lock().unwrap().len();
    let two = exec(crate::wire::ExecOptions {
        stdin: Some("a".into()),
        stdin_base64: Some("YQ==".into()),
        ..Default::default()
    })
    .await;
    assert!(
        matches!(two, Err(crate::error::Error::BadExec { .. })),
        "{two:?}"
    );
    let not_base64 = exec(crate::wire::ExecOptions {
        stdin_base64: Some("not base64!".into()),
        ..Default::default()
    })
    .await;
    assert!(matches!(
        not_base64,
        Err(crate::error::Error::BadExec { .. })
    ));
    assert_eq!(
        fake.execs.lock().unwrap().len(),
        runs,
        "a refused exec ran nothing"
    );
}

#[tokio::test]
async fn an_exec_the_runtime_cannot_run_fails_and_the_job_stays() {
    let fake = Arc::new(FakeRuntime {
        fail_exec: true,
        ..FakeRuntime::default()
    });
    let (_tmp, repo, paddock) = setup(&fake);
    paddock.create(fake_job(&repo, "stuck")).await.unwrap();
    let options = crate::wire::ExecOptions {
        cmd: vec!["true".into()],
        ..crate::wire::ExecOptions::default()
    };
    let error = paddock
        .exec("stuck", options, &mut crate::runtime::exec::Discard)
        .await
        .expect_err("the runtime fails");
    assert!(error.to_string().contains("stopped answering"), "{error}");
    let record = paddock.store().load("stuck").unwrap();
    assert_eq!(record.state, crate::job::JobState::Failed);
    assert!(record.worktree.exists(), "the job's files stay");
}

#[tokio::test]
async fn rm_keeps_the_branch_with_its_commits_and_saves_uncommitted_work() {
    let fake = Arc::new(FakeRuntime::default());
    let (_tmp, repo, paddock) = setup(&fake);
    let record = paddock
        .create(fake_job(&repo, "keep"))
        .await
        .unwrap()
        .record;
    run(
        &paddock,
        "keep",
        "echo a > a.txt && git add a.txt && git commit -qm kept && echo draft > draft.txt",
    )
    .await;
    let options = crate::wire::RemoveOptions::from_flags(false, false, None, false);
    let report = paddock.remove("keep", options).await.unwrap();
    assert!(report.branch_kept);
    assert_eq!(report.commits_ahead, 1);
    assert!(
        report.wip_commit.is_some(),
        "the draft was saved: {report:?}"
    );
    assert_eq!(*fake.destroyed.lock().unwrap(), ["keep"]);
    assert!(fake.stopped.lock().unwrap().contains(&"keep".to_string()));
    assert!(!paddock.store().exists_str("keep"));
    assert!(!record.worktree.exists(), "the checkout is gone");
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s", &record.branch]).trim(),
        "kept"
    );
}

#[tokio::test]
async fn stop_asks_the_runtime_and_the_job_can_run_again() {
    let fake = Arc::new(FakeRuntime::default());
    let (_tmp, repo, paddock) = setup(&fake);
    paddock.create(fake_job(&repo, "halt")).await.unwrap();
    paddock.stop("halt", None).await.unwrap();
    assert_eq!(*fake.stopped.lock().unwrap(), ["halt"]);
    assert_eq!(run(&paddock, "halt", "true").await.exit_code, 0);
}

#[tokio::test]
async fn sweep_removes_only_idle_jobs_and_keeps_their_commits() {
    let fake = Arc::new(FakeRuntime::default());
    let (_tmp, repo, paddock) = setup(&fake);
    let idle = paddock
        .create(fake_job(&repo, "idle"))
        .await
        .unwrap()
        .record;
    run(
        &paddock,
        "idle",
        "echo b > b.txt && git add b.txt && git commit -qm idle-work",
    )
    .await;
    paddock.create(fake_job(&repo, "fresh")).await.unwrap();
    // "Now" an hour on: both are idle past a minute unless one was touched since.
    let mut options = sweep_options(Duration::from_secs(60));
    options.now = chrono::Utc::now() + chrono::Duration::hours(1);
    let fresh = JobId::parse("fresh").unwrap();
    paddock
        .store()
        .update(&fresh, |r| r.last_activity_at = options.now)
        .unwrap();
    let report = paddock.sweep(&options).await.unwrap();
    let removed: Vec<&str> = report.removed.iter().map(|i| i.name.as_str()).collect();
    assert!(removed.contains(&"idle"), "{report:?}");
    assert!(!removed.contains(&"fresh"), "{report:?}");
    assert!(paddock.store().exists_str("fresh"));
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%s", &idle.branch]).trim(),
        "idle-work",
        "the idle job's work stays on its branch"
    );
}

#[tokio::test]
async fn a_paused_job_takes_no_exec_is_kept_by_the_sweep_and_runs_again_after_resume() {
    let fake = Arc::new(FakeRuntime::default());
    let (_tmp, repo, paddock) = setup(&fake);
    paddock.create(fake_job(&repo, "parked")).await.unwrap();
    let paused = paddock.pause("parked").await.unwrap();
    assert!(paused.paused && paused.since.is_some(), "{paused:?}");
    assert_eq!(*fake.frozen.lock().unwrap(), ["parked"]);
    // Again: the same answer, frozen once.
    let again = paddock.pause("parked").await.unwrap();
    assert_eq!(again.since, paused.since);
    assert_eq!(fake.frozen.lock().unwrap().len(), 1);
    let record = paddock
        .store()
        .load_id(&JobId::parse("parked").unwrap())
        .unwrap();
    assert_eq!(record.paused_at, paused.since);

    let options = crate::wire::ExecOptions {
        cmd: vec!["true".into()],
        ..crate::wire::ExecOptions::default()
    };
    let refused = paddock
        .exec("parked", options, &mut crate::runtime::exec::Discard)
        .await
        .expect_err("a paused job takes no exec");
    assert!(
        matches!(refused, crate::error::Error::Paused { .. }),
        "{refused}"
    );
    assert_eq!(refused.kind(), crate::error::ErrorKind::Conflict);
    assert!(fake.execs.lock().unwrap().is_empty(), "nothing ran");

    // An hour on, idle past a minute: a paused job is kept.
    let mut options = sweep_options(Duration::from_secs(60));
    options.now = chrono::Utc::now() + chrono::Duration::hours(1);
    let report = paddock.sweep(&options).await.unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    assert!(paddock.store().exists_str("parked"));

    let resumed = paddock.resume("parked").await.unwrap();
    assert!(!resumed.paused && resumed.since.is_none(), "{resumed:?}");
    assert!(fake.frozen.lock().unwrap().is_empty(), "thawed");
    assert_eq!(
        paddock
            .store()
            .load_id(&JobId::parse("parked").unwrap())
            .unwrap()
            .paused_at,
        None
    );
    assert_eq!(run(&paddock, "parked", "echo ran").await.stdout, "ran\n");
    // Paused again, `rm` thaws it first and removes it.
    paddock.pause("parked").await.unwrap();
    paddock
        .remove("parked", crate::wire::RemoveOptions::default())
        .await
        .unwrap();
    assert!(fake.frozen.lock().unwrap().is_empty(), "rm thawed it");
}

#[tokio::test]
async fn a_queued_or_unknown_job_cannot_be_paused_and_leaves_nothing() {
    let fake = Arc::new(FakeRuntime::default());
    let (_tmp, _repo, paddock) = setup(&fake);
    let unknown = paddock.pause("nosuch").await.expect_err("no such job");
    assert_eq!(unknown.kind(), crate::error::ErrorKind::NotFound);
    assert!(fake.frozen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn another_user_runs_only_where_the_runtime_contains_it_and_is_settled_after() {
    use crate::wire::{ExecOptions, ExecUser};
    // Without `OtherUsers` (runc, the process runtime): refused, nothing run, no slot held.
    let fake = Arc::new(FakeRuntime::default());
    let (_tmp, repo, paddock) = setup(&fake);
    paddock.create(fake_job(&repo, "plain")).await.unwrap();
    let as_user = |user: ExecUser| ExecOptions {
        cmd: vec!["true".into()],
        user: Some(user),
        no_wait: true,
        ..Default::default()
    };
    let mut sink = crate::runtime::exec::Discard;
    let runs = fake.execs.lock().unwrap().len();
    for user in [ExecUser::Root, ExecUser::Id { uid: 1234, gid: 5 }] {
        let refused = paddock.exec("plain", as_user(user), &mut sink).await;
        assert!(
            matches!(refused, Err(crate::error::Error::UserNotContained { .. })),
            "{refused:?}"
        );
    }
    assert_eq!(fake.execs.lock().unwrap().len(), runs, "nothing ran");
    // The agent's own identity is no other user.
    let record = paddock.load("plain").unwrap();
    let (uid, gid) = crate::runtime::agent_user(record.limits.uid);
    paddock
        .exec("plain", as_user(ExecUser::Id { uid, gid }), &mut sink)
        .await
        .unwrap();
    paddock
        .exec("plain", as_user(ExecUser::Agent), &mut sink)
        .await
        .unwrap();
    assert!(fake.other_user_execs.lock().unwrap().is_empty());

    // With it (gVisor, the microVM): run as that user, then settled, every time.
    let fake = Arc::new(FakeRuntime {
        other_users: true,
        ..FakeRuntime::default()
    });
    let (_tmp, repo, paddock) = setup(&fake);
    paddock.create(fake_job(&repo, "contained")).await.unwrap();
    paddock
        .exec("contained", as_user(ExecUser::Root), &mut sink)
        .await
        .unwrap();
    let failed = ExecOptions {
        cmd: vec!["false".into()],
        ..as_user(ExecUser::Id { uid: 7, gid: 8 })
    };
    let result = paddock.exec("contained", failed, &mut sink).await.unwrap();
    assert_eq!(result.exit_code, 1);
    assert_eq!(
        *fake.other_user_execs.lock().unwrap(),
        vec![((0, 0), true), ((7, 8), true)]
    );
}

#[tokio::test]
async fn the_file_api_as_another_user_goes_through_the_sandbox_only_where_it_is_contained() {
    use crate::wire::{ExecUser, FileBytes};
    // Without `OtherUsers`: every file operation as root is refused before anything runs.
    let fake = Arc::new(FakeRuntime::default());
    let (tmp, repo, paddock) = setup(&fake);
    paddock.create(fake_job(&repo, "plain")).await.unwrap();
    let root = ExecUser::Root;
    let refused = |result: crate::error::Result<()>| {
        assert!(
            matches!(result, Err(crate::error::Error::UserNotContained { .. })),
            "{result:?}"
        );
    };
    refused(
        paddock
            .read_file("plain", "README", root, None)
            .await
            .map(drop),
    );
    refused(
        paddock
            .write_file("plain", "new", FileBytes::from_vec(b"x".to_vec()), root)
            .await
            .map(drop),
    );
    refused(paddock.list_files("plain", "", root).await.map(drop));
    refused(paddock.read_tar("plain", "", root).await.map(drop));
    assert!(fake.execs.lock().unwrap().is_empty(), "nothing ran");
    let worktree = paddock.load("plain").unwrap().worktree;
    assert!(!worktree.join("new").exists());

    // With it: the sandbox answers as that user, and a write is settled after.
    let fake = Arc::new(FakeRuntime {
        other_users: true,
        ..FakeRuntime::default()
    });
    let (_tmp2, repo, paddock) = setup(&fake);
    paddock.create(fake_job(&repo, "contained")).await.unwrap();
    // `.git` stays refused to every user, before anything runs.
    let into_git = paddock
        .write_file(
            "contained",
            ".git/hooks/post-checkout",
            FileBytes::from_vec(b"x".to_vec()),
            root,
        )
        .await;
    assert!(into_git.is_err(), "{into_git:?}");
    assert!(fake.execs.lock().unwrap().is_empty(), "nothing ran");
    // (The fake's sandbox is this host: a path of the test's own.)
    let target = tmp.path().join("as-root");
    let target = target.to_str().unwrap();
    let written = paddock
        .write_file(
            "contained",
            target,
            FileBytes::from_vec(b"by root".to_vec()),
            root,
        )
        .await
        .unwrap();
    assert_eq!((written.path.as_str(), written.size), (target, 7));
    assert_eq!(std::fs::read(target).unwrap(), b"by root");
    let read = paddock
        .read_file("contained", target, root, None)
        .await
        .unwrap();
    assert_eq!(read.into_vec().await.unwrap(), b"by root");
    // The write and its size check ran as root and were settled; the reads left nothing.
    let execs = fake.other_user_execs.lock().unwrap().clone();
    assert_eq!(execs.first(), Some(&((0, 0), true)), "{execs:?}");
    assert!(execs.iter().all(|(user, _)| *user == (0, 0)), "{execs:?}");
}
