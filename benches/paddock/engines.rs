//! Rows for jobs on a remote Docker engine (issue 30) against the same jobs on the local
//! engine: create-to-ready (the create and a first `exec true`) and an exec's overhead
//! (`exec true`), interleaved run by run. The engine is a second `dockerd` on this machine in
//! its own network namespace, reached by TCP with TLS (`tests/it/engines/dockerd.sh`), so
//! the numbers show paddock's cost of the stream in and the TLS API, not a network's. Two
//! more rows put an `allowlist` job on the engine (its sidecar from the proxy image, the
//! range guard there, the policy uploaded; each exec also copies the proxy's log back)
//! against a `none` job on the same engine.
//! `PADDOCK_BENCH_ONLY=engines` runs them alone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use super::fixtures::{FixtureRepo, TestHome, test_image};
use super::{RUNS, Row, interleaved, median, ms, run};

/// Starts the bench's engine (a no-op when it runs) with the agent image; the user config
/// lines that name it.
fn engine() -> String {
    let dir = PathBuf::from("/tmp/paddock-test-engine-eng1");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/engines/dockerd.sh");
    let host = run(Command::new("sh")
        .arg(script)
        .args(["start", "eng1", "71"])
        .arg(&dir));
    let certs = dir.join("certs");
    let image = test_image();
    let env = format!(
        "DOCKER_HOST={host} DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH={}",
        certs.display()
    );
    run(Command::new("sh").arg("-c").arg(format!(
        "{env} docker image inspect {image} >/dev/null 2>&1 || docker save {image} | {env} docker load -q"
    )));
    format!(
        "engines:\n  eng1:\n    host: \"{host}\"\n    tls:\n      ca: {}\n      cert: {}\n      key: {}\n",
        certs.join("ca.pem").display(),
        certs.join("cert.pem").display(),
        certs.join("key.pem").display()
    )
}

fn create(home: &TestHome, repo: &FixtureRepo, task: &str, remote: bool) -> String {
    create_with(home, repo, task, remote, &[])
}

fn create_with(
    home: &TestHome,
    repo: &FixtureRepo,
    task: &str,
    remote: bool,
    extra: &[&str],
) -> String {
    let repo_path = repo.path().display().to_string();
    let image = test_image();
    let mut args = vec![
        "create", "--repo", &repo_path, "--task", task, "--image", &image, "--json",
    ];
    args.extend_from_slice(extra);
    if remote {
        args.extend(["--engine", "eng1"]);
    } else {
        args.extend(["--runtime", "docker"]);
    }
    let job: serde_json::Value = serde_json::from_str(&run(&mut home.cmd(&args))).expect("json");
    job["id"].as_str().expect("an id").to_string()
}

/// The engine rows, on `repo` (`label` names it).
pub fn engine_rows(repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
    let home = TestHome::new();
    std::fs::write(
        home.dir.path().join("config/paddock/config.yaml"),
        format!(
            "admission:\n  memory: 1024g\n  cpus: 1000\n  max_running_execs: 1000\n{}",
            engine()
        ),
    )
    .expect("config");
    let (mut remote, mut local) = (Vec::new(), Vec::new());
    let ids = std::cell::RefCell::new(Vec::new());
    let sample = |remote_job: bool, i: usize| {
        let started = Instant::now();
        let id = create(&home, repo, &format!("r{i}-{remote_job}"), remote_job);
        run(&mut home.cmd(&["exec", &id, "--", "true"]));
        ids.borrow_mut().push(id);
        ms(started.elapsed())
    };
    interleaved(&mut |i| remote.push(sample(true, i)), &mut |i| {
        local.push(sample(false, i))
    });
    let ids = ids.into_inner();
    let (remote_job, local_job) = (ids[0].clone(), ids[1].clone());
    rows.push(Row {
        name: format!("create to ready, remote engine (TLS) vs local, {label}"),
        paddock: remote,
        baseline: Some(local),
        unit: "ms",
        target: "reported".into(),
        met: true,
        note: "create --engine (volumes filled by a pack through the engine's API; object cache warm after the first run) + exec true, against the same on the local engine".into(),
    });
    let (mut remote, mut local) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        for (id, out) in [(&remote_job, &mut remote), (&local_job, &mut local)] {
            let started = Instant::now();
            run(&mut home.cmd(&["exec", id, "--", "true"]));
            out.push(ms(started.elapsed()));
        }
    }
    rows.push(Row {
        name: format!("exec true, remote engine (TLS) vs local, {label}"),
        note: format!(
            "remote median {:.0} ms vs local {:.0} ms: each remote exec also brings the sync snippet's outbox back through the archive API",
            median(&remote),
            median(&local)
        ),
        paddock: remote,
        baseline: Some(local),
        unit: "ms",
        target: "reported".into(),
        met: true,
    });
    for id in ids {
        let _ = home.cmd(&["rm", &id, "--force"]).output();
    }
    allowlist_rows(&home, repo, label, rows);
}

/// An `allowlist` job on the engine against a `none` one there: create-to-ready and
/// `exec true`. The proxy image is built on the engine first (`image build --engine`).
fn allowlist_rows(home: &TestHome, repo: &FixtureRepo, label: &str, rows: &mut Vec<Row>) {
    let base = "paddock-base:bookworm";
    let dir = "/tmp/paddock-test-engine-eng1/certs";
    let env =
        format!("DOCKER_HOST=tcp://10.231.71.2:2376 DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH={dir}");
    run(Command::new("sh").arg("-c").arg(format!(
        "{env} docker image inspect {base} >/dev/null 2>&1 || docker save {base} | {env} docker load -q"
    )));
    run(&mut home.cmd(&[
        "image",
        "build",
        "--engine",
        "eng1",
        "--base-image",
        base,
        "--tag",
        "paddock-agent-engine-test:bench",
    ]));
    // A destination nothing serves: the rows time the proxy's setup, not a connection.
    let allow = ["--allow", "10.231.71.2:9"];
    let (mut sealed, mut plain) = (Vec::new(), Vec::new());
    let ids = std::cell::RefCell::new(Vec::new());
    let sample = |allowlist: bool, i: usize| {
        let started = Instant::now();
        let extra: &[&str] = if allowlist { &allow } else { &[] };
        let id = create_with(home, repo, &format!("a{i}-{allowlist}"), true, extra);
        run(&mut home.cmd(&["exec", &id, "--", "true"]));
        ids.borrow_mut().push(id);
        ms(started.elapsed())
    };
    interleaved(&mut |i| sealed.push(sample(true, i)), &mut |i| {
        plain.push(sample(false, i))
    });
    let ids = ids.into_inner();
    let (sealed_job, plain_job) = (ids[0].clone(), ids[1].clone());
    rows.push(Row {
        name: format!("create to ready, allowlist vs none on the remote engine, {label}"),
        paddock: sealed,
        baseline: Some(plain),
        unit: "ms",
        target: "reported".into(),
        met: true,
        note: "create --engine --allow (network, range guard container, sidecar from the proxy image, policy and log uploaded) + exec true, against create --engine + exec true".into(),
    });
    let (mut sealed, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        for (id, out) in [(&sealed_job, &mut sealed), (&plain_job, &mut plain)] {
            let started = Instant::now();
            run(&mut home.cmd(&["exec", id, "--", "true"]));
            out.push(ms(started.elapsed()));
        }
    }
    rows.push(Row {
        name: format!("exec true, allowlist vs none on the remote engine, {label}"),
        note: "an allowlist job's exec also stats the proxy's log on the engine (and copies it when it grew)".into(),
        paddock: sealed,
        baseline: Some(plain),
        unit: "ms",
        target: "reported".into(),
        met: true,
    });
    for id in ids {
        let _ = home.cmd(&["rm", &id, "--force"]).output();
    }
}
