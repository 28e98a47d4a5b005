//! Checkpoints, restore, fork, pause and resume (issue 43) on an overlay-checkout runc job
//! that changed 100 files of the repository, each against the raw tool a user would reach
//! for, interleaved run by run: `checkpoint` against `git stash create` plus a bundle of it
//! through `docker exec` (a snapshot by hand, which neither freezes the job nor keeps the
//! index or untracked files); `restore` against `git reset --hard` + `git clean -fd` +
//! `git stash apply` through `docker exec`; `fork -n 4` against four `paddock create` of
//! the same commit at once (what an orchestrator does without fork, which loses the work);
//! `pause` and `resume` against `docker pause` and `docker unpause` of the job's container.

use super::*;

/// Changes the first 100 tracked files (a new line each, `round` in it).
fn change_100(home: &TestHome, id: &str, round: usize) {
    run(&mut home.cmd(&[
        "exec",
        id,
        "--",
        "sh",
        "-c",
        &format!(
            "git ls-files | head -100 | while read -r f; do echo 'round {round}' >> \"$f\"; done"
        ),
    ]));
}

fn docker_exec(container: &str, script: &str) -> Command {
    let mut cmd = Command::new("docker");
    cmd.args(["exec", "-u", "1000:1000", "-w", "/workspace"])
        .args([
            "-e",
            "GIT_DIR=/paddock/git",
            "-e",
            "GIT_WORK_TREE=/workspace",
        ])
        .args(["-e", "GIT_AUTHOR_NAME=b", "-e", "GIT_AUTHOR_EMAIL=b@b"])
        .args([
            "-e",
            "GIT_COMMITTER_NAME=b",
            "-e",
            "GIT_COMMITTER_EMAIL=b@b",
        ])
        .args([container, "sh", "-c", script]);
    cmd
}

fn timed_ms(cmd: &mut Command) -> f64 {
    settle();
    let started = Instant::now();
    run(cmd);
    ms(started.elapsed())
}

fn row(name: String, ours: Vec<f64>, theirs: Vec<f64>, most_ms: f64, note: &str) -> Row {
    let met = median(&ours) < most_ms;
    Row {
        name,
        paddock: ours,
        baseline: Some(theirs),
        unit: "ms",
        target: format!("p50 < {most_ms:.0} ms"),
        met,
        note: note.into(),
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one scenario per row, read top to bottom"
)]
pub(super) fn rows(repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
    let home = TestHome::new();
    let image = test_image();
    let path = repo.path().display().to_string();
    let flags = [
        "--runtime",
        "docker",
        "--image",
        &image,
        "--checkout",
        "overlay",
    ];
    let mut args = vec!["create", "--repo", &path, "--task", "bench-cp", "--json"];
    args.extend_from_slice(&flags);
    let job: Value = serde_json::from_str(&run(&mut home.cmd(&args))).unwrap();
    let id = job["id"].as_str().unwrap().to_string();
    let container = fixtures::container_of(&job);
    change_100(&home, &id, 0);

    // checkpoint against git stash create + a bundle of it, both in the container.
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    interleaved(
        &mut |i| {
            change_100(&home, &id, i + 1);
            ours.push(timed_ms(&mut home.cmd(&[
                "checkpoint",
                &id,
                "--name",
                &format!("b{i}"),
            ])));
        },
        &mut |i| {
            change_100(&home, &id, i + 100);
            theirs.push(timed_ms(&mut docker_exec(
                &container,
                "s=$(git stash create) && git update-ref refs/bench/s $s && git bundle create -q /tmp/s.bundle refs/bench/s ^HEAD",
            )));
        },
    );
    rows.push(row(
        format!("checkpoint, 100 changed files, overlay runc ({label})"),
        ours,
        theirs,
        150.0,
        "paddock checkpoint (frozen, index and untracked files kept, fsck-checked into the wip store) vs docker exec git stash create + git bundle create",
    ));

    // restore against reset --hard + clean -fd + stash apply, in the container.
    let stash = run(&mut docker_exec(&container, "git stash create"));
    let stash = stash.trim().to_string();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    interleaved(
        &mut |i| {
            change_100(&home, &id, i + 200);
            ours.push(timed_ms(&mut home.cmd(&["restore", &id, "b0"])));
        },
        &mut |i| {
            change_100(&home, &id, i + 300);
            theirs.push(timed_ms(&mut docker_exec(
                &container,
                &format!("git reset -q --hard && git clean -fdq && git stash apply -q {stash}"),
            )));
        },
    );
    rows.push(row(
        format!("restore, 100 changed files, overlay runc ({label})"),
        ours,
        theirs,
        300.0,
        "paddock restore (every file, the index, files made since removed) vs docker exec git reset --hard + git clean -fd + git stash apply",
    ));

    // fork -n 4 against four creates of the same commit at once.
    let base = repo.git(&["rev-parse", "HEAD"]).trim().to_string();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let remove_all = |ids: Vec<String>| {
        for job in ids {
            run(&mut home.cmd(&["rm", &job, "--force", "--delete-branch"]));
        }
    };
    interleaved(
        &mut |_| {
            settle();
            let started = Instant::now();
            let out = run(&mut home.cmd(&["fork", &id, "--from", "b0", "-n", "4", "--json"]));
            ours.push(ms(started.elapsed()));
            let answer: Value = serde_json::from_str(&out).unwrap();
            let ids = answer["jobs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|j| j["id"].as_str().unwrap().to_string())
                .collect();
            remove_all(ids);
        },
        &mut |i| {
            settle();
            let started = Instant::now();
            let children: Vec<_> = (0..4)
                .map(|k| {
                    let task = format!("bench-fresh-{i}-{k}");
                    let mut args = vec![
                        "create", "--repo", &path, "--task", &task, "--base", &base, "--json",
                    ];
                    args.extend_from_slice(&flags);
                    home.cmd(&args)
                        .stdout(Stdio::piped())
                        .spawn()
                        .expect("paddock starts")
                })
                .collect();
            let outs: Vec<String> = children
                .into_iter()
                .map(|c| String::from_utf8(c.wait_with_output().unwrap().stdout).unwrap())
                .collect();
            theirs.push(ms(started.elapsed()));
            let ids = outs
                .iter()
                .map(|o| {
                    let job: Value = serde_json::from_str(o).expect("create --json");
                    job["id"].as_str().unwrap().to_string()
                })
                .collect();
            remove_all(ids);
        },
    );
    rows.push(row(
        format!("fork -n 4, 100 changed files, overlay runc ({label})"),
        ours,
        theirs,
        1000.0,
        "paddock fork -n 4 (four jobs with the checkpoint's files, index and commits) vs four paddock create of the same commit at once (the work is not in them)",
    ));

    // pause and resume against docker pause and unpause.
    let (mut pauses, mut resumes, mut theirs_pause, mut theirs_resume) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    interleaved(
        &mut |_| {
            pauses.push(timed_ms(&mut home.cmd(&["pause", &id])));
            resumes.push(timed_ms(&mut home.cmd(&["resume", &id])));
        },
        &mut |_| {
            theirs_pause.push(timed_ms(Command::new("docker").args(["pause", &container])));
            theirs_resume.push(timed_ms(
                Command::new("docker").args(["unpause", &container]),
            ));
        },
    );
    rows.push(row(
        format!("pause, runc ({label})"),
        pauses,
        theirs_pause,
        50.0,
        "paddock pause (record first, then the cgroup freezer) vs docker pause",
    ));
    rows.push(row(
        format!("resume, runc ({label})"),
        resumes,
        theirs_resume,
        50.0,
        "paddock resume vs docker unpause",
    ));
    run(&mut home.cmd(&["rm", &id, "--force"]));
}
