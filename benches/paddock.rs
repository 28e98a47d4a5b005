//! paddock against the raw tools it wraps, measured side by side in one run so machine noise
//! hits both: `cargo bench --bench paddock` (see docs/BENCHMARKS.md).
//!
//! Every comparison interleaves paddock and its baseline run by run and reports medians and
//! p95 over at least 5 runs. Results go to `target/bench/results.json` and
//! `docs/BENCHMARKS.md`. Set `PADDOCK_BENCH_QUICK=1` for a smoke run (5,000-file repo only),
//! `PADDOCK_BENCH_REPO=/path` to add a repository of your own, `PADDOCK_BENCH_ONLY=egress`
//! to run only the egress proxy rows (`=queue`: the 100 queued runs; `=marks`: `ls` with the
//! merged and conflicts marks; `=overlay`: the overlay checkout rows on the 50,000-file
//! repository; `=ready`: job ready and first exec, cold and warm, on 1, 5,000 and 50,000
//! files; `=exec`: an exec's cost against `docker exec` and the warm pool's first exec, on
//! 1 and 5,000 files; `=microvm`: a microVM job's create to ready and exec round trip
//! against runc), printed, not written.

#[path = "../fixtures/mod.rs"]
mod fixtures;
#[path = "parts/microvm.rs"]
mod microvm;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fixtures::{FixtureRepo, TestHome, bridge_gateway, test_image};
use serde_json::{Value, json};

const RUNS: usize = 7;

fn median(samples: &[f64]) -> f64 {
    percentile(samples, 0.5)
}

fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).expect("timings are numbers"));
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "p is in 0..=1, so the nearest rank is a small index within the slice"
    )]
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn run(cmd: &mut Command) -> String {
    let output = cmd.stdin(Stdio::null()).output().expect("command runs");
    assert!(
        output.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// Flushes dirty pages before a timed command, so the kernel's writeback of earlier work
/// (fixture generation, the previous run's checkout) does not land inside a measurement.
fn settle() {
    let _ = Command::new("sync").status();
}

fn timed(cmd: &mut Command) -> (Duration, String) {
    settle();
    let started = Instant::now();
    let out = run(cmd);
    (started.elapsed(), out)
}

/// One row of the results table.
struct Row {
    name: String,
    paddock: Vec<f64>,
    baseline: Option<Vec<f64>>,
    unit: &'static str,
    target: String,
    met: bool,
    note: String,
}

impl Row {
    fn json(&self) -> Value {
        json!({
            "name": self.name,
            "unit": self.unit,
            "paddock": {"median": median(&self.paddock), "p95": percentile(&self.paddock, 0.95), "samples": self.paddock},
            "baseline": self.baseline.as_ref().map(|b| json!({"median": median(b), "p95": percentile(b, 0.95), "samples": b})),
            "ratio": self.baseline.as_ref().map(|b| median(&self.paddock) / median(b)),
            "target": self.target,
            "met": self.met,
            "note": self.note,
        })
    }

    fn markdown(&self) -> String {
        let fmt = |v: f64| {
            if self.unit == "ms" {
                format!("{v:.0} ms")
            } else {
                format!("{v:.1} {}", self.unit)
            }
        };
        let (base, ratio) = match &self.baseline {
            Some(b) => (
                format!("{} / {}", fmt(median(b)), fmt(percentile(b, 0.95))),
                format!("{:.2}×", median(&self.paddock) / median(b)),
            ),
            None => ("–".into(), "–".into()),
        };
        format!(
            "| {} | {} / {} | {} | {} | {} | {} |",
            self.name,
            fmt(median(&self.paddock)),
            fmt(percentile(&self.paddock, 0.95)),
            base,
            ratio,
            self.target,
            if self.met { "met" } else { "**missed**" },
        )
    }
}

fn docker_ok() -> bool {
    std::env::var("PADDOCK_SKIP_DOCKER_TESTS").as_deref() != Ok("1")
        && Command::new("docker")
            .args(["image", "inspect", &test_image()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// `git worktree add -b` as a user would type it.
fn raw_worktree(repo: &Path, dir: &Path, branch: &str) -> Command {
    let mut cmd = Command::new("git");
    cmd.args([
        "-c",
        "checkout.workers=0",
        "worktree",
        "add",
        "-q",
        "-b",
        branch,
    ])
    .arg(dir)
    .arg("HEAD")
    .current_dir(repo);
    cmd
}

fn cleanup_raw(repo: &Path, dir: &Path, branch: &str) {
    let _ = Command::new("git")
        .args(["worktree", "remove", "--force", "--force"])
        .arg(dir)
        .current_dir(repo)
        .output();
    let _ = Command::new("git")
        .args(["branch", "-D", branch])
        .current_dir(repo)
        .output();
}

/// The same mounts and limits as a paddock job container, through the docker CLI.
fn raw_docker_run(name: &str, worktree: &Path, common: &Path) -> Command {
    let admin = std::fs::read_to_string(worktree.join(".git")).expect("a worktree has a .git file");
    let admin = admin.trim().trim_start_matches("gitdir: ").to_string();
    let mut cmd = Command::new("docker");
    cmd.args(["run", "-d", "--name", name, "--init", "--read-only"])
        .args(["--tmpfs", "/tmp:rw,nosuid,nodev,size=512m,mode=1777"])
        .args(["--tmpfs", "/home/agent:rw,nosuid,nodev,size=256m,mode=1777"])
        .args([
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--network",
            "none",
        ])
        .args([
            "--memory",
            "2g",
            "--memory-swap",
            "2g",
            "--cpus",
            "2",
            "--pids-limit",
            "512",
        ])
        .args(["-u", "1000:1000", "-w", "/workspace"])
        .args(["-v", &format!("{}:/workspace", worktree.display())])
        .args([
            "-v",
            &format!("{}:{}:ro", common.display(), common.display()),
        ])
        .args(["-v", &format!("{0}/objects:{0}/objects", common.display())])
        .args(["-v", &format!("{admin}:{admin}")])
        .arg(test_image());
    cmd
}

fn cold_ready_docker(repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
    let home = TestHome::new();
    let common = repo.path().join(".git").canonicalize().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let path = repo.path().display().to_string();
    let image = test_image();
    let paddock_run = |i: usize| {
        // paddock: create (branch, worktree, container) + first successful exec.
        settle();
        let task = format!("bench-{i}");
        let started = Instant::now();
        let job: Value = serde_json::from_str(&run(&mut home.cmd(&[
            "create",
            "--repo",
            &path,
            "--task",
            &task,
            "--runtime",
            "docker",
            "--image",
            &image,
            "--json",
        ])))
        .unwrap();
        let id = job["id"].as_str().unwrap().to_string();
        run(&mut home.cmd(&["exec", &id, "--", "true"]));
        let elapsed = ms(started.elapsed());
        run(&mut home.cmd(&["rm", &id]));
        elapsed
    };
    let baseline_run = |i: usize| {
        // baseline: git worktree add -b + docker run -d (same mounts, limits) + docker exec true.
        let dir = scratch.path().join(format!("raw-{i}"));
        let branch = format!("raw/bench-{i}");
        let name = format!("paddock-bench-raw-{i}-{}", std::process::id());
        settle();
        let started = Instant::now();
        run(&mut raw_worktree(repo.path(), &dir, &branch));
        run(&mut raw_docker_run(&name, &dir, &common));
        run(Command::new("docker").args(["exec", &name, "true"]));
        let elapsed = ms(started.elapsed());
        let _ = Command::new("docker").args(["rm", "-f", &name]).output();
        cleanup_raw(repo.path(), &dir, &branch);
        elapsed
    };
    interleaved(&mut |i| ours.push(paddock_run(i)), &mut |i| {
        theirs.push(baseline_run(i))
    });
    let ratio = median(&ours) / median(&theirs);
    rows.push(Row {
        name: format!("cold job ready, Docker ({label})"),
        paddock: ours,
        baseline: Some(theirs),
        unit: "ms",
        target: "≤ 1.10 × baseline".into(),
        met: ratio <= 1.10,
        note:
            "paddock create + exec true vs git worktree add -b + docker run -d + docker exec true"
                .into(),
    });
}

/// A Docker job of the test image on `repo`: its id and its container's name.
fn docker_job(home: &TestHome, repo: &FixtureRepo, task: &str) -> (String, String) {
    let job: Value = serde_json::from_str(&run(&mut home.cmd(&[
        "create",
        "--repo",
        &repo.path().display().to_string(),
        "--task",
        task,
        "--runtime",
        "docker",
        "--image",
        &test_image(),
        "--json",
    ])))
    .unwrap();
    let id = job["id"].as_str().unwrap().to_string();
    (id, fixtures::container_of(&job))
}

/// The cost of bringing an exec's commit back: `paddock exec` of a committing command vs
/// `docker exec` of the same command in the same container (no sync), interleaved; and the
/// sync alone, as paddock's audit log records it.
fn exec_sync_cost(repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
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
const EXEC_PAIRS: usize = 15;

/// Runs `sample(i, paddock_first)` `EXEC_PAIRS` times; the caller alternates the order.
fn alternated(mut sample: impl FnMut(usize, bool)) {
    for i in 0..EXEC_PAIRS {
        sample(i, i % 2 == 0);
    }
}

/// An install with a `pooled` profile (Docker, overlay checkout, a pool of one that the
/// bench fills itself: no refill after a claim).
fn pooled_home() -> TestHome {
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

/// Issue 25's exec rows, on one Docker job and its container: `paddock exec -- true` against
/// `docker exec true` (the command changed nothing: no sync round), a committing exec
/// against `docker exec` of the same commit (the sync included), and the first exec result
/// of a job created from a warm pool.
fn exec_cost(repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
    let home = pooled_home();
    let image = test_image();
    let path = repo.path().display().to_string();
    let (id, container) = docker_job(&home, repo, "exec-bench");
    // One exec each first, untimed: the container's first execs page in sh and git.
    run(&mut home.cmd(&["exec", &id, "--", "git", "status", "--short"]));
    run(Command::new("docker").args(["exec", &container, "true"]));

    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    alternated(|_, paddock_first| {
        let mut paddock_run =
            || ours.push(ms(timed(&mut home.cmd(&["exec", &id, "--", "true"])).0));
        let mut docker_run = || {
            theirs.push(ms(timed(
                Command::new("docker").args(["exec", &container, "true"]),
            )
            .0))
        };
        if paddock_first {
            paddock_run();
            docker_run();
        } else {
            docker_run();
            paddock_run();
        }
    });
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
        let out = run(&mut home.cmd(&[
            "create",
            "--repo",
            &path,
            "--task",
            &format!("warm-{i}"),
            "--profile",
            "pooled",
            "--json",
        ]));
        let id = serde_json::from_str::<Value>(&out).unwrap()["id"]
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

fn process_create(repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
    let home = TestHome::new();
    let scratch = tempfile::tempdir().unwrap();
    let path = repo.path().display().to_string();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let (mut our_cpu, mut their_cpu) = (Vec::new(), Vec::new());
    let mut paddock_run = |i: usize| {
        let task = format!("proc-{i}");
        let cpu = children_cpu();
        let (elapsed, out) = timed(&mut home.cmd(&[
            "create",
            "--repo",
            &path,
            "--task",
            &task,
            "--runtime",
            "process",
            "--json",
        ]));
        our_cpu.push(ms(children_cpu() - cpu));
        ours.push(ms(elapsed));
        let id = serde_json::from_str::<Value>(&out).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        run(&mut home.cmd(&["rm", &id]));
    };
    let mut baseline_run = |i: usize| {
        let dir = scratch.path().join(format!("raw-{i}"));
        let branch = format!("raw/proc-{i}");
        let cpu = children_cpu();
        let (elapsed, _) = timed(&mut raw_worktree(repo.path(), &dir, &branch));
        their_cpu.push(ms(children_cpu() - cpu));
        theirs.push(ms(elapsed));
        cleanup_raw(repo.path(), &dir, &branch);
    };
    interleaved(&mut paddock_run, &mut baseline_run);
    let ratio = median(&ours) / median(&theirs);
    rows.push(Row {
        name: format!("process runtime create ({label})"),
        paddock: ours,
        baseline: Some(theirs),
        unit: "ms",
        target: "≤ 1.10 × git worktree add".into(),
        met: ratio <= 1.10,
        note: format!(
            "paddock create --runtime process vs git worktree add -b; CPU time (user+sys, paddock with its git children) median {:.0} vs {:.0} ms = {:.2}×",
            median(&our_cpu),
            median(&their_cpu),
            median(&our_cpu) / median(&their_cpu)
        ),
    });
}

/// Bytes a directory tree takes on disk, not crossing into other mounts (`du -sx`): an
/// overlay checkout's files are counted once, in the pristine checkout.
fn disk_bytes(path: &Path) -> f64 {
    let out = run(Command::new("du").args(["-sx", "--block-size=1"]).arg(path));
    out.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0)
}

/// `create --checkout overlay` (process runtime, the commit's pristine checkout already
/// made) against `git worktree add -b`, interleaved; then the disk of 20 overlay jobs
/// against one `git worktree add` checkout.
fn overlay_create(repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
    let home = TestHome::new();
    let scratch = tempfile::tempdir().unwrap();
    let path = repo.path().display().to_string();
    let create = |task: &str| -> String {
        let out = run(&mut home.cmd(&[
            "create",
            "--repo",
            &path,
            "--task",
            task,
            "--runtime",
            "process",
            "--checkout",
            "overlay",
            "--json",
        ]));
        serde_json::from_str::<Value>(&out).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // The pristine checkout, made once (it stays after the job goes).
    let first = create("overlay-warm");
    run(&mut home.cmd(&["rm", &first]));
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut paddock_run = |i: usize| {
        let task = format!("overlay-{i}");
        settle();
        let started = Instant::now();
        let id = create(&task);
        ours.push(ms(started.elapsed()));
        run(&mut home.cmd(&["rm", &id]));
    };
    let mut baseline_run = |i: usize| {
        let dir = scratch.path().join(format!("raw-{i}"));
        let branch = format!("raw/overlay-{i}");
        let (elapsed, _) = timed(&mut raw_worktree(repo.path(), &dir, &branch));
        theirs.push(ms(elapsed));
        cleanup_raw(repo.path(), &dir, &branch);
    };
    interleaved(&mut paddock_run, &mut baseline_run);
    let ratio = median(&ours) / median(&theirs);
    rows.push(Row {
        name: format!("overlay create ({label})"),
        paddock: ours,
        baseline: Some(theirs),
        unit: "ms",
        target: "≤ 0.10 × git worktree add".into(),
        met: ratio <= 0.10,
        note: "paddock create --runtime process --checkout overlay (pristine checkout already made) vs git worktree add -b".into(),
    });

    // Disk: 20 overlay jobs (pristine checkout, job dirs and upper dirs; mounts not crossed)
    // against one checkout made by git worktree add.
    let dir = scratch.path().join("raw-disk");
    run(&mut raw_worktree(repo.path(), &dir, "raw/overlay-disk"));
    let one = disk_bytes(&dir);
    cleanup_raw(repo.path(), &dir, "raw/overlay-disk");
    let ids: Vec<String> = (0..20)
        .map(|i| create(&format!("overlay-disk-{i}")))
        .collect();
    let twenty = disk_bytes(&home.root());
    for id in &ids {
        run(&mut home.cmd(&["rm", id]));
    }
    let mib = |b: f64| b / (1024.0 * 1024.0);
    rows.push(Row {
        name: format!("disk of 20 overlay jobs ({label})"),
        paddock: vec![mib(twenty)],
        baseline: Some(vec![mib(one)]),
        unit: "MiB",
        target: "< 1.2 × one checkout".into(),
        met: twenty / one < 1.2,
        note: "du -sx of $PADDOCK_HOME with 20 overlay jobs (the pristine checkout, job dirs, upper dirs) vs du -s of one git worktree add checkout".into(),
    });
}

/// Time to a ready job and to its first exec's result, side by side with the raw tools:
/// `git worktree add -b` + `docker run -d` (+ `docker exec true`) against paddock cold with
/// a worktree checkout, cold with an overlay checkout (the pristine checkout made once
/// beforehand), and warm (an overlay checkout claimed into a waiting pool container; the
/// pool is filled, untimed, before each run). Also the first `git status` inside the warm
/// job. Ready = `create` returned (the first exec can start).
fn job_ready(repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
    let home = pooled_home();
    let image = test_image();
    let common = repo.path().join(".git").canonicalize().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let path = repo.path().display().to_string();
    let create = |task: &str, flags: &[&str]| -> String {
        let mut args = vec!["create", "--repo", &path, "--task", task, "--json"];
        args.extend_from_slice(flags);
        let out = run(&mut home.cmd(&args));
        serde_json::from_str::<Value>(&out).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let docker_flags = [
        "--runtime",
        "docker",
        "--image",
        image.as_str(),
        "--checkout",
        "worktree",
    ];
    let overlay_flags = [
        "--runtime",
        "docker",
        "--image",
        image.as_str(),
        "--checkout",
        "overlay",
    ];
    let warm_flags = ["--profile", "pooled"];
    // The pristine checkout, made once (it stays after the job goes).
    let first = create("ready-pristine", &overlay_flags);
    run(&mut home.cmd(&["rm", "--delete-branch", &first]));
    let mut samples: [(Vec<f64>, Vec<f64>); 4] = Default::default();
    let mut git_status = Vec::new();
    let mut one = |variant: usize, i: usize| {
        let task = format!("ready-{variant}-{i}");
        if variant == 3 {
            run(&mut home.cmd(&["pool", "fill", "--profile", "pooled", "--repo", &path]));
        }
        settle();
        let started = Instant::now();
        let (ready, first_exec, cleanup): (f64, f64, Box<dyn Fn()>) = if variant == 0 {
            let dir = scratch.path().join(format!("raw-{i}"));
            let branch = format!("raw/ready-{i}");
            let name = format!("paddock-bench-ready-{i}-{}", std::process::id());
            run(&mut raw_worktree(repo.path(), &dir, &branch));
            run(&mut raw_docker_run(&name, &dir, &common));
            let ready = ms(started.elapsed());
            run(Command::new("docker").args(["exec", &name, "true"]));
            let first_exec = ms(started.elapsed());
            let repo_path = repo.path().to_path_buf();
            (
                ready,
                first_exec,
                Box::new(move || {
                    let _ = Command::new("docker").args(["rm", "-f", &name]).output();
                    cleanup_raw(&repo_path, &dir, &branch);
                }),
            )
        } else {
            let flags: &[&str] = match variant {
                1 => &docker_flags,
                2 => &overlay_flags,
                _ => &warm_flags,
            };
            let id = create(&task, flags);
            let ready = ms(started.elapsed());
            run(&mut home.cmd(&["exec", &id, "--", "true"]));
            let first_exec = ms(started.elapsed());
            if variant == 3 {
                let status = Instant::now();
                run(&mut home.cmd(&["exec", &id, "--", "git", "status", "--porcelain"]));
                git_status.push(ms(status.elapsed()));
            }
            let home = &home;
            let id = id.clone();
            run(&mut home.cmd(&["rm", "--delete-branch", &id]));
            (ready, first_exec, Box::new(|| {}))
        };
        cleanup();
        samples[variant].0.push(ready);
        samples[variant].1.push(first_exec);
    };
    for i in 0..RUNS {
        // The order of the four rotates from run to run.
        for k in 0..4 {
            one((i + k) % 4, i);
        }
    }
    run(&mut home.cmd(&["pool", "drain"]));
    let (baseline_ready, baseline_exec) = samples[0].clone();
    let names = ["", "cold, worktree", "cold, overlay", "warm pool, overlay"];
    for variant in 1..4 {
        let (ready, first_exec) = samples[variant].clone();
        let warm = variant == 3;
        let p50 = median(&ready);
        let p95 = percentile(&ready, 0.95);
        rows.push(Row {
            name: format!("job ready, {} ({label})", names[variant]),
            paddock: ready,
            baseline: Some(baseline_ready.clone()),
            unit: "ms",
            target: if warm {
                "p50 < 100 ms, p95 < 200 ms".into()
            } else {
                "< baseline".into()
            },
            met: if warm {
                p50 < 100.0 && p95 < 200.0
            } else {
                p50 < median(&baseline_ready)
            },
            note: "paddock create --json returned vs git worktree add -b + docker run -d returned"
                .into(),
        });
        let exec_p50 = median(&first_exec);
        rows.push(Row {
            name: format!("first exec result, {} ({label})", names[variant]),
            paddock: first_exec,
            baseline: Some(baseline_exec.clone()),
            unit: "ms",
            target: "< baseline".into(),
            met: exec_p50 < median(&baseline_exec),
            note: "create + paddock exec true vs git worktree add -b + docker run -d + docker exec true".into(),
        });
    }
    let status_p50 = median(&git_status);
    rows.push(Row {
        name: format!("first git status in a warm job ({label})"),
        paddock: git_status,
        baseline: None,
        unit: "ms",
        target: "< 500 ms".into(),
        met: status_p50 < 500.0,
        note: "paddock exec JOB -- git status --porcelain, the job's first git command".into(),
    });
}

/// CPU time (user + system) used so far by waited-for children and their children: far
/// less noisy than wall time on a shared 2-core machine, so it backs up close ratios.
#[expect(
    unsafe_code,
    reason = "getrusage of the benchmark's children; no safe wrapper"
)]
fn children_cpu() -> Duration {
    // SAFETY: getrusage fills the struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &raw mut usage) };
    let tv = |t: libc::timeval| {
        Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_usec).unwrap_or(0) * 1000,
        )
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn parallel_creates(repo: &FixtureRepo, rows: &mut Vec<Row>) {
    let path = repo.path().display().to_string();
    let (mut parallel, mut sequential) = (Vec::new(), Vec::new());
    let mut failures = 0;
    for round in 0..5 {
        let home = TestHome::new();
        settle();
        let started = Instant::now();
        let children: Vec<_> = (0..16)
            .map(|i| {
                home.cmd(&[
                    "create",
                    "--repo",
                    &path,
                    "--task",
                    &format!("par-{round}-{i}"),
                    "--runtime",
                    "process",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
            })
            .collect();
        for mut child in children {
            if !child.wait().unwrap().success() {
                failures += 1;
            }
        }
        parallel.push(ms(started.elapsed()));
        remove_all(&home);

        let home = TestHome::new();
        settle();
        let started = Instant::now();
        for i in 0..16 {
            let ok = home
                .cmd(&[
                    "create",
                    "--repo",
                    &path,
                    "--task",
                    &format!("seq-{round}-{i}"),
                    "--runtime",
                    "process",
                ])
                .output()
                .unwrap()
                .status
                .success();
            if !ok {
                failures += 1;
            }
        }
        sequential.push(ms(started.elapsed()));
        remove_all(&home);
    }
    let met = failures == 0 && median(&parallel) <= median(&sequential);
    rows.push(Row {
        name: "16 parallel creates (wall time)".into(),
        paddock: parallel,
        baseline: Some(sequential),
        unit: "ms",
        target: "0 failures; ≤ 16 sequential".into(),
        met,
        note: format!("{failures} failures; baseline = the same 16 creates one after another"),
    });
}

fn remove_all(home: &TestHome) {
    let jobs: Value = serde_json::from_str(&run(&mut home.cmd(&["ls", "--json"]))).unwrap();
    for job in jobs.as_array().unwrap() {
        run(&mut home.cmd(&["rm", "--delete-branch", job["id"].as_str().unwrap()]));
    }
}

/// Runs `paddock` and `baseline` `RUNS` times each, alternating which goes first, so
/// neither always inherits the other's page cache.
fn interleaved(paddock: &mut dyn FnMut(usize), baseline: &mut dyn FnMut(usize)) {
    for i in 0..RUNS {
        if i % 2 == 0 {
            paddock(i);
            baseline(i);
        } else {
            baseline(i);
            paddock(i);
        }
    }
}

fn many_jobs(home: &TestHome, repo: &FixtureRepo, count: usize, prefix: &str) {
    let path = repo.path().display().to_string();
    for chunk in (0..count).collect::<Vec<_>>().chunks(8) {
        let children: Vec<_> = chunk
            .iter()
            .map(|i| {
                home.cmd(&[
                    "create",
                    "--repo",
                    &path,
                    "--task",
                    &format!("{prefix}-{i}"),
                    "--runtime",
                    "process",
                ])
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
            })
            .collect();
        for mut child in children {
            assert!(child.wait().unwrap().success());
        }
    }
}

fn ls_and_sweep(rows: &mut Vec<Row>) {
    let repo = FixtureRepo::with_files(100, 200);
    let home = TestHome::new();
    many_jobs(&home, &repo, 200, "ls");
    let mut samples = Vec::new();
    for _ in 0..RUNS {
        let (elapsed, out) = timed(&mut home.cmd(&["ls", "--json"]));
        assert_eq!(
            serde_json::from_str::<Value>(&out)
                .unwrap()
                .as_array()
                .unwrap()
                .len(),
            200
        );
        samples.push(ms(elapsed));
    }
    let met = median(&samples) <= 150.0;
    rows.push(Row {
        name: "ls --json, 200 jobs".into(),
        paddock: samples,
        baseline: None,
        unit: "ms",
        target: "≤ 150 ms".into(),
        met,
        note: String::new(),
    });

    // Sweep them all as stale: --now two hours ahead, so every job is idle.
    let mut rates = Vec::new();
    let mut round_home = home;
    for round in 0..3 {
        if round > 0 {
            round_home = TestHome::new();
            many_jobs(&round_home, &repo, 200, &format!("sw{round}"));
        }
        let later = (chrono::Utc::now() + chrono::TimeDelta::hours(2)).to_rfc3339();
        let (elapsed, out) = timed(&mut round_home.cmd(&["sweep", "--json", "--now", &later]));
        let report: Value = serde_json::from_str(&out).unwrap();
        let removed = report["removed"].as_array().unwrap().len();
        assert_eq!(removed, 200, "{report}");
        rates.push(removed as f64 / elapsed.as_secs_f64());
    }
    let met = median(&rates) >= 10.0;
    rows.push(Row {
        name: "sweep of 200 stale jobs (process runtime)".into(),
        paddock: rates,
        baseline: None,
        unit: "jobs/s",
        target: "≥ 10 jobs/s".into(),
        met,
        note: "each removal: snapshot check, worktree remove, branch delete, record".into(),
    });
}

/// `ls --json` of 200 jobs that each have a commit, so every row carries a computed merged
/// and conflicts mark (issue 16): the first `ls` computes each job's merge with its base
/// (cold), the next ones read the cached answers (warm). The baseline is git's own listing
/// of the 200 branches with their tips (`git for-each-ref`), the least any `ls` must do.
fn ls_with_marks(rows: &mut Vec<Row>) {
    let repo = FixtureRepo::with_files(100, 200);
    let home = TestHome::new();
    many_jobs(&home, &repo, 200, "mk");
    let jobs: Value = serde_json::from_str(&run(&mut home.cmd(&["ls", "--json"]))).unwrap();
    for job in jobs.as_array().unwrap() {
        let id = job["id"].as_str().unwrap();
        run(&mut home.cmd(&[
            "exec",
            id,
            "--",
            "sh",
            "-c",
            "echo change >> change.txt && git add change.txt && git commit -qm change",
        ]));
    }
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    let mut baseline = Vec::new();
    for round in 0..RUNS {
        if round > 0 {
            // Cold again: move main, so every cached answer's key is stale.
            repo.write("base.txt", &format!("round {round}\n"));
            repo.commit_all("move main");
        }
        let (elapsed, out) = timed(&mut home.cmd(&["ls", "--json"]));
        let listed: Value = serde_json::from_str(&out).unwrap();
        assert!(
            listed
                .as_array()
                .unwrap()
                .iter()
                .all(|j| j["conflicts"].is_boolean()),
            "{listed}"
        );
        cold.push(ms(elapsed));
        warm.push(ms(timed(&mut home.cmd(&["ls", "--json"])).0));
        let mut git = Command::new("git");
        git.args([
            "-C",
            &repo.path().display().to_string(),
            "for-each-ref",
            "refs/heads/agent/",
        ]);
        baseline.push(ms(timed(&mut git).0));
    }
    for (name, samples) in [("cold", cold), ("warm", warm)] {
        let met = median(&samples) <= 150.0;
        rows.push(Row {
            name: format!("ls --json, 200 jobs with a commit each, marks {name}"),
            paddock: samples,
            baseline: Some(baseline.clone()),
            unit: "ms",
            target: "≤ 150 ms".into(),
            met,
            note: "merged and conflicts marks of each job against its base (merge-tree, cached per tip)".into(),
        });
    }
}

fn rss_kib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// An HTTP server on `address` for the egress rows: `GET /10m` sends 10 MiB, `GET /hold`
/// sends a head and keeps the connection open for 20 s. Returns its port.
fn body_server(address: &str) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind((address, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                if String::from_utf8_lossy(&head).starts_with("GET /hold") {
                    let _ = stream.write_all(b"HTTP/1.0 200 OK\r\n\r\n");
                    std::thread::sleep(Duration::from_secs(20));
                    return;
                }
                let body = vec![b'x'; 10 << 20];
                let _ = stream.write_all(
                    format!("HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).as_bytes(),
                );
                let _ = stream.write_all(&body);
            });
        }
    });
    port
}

/// A 10 MiB download through an allowlist job's egress proxy against the same download
/// straight from an `open` job, both timed inside their containers (no exec overhead); then
/// the proxy's memory with 50 tunnels open.
fn egress_overhead(rows: &mut Vec<Row>) {
    let repo = FixtureRepo::with_files(100, 200);
    let home = TestHome::new();
    let gateway = bridge_gateway();
    let port = body_server(&gateway);
    let image = test_image();
    let create = |extra: &[&str]| -> (String, String) {
        let path = repo.path().display().to_string();
        let mut args = vec![
            "create",
            "--repo",
            &path,
            "--runtime",
            "docker",
            "--image",
            &image,
            "--json",
        ];
        args.extend_from_slice(extra);
        let job: Value = serde_json::from_str(&run(&mut home.cmd(&args))).unwrap();
        (
            job["id"].as_str().unwrap().to_string(),
            fixtures::container_of(&job),
        )
    };
    let target = format!("{gateway}:{port}");
    let (proxied, proxied_container) = create(&["--task", "egress-proxied", "--allow", &target]);
    let (direct, direct_container) = create(&["--task", "egress-direct", "--network", "open"]);
    // Prints the microseconds a fetch took and the bytes it got (bash's clock: no fork of
    // `date` inside the timed span).
    let fetch_direct = format!(
        "t0=${{EPOCHREALTIME/./}}; exec 3<>/dev/tcp/{gateway}/{port}; printf 'GET /10m HTTP/1.0\\r\\n\\r\\n' >&3; n=$(cat <&3 | wc -c); echo $(( ${{EPOCHREALTIME/./}} - t0 )) $n"
    );
    let fetch_proxied = format!(
        "h=${{HTTPS_PROXY#http://}}; t0=${{EPOCHREALTIME/./}}; exec 3<>/dev/tcp/${{h%:*}}/${{h##*:}}; printf 'CONNECT {target} HTTP/1.1\\r\\n\\r\\nGET /10m HTTP/1.0\\r\\n\\r\\n' >&3; n=$(cat <&3 | wc -c); echo $(( ${{EPOCHREALTIME/./}} - t0 )) $n"
    );
    let fetch = |container: &str, script: &str| -> f64 {
        let out = run(Command::new("docker").args(["exec", container, "bash", "-c", script]));
        let mut words = out.split_whitespace();
        let micros: f64 = words.next().unwrap().parse().unwrap();
        let bytes: u64 = words.next().unwrap().parse().unwrap();
        assert!(bytes >= 10 << 20, "the whole body came through: {out}");
        micros / 1e3
    };
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for i in 0..RUNS {
        if i % 2 == 0 {
            ours.push(fetch(&proxied_container, &fetch_proxied));
            theirs.push(fetch(&direct_container, &fetch_direct));
        } else {
            theirs.push(fetch(&direct_container, &fetch_direct));
            ours.push(fetch(&proxied_container, &fetch_proxied));
        }
    }
    let ratio = median(&ours) / median(&theirs);
    rows.push(Row {
        name: "fetch 10 MiB through the egress proxy".into(),
        paddock: ours,
        baseline: Some(theirs),
        unit: "ms",
        target: "≤ 1.2 × direct (open network)".into(),
        met: ratio <= 1.2,
        note: "allowlist job: CONNECT through its sidecar proxy, then GET; baseline: the same GET from an `open` job; timed inside the containers".into(),
    });

    // 50 tunnels held open at once; the proxy's resident memory meanwhile.
    let hold = format!(
        "h=${{HTTPS_PROXY#http://}}; for i in $(seq 50); do ( exec 3<>/dev/tcp/${{h%:*}}/${{h##*:}}; printf 'CONNECT {target} HTTP/1.1\\r\\n\\r\\nGET /hold HTTP/1.0\\r\\n\\r\\n' >&3; sleep 15 ) & done; sleep 16"
    );
    let holder = Command::new("docker")
        .args(["exec", &proxied_container, "bash", "-c", &hold])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(5));
    let init: u32 = run(Command::new("docker").args([
        "inspect",
        "--format",
        "{{.State.Pid}}",
        &fixtures::container_with_role(&home, &proxied, "egress"),
    ]))
    .parse()
    .unwrap();
    // The proxy is the child of the sidecar's init.
    let proxy: u32 = std::fs::read_to_string(format!("/proc/{init}/task/{init}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .and_then(|pid| pid.parse().ok())
        .unwrap_or(init);
    let tunnels = std::fs::read_dir(format!("/proc/{proxy}/fd")).map_or(0, Iterator::count);
    let rss = rss_kib(proxy) / 1024.0;
    let mut holder = holder;
    let _ = holder.wait();
    rows.push(Row {
        name: "egress proxy resident memory, 50 open tunnels".into(),
        paddock: vec![rss],
        baseline: None,
        unit: "MB",
        target: "≤ 64 MB".into(),
        met: rss <= 64.0,
        note: format!("VmRSS of `paddock egress-proxy` in the sidecar while 50 CONNECT tunnels stay open ({tunnels} descriptors open)"),
    });
    run(&mut home.cmd(&["rm", &proxied, "--force"]));
    run(&mut home.cmd(&["rm", &direct, "--force"]));
}

/// Peak resident memory of a process (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// 100 `paddock run`s (Docker jobs: create, one command, remove) submitted at once to a
/// daemon with the host's default budget: they queue and drain; every one must succeed.
fn queue_drain(rows: &mut Vec<Row>) {
    const JOBS: usize = 100;
    let repo = FixtureRepo::with_files(100, 200);
    // The default budget of this host (no `admission:` settings).
    let home = TestHome::new().with_budget("");
    let mut daemon = home
        .cmd(&["serve", "--sweep-interval", "1h"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let socket = home.root().join("paddock.sock");
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let image = test_image();
    let path = repo.path().display().to_string();
    let started = Instant::now();
    let clients: Vec<_> = (0..JOBS)
        .map(|i| {
            home.cmd(&[
                "run",
                "--repo",
                &path,
                "--task",
                &format!("drain-{i}"),
                "--runtime",
                "docker",
                "--image",
                &image,
                "--json",
                "--",
                "true",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    let mut failed = 0;
    for client in clients {
        let out = client.wait_with_output().unwrap();
        if !out.status.success() {
            failed += 1;
            eprintln!(
                "a queued run failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let peak = peak_rss_kib(daemon.id()) / 1024.0;
    let _ = daemon.kill();
    let _ = daemon.wait();
    rows.push(Row {
        name: "100 runs submitted at once: drained".into(),
        paddock: vec![JOBS as f64 / elapsed],
        baseline: None,
        unit: "jobs/s",
        target: "all succeed".into(),
        met: failed == 0,
        note: format!(
            "{JOBS} `paddock run -- true` (Docker) through one daemon with this host's default budget; {failed} failed; {elapsed:.0} s in all; the daemon's peak RSS {peak:.1} MB"
        ),
    });
}

fn daemon_memory(rows: &mut Vec<Row>) {
    let repo = FixtureRepo::with_files(100, 200);
    let home = TestHome::new();
    let serve = |home: &TestHome| {
        home.cmd(&["serve", "--sweep-interval", "10s", "--idle", "100h"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut idle = Vec::new();
    let mut daemon = serve(&home);
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(600));
        idle.push(rss_kib(daemon.id()) / 1024.0);
    }
    let _ = daemon.kill();
    let _ = daemon.wait();
    many_jobs(&home, &repo, 100, "mem");
    let mut loaded = Vec::new();
    let mut daemon = serve(&home);
    std::thread::sleep(Duration::from_secs(1));
    // Activity in every worktree, and at least one sweep over the 100 jobs.
    for entry in std::fs::read_dir(home.root().join("worktrees"))
        .unwrap()
        .flatten()
    {
        for job in std::fs::read_dir(entry.path())
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
        {
            std::fs::write(job.path().join("touched.txt"), "x").unwrap();
        }
    }
    for _ in 0..5 {
        std::thread::sleep(Duration::from_secs(3));
        loaded.push(rss_kib(daemon.id()) / 1024.0);
    }
    let _ = daemon.kill();
    let _ = daemon.wait();
    let met = median(&idle) <= 30.0;
    rows.push(Row {
        name: "serve resident memory, idle".into(),
        paddock: idle,
        baseline: None,
        unit: "MB",
        target: "≤ 30 MB".into(),
        met,
        note: "VmRSS".into(),
    });
    let met = median(&loaded) <= 60.0;
    rows.push(Row {
        name: "serve resident memory, 100 jobs (watching, sweeping)".into(),
        paddock: loaded,
        baseline: None,
        unit: "MB",
        target: "≤ 60 MB".into(),
        met,
        note: "VmRSS while the watcher covers 100 worktrees and sweeps run".into(),
    });
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .nth(1)
        .and_then(|k| k.parse::<u64>().ok())
        .map_or(0, |k| k / 1024 / 1024);
    let docker = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let git = run(Command::new("git").arg("--version"));
    format!("{cpus} CPUs, {mem} GiB RAM, Docker {docker}, {git}")
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let quick = std::env::var("PADDOCK_BENCH_QUICK").as_deref() == Ok("1");
    let mut rows = Vec::new();
    let only = std::env::var("PADDOCK_BENCH_ONLY").ok();
    if let Some(only) = only.as_deref().filter(|o| {
        matches!(
            *o,
            "egress" | "queue" | "marks" | "overlay" | "ready" | "exec" | "microvm"
        )
    }) {
        // A check of some rows alone; the results file and table are left as they are.
        match only {
            "overlay" => {
                let large = std::env::var("PADDOCK_BENCH_QUICK").as_deref() != Ok("1");
                let files = if large { 50_000 } else { 5_000 };
                eprintln!("generating the {files}-file fixture repository");
                let repo = FixtureRepo::with_files(files, 2_000);
                overlay_create(&repo, &format!("{files} files"), &mut rows);
            }
            "ready" => {
                for files in [1, 5_000, 50_000] {
                    eprintln!("generating the {files}-file fixture repository");
                    let repo = FixtureRepo::with_files(files, 2_000);
                    job_ready(&repo, &format!("{files} files"), &mut rows);
                    for row in &rows {
                        eprintln!("{}", row.markdown());
                    }
                }
            }
            "exec" => {
                for files in [1, 5_000] {
                    eprintln!("generating the {files}-file fixture repository");
                    let repo = FixtureRepo::with_files(files, 2_000);
                    exec_cost(&repo, &format!("{files} files"), &mut rows);
                    for row in &rows {
                        eprintln!("{}", row.markdown());
                    }
                }
            }
            "egress" => egress_overhead(&mut rows),
            "queue" => queue_drain(&mut rows),
            "microvm" => microvm::rows(&FixtureRepo::new(), &mut rows),
            _ => ls_with_marks(&mut rows),
        }
        for row in &rows {
            println!("{}\n  {}", row.markdown(), row.note);
        }
        return;
    }
    eprintln!("generating the 5,000-file fixture repository");
    let small = FixtureRepo::with_files(5_000, 2_000);
    let large = (!quick).then(|| {
        eprintln!("generating the 50,000-file fixture repository");
        FixtureRepo::with_files(50_000, 2_000)
    });
    let extra = std::env::var("PADDOCK_BENCH_REPO").ok().map(PathBuf::from);
    let mut repos: Vec<(&FixtureRepo, String)> = vec![(&small, "5,000 files".into())];
    if let Some(large) = &large {
        repos.push((large, "50,000 files".into()));
    }
    let docker = docker_ok();
    for (repo, label) in &repos {
        eprintln!("process runtime create, {label}");
        process_create(repo, label, &mut rows);
        eprintln!("overlay create and disk, {label}");
        overlay_create(repo, label, &mut rows);
        if docker {
            eprintln!("cold job ready, {label}");
            cold_ready_docker(repo, label, &mut rows);
            eprintln!("job ready: cold worktree, cold overlay, warm pool, {label}");
            job_ready(repo, label, &mut rows);
            eprintln!("exec sync cost, {label}");
            exec_sync_cost(repo, label, &mut rows);
            eprintln!("exec against docker exec, warm pool first exec, {label}");
            exec_cost(repo, label, &mut rows);
        }
    }
    if let Some(path) = extra {
        eprintln!("your repository: {}", path.display());
        let copy = FixtureRepo::clone_of(&path);
        process_create(&copy, &format!("{}", path.display()), &mut rows);
    }
    if docker {
        eprintln!("egress proxy");
        egress_overhead(&mut rows);
    }
    if docker && microvm::available() {
        eprintln!("microVM create to ready and exec round trip");
        microvm::rows(&small, &mut rows);
    }
    eprintln!("16 parallel creates");
    parallel_creates(&small, &mut rows);
    eprintln!("ls and sweep with 200 jobs");
    ls_and_sweep(&mut rows);
    eprintln!("ls with merged and conflicts marks");
    ls_with_marks(&mut rows);
    eprintln!("daemon memory");
    daemon_memory(&mut rows);
    if docker {
        eprintln!("100 queued runs");
        queue_drain(&mut rows);
    }

    let results = json!({
        "machine": machine(),
        "command": "cargo bench --bench paddock",
        "runs": RUNS,
        "date": chrono::Utc::now().to_rfc3339(),
        "results": rows.iter().map(Row::json).collect::<Vec<_>>(),
    });
    let out_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&out_dir).unwrap();
    std::fs::write(
        out_dir.join("results.json"),
        serde_json::to_vec_pretty(&results).unwrap(),
    )
    .unwrap();
    let mut table = String::from(
        "| measurement | paddock median / p95 | baseline median / p95 | ratio | target | |\n|---|---|---|---|---|---|\n",
    );
    for row in &rows {
        table.push_str(&row.markdown());
        table.push('\n');
    }
    table.push_str("\nNotes:\n\n");
    for row in rows.iter().filter(|r| !r.note.is_empty()) {
        table.push_str(&format!("- {}: {}\n", row.name, row.note));
    }
    println!("{table}");
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/BENCHMARKS.md");
    if let Ok(text) = std::fs::read_to_string(&doc)
        && let (Some(start), Some(end)) = (
            text.find("<!-- results -->"),
            text.find("<!-- /results -->"),
        )
    {
        let updated = format!(
            "{}<!-- results -->\nMachine: {}. Date: {}. Runs per measurement: {RUNS} (5 rounds for the parallel and 3 for the sweep row), paddock and baseline interleaved.\n\n{table}{}",
            &text[..start],
            results["machine"].as_str().unwrap_or_default(),
            results["date"].as_str().unwrap_or_default(),
            &text[end..]
        );
        std::fs::write(&doc, updated).unwrap();
    }
}
