//! paddock against the raw tools it wraps, measured side by side in one run so machine noise
//! hits both: `cargo bench --bench paddock` (see docs/BENCHMARKS.md).
//!
//! Every comparison interleaves paddock and its baseline run by run and reports medians and
//! p95 over at least 5 runs. Results go to `target/bench/results.json` and
//! `docs/BENCHMARKS.md`. Set `PADDOCK_BENCH_QUICK=1` for a smoke run (5,000-file repo only),
//! `PADDOCK_BENCH_REPO=/path` to add a repository of your own, `PADDOCK_BENCH_ONLY=ab` with
//! `PADDOCK_BENCH_AGAINST=PATH` for a same-run A/B against another build, `PADDOCK_BENCH_ONLY=egress`
//! to run only the egress proxy rows (`=secrets`: the proxy's cost for a secret host, TLS
//! terminated, against a tunnel and a direct request; `=queue`: the 100 queued runs;
//! `=marks`: `ls` with the merged and conflicts marks; `=engines`: a remote engine's
//! create-to-ready and exec against the local engine's; `=overlay`: the overlay checkout rows on the 50,000-file
//! repository; `=ready`: job ready and first exec, cold and warm, on 1, 5,000 and 50,000
//! files; `=exec`: an exec's cost against `docker exec` and the warm pool's first exec, on
//! 1 and 5,000 files; `=exec-server`: issue 46's rows, the resident exec server against
//! Docker's exec (API, CLI, host CPU, a commit, a warm job's first exec, 100 at once);
//! `=microvm`: a microVM job's create to ready and exec round trip
//! against runc; `=image`: the default agent image's size and cold create against the
//! minimal one's, `PADDOCK_BENCH_MINIMAL` naming it (default `paddock-agent:minimal`); `=checkpoint`: checkpoint, restore, fork -n 4, pause and resume on the
//! 50,000-file repository with an overlay checkout; `=microvm-checkpoint`: checkpoint,
//! restore and fork -n 4 of a microVM job against runc), printed, not written.

#[path = "paddock/ab.rs"]
mod ab;
#[path = "paddock/checkpoint.rs"]
mod checkpoint;
#[path = "paddock/create.rs"]
mod create;
#[path = "paddock/daemon.rs"]
mod daemon;
#[path = "paddock/egress.rs"]
mod egress;
#[path = "paddock/engines.rs"]
mod engines;
#[path = "paddock/exec.rs"]
mod exec;
#[path = "../fixtures/mod.rs"]
mod fixtures;
#[path = "paddock/image.rs"]
mod image;
#[path = "paddock/lists.rs"]
mod lists;
#[path = "paddock/ready.rs"]
mod ready;
#[path = "paddock/resident.rs"]
mod resident;
#[path = "paddock/secrets.rs"]
mod secrets;
pub(crate) use create::*;
pub(crate) use daemon::*;
pub(crate) use egress::*;
pub(crate) use exec::*;
pub(crate) use lists::*;
pub(crate) use ready::*;
#[path = "paddock/microvm.rs"]
mod microvm;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fixtures::{FixtureRepo, TestHome, bridge_gateway, test_image};
use serde_json::{Value, json};

const RUNS: usize = 7;

fn median(samples: &[f64]) -> f64 {
    percentile(samples, 0.5)
}

fn percentile(samples: &[f64], p: f64) -> f64 {
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).expect("timings are numbers"));
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "p is in 0..=1, so the nearest rank is a small index within the slice"
    )]
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn run(cmd: &mut Command) -> String {
    let output = cmd.stdin(Stdio::null()).output().expect("command runs");
    assert!(
        output.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// Flushes dirty pages before a timed command, so the kernel's writeback of earlier work
/// (fixture generation, the previous run's checkout) does not land inside a measurement.
fn settle() {
    let _ = Command::new("sync").status();
}

fn timed(cmd: &mut Command) -> (Duration, String) {
    settle();
    let started = Instant::now();
    let out = run(cmd);
    (started.elapsed(), out)
}

/// One row of the results table.
struct Row {
    name: String,
    paddock: Vec<f64>,
    baseline: Option<Vec<f64>>,
    unit: &'static str,
    target: String,
    met: bool,
    note: String,
}

impl Row {
    fn json(&self) -> Value {
        json!({
            "name": self.name,
            "unit": self.unit,
            "paddock": {"median": median(&self.paddock), "p95": percentile(&self.paddock, 0.95), "samples": self.paddock},
            "baseline": self.baseline.as_ref().map(|b| json!({"median": median(b), "p95": percentile(b, 0.95), "samples": b})),
            "ratio": self.baseline.as_ref().map(|b| median(&self.paddock) / median(b)),
            "target": self.target,
            "met": self.met,
            "note": self.note,
        })
    }

    fn markdown(&self) -> String {
        let fmt = |v: f64| {
            if self.unit == "ms" {
                format!("{v:.0} ms")
            } else {
                format!("{v:.1} {}", self.unit)
            }
        };
        let (base, ratio) = match &self.baseline {
            Some(b) => (
                format!("{} / {}", fmt(median(b)), fmt(percentile(b, 0.95))),
                format!("{:.2}×", median(&self.paddock) / median(b)),
            ),
            None => ("–".into(), "–".into()),
        };
        format!(
            "| {} | {} / {} | {} | {} | {} | {} |",
            self.name,
            fmt(median(&self.paddock)),
            fmt(percentile(&self.paddock, 0.95)),
            base,
            ratio,
            self.target,
            if self.met { "met" } else { "**missed**" },
        )
    }
}

fn docker_ok() -> bool {
    std::env::var("PADDOCK_SKIP_DOCKER_TESTS").as_deref() != Ok("1")
        && Command::new("docker")
            .args(["image", "inspect", &test_image()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .nth(1)
        .and_then(|k| k.parse::<u64>().ok())
        .map_or(0, |k| k / 1024 / 1024);
    let docker = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let git = run(Command::new("git").arg("--version"));
    format!("{cpus} CPUs, {mem} GiB RAM, Docker {docker}, {git}")
}

#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let quick = std::env::var("PADDOCK_BENCH_QUICK").as_deref() == Ok("1");
    let mut rows = Vec::new();
    let only = std::env::var("PADDOCK_BENCH_ONLY").ok();
    if let Some(only) = only.as_deref().filter(|o| {
        matches!(
            *o,
            "egress"
                | "secrets"
                | "queue"
                | "marks"
                | "overlay"
                | "ready"
                | "exec"
                | "exec-server"
                | "engines"
                | "microvm"
                | "checkpoint"
                | "microvm-checkpoint"
                | "ab"
                | "image"
        )
    }) {
        // A check of some rows alone; the results file and table are left as they are.
        match only {
            "overlay" => {
                let large = std::env::var("PADDOCK_BENCH_QUICK").as_deref() != Ok("1");
                let files = if large { 50_000 } else { 5_000 };
                eprintln!("generating the {files}-file fixture repository");
                let repo = FixtureRepo::with_files(files, 2_000);
                overlay_create(&repo, &format!("{files} files"), &mut rows);
            }
            "ready" => {
                for files in [1, 5_000, 50_000] {
                    eprintln!("generating the {files}-file fixture repository");
                    let repo = FixtureRepo::with_files(files, 2_000);
                    job_ready(&repo, &format!("{files} files"), &mut rows);
                    for row in &rows {
                        eprintln!("{}", row.markdown());
                    }
                }
            }
            "exec" => {
                for files in [1, 5_000] {
                    eprintln!("generating the {files}-file fixture repository");
                    let repo = FixtureRepo::with_files(files, 2_000);
                    exec_cost(&repo, &format!("{files} files"), &mut rows);
                    for row in &rows {
                        eprintln!("{}", row.markdown());
                    }
                }
            }
            "exec-server" => {
                eprintln!("generating the 5,000-file fixture repository");
                let repo = FixtureRepo::with_files(5_000, 2_000);
                resident::rows(&repo, "5,000 files", &mut rows);
            }
            "egress" => egress_overhead(&mut rows),
            "secrets" => secrets::secret_host_overhead(&mut rows),
            "queue" => queue_drain(&mut rows),
            "engines" => {
                let repo = FixtureRepo::with_files(5_000, 2_000);
                engines::engine_rows(&repo, "5,000 files", &mut rows);
            }
            "microvm" => microvm::rows(&FixtureRepo::new(), &mut rows),
            "image" => image::rows(&FixtureRepo::new(), &mut rows),
            "microvm-checkpoint" => microvm::checkpoint_rows(&FixtureRepo::new(), &mut rows),
            "checkpoint" => {
                let files = if quick { 5_000 } else { 50_000 };
                eprintln!("generating the {files}-file fixture repository");
                let repo = FixtureRepo::with_files(files, 2_000);
                checkpoint::rows(&repo, &format!("{files} files"), &mut rows);
            }
            "ab" => {
                let against = std::env::var("PADDOCK_BENCH_AGAINST")
                    .expect("PADDOCK_BENCH_AGAINST names the other paddock binary");
                eprintln!("generating the 5,000-file fixture repository");
                let repo = FixtureRepo::with_files(5_000, 2_000);
                ab::rows(Path::new(&against), &repo, "5,000 files", &mut rows);
            }
            _ => ls_with_marks(&mut rows),
        }
        for row in &rows {
            println!("{}\n  {}", row.markdown(), row.note);
        }
        return;
    }
    eprintln!("generating the 5,000-file fixture repository");
    let small = FixtureRepo::with_files(5_000, 2_000);
    let large = (!quick).then(|| {
        eprintln!("generating the 50,000-file fixture repository");
        FixtureRepo::with_files(50_000, 2_000)
    });
    let extra = std::env::var("PADDOCK_BENCH_REPO").ok().map(PathBuf::from);
    let mut repos: Vec<(&FixtureRepo, String)> = vec![(&small, "5,000 files".into())];
    if let Some(large) = &large {
        repos.push((large, "50,000 files".into()));
    }
    let docker = docker_ok();
    for (repo, label) in &repos {
        eprintln!("process runtime create, {label}");
        process_create(repo, label, &mut rows);
        eprintln!("overlay create and disk, {label}");
        overlay_create(repo, label, &mut rows);
        if docker {
            eprintln!("cold job ready, {label}");
            cold_ready_docker(repo, label, &mut rows);
            eprintln!("job ready: cold worktree, cold overlay, warm pool, {label}");
            job_ready(repo, label, &mut rows);
            eprintln!("exec sync cost, {label}");
            exec_sync_cost(repo, label, &mut rows);
            eprintln!("exec against docker exec, warm pool first exec, {label}");
            exec_cost(repo, label, &mut rows);
            eprintln!("remote engine: create to ready, exec, {label}");
            engines::engine_rows(repo, label, &mut rows);
            if label.starts_with("50,000") {
                eprintln!("checkpoint, restore, fork, pause, resume, {label}");
                checkpoint::rows(repo, label, &mut rows);
            }
        }
    }
    if let Some(path) = extra {
        eprintln!("your repository: {}", path.display());
        let copy = FixtureRepo::clone_of(&path);
        process_create(&copy, &format!("{}", path.display()), &mut rows);
    }
    if docker {
        eprintln!("egress proxy");
        egress_overhead(&mut rows);
        eprintln!("egress proxy for a secret host (TLS terminated)");
        secrets::secret_host_overhead(&mut rows);
    }
    if docker && microvm::available() {
        eprintln!("microVM create to ready and exec round trip");
        microvm::rows(&small, &mut rows);
    }
    eprintln!("16 parallel creates");
    parallel_creates(&small, &mut rows);
    eprintln!("ls and sweep with 200 jobs");
    ls_and_sweep(&mut rows);
    eprintln!("ls with merged and conflicts marks");
    ls_with_marks(&mut rows);
    eprintln!("daemon memory");
    daemon_memory(&mut rows);
    if docker {
        eprintln!("100 queued runs");
        queue_drain(&mut rows);
    }

    let results = json!({
        "machine": machine(),
        "command": "cargo bench --bench paddock",
        "runs": RUNS,
        "date": chrono::Utc::now().to_rfc3339(),
        "results": rows.iter().map(Row::json).collect::<Vec<_>>(),
    });
    let out_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench");
    std::fs::create_dir_all(&out_dir).unwrap();
    std::fs::write(
        out_dir.join("results.json"),
        serde_json::to_vec_pretty(&results).unwrap(),
    )
    .unwrap();
    let mut table = String::from(
        "| measurement | paddock median / p95 | baseline median / p95 | ratio | target | |\n|---|---|---|---|---|---|\n",
    );
    for row in &rows {
        table.push_str(&row.markdown());
        table.push('\n');
    }
    table.push_str("\nNotes:\n\n");
    for row in rows.iter().filter(|r| !r.note.is_empty()) {
        table.push_str(&format!("- {}: {}\n", row.name, row.note));
    }
    println!("{table}");
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/BENCHMARKS.md");
    if let Ok(text) = std::fs::read_to_string(&doc)
        && let (Some(start), Some(end)) = (
            text.find("<!-- results -->"),
            text.find("<!-- /results -->"),
        )
    {
        let updated = format!(
            "{}<!-- results -->\nMachine: {}. Date: {}. Runs per measurement: {RUNS} (5 rounds for the parallel and 3 for the sweep row), paddock and baseline interleaved.\n\n{table}{}",
            &text[..start],
            results["machine"].as_str().unwrap_or_default(),
            results["date"].as_str().unwrap_or_default(),
            &text[end..]
        );
        std::fs::write(&doc, updated).unwrap();
    }
}
