//! Issue 46, as far as it is built: the resident exec server, opt-in with
//! `PADDOCK_EXEC_PATH=exec-server`, on runc and gVisor. With the switch, a job's execs
//! take the server's path (`meta.exec_path`), including one whose order is longer than a
//! line of the transport (a committing exec carries its sync snippet; a long environment):
//! the branch moves, stdin arrives whole, a timeout kills the command.
//!
//! The attacks: the agent (and, under gVisor, root) cannot signal, trace, read the
//! descriptors of or replace the server, which runs as a uid of its own no exec may name;
//! its commands keep no capability and run in the job's cgroup; Docker's exec in the same
//! container (the fallback, forced with `PADDOCK_EXEC_PATH=docker-exec`, and `paddock
//! shell`) holds none of the server's capabilities either, while the exec's loader
//! variables still reach its command; 100 MiB of output keeps the result's and the logs'
//! caps; a flood of concurrent execs leaves the job usable,
//! and so does a server killed from outside (the next exec starts the container again).
//! Without the switch, Docker's exec runs them, as before.

use crate::fixtures::{FixtureRepo, TestHome, container_of, docker_available, test_image, text};

#[test]
fn the_opt_in_exec_server_runs_execs_and_the_agent_cannot_reach_it() {
    let test = "the_opt_in_exec_server_runs_execs_and_the_agent_cannot_reach_it";
    if !docker_available(test) {
        return;
    }
    for runtime in ["docker", "runsc"] {
        served(runtime);
    }
}

fn served(runtime: &str) {
    let repo = FixtureRepo::new();
    let home = TestHome::new().env("PADDOCK_EXEC_PATH", "exec-server");
    let image = test_image();
    let job = home.create(&repo, &["--runtime", runtime, "--image", &image]);
    let id = text(&job, "id");

    // A plain command, and one whose order is split into parts: a commit (the sync
    // snippet rides along) with 20 KB of environment.
    let ran = home.json(&["exec", "--json", &id, "--", "true"]);
    assert_eq!(ran["meta"]["exec_path"], "exec-server", "{ran}");
    let long = format!("BIG={}", "x".repeat(20_000));
    let ran = home.json(&[
        "exec",
        "--json",
        "--env",
        &long,
        &id,
        "--",
        "sh",
        "-c",
        "test ${#BIG} = 20000 && echo made > made.txt && git add made.txt && git commit -q -m 'from the server'",
    ]);
    assert_eq!(ran["exit_code"], 0, "{ran}");
    assert_eq!(ran["meta"]["exec_path"], "exec-server", "{ran}");
    assert!(ran["sync_error"].is_null(), "{ran}");
    let branch = text(&home.json(&["show", "--json", &id])["job"], "branch");
    assert_eq!(
        repo.git(&["log", "-1", "--format=%s", &branch]).trim(),
        "from the server"
    );

    // stdin, byte for byte.
    let input: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let fed = fed(&home, &["exec", "-i", &id, "--", "wc", "-c"], input);
    assert!(fed.status.success(), "{fed:?}");
    assert_eq!(String::from_utf8_lossy(&fed.stdout).trim(), "3000000");

    // A timeout ends the command.
    let timed = home.run(&[
        "exec",
        "--json",
        "--timeout",
        "2s",
        &id,
        "--",
        "sleep",
        "60",
    ]);
    assert_eq!(timed.status.code(), Some(124), "{timed:?}");
    let ran: serde_json::Value = serde_json::from_slice(&timed.stdout).expect("a JSON result");
    assert_eq!(ran["timed_out"], true, "{ran}");
    assert!(ran["duration_ms"].as_u64().unwrap() < 20_000, "{ran}");

    eprintln!("exec_server: {runtime}: attacked as the agent");
    let server = attacked(&home, &id, runtime, "agent");
    eprintln!("exec_server: {runtime}: the fallback and the shell");
    fallback_holds_nothing(&home, &id, runtime);
    eprintln!("exec_server: {runtime}: the flood");
    flooded(&home, &id);
    if runtime == "docker" {
        capped(&home, &id);
    }
    if runtime == "runsc" {
        // Root inside gVisor is a uid like any other to the server: its commands run, and
        // it can neither reach nor end the server (the settle's `kill -9 -1` as root
        // included).
        let root = home.json(&["exec", "--json", "--user", "root", &id, "--", "id", "-u"]);
        assert_eq!(root["exit_code"], 0, "{root}");
        assert_eq!(text(&root, "stdout").trim(), "0", "{root}");
        attacked(&home, &id, runtime, "root");
        let ran = home.json(&[
            "exec",
            "--json",
            "--user",
            "root",
            &id,
            "--",
            "sh",
            "-c",
            "kill -9 -1; true",
        ]);
        assert_eq!(ran["exit_code"], 0, "{ran}");
        let ran = home.json(&["exec", "--json", &id, "--", "true"]);
        assert_eq!(ran["meta"]["exec_path"], "exec-server", "{ran}");
    }
    // No exec runs as the server's own uid or gid.
    for user in ["2147483646", "1000:2147483646"] {
        let refused = home.run(&["exec", "--user", user, &id, "--", "true"]);
        assert!(!refused.status.success(), "{refused:?}");
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("unknown user"),
            "{refused:?}"
        );
    }
    eprintln!("exec_server: {runtime}: the killed server");
    killed(&home, &job, &id, runtime, &server);
    home.ok(&["rm", &id, "--force"]);

    // Without the switch (even where the test's own environment sets it): Docker's exec,
    // as before.
    let plain = TestHome::new().env("PADDOCK_EXEC_PATH", "");
    let job = plain.create(&repo, &["--runtime", runtime, "--image", &image]);
    let id = text(&job, "id");
    let ran = plain.json(&["exec", "--json", &id, "--", "true"]);
    assert_eq!(ran["meta"]["exec_path"], "docker-exec", "{ran}");
    plain.ok(&["rm", &id, "--force"]);
}

/// The agent (or `user`) against the server: no signal, no trace, no descriptor, no
/// binary to replace, no capability kept, the job's cgroup; the server's uid is its own.
/// The server's pid (inside the sandbox).
fn attacked(home: &TestHome, id: &str, runtime: &str, user: &str) -> String {
    let probe = r#"
        pid=$(for d in /proc/[0-9]*; do
          case "$(tr '\0' ' ' < $d/cmdline 2>/dev/null)" in "/.paddock-tools/exec/ld.so "*) echo ${d#/proc/};; esac
        done | head -n 1)
        echo "server=$pid"
        kill -9 "$pid" 2>/dev/null && echo SIGNALLED
        kill -STOP "$pid" 2>/dev/null && echo STOPPED
        ls /proc/$pid/fd/ 2>/dev/null | head -n 1 | grep -q . && echo FDS
        cat /proc/$pid/environ >/dev/null 2>&1 && echo ENVIRON
        python3 -c 'import sys; open("/proc/%s/mem" % sys.argv[1], "rb")' "$pid" 2>/dev/null && echo MEM
        echo x >> /proc/$pid/fd/0 2>/dev/null && echo STDIN
        echo x >> /.paddock-tools/exec/paddock 2>/dev/null && echo WROTE
        python3 -c 'import ctypes, sys; libc = ctypes.CDLL(None); sys.exit(0 if libc.ptrace(16, int(sys.argv[1]), 0, 0) == 0 else 1)' "$pid" && echo PTRACED
        grep '^Uid:' /proc/$pid/status
        [ "$(cat /proc/self/cgroup)" = "$(cat /proc/$pid/cgroup)" ] && echo same-cgroup
        grep -E '^Cap(Eff|Prm|Inh|Bnd|Amb):' /proc/self/status
        echo end
    "#;
    let ran = home.json(&[
        "exec", "--json", "--user", user, id, "--", "sh", "-c", probe,
    ]);
    assert_eq!(ran["meta"]["exec_path"], "exec-server", "{ran}");
    let out = text(&ran, "stdout");
    let server = out
        .lines()
        .find_map(|l| l.strip_prefix("server="))
        .unwrap_or_default()
        .to_string();
    assert!(
        !server.is_empty() && server != "1",
        "the server is seen: {out}"
    );
    for word in [
        "SIGNALLED",
        "STOPPED",
        "FDS",
        "MEM",
        "STDIN",
        "WROTE",
        "PTRACED",
    ] {
        assert!(!out.lines().any(|l| l == word), "{user}: {word}: {out}");
    }
    // gVisor 2022 lets any process read another's environ; the server's is the
    // container's own environment, which every command of the job is given anyway.
    if runtime == "docker" {
        assert!(
            !out.lines().any(|l| l == "ENVIRON"),
            "{user}: ENVIRON: {out}"
        );
    }
    assert!(
        out.contains("Uid:\t2147483646\t2147483646\t2147483646"),
        "the server's own uid: {out}"
    );
    assert!(out.contains("same-cgroup"), "the job's cgroup: {out}");
    let caps: Vec<&str> = out.lines().filter(|l| l.starts_with("Cap")).collect();
    assert!(caps.len() >= 4, "the capability sets: {out}");
    assert!(
        caps.iter().all(|l| l.ends_with("0000000000000000")),
        "{user}: no capability: {out}"
    );
    // The server is still there.
    let ran = home.json(&["exec", "--json", id, "--", "true"]);
    assert_eq!(ran["meta"]["exec_path"], "exec-server", "{ran}");
    server
}

/// Docker's exec in the server's container (the fallback path, forced; `paddock shell`)
/// holds none of the server's capabilities, and the exec's loader variables reach the
/// command, not the helper that drops them (a library loaded there would refuse to run).
fn fallback_holds_nothing(home: &TestHome, id: &str, runtime: &str) {
    let caps = "grep -E '^Cap(Eff|Prm|Inh|Amb|Bnd):' /proc/self/status; printenv LD_PRELOAD";
    let ran: serde_json::Value = serde_json::from_slice(
        &home
            .cmd(&[
                "exec",
                "--json",
                "--env",
                "LD_PRELOAD=/lib/x86_64-linux-gnu/libz.so.1",
                id,
                "--",
                "sh",
                "-c",
                caps,
            ])
            .env("PADDOCK_EXEC_PATH", "docker-exec")
            .output()
            .expect("paddock runs")
            .stdout,
    )
    .expect("a JSON result");
    assert_eq!(ran["meta"]["exec_path"], "docker-exec", "{ran}");
    assert_eq!(ran["exit_code"], 0, "{ran}");
    let out = text(&ran, "stdout");
    assert!(
        out.contains("/lib/x86_64-linux-gnu/libz.so.1"),
        "the loader variable reached the command: {ran}"
    );
    let held: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("Cap"))
        // runc leaves an exec that holds nothing its bounding set (it cannot shrink it,
        // and with no_new_privs cannot use it); gVisor's exec held the server's four.
        .filter(|l| runtime == "runsc" || !l.starts_with("CapBnd"))
        .filter(|l| !l.ends_with("0000000000000000"))
        .collect();
    assert!(held.is_empty(), "Docker's exec holds {held:?}: {out}");

    let shell = fed(
        home,
        &["shell", id],
        b"grep -E '^Cap(Eff|Prm|Amb):' /proc/self/status\n".to_vec(),
    );
    let out = String::from_utf8_lossy(&shell.stdout).to_string();
    assert!(shell.status.success(), "{shell:?}");
    let caps: Vec<&str> = out.lines().filter(|l| l.starts_with("Cap")).collect();
    // gVisor 2022 shows no ambient set.
    assert!(caps.len() >= 2, "{out}");
    assert!(
        caps.iter().all(|l| l.ends_with("0000000000000000")),
        "the shell holds no capability: {out}"
    );
}

/// Forty execs at once: each runs once, the server answers after.
fn flooded(home: &TestHome, id: &str) {
    let results: Vec<serde_json::Value> = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..40)
            .map(|i| {
                scope.spawn(move || {
                    let script = format!("echo run-{i}");
                    home.json(&["exec", "--json", id, "--", "sh", "-c", &script])
                })
            })
            .collect();
        runs.into_iter()
            .map(|run| run.join().expect("an exec thread"))
            .collect()
    });
    for (i, ran) in results.iter().enumerate() {
        assert_eq!(ran["exit_code"], 0, "{ran}");
        assert_eq!(text(ran, "stdout").trim(), format!("run-{i}"), "{ran}");
    }
    let ran = home.json(&["exec", "--json", id, "--", "true"]);
    assert_eq!(ran["meta"]["exec_path"], "exec-server", "{ran}");
}

/// 100 MiB of output through the server: the result keeps the exec's cap and says it
/// was cut, the job's output log and the exec's record stay at theirs (the 2 GiB flood
/// test holds these on Docker's path; here, a size that passes the log's cap).
fn capped(home: &TestHome, id: &str) {
    const MIB: u64 = 1 << 20;
    let ran = home.json(&[
        "exec",
        "--json",
        id,
        "--",
        "sh",
        "-c",
        "head -c 100M /dev/zero | tr '\\0' A",
    ]);
    assert_eq!(ran["exit_code"], 0, "{}", ran["stderr"]);
    assert_eq!(ran["meta"]["exec_path"], "exec-server");
    assert_eq!(ran["truncated"], true);
    let kept = ran["stdout"].as_str().map_or(0, str::len) as u64;
    assert!(kept > 0 && kept <= 2 * MIB, "the result keeps {kept} bytes");
    crate::flood::logs_within_caps(home, id);
}

/// The server killed from outside (as only the host's root could): the container ends
/// with it, and the next exec starts it again, through a new server, the job's work there.
fn killed(home: &TestHome, job: &serde_json::Value, id: &str, runtime: &str, server: &str) {
    let container = container_of(job);
    let kill = if runtime == "runsc" {
        // Inside the sandbox, with the host's busybox paddock mounts there; detached: an
        // exec attached to a gVisor sandbox that ends under it may never return.
        std::process::Command::new("docker")
            .args(["exec", "-d", "--privileged", "-u", "0", &container])
            .args(["/.paddock-tools/busybox", "kill", "-9", server])
            .output()
            .expect("docker runs")
    } else {
        // The server is the only child of the container's init, on this host.
        let init = std::process::Command::new("docker")
            .args(["inspect", "-f", "{{.State.Pid}}", &container])
            .output()
            .expect("docker runs");
        let init = String::from_utf8_lossy(&init.stdout).trim().to_string();
        let children = std::fs::read_to_string(format!("/proc/{init}/task/{init}/children"))
            .expect("the init's children");
        let pid = children.split_whitespace().next().expect("the server");
        std::process::Command::new("kill")
            .args(["-9", pid])
            .output()
            .expect("kill runs")
    };
    assert!(kill.status.success(), "{kill:?}");
    // The engine notices the container's end.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::time::Instant::now() < until {
        let running = std::process::Command::new("docker")
            .args(["inspect", "-f", "{{.State.Running}}", &container])
            .output()
            .expect("docker runs");
        if String::from_utf8_lossy(&running.stdout).trim() == "false" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let ran = home.json(&["exec", "--json", id, "--", "cat", "made.txt"]);
    assert_eq!(ran["exit_code"], 0, "{ran}");
    assert_eq!(text(&ran, "stdout").trim(), "made", "{ran}");
    assert_eq!(ran["meta"]["exec_path"], "exec-server", "{ran}");
}

/// `paddock ARGS` with `input` on its stdin.
fn fed(home: &TestHome, args: &[&str], input: Vec<u8>) -> std::process::Output {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut child = home
        .cmd(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("paddock runs");
    let mut stdin = child.stdin.take().expect("piped");
    let feeder = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().expect("paddock ends");
    feeder
        .join()
        .expect("the feeder ends")
        .expect("paddock read its stdin");
    output
}
