//! From a job's branch to main, through the real binary on the process runtime: `conflicts`
//! finds which jobs conflict without touching any working tree or writing an object into the
//! repository, and the daemon tells when a moving base makes a job conflict; `merge` lands a
//! branch (squash, merge), refuses a conflict or a dirty checkout and then changes nothing;
//! `apply` leaves a job's committed and uncommitted work uncommitted in the user's checkout;
//! `sweep --merged` removes what a plain-git squash merge landed and nothing else.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use crate::api::{Daemon, api};
use crate::fixtures::{FixtureRepo, TestHome, text};

/// Every file under `root` (the `.git` dir included) with its size and mtime.
fn tree_state(root: &Path) -> BTreeMap<String, (u64, SystemTime)> {
    let mut state = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = entry.path().symlink_metadata().unwrap();
            if meta.is_dir() {
                stack.push(entry.path());
            }
            let name = entry.path().display().to_string();
            state.insert(name, (meta.len(), meta.modified().unwrap()));
        }
    }
    state
}

/// Creates a process-runtime job with this id; returns its branch.
fn job(home: &TestHome, repo: &FixtureRepo, id: &str) -> (String, String) {
    let job = home.create(repo, &["--id", id, "--runtime", "process"]);
    (text(&job, "branch"), text(&job, "worktree"))
}

fn three_jobs(home: &TestHome, repo: &FixtureRepo) -> Vec<(String, String)> {
    repo.write("shared.txt", "one\ntwo\nthree\n");
    repo.write("other.txt", "alpha\nbeta\n");
    repo.commit_all("two files");
    let jobs = vec![
        job(home, repo, "a"),
        job(home, repo, "b"),
        job(home, repo, "c"),
    ];
    home.sh(
        "a",
        "printf 'ONE by a\\ntwo\\nthree\\n' > shared.txt && git commit -qam a",
    );
    home.sh(
        "b",
        "printf 'ONE by b\\ntwo\\nthree\\n' > shared.txt && git commit -qam b",
    );
    home.sh(
        "c",
        "printf 'alpha\\nbeta by c\\n' > other.txt && git commit -qam c",
    );
    jobs
}

fn by_id<'v>(report: &'v Value, id: &str) -> &'v Value {
    report["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == id)
        .unwrap_or_else(|| panic!("{id} in {report}"))
}

fn events_of(home: &TestHome, kind: &str) -> Vec<Value> {
    home.ok(&["events", "--json"])
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|e| e["type"] == kind)
        .collect()
}

#[test]
fn conflicts_are_found_without_touching_any_tree_and_a_moving_base_emits_the_event() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let daemon = Daemon::start(&home, &["--sweep-interval", "1s"]);
    let jobs = three_jobs(&home, &repo);
    // The daemon's sweeps have seen the jobs clean against main.
    std::thread::sleep(Duration::from_secs(2));

    let objects = repo.git(&["count-objects", "-v"]);
    let before: Vec<_> = std::iter::once(tree_state(repo.path()))
        .chain(
            jobs.iter()
                .map(|(_, worktree)| tree_state(Path::new(worktree))),
        )
        .collect();
    let report: Value = home.json(&["conflicts", "--json"]);
    let after: Vec<_> = std::iter::once(tree_state(repo.path()))
        .chain(
            jobs.iter()
                .map(|(_, worktree)| tree_state(Path::new(worktree))),
        )
        .collect();
    assert_eq!(before, after, "no checkout, index or git file changed");
    assert_eq!(
        repo.git(&["count-objects", "-v"]),
        objects,
        "no object written"
    );

    for id in ["a", "b", "c"] {
        let job = by_id(&report, id);
        assert_eq!(job["base"], "main", "{job}");
        assert_eq!(job["clean"], true, "each alone merges into main: {job}");
        assert_eq!(job["merged"], false, "{job}");
    }
    assert_eq!(
        by_id(&report, "a")["files"],
        serde_json::json!(["shared.txt"])
    );
    assert_eq!(
        by_id(&report, "c")["files"],
        serde_json::json!(["other.txt"])
    );
    let pairs = report["pairs"].as_array().unwrap();
    assert_eq!(pairs.len(), 1, "only a and b share a file: {report}");
    assert_eq!(pairs[0]["jobs"], serde_json::json!(["a", "b"]));
    assert_eq!(pairs[0]["shared_files"], serde_json::json!(["shared.txt"]));
    assert_eq!(pairs[0]["clean"], false);
    assert_eq!(
        pairs[0]["conflicts"],
        serde_json::json!([{"path": "shared.txt", "type": "contents"}])
    );
    // The API answers the same, and `show` reports the job against its base.
    let (status, api_report) = api(&daemon.socket, "GET", "/v1/conflicts?jobs=a,b,c", None);
    assert_eq!(status, 200, "{api_report}");
    assert_eq!(api_report["pairs"], report["pairs"]);
    let show = home.json(&["show", "c", "--json"]);
    assert_eq!(show["merge"]["clean"], true, "{show}");
    assert!(events_of(&home, "job.conflict").is_empty());

    // main moves and now conflicts with c: the daemon tells.
    repo.write("other.txt", "alpha\nbeta on main\n");
    repo.commit_all("main edits other.txt");
    let deadline = Instant::now() + Duration::from_secs(30);
    let event = loop {
        if let Some(event) = events_of(&home, "job.conflict").pop() {
            break event;
        }
        assert!(Instant::now() < deadline, "no job.conflict event");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(event["job"], "c", "{event}");
    assert_eq!(event["detail"]["base"], "main", "{event}");
    assert_eq!(
        event["detail"]["base_tip"],
        repo.git(&["rev-parse", "main"])
    );
    assert_eq!(
        event["detail"]["files"],
        serde_json::json!([{"path": "other.txt", "type": "contents"}])
    );
    assert_eq!(events_of(&home, "job.conflict").len(), 1, "told once");
    let report: Value = home.json(&["conflicts", "c", "--json"]);
    assert_eq!(by_id(&report, "c")["clean"], false, "{report}");
    daemon.stop();
}

#[test]
fn merge_lands_or_refuses_and_apply_leaves_the_work_uncommitted() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let jobs = three_jobs(&home, &repo);
    let main_before = repo.git(&["rev-parse", "main"]);

    // --squash: one commit on main, with c's tree, and the checkout follows.
    let merged = home.json(&["merge", "c", "--squash", "--json"]);
    assert_eq!(merged["landed"], true, "{merged}");
    let main = repo.git(&["rev-parse", "main"]);
    assert_eq!(text(&merged, "commit"), main);
    assert_eq!(repo.git(&["rev-parse", "main^"]), main_before, "one commit");
    assert_eq!(repo.git(&["rev-list", "--count", "main"]), "3");
    assert_eq!(
        repo.git(&["show", "-s", "--format=%P", "main"])
            .split(' ')
            .count(),
        1
    );
    assert_eq!(
        repo.git(&["diff", "--name-only", &main_before, "main"]),
        "other.txt"
    );
    assert_eq!(
        repo.git(&["rev-parse", "main:other.txt"]),
        repo.git(&["rev-parse", &format!("{}:other.txt", jobs[2].0)])
    );
    assert_eq!(
        std::fs::read_to_string(repo.path().join("other.txt")).unwrap(),
        "alpha\nbeta by c\n"
    );
    assert_eq!(
        repo.git(&["status", "--porcelain"]),
        "",
        "the checkout followed"
    );

    // b lands; a then conflicts on shared.txt and nothing changes.
    home.json(&["merge", "b", "--json"]);
    let main = repo.git(&["rev-parse", "main"]);
    let refused = home.run(&["merge", "a"]);
    assert_eq!(refused.status.code(), Some(6), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("shared.txt (contents)"), "{stderr}");
    assert_eq!(repo.git(&["rev-parse", "main"]), main, "main unchanged");
    assert_eq!(repo.git(&["status", "--porcelain"]), "");

    // apply: committed and uncommitted work, staged in the checkout, HEAD unchanged.
    job(&home, &repo, "d");
    home.sh(
        "d",
        "echo 'more' >> README.md && git commit -qam d && echo notes > notes.txt && printf 'pub fn answer() -> u32 {\\n    43\\n}\\n' > src/lib.rs",
    );
    // src/lib.rs keeps its size and was written in the second of the commit's index write:
    // a second later, only git's racy-clean check (which the snapshot must not defeat)
    // tells it changed.
    std::thread::sleep(Duration::from_millis(1100));
    let applied = home.json(&["apply", "d", "--json"]);
    assert_eq!(applied["uncommitted"], true, "{applied}");
    assert_eq!(
        applied["files"],
        serde_json::json!(["README.md", "notes.txt", "src/lib.rs"])
    );
    assert_eq!(repo.git(&["rev-parse", "main"]), main, "nothing committed");
    assert_eq!(
        repo.git(&["status", "--porcelain"]),
        "M  README.md\nA  notes.txt\nM  src/lib.rs"
    );
    assert_eq!(
        std::fs::read_to_string(repo.path().join("notes.txt")).unwrap(),
        "notes\n"
    );
    assert!(
        repo.git(&["for-each-ref", "refs/paddock/apply"]).is_empty(),
        "no ref left behind"
    );

    // A checkout with uncommitted changes is never moved.
    job(&home, &repo, "e");
    home.sh("e", "echo e > e.txt && git add e.txt && git commit -qm e");
    let refused = home.run(&["merge", "e", "--squash"]);
    assert_eq!(refused.status.code(), Some(9), "{refused:?}");
    assert_eq!(repo.git(&["rev-parse", "main"]), main, "main unchanged");
    assert!(!repo.path().join("e.txt").exists());
}

#[test]
fn sweep_merged_removes_a_squash_merged_job_and_keeps_the_rest() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let (merged_branch, _) = job(&home, &repo, "m");
    let (unmerged_branch, _) = job(&home, &repo, "u");
    let (extra_branch, _) = job(&home, &repo, "x");
    let (fresh_branch, _) = job(&home, &repo, "n");
    home.sh("m", "echo m > m.txt && git add m.txt && git commit -qm m");
    home.sh("u", "echo u > u.txt && git add u.txt && git commit -qm u");
    home.sh(
        "x",
        "echo x1 > x1.txt && git add x1.txt && git commit -qm x1",
    );
    // Plain git, outside paddock: squash merges of m and of x's first commit.
    for branch in [&merged_branch, &extra_branch] {
        repo.git(&["merge", "--squash", "-q", branch]);
        repo.git(&["commit", "-q", "-m", &format!("squash {branch}")]);
    }
    home.sh(
        "x",
        "echo x2 > x2.txt && git add x2.txt && git commit -qm x2",
    );

    let listed: Value = home.json(&["ls", "--json"]);
    let merged: BTreeMap<String, Value> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (text(j, "id"), j["merged"].clone()))
        .collect();
    assert_eq!(merged["m"], true, "{listed}");
    for id in ["u", "x", "n"] {
        assert_eq!(merged[id], false, "{id}: {listed}");
    }

    let report = home.json(&["sweep", "--merged", "--json"]);
    let removed: Vec<&str> = report["removed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(removed, vec!["m"], "{report}");
    let branches = repo.branches();
    assert!(!branches.contains(&merged_branch), "{branches:?}");
    for kept in [&unmerged_branch, &extra_branch, &fresh_branch] {
        assert!(branches.contains(kept), "{kept} kept: {branches:?}");
    }
    let mut left: Vec<String> = home
        .json(&["ls", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|j| text(j, "id"))
        .collect();
    left.sort();
    assert_eq!(left, vec!["n", "u", "x"]);
}

#[test]
fn rebase_replays_the_commits_with_their_authors_and_delete_removes_the_job() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let (branch, _) = job(&home, &repo, "r");
    home.sh(
        "r",
        "echo 1 > r1.txt && git add r1.txt && git commit -qm r1 && echo 2 > r2.txt && git add r2.txt && git commit -qm r2",
    );
    repo.write("main.txt", "main moved\n");
    let moved = repo.commit_all("main moves");

    let report = home.json(&["merge", "r", "--rebase", "--delete", "--json"]);
    assert_eq!(report["landed"], true, "{report}");
    assert_eq!(report["fast_forward"], false, "{report}");
    assert_eq!(report["commits_written"], 2, "{report}");
    assert_eq!(
        repo.git(&["rev-parse", "main~2"]),
        moved,
        "replayed onto main"
    );
    assert_eq!(repo.git(&["log", "--format=%s", "-2", "main"]), "r2\nr1");
    assert_eq!(
        repo.git(&["log", "--format=%an", "-2", "main"]),
        "paddock agent (r)\npaddock agent (r)",
        "the agent stays the author"
    );
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
    assert!(repo.path().join("r2.txt").exists(), "the checkout followed");
    // --delete: the job is gone, and its branch with it.
    assert_eq!(report["removed"]["id"], "r", "{report}");
    assert!(!repo.branches().contains(&branch));
    assert_eq!(home.json(&["ls", "--json"]), serde_json::json!([]));
}
