//! What a job can read of other jobs' work (Docker, runc and runsc): a job reads the
//! repository's objects as they were at its create, so another job's commits synced later
//! and its uncommitted work (saved by `rm` in paddock's wip store) are not readable inside;
//! a job created after those commits landed reads them (they are on a branch of the user's
//! repository), never the wip snapshot. The user gets the work back with the `git fetch`
//! that `rm` names.

use std::path::PathBuf;

use crate::fixtures::{FixtureRepo, TestHome, docker_available, test_image, text};

/// Every marker of `markers` that some object or file the job can read holds: all objects
/// its git sees (its own and through the alternates, decompressed), and the raw files of
/// its git dir and object stores.
fn readable_markers(home: &TestHome, job: &str, markers: &[&str]) -> Vec<String> {
    let out = home.sh(
        job,
        "{ git -C /workspace cat-file --batch-all-objects --batch; \
         find /paddock-objects /paddock/git -type f -exec cat {} + 2>/dev/null; \
         } | grep -a -o 'PA-[A-Z]*-[0-9a-z]*' | sort -u || true",
    );
    markers
        .iter()
        .filter(|m| out.lines().any(|line| line.trim() == **m))
        .map(|m| (*m).to_string())
        .collect()
}

/// Whether the job's git can read the object `oid` at all.
fn can_read(home: &TestHome, job: &str, oid: &str) -> bool {
    home.sh(
        job,
        &format!("git -C /workspace cat-file -e {oid} 2>/dev/null && echo yes || echo no"),
    )
    .trim()
        == "yes"
}

fn private_work(runtime: &str, test: &str) {
    if !docker_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let image = test_image();
    let create = |task: &str| {
        let job = home.create(
            &repo,
            &["--runtime", runtime, "--image", &image, "--task", task],
        );
        (text(&job, "id"), text(&job, "branch"))
    };
    let nonce = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("a clock after 1970")
            .as_nanos()
    );
    let committed = format!("PA-COMMITTED-{nonce}");
    let secret = format!("PA-SECRET-{nonce}");

    let (a, a_branch) = create("a");
    let (b, _) = create("b");
    home.sh(
        &a,
        &format!(
            "echo {committed} > committed.txt && git add committed.txt && git commit -q -m committed"
        ),
    );
    let a_commit = repo.git(&["rev-parse", &a_branch]);
    assert!(
        repo.git(&["show", &format!("{a_branch}:committed.txt")])
            .contains(&committed),
        "a's commit was synced into the user's repository"
    );
    home.sh(&a, &format!("echo {secret} > secret.txt"));
    let removed = home.json(&["rm", "--json", &a]);
    let wip_ref = text(&removed, "wip_ref");
    let wip_commit = text(&removed, "wip_commit");
    assert_eq!(wip_ref, format!("refs/paddock/wip/{a}"), "{removed}");
    let (c, _) = create("c");

    // b was made before either landed: neither is readable, by content or by id.
    let markers = [committed.as_str(), secret.as_str()];
    assert_eq!(
        readable_markers(&home, &b, &markers),
        Vec::<String>::new(),
        "b reads a's work"
    );
    assert!(!can_read(&home, &b, &a_commit), "b reads a's synced commit");
    assert!(
        !can_read(&home, &b, &wip_commit),
        "b reads a's wip snapshot"
    );
    // c was made after a's commit landed on a's branch (readable) and after its rm (the wip
    // snapshot never reached the user's store).
    assert_eq!(
        readable_markers(&home, &c, &markers),
        vec![committed.clone()],
        "c reads exactly a's committed work"
    );
    assert!(can_read(&home, &c, &a_commit));
    assert!(
        !can_read(&home, &c, &wip_commit),
        "c reads a's wip snapshot"
    );

    // The user's repository has a's branch, not its snapshot; the fetch rm names brings it.
    let store = PathBuf::from(text(&removed, "wip_store"));
    assert!(
        store.starts_with(home.root().join("wip")),
        "the wip store is paddock's: {removed}"
    );
    assert_eq!(repo.git(&["rev-parse", &a_branch]), a_commit);
    let missing = std::process::Command::new("git")
        .args(["cat-file", "-e", &wip_commit])
        .current_dir(repo.path())
        .status()
        .expect("git runs");
    assert!(
        !missing.success(),
        "the snapshot is not in the user's object store"
    );
    repo.git(&["fetch", "-q", &store.display().to_string(), &wip_ref]);
    assert!(
        repo.git(&["show", "FETCH_HEAD:secret.txt"])
            .contains(&secret),
        "the wip store gives a's uncommitted work back"
    );
    for job in [&b, &c] {
        home.ok(&["rm", job]);
    }
}

#[test]
fn a_job_reads_neither_later_commits_nor_wip_snapshots_of_another() {
    private_work(
        "docker",
        "a_job_reads_neither_later_commits_nor_wip_snapshots",
    );
}

#[test]
fn a_job_reads_neither_later_commits_nor_wip_snapshots_of_another_under_gvisor() {
    private_work(
        "runsc",
        "a_job_reads_neither_later_commits_nor_wip_snapshots_under_gvisor",
    );
}
