//! Issue 44, part 1: an exec's standard input. `paddock exec -i` passes 50 MiB of bytes
//! that are not text to the command intact (compared by hash), on the engine and through a
//! running daemon, under the process runtime, runc and gVisor; the API takes the same input
//! inline (`stdin`, `stdin_base64`) and streamed in the body (`application/x-paddock-exec-stdin`);
//! on a pseudo-terminal a line typed goes in and the command's answer comes out before the
//! input ends; a command that reads nothing ends at once however much is offered; without
//! `-i` the command reads end-of-file; bad input is a 400 that runs nothing.

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::api::{Daemon, api, dechunk};
use crate::fixtures::{FixtureRepo, TestHome, docker_available, test_image, text};
use serde_json::{Value, json};

const FIFTY_MIB: usize = 50 << 20;

/// 50 MiB of every byte value (a xorshift stream: no run a pipe or a text path would
/// keep by luck), written to a file of the test's; its path and its sha256.
fn input_file(dir: &Path) -> (PathBuf, String) {
    let path = dir.join("stdin.bin");
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut bytes = Vec::with_capacity(FIFTY_MIB);
    while bytes.len() < FIFTY_MIB {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    std::fs::write(&path, &bytes).unwrap();
    (path.clone(), sha256_of(&path))
}

fn sha256_of(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// `paddock exec -i JOB -- sha256sum` with `input` on its stdin: the hash the command saw.
fn hash_through_cli(home: &TestHome, id: &str, input: &Path) -> String {
    let started = Instant::now();
    let out = home
        .cmd(&["exec", "-i", id, "--", "sha256sum"])
        .stdin(std::fs::File::open(input).unwrap())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "exec -i: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("50 MiB through `exec -i` in {:?}", started.elapsed());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// `POST /v1/jobs/{id}/exec` with `input` streamed in the body after the options' line,
/// written as the answer is read (the daemon answers while the body still comes).
fn hash_through_api_stream(socket: &Path, id: &str, input: &Path) -> Value {
    let mut stream = UnixStream::connect(socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(300)))
        .unwrap();
    let options = format!("{}\n", json!({"cmd": ["sha256sum"]}));
    let length = options.len() + FIFTY_MIB;
    write!(
        stream,
        "POST /v1/jobs/{id}/exec HTTP/1.1\r\nHost: paddock\r\nConnection: close\r\n\
         Content-Type: application/x-paddock-exec-stdin\r\nContent-Length: {length}\r\n\r\n{options}"
    )
    .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let input = input.to_path_buf();
    let sender = std::thread::spawn(move || {
        let mut file = std::fs::File::open(input).unwrap();
        std::io::copy(&mut file, &mut writer).unwrap();
    });
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    sender.join().unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    let body = if head.to_ascii_lowercase().contains("chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn first_word(text: &Value) -> String {
    text.as_str()
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Every path of the input for a job of `runtime`: the engine's, the daemon's CLI, the API
/// streamed and inline, the end-of-file without `-i`, a command that reads nothing.
fn stdin_everywhere(runtime: &str, daemon_runtime: &str) {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let image = test_image();
    let mut args = vec!["--runtime", runtime, "--task", "stdin"];
    if runtime != "process" {
        args.extend(["--image", image.as_str()]);
    }
    let job = home.create(&repo, &args);
    let id = text(&job, "id");
    let (input, want) = input_file(home.dir.path());

    assert_eq!(
        hash_through_cli(&home, &id, &input),
        want,
        "engine, exec -i"
    );
    // Without -i the command reads end-of-file, whatever the CLI's stdin holds.
    let out = home
        .cmd(&["exec", &id, "--", "wc", "-c"])
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0");
    // A command that reads none of it ends at once, its own exit code back.
    let started = Instant::now();
    let out = home
        .cmd(&["exec", "-i", &id, "--", "sh", "-c", "exit 3"])
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(started.elapsed() < Duration::from_secs(30));

    let daemon = Daemon::start_with_runtime(&home, &[], daemon_runtime);
    assert_eq!(
        hash_through_cli(&home, &id, &input),
        want,
        "daemon, exec -i"
    );
    let streamed = hash_through_api_stream(&daemon.socket, &id, &input);
    assert_eq!(
        first_word(&streamed["stdout"]),
        want,
        "API, streamed: {streamed}"
    );
    let path = format!("/v1/jobs/{id}/exec");
    let (status, inline) = api(
        &daemon.socket,
        "POST",
        &path,
        Some(&json!({"cmd": ["cat"], "stdin": "one line\n"})),
    );
    assert_eq!(
        (status, inline["stdout"].as_str()),
        (200, Some("one line\n"))
    );
    let (status, inline) = api(
        &daemon.socket,
        "POST",
        &path,
        Some(&json!({"cmd": ["od", "-An", "-tx1"], "stdin_base64": "AP8K"})),
    );
    assert_eq!(status, 200, "{inline}");
    assert_eq!(inline["stdout"].as_str().map(str::trim), Some("00 ff 0a"));
    // Bad input: a 400 and nothing run.
    let execs_before = home
        .json(&["execs", &id, "--json"])
        .as_array()
        .unwrap()
        .len();
    let (status, refused) = api(
        &daemon.socket,
        "POST",
        &path,
        Some(&json!({"cmd": ["cat"], "stdin": "a", "stdin_base64": "YQ=="})),
    );
    assert_eq!(status, 400, "{refused}");
    let (status, refused) = api(
        &daemon.socket,
        "POST",
        &path,
        Some(&json!({"cmd": ["cat"], "stdin_base64": "not base64!"})),
    );
    assert_eq!(status, 400, "{refused}");
    let execs_after = home
        .json(&["execs", &id, "--json"])
        .as_array()
        .unwrap()
        .len();
    assert_eq!(execs_before, execs_after, "a refused exec ran nothing");
    daemon.stop();
    home.ok(&["rm", &id, "--force"]);
}

#[test]
fn fifty_mib_of_stdin_reach_a_process_job_intact_on_every_path() {
    stdin_everywhere("process", "process");
}

#[test]
fn fifty_mib_of_stdin_reach_a_runc_job_intact_on_every_path() {
    if !docker_available("fifty_mib_of_stdin_reach_a_runc_job_intact_on_every_path") {
        return;
    }
    stdin_everywhere("docker", "docker");
}

#[test]
fn fifty_mib_of_stdin_reach_a_gvisor_job_intact_on_every_path() {
    if !docker_available("fifty_mib_of_stdin_reach_a_gvisor_job_intact_on_every_path") {
        return;
    }
    stdin_everywhere("runsc", "docker");
}

/// `exec -i` on a real pseudo-terminal: a line typed reaches the command and its answer
/// shows before the input ends; Ctrl-D ends the input and the exec.
fn a_line_in_a_line_out(runtime: &str, through_daemon: bool) {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let image = test_image();
    let mut args = vec!["--runtime", runtime, "--task", "pty"];
    if runtime != "process" {
        args.extend(["--image", image.as_str()]);
    }
    let job = home.create(&repo, &args);
    let id = text(&job, "id");
    let daemon = through_daemon.then(|| Daemon::start_with_runtime(&home, &[], runtime));
    let line = format!(
        "{} exec -i {id} -- sh -c 'while read -r l; do echo \"got:$l\"; done; echo bye'",
        env!("CARGO_BIN_EXE_paddock")
    );
    let mut child = Command::new("script")
        .args(["-qfec", &line, "/dev/null"])
        .env_remove("PADDOCK_NO_DAEMON")
        .envs(home.envs.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("`script` (util-linux) runs a command on a pseudo-terminal");
    let mut to_terminal = child.stdin.take().unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line.trim_end_matches('\r').to_string()).is_err() {
                break;
            }
        }
    });
    let wait_for = |part: &str| {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) if line.contains(part) && !line.contains("\"got:") => return,
                Ok(line) => seen.push(line),
                Err(_) => panic!("no {part:?} on the terminal; it showed {seen:?}"),
            }
        }
    };
    to_terminal.write_all(b"first\n").unwrap();
    wait_for("got:first");
    to_terminal.write_all(b"second\n").unwrap();
    wait_for("got:second");
    // Ctrl-D at the start of a line: the terminal's end-of-file.
    to_terminal.write_all(&[4]).unwrap();
    wait_for("bye");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "exec -i did not end after Ctrl-D"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    if let Some(daemon) = daemon {
        daemon.stop();
    }
    home.ok(&["rm", &id, "--force"]);
}

#[test]
fn exec_i_on_a_terminal_answers_a_line_at_a_time_in_a_process_job() {
    a_line_in_a_line_out("process", false);
    a_line_in_a_line_out("process", true);
}

#[test]
fn exec_i_on_a_terminal_answers_a_line_at_a_time_in_a_runc_job() {
    if !docker_available("exec_i_on_a_terminal_answers_a_line_at_a_time_in_a_runc_job") {
        return;
    }
    a_line_in_a_line_out("docker", false);
    a_line_in_a_line_out("docker", true);
}
