//! Job ready: a cold Docker job against `git worktree add` + `docker run`, and job ready and
//! first exec cold and warm (worktree, overlay, warm pool) on 1, 5,000 and 50,000 files.

use super::*;

/// `git worktree add -b` as a user would type it.
pub(super) fn raw_worktree(repo: &Path, dir: &Path, branch: &str) -> Command {
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

pub(super) fn cleanup_raw(repo: &Path, dir: &Path, branch: &str) {
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
pub(super) fn raw_docker_run(name: &str, worktree: &Path, common: &Path) -> Command {
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

pub(super) fn cold_ready_docker(repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
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
pub(super) fn docker_job(home: &TestHome, repo: &FixtureRepo, task: &str) -> (String, String) {
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

/// Time to a ready job and to its first exec's result, side by side with the raw tools:
/// `git worktree add -b` + `docker run -d` (+ `docker exec true`) against paddock cold with
/// a worktree checkout, cold with an overlay checkout (the pristine checkout made once
/// beforehand), and warm (an overlay checkout claimed into a waiting pool container; the
/// pool is filled, untimed, before each run). Also the first `git status` inside the warm
/// job. Ready = `create` returned (the first exec can start).
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
pub(super) fn job_ready(repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
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
