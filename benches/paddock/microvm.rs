//! The microVM rows: a job's create to ready (the VM booted and its agent answering) and an
//! exec's round trip, each against the same under runc, alternated run by run with `sync`
//! before each. Measured under whatever accelerator the host gives (`auto`; the emulator on
//! hosts whose KVM cannot boot a stock kernel), which the row's note names.

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
    let image = test_image();
    let repo_path = repo.path().display().to_string();
    settle();
    let started = Instant::now();
    run(&mut home.cmd(&[
        "create",
        "--repo",
        &repo_path,
        "--runtime",
        runtime,
        "--image",
        &image,
        "--id",
        id,
    ]));
    ms(started.elapsed())
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
    let accel = std::fs::read_to_string(std::path::Path::new(concat!(
        env!("CARGO_TARGET_TMPDIR"),
        "/microvm-assets/accel"
    )))
    .unwrap_or_default()
    .lines()
    .nth(1)
    .unwrap_or("?")
    .to_string();
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
        note: "the warm pool does not serve microVM jobs yet: no claim-time row".into(),
    });
}
