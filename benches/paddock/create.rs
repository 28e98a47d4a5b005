//! Creates: the process runtime against `git worktree add`, the overlay checkout's time and
//! disk against a worktree, and 16 creates at once against the same 16 one after another.

use super::*;

pub(super) fn process_create(repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
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
pub(super) fn disk_bytes(path: &Path) -> f64 {
    let out = run(Command::new("du").args(["-sx", "--block-size=1"]).arg(path));
    out.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0)
}

/// `create --checkout overlay` (process runtime, the commit's pristine checkout already
/// made) against `git worktree add -b`, interleaved; then the disk of 20 overlay jobs
/// against one `git worktree add` checkout.
pub(super) fn overlay_create(repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
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

/// CPU time (user + system) used so far by waited-for children and their children: far
/// less noisy than wall time on a shared 2-core machine, so it backs up close ratios.
#[expect(
    unsafe_code,
    reason = "getrusage of the benchmark's children; no safe wrapper"
)]
pub(super) fn children_cpu() -> Duration {
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

pub(super) fn parallel_creates(repo: &FixtureRepo, rows: &mut Vec<Row>) {
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
