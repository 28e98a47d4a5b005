//! `ls` and `sweep` with 200 jobs, and `ls` with the merged and conflicts marks.

use super::*;

pub(super) fn remove_all(home: &TestHome) {
    let jobs: Value = serde_json::from_str(&run(&mut home.cmd(&["ls", "--json"]))).unwrap();
    for job in jobs.as_array().unwrap() {
        run(&mut home.cmd(&["rm", "--delete-branch", job["id"].as_str().unwrap()]));
    }
}

/// Runs `paddock` and `baseline` `RUNS` times each, alternating which goes first, so
/// neither always inherits the other's page cache.
pub(super) fn interleaved(paddock: &mut dyn FnMut(usize), baseline: &mut dyn FnMut(usize)) {
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

pub(super) fn many_jobs(home: &TestHome, repo: &FixtureRepo, count: usize, prefix: &str) {
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

pub(super) fn ls_and_sweep(rows: &mut Vec<Row>) {
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
pub(super) fn ls_with_marks(rows: &mut Vec<Row>) {
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
