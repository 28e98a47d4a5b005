//! Issue 46's rows (`PADDOCK_BENCH_ONLY=exec-server`): the resident exec server
//! (`PADDOCK_EXEC_PATH=exec-server`) against Docker's exec in the same container, over the
//! APIs each offers (paddock's HTTP API on its socket; Docker's exec API on the engine's
//! socket: create, start attached, inspect for the exit code, which is what a client of it
//! needs for a result), the host CPU each spends per exec, a committing exec against a plain
//! one, the first exec of a job claimed from a warm pool, and 100 concurrent execs across 10
//! jobs. Every pair alternates which goes first.

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;

use super::*;

const DOCKER_SOCKET: &str = "/var/run/docker.sock";
/// Pairs for the API rows: single execs here vary by a few ms.
const PAIRS: usize = 30;
/// Execs per side for the CPU row.
const CPU_EXECS: usize = 60;

/// One HTTP/1.1 request over a Unix socket, read to its end: the status and the body's
/// bytes (chunked or not: the callers look for a word in it).
fn request(socket: &Path, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = UnixStream::connect(socket).expect("the socket answers");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("the request goes");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("the answer comes");
    let text = String::from_utf8_lossy(&response).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// `POST /v1/jobs/{id}/exec` of `cmd` on paddock's socket; its milliseconds.
fn paddock_api_exec(socket: &Path, id: &str, cmd: &[&str]) -> f64 {
    let body = json!({ "cmd": cmd }).to_string();
    let started = Instant::now();
    let (status, text) = request(socket, "POST", &format!("/v1/jobs/{id}/exec"), &body);
    let took = ms(started.elapsed());
    assert!(
        status == 200 && text.contains("\"exit_code\":0"),
        "paddock's exec: {text}"
    );
    took
}

/// Docker's exec API of `cmd` in `container` as the agent: create, start attached (the
/// output read to its end), inspect for the exit code; its milliseconds.
fn docker_api_exec(container: &str, cmd: &[&str]) -> f64 {
    let socket = Path::new(DOCKER_SOCKET);
    let body = json!({"Cmd": cmd, "User": "1000:1000", "AttachStdout": true, "AttachStderr": true})
        .to_string();
    let started = Instant::now();
    let (status, text) = request(
        socket,
        "POST",
        &format!("/v1.41/containers/{container}/exec"),
        &body,
    );
    assert_eq!(status, 201, "docker's exec create: {text}");
    let id = text
        .split("\"Id\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("an exec id")
        .to_string();
    let (status, text) = request(
        socket,
        "POST",
        &format!("/v1.41/exec/{id}/start"),
        r#"{"Detach":false,"Tty":false}"#,
    );
    assert_eq!(status, 200, "docker's exec start: {text}");
    let (status, text) = request(socket, "GET", &format!("/v1.41/exec/{id}/json"), "");
    let took = ms(started.elapsed());
    assert!(
        status == 200 && text.contains("\"ExitCode\":0"),
        "docker's exec inspect: {text}"
    );
    took
}

/// A `paddock serve` of `home`, up; killed when dropped.
struct Serving(std::process::Child);

impl Serving {
    fn start(home: &TestHome) -> (Serving, PathBuf) {
        let child = home
            .cmd(&["serve", "--sweep-interval", "1h"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("paddock serve starts");
        let socket = home.root().join("paddock.sock");
        let until = Instant::now() + Duration::from_secs(60);
        while UnixStream::connect(&socket).is_err() {
            assert!(Instant::now() < until, "the daemon did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        (Serving(child), socket)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Clock ticks of CPU (user + system, with reaped children's) of every process whose
/// command name is one of `names`, plus process `extra`.
fn cpu_ticks(names: &[&str], extra: u32) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some((name, rest)) = stat.split_once(" (").and_then(|(_, r)| r.rsplit_once(") "))
        else {
            continue;
        };
        if pid != extra && !names.iter().any(|n| name.starts_with(n)) {
            continue;
        }
        // Fields after the name: state is 3rd overall, utime the 14th .. cstime the 17th.
        let fields: Vec<&str> = rest.split_whitespace().collect();
        total += fields[11..15]
            .iter()
            .filter_map(|f| f.parse::<u64>().ok())
            .sum::<u64>();
    }
    total
}

/// The engine's processes: what Docker's exec path runs on the host (runc is reaped by its
/// shim, so its time is in the shim's children's).
const ENGINE: [&str; 3] = ["dockerd", "containerd", "containerd-shim"];

/// The rows (see the module docs); `label` names the repository.
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
pub(super) fn rows(repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
    let home = pooled_home().env("PADDOCK_EXEC_PATH", "exec-server");
    let (daemon, socket) = Serving::start(&home);
    let (id, container) = docker_job(&home, repo, "resident-bench");
    // Paged in, untimed.
    paddock_api_exec(&socket, &id, &["git", "status", "--short"]);
    docker_api_exec(&container, &["true"]);

    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for i in 0..PAIRS {
        if i % 2 == 0 {
            ours.push(paddock_api_exec(&socket, &id, &["true"]));
            theirs.push(docker_api_exec(&container, &["true"]));
        } else {
            theirs.push(docker_api_exec(&container, &["true"]));
            ours.push(paddock_api_exec(&socket, &id, &["true"]));
        }
    }
    let ratio = median(&ours) / median(&theirs);
    rows.push(Row {
        name: format!("API exec true, exec server ({label})"),
        paddock: ours,
        baseline: Some(theirs),
        unit: "ms",
        target: "≤ 0.3 × Docker's exec API".into(),
        met: ratio <= 0.3,
        note: "POST /v1/jobs/{id}/exec on paddock's socket vs Docker's exec API on the engine's (create, start attached, inspect), the same container".into(),
    });

    // The CLI, against `docker exec`.
    let (cli, docker_cli) = cli_true_pairs(&home, &id, &container);
    let ratio = median(&cli) / median(&docker_cli);
    rows.push(Row {
        name: format!("CLI exec true, exec server ({label})"),
        paddock: cli,
        baseline: Some(docker_cli),
        unit: "ms",
        target: "≤ 0.6 × docker exec".into(),
        met: ratio <= 0.6,
        note: "paddock exec JOB -- true vs docker exec CONTAINER true, the same container".into(),
    });

    // A committing exec against the same command in a job whose HEAD is detached (the same
    // git work, but the branch does not move, so nothing syncs), and against `true`; all
    // through paddock's API, the three alternated.
    let (detached, _) = docker_job(&home, repo, "resident-detached");
    paddock_api_exec(&socket, &detached, &["git", "checkout", "-q", "--detach"]);
    let (mut committing, mut same, mut bare) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..PAIRS {
        let script = format!("echo {i} >> c.txt && git add c.txt && git commit -q -m 'c {i}'");
        let commit = ["sh", "-c", script.as_str()];
        let mut order: [&mut dyn FnMut(); 3] = [
            &mut || committing.push(paddock_api_exec(&socket, &id, &commit)),
            &mut || same.push(paddock_api_exec(&socket, &detached, &commit)),
            &mut || bare.push(paddock_api_exec(&socket, &id, &["true"])),
        ];
        order.rotate_left(i % 3);
        for run in &mut order {
            run();
        }
    }
    let added = median(&committing) - median(&same);
    let over_true = median(&committing) - median(&bare);
    let audit = std::fs::read_to_string(home.root().join("logs").join(&id).join("exec.jsonl"))
        .expect("paddock writes an audit log");
    let sync: Vec<f64> = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|e| e["sync_ms"].as_f64())
        .collect();
    let sync_ms = if sync.is_empty() { 0.0 } else { median(&sync) };
    rows.push(Row {
        name: format!("API exec with a commit, exec server ({label})"),
        paddock: committing.clone(),
        baseline: Some(same),
        unit: "ms",
        target: "≤ the same exec without a commit + 20 ms".into(),
        met: added <= 20.0,
        note: format!(
            "`echo >> c.txt && git add && git commit` in a job on its branch vs the same command in a job whose HEAD is detached (the same git work; the branch does not move, so nothing syncs), both POST /v1/jobs/{{id}}/exec; the commit's sync adds {added:.0} ms at the median, of which the host's half (the fsck'd pack into the scratch repository, then the user's branch) {sync_ms:.0} ms (exec.jsonl `sync_ms`)"
        ),
    });
    rows.push(Row {
        name: format!("API exec with a commit against `true`, exec server ({label})"),
        paddock: committing,
        baseline: Some(bare),
        unit: "ms",
        target: "(context: the command's own git work included)".into(),
        met: true,
        note: format!(
            "the same committing exec vs `true` in the same job: {over_true:.0} ms more at the median, the command's own `git add` and `git commit` over a 5,000-entry index included"
        ),
    });

    // Host CPU per exec: the daemon's and the engine's processes, over CPU_EXECS each.
    let ticks = |f: &dyn Fn()| {
        let before = cpu_ticks(&ENGINE, daemon.0.id());
        for _ in 0..CPU_EXECS {
            f();
        }
        let after = cpu_ticks(&ENGINE, daemon.0.id());
        #[expect(clippy::cast_precision_loss, reason = "a few thousand ticks")]
        let per = (after.saturating_sub(before)) as f64 * 10.0 / CPU_EXECS as f64;
        per
    };
    let (mut cpu_ours, mut cpu_theirs) = (Vec::new(), Vec::new());
    for round in 0..4 {
        let ours = || {
            paddock_api_exec(&socket, &id, &["true"]);
        };
        let theirs = || {
            docker_api_exec(&container, &["true"]);
        };
        if round % 2 == 0 {
            cpu_ours.push(ticks(&ours));
            cpu_theirs.push(ticks(&theirs));
        } else {
            cpu_theirs.push(ticks(&theirs));
            cpu_ours.push(ticks(&ours));
        }
    }
    let ratio = median(&cpu_ours) / median(&cpu_theirs);
    rows.push(Row {
        name: format!("host CPU per exec, exec server ({label})"),
        paddock: cpu_ours,
        baseline: Some(cpu_theirs),
        unit: "ms CPU",
        target: "≤ 0.3 × Docker's exec".into(),
        met: ratio <= 0.3,
        note: format!(
            "user + system time (reaped children's included) of paddock's daemon, dockerd, containerd and the shims per exec of `true`, {CPU_EXECS} execs per sample, 4 alternated samples: paddock's API vs Docker's exec API"
        ),
    });
    run(&mut home.cmd(&["rm", &id]));

    warm_first_exec(&home, &socket, repo, label, rows);
    concurrent(&home, &socket, repo, rows);
    drop(daemon);
}

/// The first exec of a job claimed from a warm pool (filled, untimed, before each claim):
/// the exec alone, after the create returned.
fn warm_first_exec(
    home: &TestHome,
    socket: &Path,
    repo: &FixtureRepo,
    label: &str,
    rows: &mut Vec<Row>,
) {
    let path = repo.path().display().to_string();
    let mut first = Vec::new();
    for i in 0..EXEC_PAIRS {
        run(&mut home.cmd(&["pool", "fill", "--profile", "pooled", "--repo", &path]));
        settle();
        let job = warm_create(home, &path, i);
        assert_eq!(job["pool"]["start"], "warm", "a warm job: {job}");
        let id = job["id"].as_str().expect("an id").to_string();
        first.push(paddock_api_exec(socket, &id, &["true"]));
        run(&mut home.cmd(&["rm", "--delete-branch", &id]));
    }
    run(&mut home.cmd(&["pool", "drain"]));
    let p50 = median(&first);
    rows.push(Row {
        name: format!("first exec of a warm job, exec server ({label})"),
        paddock: first,
        baseline: None,
        unit: "ms",
        target: "p50 < 40 ms".into(),
        met: p50 < 40.0,
        note: "POST /v1/jobs/{id}/exec of `true` right after `create --profile pooled` returned (the pool filled, untimed, before each)".into(),
    });
}

/// 100 execs at once across 10 jobs (10 each), through paddock's API and through Docker's
/// exec API in the same containers: each exec's time, and the wall time in the note.
fn concurrent(home: &TestHome, socket: &Path, repo: &FixtureRepo, rows: &mut Vec<Row>) {
    let jobs: Vec<(String, String)> = (0..10)
        .map(|i| docker_job(home, repo, &format!("flood-{i}")))
        .collect();
    for (id, container) in &jobs {
        paddock_api_exec(socket, id, &["true"]);
        docker_api_exec(container, &["true"]);
    }
    let wave = |paddock: bool| -> (Vec<f64>, f64) {
        let started = Instant::now();
        let times = std::thread::scope(|scope| {
            let runs: Vec<_> = (0..100)
                .map(|i| {
                    let (id, container) = &jobs[i % jobs.len()];
                    scope.spawn(move || {
                        if paddock {
                            paddock_api_exec(socket, id, &["true"])
                        } else {
                            docker_api_exec(container, &["true"])
                        }
                    })
                })
                .collect();
            runs.into_iter()
                .map(|r| r.join().expect("an exec thread"))
                .collect::<Vec<f64>>()
        });
        (times, ms(started.elapsed()))
    };
    let (mut ours, mut theirs, mut walls) = (Vec::new(), Vec::new(), (Vec::new(), Vec::new()));
    for round in 0..4 {
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for paddock in order {
            let (times, wall) = wave(paddock);
            if paddock {
                ours.extend(times);
                walls.0.push(wall);
            } else {
                theirs.extend(times);
                walls.1.push(wall);
            }
        }
    }
    for (id, _) in &jobs {
        run(&mut home.cmd(&["rm", id]));
    }
    let (wall_ours, wall_theirs) = (median(&walls.0), median(&walls.1));
    rows.push(Row {
        name: "100 concurrent execs across 10 jobs, exec server".into(),
        paddock: ours,
        baseline: Some(theirs),
        unit: "ms",
        target: "all succeed".into(),
        met: true,
        note: format!(
            "each exec's time, 4 alternated waves of 100 `true` (10 per job) through paddock's API (the default budget: {slots} exec slots on this host, the rest queued) vs Docker's exec API (no bound); a wave's wall time {wall_ours:.0} ms vs {wall_theirs:.0} ms at the median",
            slots = std::thread::available_parallelism().map_or(1, std::num::NonZero::get) * 2
        ),
    });
}
