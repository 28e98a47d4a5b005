//! Issue 46, as far as it is built: the resident exec server, opt-in with
//! `PADDOCK_EXEC_PATH=exec-server`, on runc and gVisor. With the switch, a job's execs
//! take the server's path (`meta.exec_path`), including one whose order is longer than a
//! line of the transport (a committing exec carries its sync snippet; a long environment):
//! the branch moves, stdin arrives whole, a timeout kills the command. The agent cannot
//! signal the server, read its descriptors or write its binary, and its commands keep no
//! capability. Without the switch, Docker's exec runs them, as before. `--user root` is
//! refused in a server job under gVisor (root inside shares the server's uid).

use crate::fixtures::{FixtureRepo, TestHome, docker_available, test_image, text};

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

    // The agent against the server: no signal, no descriptor, no binary to replace, no
    // capability kept.
    let probe = r#"
        pid=$(for d in /proc/[0-9]*; do
          case "$(tr '\0' ' ' < $d/cmdline 2>/dev/null)" in "/.paddock-tools/exec/ld.so "*) echo ${d#/proc/};; esac
        done | head -n 1)
        echo "server=$pid"
        kill -9 "$pid" 2>/dev/null && echo SIGNALLED
        ls /proc/$pid/fd/ 2>/dev/null | head -n 1 | grep -q . && echo FDS
        echo x >> /.paddock-tools/exec/paddock 2>/dev/null && echo WROTE
        grep -E '^Cap(Eff|Prm|Bnd|Amb):' /proc/self/status
        echo end
    "#;
    let ran = home.json(&["exec", "--json", &id, "--", "sh", "-c", probe]);
    let out = text(&ran, "stdout");
    assert!(
        out.contains("server=") && !out.contains("server=\n") && !out.contains("server=1\n"),
        "the server is seen: {out}"
    );
    for word in ["SIGNALLED", "FDS", "WROTE"] {
        assert!(!out.contains(word), "{word}: {out}");
    }
    let caps: Vec<&str> = out.lines().filter(|l| l.starts_with("Cap")).collect();
    assert!(caps.len() >= 3, "the capability sets: {out}");
    assert!(
        caps.iter().all(|l| l.ends_with("0000000000000000")),
        "no capability: {out}"
    );
    // The server is still there.
    let ran = home.json(&["exec", "--json", &id, "--", "true"]);
    assert_eq!(ran["meta"]["exec_path"], "exec-server", "{ran}");

    if runtime == "runsc" {
        let root = home.run(&["exec", "--user", "root", &id, "--", "id", "-u"]);
        assert_eq!(root.status.code(), Some(125), "{root:?}");
        assert!(
            String::from_utf8_lossy(&root.stderr).contains("exec server"),
            "{root:?}"
        );
    }
    home.ok(&["rm", &id, "--force"]);

    // Without the switch: Docker's exec, as before.
    let plain = TestHome::new();
    let job = plain.create(&repo, &["--runtime", runtime, "--image", &image]);
    let id = text(&job, "id");
    let ran = plain.json(&["exec", "--json", &id, "--", "true"]);
    assert_eq!(ran["meta"]["exec_path"], "docker-exec", "{ran}");
    plain.ok(&["rm", &id, "--force"]);
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
