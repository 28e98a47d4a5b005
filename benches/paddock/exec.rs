//! An exec's cost: `paddock exec -- true` against `docker exec true`, the sync a committing
//! exec adds, and the warm pool's first exec.

use super::*;

/// The agent's uid and gid, named in the baseline's `docker exec` as paddock names them: a
/// container whose main process is the exec server (`PADDOCK_EXEC_PATH=exec-server`) is
/// root's, and root without capabilities cannot write the agent's workspace.
const AGENT: &str = "1000:1000";

/// The cost of bringing an exec's commit back: `paddock exec` of a committing command vs
/// `docker exec` of the same command in the same container (no sync), interleaved; and the
/// sync alone, as paddock's audit log records it.
pub(super) fn exec_sync_cost(repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
    let home = TestHome::new();
    let (id, container) = docker_job(&home, repo, "sync-bench");
    let commit = |file: &str, i: usize| {
        format!("echo {i} >> {file} && git add {file} && git commit -q -m '{file} {i}'")
    };
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for i in 0..RUNS {
        let mut paddock_run = || {
            let (took, _) =
                timed(&mut home.cmd(&["exec", &id, "--", "sh", "-c", &commit("ours.txt", i)]));
            ours.push(ms(took));
        };
        let mut docker_run = || {
            let (took, _) = timed(Command::new("docker").args([
                "exec",
                "-u",
                AGENT,
                "-w",
                "/workspace",
                &container,
                "sh",
                "-c",
                &commit("theirs.txt", i),
            ]));
            theirs.push(ms(took));
        };
        if i % 2 == 0 {
            paddock_run();
            docker_run();
        } else {
            docker_run();
            paddock_run();
        }
    }
    let audit = std::fs::read_to_string(home.root().join("logs").join(&id).join("exec.jsonl"))
        .expect("paddock writes an audit log");
    let sync: Vec<f64> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| e["sync_ms"].as_f64())
        .collect();
    run(&mut home.cmd(&["rm", &id]));
    let added = median(&ours) - median(&theirs);
    rows.push(Row {
        name: format!("exec with a commit, Docker ({label})"),
        paddock: ours,
        baseline: Some(theirs),
        unit: "ms",
        target: "≤ baseline + 100 ms".into(),
        met: added <= 100.0,
        note: format!(
            "paddock exec (command + sync of the branch into the user's repository) vs docker exec of the same command; paddock adds {added:.0} ms at the median"
        ),
    });
    let sync_median = median(&sync);
    rows.push(Row {
        name: format!("sync after an exec that committed ({label})"),
        paddock: sync,
        baseline: None,
        unit: "ms",
        target: "≤ 100 ms".into(),
        met: sync_median <= 100.0,
        note: "bundle made in the container, fetched with fsck into the scratch repository, then into the user's repository (exec.jsonl `sync_ms`)".into(),
    });
}

/// Pairs for the exec rows: each is cheap, and single execs vary by tens of ms here.
pub(super) const EXEC_PAIRS: usize = 15;

/// Runs `sample(i, paddock_first)` `EXEC_PAIRS` times; the caller alternates the order.
pub(super) fn alternated(mut sample: impl FnMut(usize, bool)) {
    for i in 0..EXEC_PAIRS {
        sample(i, i % 2 == 0);
    }
}

/// An install with a `pooled` profile (Docker, overlay checkout, a pool of one that the
/// bench fills itself: no refill after a claim).
pub(super) fn pooled_home() -> TestHome {
    let home = TestHome::new().env("PADDOCK_POOL_REFILL", "off");
    let image = test_image();
    std::fs::write(
        home.dir.path().join("config/paddock/config.yaml"),
        format!(
            "admission:\n  memory: 1024g\n  cpus: 1000\nprofiles:\n  pooled:\n    runtime: docker\n    image: {image}\n    checkout: overlay\n    pool: {{size: 1}}\n"
        ),
    )
    .unwrap();
    home
}

/// `paddock exec JOB -- true` against `docker exec CONTAINER true` in the same container,
/// [`EXEC_PAIRS`] alternated pairs: (paddock's, Docker's) milliseconds.
pub(super) fn cli_true_pairs(home: &TestHome, id: &str, container: &str) -> (Vec<f64>, Vec<f64>) {
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    alternated(|_, paddock_first| {
        let mut paddock_run = || ours.push(ms(timed(&mut home.cmd(&["exec", id, "--", "true"])).0));
        let mut docker_run = || {
            theirs.push(ms(timed(
                Command::new("docker").args(["exec", "-u", AGENT, container, "true"]),
            )
            .0));
        };
        if paddock_first {
            paddock_run();
            docker_run();
        } else {
            docker_run();
            paddock_run();
        }
    });
    (ours, theirs)
}

/// `paddock create --profile pooled` of task `warm-{i}` in the repository at `path`: the job
/// (claimed from the pool when it has a slot).
pub(super) fn warm_create(home: &TestHome, path: &str, i: usize) -> Value {
    let out = run(&mut home.cmd(&[
        "create",
        "--repo",
        path,
        "--task",
        &format!("warm-{i}"),
        "--profile",
        "pooled",
        "--json",
    ]));
    serde_json::from_str(&out).expect("a job")
}

/// Issue 25's exec rows, on one Docker job and its container: `paddock exec -- true` against
/// `docker exec true` (the command changed nothing: no sync round), a committing exec
/// against `docker exec` of the same commit (the sync included), and the first exec result
/// of a job created from a warm pool.
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
pub(super) fn exec_cost(repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
    let home = pooled_home();
    let image = test_image();
    let path = repo.path().display().to_string();
    let (id, container) = docker_job(&home, repo, "exec-bench");
    // One exec each first, untimed: the container's first execs page in sh and git.
    run(&mut home.cmd(&["exec", &id, "--", "git", "status", "--short"]));
    run(Command::new("docker").args(["exec", "-u", AGENT, &container, "true"]));

    let (ours, theirs) = cli_true_pairs(&home, &id, &container);
    let ratio = median(&ours) / median(&theirs);
    rows.push(Row {
        name: format!("exec true, Docker ({label})"),
        paddock: ours,
        baseline: Some(theirs),
        unit: "ms",
        target: "≤ 1.05 × docker exec".into(),
        met: ratio <= 1.05,
        note: "paddock exec JOB -- true vs docker exec CONTAINER true, the same container; no commit, so no sync round".into(),
    });

    let commit = |file: &str, i: usize| {
        format!("echo {i} >> {file} && git add {file} && git commit -q -m '{file} {i}'")
    };
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    alternated(|i, paddock_first| {
        let mut paddock_run = || {
            let script = commit("ours.txt", i);
            ours.push(ms(timed(
                &mut home.cmd(&["exec", &id, "--", "sh", "-c", &script]),
            )
            .0));
        };
        let mut docker_run = || {
            let script = commit("theirs.txt", i);
            theirs.push(ms(timed(Command::new("docker").args([
                "exec",
                "-u",
                AGENT,
                "-w",
                "/workspace",
                &container,
                "sh",
                "-c",
                &script,
            ]))
            .0));
        };
        if paddock_first {
            paddock_run();
            docker_run();
        } else {
            docker_run();
            paddock_run();
        }
    });
    let added = median(&ours) - median(&theirs);
    rows.push(Row {
        name: format!("exec with a commit, Docker ({label})"),
        paddock: ours,
        baseline: Some(theirs),
        unit: "ms",
        target: "≤ docker exec + 30 ms".into(),
        met: added <= 30.0,
        note: format!(
            "paddock exec (command + sync of the branch into the user's repository) vs docker exec of the same commit in the same container; paddock adds {added:.0} ms at the median"
        ),
    });
    run(&mut home.cmd(&["rm", &id]));

    // The warm pool: create from a filled pool (untimed fill) + the first exec's result.
    let first = run(&mut home.cmd(&[
        "create",
        "--repo",
        &path,
        "--task",
        "pristine",
        "--runtime",
        "docker",
        "--image",
        &image,
        "--checkout",
        "overlay",
        "--json",
    ]));
    let first: Value = serde_json::from_str(&first).unwrap();
    run(&mut home.cmd(&["rm", "--delete-branch", first["id"].as_str().unwrap()]));
    let mut warm = Vec::new();
    for i in 0..EXEC_PAIRS {
        run(&mut home.cmd(&["pool", "fill", "--profile", "pooled", "--repo", &path]));
        settle();
        let started = Instant::now();
        let id = warm_create(&home, &path, i)["id"]
            .as_str()
            .unwrap()
            .to_string();
        run(&mut home.cmd(&["exec", &id, "--", "true"]));
        warm.push(ms(started.elapsed()));
        run(&mut home.cmd(&["rm", "--delete-branch", &id]));
    }
    run(&mut home.cmd(&["pool", "drain"]));
    let p50 = median(&warm);
    rows.push(Row {
        name: format!("first exec result, warm pool ({label})"),
        paddock: warm,
        baseline: None,
        unit: "ms",
        target: "p50 < 120 ms".into(),
        met: p50 < 120.0,
        note: "paddock create --profile pooled (overlay checkout, pool filled untimed before each) + paddock exec -- true, CLI to result".into(),
    });
}
