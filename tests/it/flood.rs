//! An agent that prints without end cannot fill the host or the memory of whoever reads
//! its output (issue 27, part 2): a 2 GiB stdout flood from inside a Docker job leaves the
//! job's output log and the exec's record at their caps, and `paddock logs` and the API's
//! `GET /v1/jobs/{id}/logs` read it in constant memory.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};

use crate::api::Daemon;
use crate::fixtures::{FixtureRepo, TestHome, docker_available, text};

const MIB: u64 = 1 << 20;

/// Peak resident memory (KiB) of a field of `/proc/<pid>/status`.
pub(crate) fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// Job `id`'s output log and exec records are at most their caps (64 MiB, and the records'
/// with their framing); the job's log directory.
pub(crate) fn logs_within_caps(home: &TestHome, id: &str) -> std::path::PathBuf {
    let logs = home.root().join("logs").join(id);
    let output_log = std::fs::metadata(logs.join("output.log")).unwrap().len();
    assert!(output_log <= 65 * MIB, "output.log is {output_log} bytes");
    for entry in std::fs::read_dir(logs.join("execs")).unwrap() {
        let path = entry.unwrap().path();
        let size = std::fs::metadata(&path).unwrap().len();
        assert!(size <= 80 * MIB, "{} is {size} bytes", path.display());
    }
    logs
}

#[test]
fn a_stdout_flood_stays_within_the_log_caps_and_reads_in_constant_memory() {
    if !docker_available("a_stdout_flood_stays_within_the_log_caps_and_reads_in_constant_memory") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create_docker(&repo, &[]);
    let id = text(&job, "id");
    let flood = home
        .cmd(&[
            "exec",
            &id,
            "--",
            "sh",
            "-c",
            "head -c 2G /dev/zero | tr '\\0' A",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(flood.success(), "{flood:?}");

    let logs = logs_within_caps(&home, &id);
    let text_log = std::fs::read_to_string(logs.join("output.log")).unwrap();
    assert!(
        text_log.contains("reached its cap of 64.0 MiB"),
        "no marker"
    );

    // `paddock logs` streams: its peak RSS stays far under the log's size.
    let (peak_kib, _) = peak_kib_of(&home, &["logs", &id]);
    assert!(
        peak_kib < 64 * 1024,
        "paddock logs peaked at {peak_kib} KiB"
    );

    // The daemon's answer streams too: its peak, reset before the request, stays under 64 MiB.
    let daemon = Daemon::start_with_runtime(&home, &[], "docker");
    let pid = daemon_pid(&home);
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
    let mut stream = UnixStream::connect(&daemon.socket).unwrap();
    write!(
        stream,
        "GET /v1/jobs/{id}/logs HTTP/1.1\r\nHost: paddock\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut received = 0u64;
    let mut buffer = vec![0; 1 << 16];
    loop {
        let read = stream.read(&mut buffer).unwrap();
        if read == 0 {
            break;
        }
        received += read as u64;
    }
    assert!(received > 60 * MIB, "the answer held only {received} bytes");
    let peak_kib = status_kib(pid, "VmHWM:");
    assert!(peak_kib < 64 * 1024, "the daemon peaked at {peak_kib} KiB");
    daemon.stop();
    home.ok(&["rm", &id, "--force"]);
}

/// The pid of the daemon serving `home` (the only `paddock serve` with its state root).
pub(crate) fn daemon_pid(home: &TestHome) -> u32 {
    let root = home.root().display().to_string();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmdline.split(|b| *b == 0).any(|a| a == b"serve")
            && environ
                .split(|b| *b == 0)
                .any(|e| e == format!("PADDOCK_HOME={root}").as_bytes())
        {
            return pid;
        }
    }
    panic!("no daemon for {root}");
}

/// Invalid UTF-8 never hides anything (issue 27, part 3): one exec prints a byte that is not
/// text; every exec's output still comes back through the API, the log says it is lossy,
/// and that exec's exact bytes come back as base64.
#[test]
fn output_that_is_not_utf8_hides_nothing() {
    use base64::Engine as _;
    if !docker_available("output_that_is_not_utf8_hides_nothing") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create_docker(&repo, &[]);
    let id = text(&job, "id");
    home.sh(&id, "echo first");
    let bad = home.json(&[
        "exec",
        &id,
        "--json",
        "--",
        "sh",
        "-c",
        "printf 'bad \\377\\376 end\\n'",
    ]);
    let exact = base64::engine::general_purpose::STANDARD
        .decode(bad["stdout_base64"].as_str().expect("stdout_base64"))
        .unwrap();
    assert_eq!(exact, b"bad \xff\xfe end\n");
    home.sh(&id, "echo third");

    let daemon = Daemon::start_with_runtime(&home, &[], "docker");
    let get = |path: &str| {
        let mut stream = UnixStream::connect(&daemon.socket).unwrap();
        crate::api::http(&mut stream, "GET", path, None, &[])
    };
    let (status, logs) = get(&format!("/v1/jobs/{id}/logs"));
    assert_eq!(status, 200, "{logs}");
    let output = logs["output"].as_str().expect("output");
    assert!(
        output.contains("first") && output.contains("third"),
        "{logs}"
    );
    assert_eq!(logs["lossy"], true, "{logs}");
    let (_, execs) = get(&format!("/v1/jobs/{id}/execs"));
    let mut bytes_back = Vec::new();
    for exec in execs.as_array().expect("a list") {
        let exec_id = exec["id"].as_str().unwrap();
        let mut stream = UnixStream::connect(&daemon.socket).unwrap();
        write!(
            stream,
            "GET /v1/jobs/{id}/execs/{exec_id}/output HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        for line in answer.lines().filter(|l| l.starts_with('{')) {
            let value: serde_json::Value = serde_json::from_str(line).unwrap();
            match value["base64"].as_str() {
                Some(b64) => bytes_back.extend(
                    base64::engine::general_purpose::STANDARD
                        .decode(b64)
                        .unwrap(),
                ),
                None => bytes_back.extend(value["data"].as_str().unwrap_or("").as_bytes()),
            }
        }
    }
    let back = String::from_utf8_lossy(&bytes_back);
    assert!(back.contains("first") && back.contains("third"), "{back}");
    assert!(
        bytes_back.windows(2).any(|w| w == b"\xff\xfe"),
        "the exact bytes did not come back: {back}"
    );
    daemon.stop();
    home.ok(&["rm", &id, "--force"]);
}

/// Runs `paddock ARGS` under GNU time; asserts it succeeds; returns its peak resident memory
/// (KiB, children included) and its output.
pub(crate) fn peak_kib_of(home: &TestHome, args: &[&str]) -> (u64, std::process::Output) {
    let timed = Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .arg(env!("CARGO_BIN_EXE_paddock"))
        .args(args)
        .envs(home.cmd(&[]).get_envs().filter_map(|(k, v)| Some((k, v?))))
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    assert!(timed.status.success(), "{args:?}: {timed:?}");
    let stderr = String::from_utf8_lossy(&timed.stderr);
    let peak_kib = stderr.lines().last().unwrap().trim().parse().unwrap();
    (peak_kib, timed)
}

/// A `GET` of `path` over the daemon's socket: the whole raw answer (head and body).
pub(crate) fn get_raw(socket: &std::path::Path, path: &str) -> String {
    let mut stream = UnixStream::connect(socket).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}
