//! The microVM rows: a job's create to ready (the VM booted and its agent answering) and an
//! exec's round trip, each against the same under runc, alternated run by run with `sync`
//! before each; and the warm pool's claim: create to ready from a waiting VM, against a cold
//! microVM create and a runc create of the same limits, the three in rotating order. Measured
//! under whatever accelerator the host gives (`auto`; the emulator on hosts whose KVM cannot
//! boot a stock kernel), which the row's note names.

use std::process::Command;
use std::time::Instant;

use super::fixtures::{FixtureRepo, TestHome, test_image};
use super::{Row, median, ms, run, settle};

/// Boots are seconds each under the emulator: fewer runs than the other rows.
const VM_RUNS: usize = 5;

pub fn available() -> bool {
    std::env::var("PADDOCK_SKIP_MICROVM_TESTS").as_deref() != Ok("1")
        && std::path::Path::new("/usr/bin/qemu-system-x86_64").exists()
        && std::path::Path::new("/usr/lib/paddock/microvm/vmlinuz").exists()
}

fn create(home: &TestHome, repo: &FixtureRepo, runtime: &str, id: &str) -> f64 {
    create_with(
        home,
        repo,
        id,
        &["--runtime", runtime, "--image", &test_image()],
    )
}

fn create_with(home: &TestHome, repo: &FixtureRepo, id: &str, flags: &[&str]) -> f64 {
    let repo_path = repo.path().display().to_string();
    let mut args = vec!["create", "--repo", &repo_path, "--id", id];
    args.extend_from_slice(flags);
    settle();
    let started = Instant::now();
    let out = run(&mut home.cmd(&args));
    let elapsed = ms(started.elapsed());
    // A warm create that started cold would measure the wrong thing.
    if flags.contains(&"pooled") {
        let job: serde_json::Value = serde_json::from_str(&out).expect("create --json");
        assert_eq!(job["pool"]["start"], "warm", "{out}");
    }
    elapsed
}

/// The accelerator the microVM assets recorded (`kvm`, or the emulator `tcg`).
fn accelerator() -> String {
    std::fs::read_to_string(std::path::Path::new(concat!(
        env!("CARGO_TARGET_TMPDIR"),
        "/microvm-assets/accel"
    )))
    .unwrap_or_default()
    .lines()
    .nth(1)
    .unwrap_or("?")
    .to_string()
}

fn exec_true(home: &TestHome, id: &str) -> f64 {
    settle();
    let started = Instant::now();
    run(&mut home.cmd(&["exec", id, "--", "true"]));
    ms(started.elapsed())
}

pub fn rows(repo: &FixtureRepo, rows: &mut Vec<Row>) {
    let home = TestHome::new();
    // The root disk is made once per image and binary: before the clock starts.
    let warm_up = create(&home, repo, "microvm", "vm-warmup");
    run(&mut home.cmd(&["rm", "vm-warmup", "--force"]));
    let accel = accelerator();
    let (mut vm_ready, mut runc_ready, mut vm_exec, mut runc_exec) =
        (vec![], vec![], vec![], vec![]);
    for i in 0..VM_RUNS {
        let (vm, runc) = (format!("vm-{i}"), format!("runc-{i}"));
        if i % 2 == 0 {
            vm_ready.push(create(&home, repo, "microvm", &vm));
            runc_ready.push(create(&home, repo, "docker", &runc));
        } else {
            runc_ready.push(create(&home, repo, "docker", &runc));
            vm_ready.push(create(&home, repo, "microvm", &vm));
        }
        for _ in 0..2 {
            if i % 2 == 0 {
                vm_exec.push(exec_true(&home, &vm));
                runc_exec.push(exec_true(&home, &runc));
            } else {
                runc_exec.push(exec_true(&home, &runc));
                vm_exec.push(exec_true(&home, &vm));
            }
        }
        for id in [&vm, &runc] {
            let _ = Command::new(env!("CARGO_BIN_EXE_paddock"))
                .args(["rm", id, "--force"])
                .envs(home.envs.iter().map(|(k, v)| (k, v)))
                .output();
        }
    }
    let machine_note = format!(
        "accelerator here: {accel} (first create, which also made the root disk: {warm_up:.0} ms); baseline: the same under runc"
    );
    rows.push(Row {
        name: format!("microVM create to ready ({accel})"),
        met: median(&vm_ready) < 60_000.0,
        paddock: vm_ready,
        baseline: Some(runc_ready),
        unit: "ms",
        target: "< 60 s under the emulator".into(),
        note: machine_note.clone(),
    });
    rows.push(Row {
        name: format!("microVM exec round trip, `true` ({accel})"),
        met: median(&vm_exec) < 2_000.0,
        paddock: vm_exec,
        baseline: Some(runc_exec),
        unit: "ms",
        target: "< 2 s".into(),
        note: "the exec's own sync included, as for runc".into(),
    });
    pool_rows(&accel, rows);
}

/// A repository whose profile `pooled` keeps one waiting microVM, and `cold` (the same
/// limits, no pool) and `runc` for the baselines.
fn pooled_repo() -> FixtureRepo {
    let repo = FixtureRepo::new();
    let image = test_image();
    let limits = format!("    image: {image}\n    memory: 256m\n    cpus: 1\n");
    repo.write(
        ".paddock.yaml",
        &format!(
            "profiles:\n  pooled:\n    runtime: microvm\n{limits}    pool: {{size: 1}}\n  cold:\n    runtime: microvm\n{limits}  runc:\n    runtime: docker\n{limits}"
        ),
    );
    repo.commit_all("pooled profiles");
    repo
}

fn pool_rows(accel: &str, rows: &mut Vec<Row>) {
    let repo = pooled_repo();
    // The bench fills the pool itself, untimed, before each claim: no background refill
    // competes with the clock.
    let home = TestHome::new().env("PADDOCK_POOL_REFILL", "off");
    let repo_path = repo.path().display().to_string();
    let fill =
        || run(&mut home.cmd(&["pool", "fill", "--repo", &repo_path, "--profile", "pooled"]));
    let (mut warm, mut cold, mut runc) = (vec![], vec![], vec![]);
    let mut waiting_rss_kib = Vec::new();
    for i in 0..VM_RUNS {
        fill();
        waiting_rss_kib.push(waiting_vm_rss_kib(&home.root()));
        let ids = [
            format!("warm-{i}"),
            format!("cold-{i}"),
            format!("runc-{i}"),
        ];
        for turn in 0..3 {
            match (turn + i) % 3 {
                0 => warm.push(create_with(
                    &home,
                    &repo,
                    &ids[0],
                    &["--profile", "pooled", "--json"],
                )),
                1 => cold.push(create_with(&home, &repo, &ids[1], &["--profile", "cold"])),
                _ => runc.push(create_with(&home, &repo, &ids[2], &["--profile", "runc"])),
            }
        }
        for id in &ids {
            run(&mut home.cmd(&["rm", id, "--force"]));
        }
    }
    let _ = home.cmd(&["pool", "drain"]).output();
    let rss = median(&waiting_rss_kib) / 1024.0;
    let note = format!(
        "create to ready from a waiting VM ({accel}); a waiting VM (256 MiB job + 256 MiB guest) held {rss:.0} MiB resident (QEMU + virtiofsd, median)"
    );
    rows.push(Row {
        name: format!("microVM warm-pool claim vs cold microVM create ({accel})"),
        met: median(&warm) < 2_000.0,
        paddock: warm.clone(),
        baseline: Some(cold),
        unit: "ms",
        target: "< 2 s".into(),
        note: note.clone(),
    });
    rows.push(Row {
        name: format!("microVM warm-pool claim vs runc create ({accel})"),
        met: median(&warm) < 2_000.0,
        paddock: warm,
        baseline: Some(runc),
        unit: "ms",
        target: "< 2 s".into(),
        note,
    });
}

/// The resident memory (KiB) of every process naming a pool slot's `vm/` under `root`.
fn waiting_vm_rss_kib(root: &std::path::Path) -> f64 {
    let needle = format!("{}/pool/", root.display());
    let mut total = 0u64;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains(&needle) {
            continue;
        }
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        total += status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0);
    }
    #[expect(clippy::cast_precision_loss, reason = "KiB of a few VMs")]
    let total = total as f64;
    total
}

/// Checkpoint, restore and fork -n 4 of a microVM job under the accelerator the host gives
/// (the emulator here), against the same under runc, alternated run by run: the job changes
/// 10 files before each checkpoint and restore (`PADDOCK_BENCH_ONLY=microvm-checkpoint`).
pub fn checkpoint_rows(repo: &FixtureRepo, rows: &mut Vec<Row>) {
    let home = TestHome::new();
    let image = test_image();
    let accel = accelerator();
    create_with(
        &home,
        repo,
        "vm-cp",
        &["--runtime", "microvm", "--image", &image],
    );
    create_with(
        &home,
        repo,
        "runc-cp",
        &["--runtime", "docker", "--image", &image],
    );
    let change = |id: &str, round: usize| {
        run(&mut home.cmd(&[
            "exec",
            id,
            "--",
            "sh",
            "-c",
            &format!("for i in 0 1 2 3 4 5 6 7 8 9; do echo {round} > changed-$i.txt; done"),
        ]));
    };
    let timed = |args: &[&str]| {
        settle();
        let started = Instant::now();
        run(&mut home.cmd(args));
        ms(started.elapsed())
    };
    let mut samples: [(Vec<f64>, Vec<f64>); 3] = Default::default();
    for i in 0..VM_RUNS {
        let order: [&str; 2] = if i % 2 == 0 {
            ["vm-cp", "runc-cp"]
        } else {
            ["runc-cp", "vm-cp"]
        };
        for id in order {
            let slot = |s: &mut (Vec<f64>, Vec<f64>), v| {
                if id == "vm-cp" {
                    s.0.push(v)
                } else {
                    s.1.push(v)
                }
            };
            change(id, i);
            let name = format!("b{i}");
            slot(&mut samples[0], timed(&["checkpoint", id, "--name", &name]));
            change(id, i + 100);
            slot(&mut samples[1], timed(&["restore", id, &name]));
        }
    }
    // fork -n 4 timed apart: four VM boots each, two runs.
    for i in 0..2 {
        for id in ["vm-cp", "runc-cp"] {
            let started = Instant::now();
            let out =
                run(&mut home.cmd(&["fork", id, "--from", &format!("b{i}"), "-n", "4", "--json"]));
            let took = ms(started.elapsed());
            if id == "vm-cp" {
                samples[2].0.push(took)
            } else {
                samples[2].1.push(took)
            }
            let answer: serde_json::Value = serde_json::from_str(&out).expect("fork --json");
            for job in answer["jobs"].as_array().expect("jobs") {
                run(&mut home.cmd(&["rm", job["id"].as_str().expect("id"), "--force"]));
            }
        }
    }
    for (name, (vm, runc)) in ["checkpoint", "restore", "fork -n 4"]
        .into_iter()
        .zip(samples)
    {
        rows.push(Row {
            name: format!("microVM {name}, small repository ({accel})"),
            met: true,
            paddock: vm,
            baseline: Some(runc),
            unit: "ms",
            target: "reported: under the emulator".into(),
            note: format!("accelerator here: {accel}; baseline: the same under runc; a microVM's checkpoint is taken live"),
        });
    }
    for id in ["vm-cp", "runc-cp"] {
        run(&mut home.cmd(&["rm", id, "--force"]));
    }
}
