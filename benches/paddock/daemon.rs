//! The daemon: 100 queued runs drained through one `paddock serve`, and its memory idle and
//! with 100 jobs.

use super::*;

/// Peak resident memory of a process (`VmHWM`), in KiB.
pub(super) fn peak_rss_kib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// 100 `paddock run`s (Docker jobs: create, one command, remove) submitted at once to a
/// daemon with the host's default budget: they queue and drain; every one must succeed.
pub(super) fn queue_drain(rows: &mut Vec<Row>) {
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

pub(super) fn daemon_memory(rows: &mut Vec<Row>) {
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
