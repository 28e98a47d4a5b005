//! Issue 43, part 4: `pause` freezes a job's processes in place and `resume` thaws them, under
//! runc and gVisor. A busy loop in the job counts into a file of its workspace: the count
//! stands still while the job is paused (and, under runc, the loop's CPU time on the host
//! too), and goes on after `resume`. A paused job takes no exec (exit 125, naming `resume`),
//! the sweep keeps it though it is idle, and `rm` removes it.

use std::path::Path;
use std::time::Duration;

use crate::fixtures::{FixtureRepo, TestHome, docker_available, test_image, text};

/// The count the loop last wrote (0 before its first).
fn count(worktree: &Path) -> u64 {
    std::fs::read_to_string(worktree.join("count.txt"))
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0)
}

/// User plus system CPU time (clock ticks) of the host processes whose command line holds
/// `marker`: a runc job's processes are host processes.
fn cpu_ticks(marker: &str) -> u64 {
    let mut ticks = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let dir = entry.path();
        let Ok(cmdline) = std::fs::read(dir.join("cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmdline).contains(marker) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        // After the command's name in parentheses: utime and stime are fields 14 and 15.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        ticks += fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    }
    ticks
}

/// A dashboard form's `POST` of `path` over the daemon's socket (a trusted caller, so any
/// CSRF field passes): the raw answer.
fn post_form(socket: &Path, path: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
    let body = "csrf=socket";
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: p\r\nConnection: close\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

fn pause_and_resume(runtime: &str, test: &str) {
    if !docker_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let image = test_image();
    let job = home.create(
        &repo,
        &["--runtime", runtime, "--image", &image, "--task", "pause"],
    );
    let id = text(&job, "id");
    let worktree = std::path::PathBuf::from(text(&job, "worktree"));
    let marker = format!("paddock-busy-{}", std::process::id());
    home.sh(
        &id,
        &format!(
            "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > count.txt; done; : {marker}' \
             >/dev/null 2>&1 </dev/null &"
        ),
    );
    let wait_for_count = |above: u64| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while count(&worktree) <= above {
            assert!(
                std::time::Instant::now() < deadline,
                "the loop did not count past {above} in 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    wait_for_count(0);

    let paused = home.json(&["pause", &id, "--json"]);
    assert_eq!(paused["paused"], true, "{paused}");
    assert!(paused["since"].is_string(), "{paused}");
    // `show` cannot look inside a frozen sandbox: the last sync's changes, said so (12).
    let shown = home.run(&["show", &id, "--json"]);
    assert_eq!(shown.status.code(), Some(12), "{shown:?}");
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["job"]["paused_at"], paused["since"], "{shown}");
    assert!(
        text(&shown, "changes_error").contains("is paused"),
        "{shown}"
    );
    // Frozen: the count and (runc) the loop's CPU time stand still.
    std::thread::sleep(Duration::from_millis(300));
    let (frozen_at, ticks) = (count(&worktree), cpu_ticks(&marker));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(count(&worktree), frozen_at, "the loop counted while paused");
    if runtime == "docker" {
        assert_eq!(cpu_ticks(&marker), ticks, "the loop used CPU while paused");
    }

    // No exec: a conflict that names the way out.
    let refused = home.run(&["exec", &id, "--", "true"]);
    assert_eq!(refused.status.code(), Some(125), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("is paused") && said.contains(&format!("paddock resume {id}")),
        "{said}"
    );
    // Idle by any measure, yet kept by the sweep.
    home.ok(&["sweep", "--idle", "0s", "--keep-finished", "0s"]);
    assert!(
        home.root().join(format!("jobs/{id}.json")).exists(),
        "the sweep removed a paused job"
    );

    // Under runc, the dashboard's job page says so and its Resume form thaws it.
    if runtime == "docker" {
        let daemon = crate::api::Daemon::start_with_runtime(&home, &[], runtime);
        let page = crate::flood::get_raw(&daemon.socket, &format!("/jobs/{id}"));
        assert!(
            page.contains(r#"id="paused""#) && page.contains(r#"id="resume""#),
            "{page}"
        );
        let answer = post_form(&daemon.socket, &format!("/jobs/{id}/resume"));
        assert!(answer.starts_with("HTTP/1.1 303"), "{answer}");
        let page = crate::flood::get_raw(&daemon.socket, &format!("/jobs/{id}"));
        assert!(
            !page.contains(r#"id="paused""#) && page.contains(r#"id="pause""#),
            "{page}"
        );
        daemon.stop();
    }
    // Resumed (again, under runc: nothing changes).
    let resumed = home.json(&["resume", &id, "--json"]);
    assert_eq!(resumed["paused"], false, "{resumed}");
    wait_for_count(frozen_at);
    assert_eq!(home.sh(&id, "echo back"), "back\n");
    let shown = home.json(&["show", &id, "--json"]);
    assert!(shown["job"].get("paused_at").is_none(), "{shown}");

    // Paused again, `rm` thaws and removes it.
    home.ok(&["pause", &id]);
    home.ok(&["rm", &id, "--force"]);
    assert!(!home.root().join(format!("jobs/{id}.json")).exists());
}

#[test]
fn a_paused_runc_job_uses_no_cpu_takes_no_exec_and_runs_on_after_resume() {
    pause_and_resume(
        "docker",
        "a_paused_runc_job_uses_no_cpu_takes_no_exec_and_runs_on_after_resume",
    );
}

#[test]
fn a_paused_gvisor_job_stands_still_and_runs_on_after_resume() {
    pause_and_resume(
        "runsc",
        "a_paused_gvisor_job_stands_still_and_runs_on_after_resume",
    );
}

#[test]
fn the_process_runtime_says_it_cannot_pause() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create(&repo, &["--runtime", "process", "--task", "nopause"]);
    let id = text(&job, "id");
    let refused = home.run(&["pause", &id]);
    assert!(!refused.status.success(), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("process runtime cannot pause"), "{said}");
    let shown = home.json(&["show", &id, "--json"]);
    assert!(shown["job"].get("paused_at").is_none(), "{shown}");
    assert_eq!(home.sh(&id, "echo still"), "still\n");
    home.ok(&["rm", &id]);
}
