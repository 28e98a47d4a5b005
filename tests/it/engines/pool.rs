//! The warm pool on a remote engine: `pool fill --engine` starts the slots there (hardened
//! containers with volumes of their own, no host path), a create on that engine claims one
//! (its fill writes the slot's volumes) and is ready sooner than a cold remote create, the
//! claimed job commits and syncs, `rm` keeps its work and takes the slot's container and
//! volumes, `pool drain` leaves no slot container or volume there, a stranger's look-alike
//! is untouched, slots on an engine that does not answer are left and reported, and the
//! sweep reaps a slot whose container went away; `engine: auto` counts waiting slots; a
//! profile whose `engine:` names the engine fills and refills its pool there.

use std::time::Instant;

use serde_json::Value;

use super::{available, engine, home_with};
use crate::fixtures::{FixtureRepo, TestHome, test_image, text};

/// A repository whose default profile keeps a pool of `size` containers of the test image.
fn pooled_repo(size: u32) -> FixtureRepo {
    let repo = FixtureRepo::new();
    repo.write(
        ".paddock.yaml",
        &format!(
            "profiles:\n  default:\n    image: {}\n    memory: 512m\n    pool: {{size: {size}}}\n",
            test_image()
        ),
    );
    repo.commit_all("a pooled profile");
    repo
}

fn slots(home: &TestHome) -> Vec<Value> {
    home.json(&["pool", "ls", "--json"])
        .as_array()
        .expect("a list")
        .clone()
}

/// `pool fill --engine eng1` of `repo`'s pool: its report.
fn fill_eng1(home: &TestHome, repo: &FixtureRepo) -> Value {
    let path = repo.path().display().to_string();
    home.json(&[
        "pool", "fill", "--repo", &path, "--engine", "eng1", "--json",
    ])
}

/// Creates a job on eng1; its create object and how long the create took (ms).
fn timed_create(home: &TestHome, repo: &FixtureRepo, task: &str) -> (Value, u128) {
    let started = Instant::now();
    let job = home.create(repo, &["--engine", "eng1", "--task", task]);
    (job, started.elapsed().as_millis())
}

fn median(mut values: Vec<u128>) -> u128 {
    values.sort_unstable();
    values[values.len() / 2]
}

/// The names of eng1's containers (all, running or not) and volumes carrying `label`.
fn labelled_on_engine(label: &str) -> (Vec<String>, Vec<String>) {
    let engine = engine();
    let filter = format!("label={label}");
    let lines = |out: String| out.lines().map(str::to_string).collect::<Vec<_>>();
    (
        lines(engine.docker_ok(&["ps", "-a", "--filter", &filter, "--format", "{{.Names}}"])),
        lines(engine.docker_ok(&["volume", "ls", "-q", "--filter", &filter])),
    )
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn a_pool_on_a_remote_engine_is_claimed_faster_keeps_work_and_drains_clean() {
    if !available("a_pool_on_a_remote_engine_is_claimed_faster_keeps_work_and_drains_clean") {
        return;
    }
    let engine = engine();
    let repo = pooled_repo(2);
    let home = home_with(engine)
        .env("PADDOCK_POOL_REFILL", "off")
        .trusting(repo.path());

    // Cold: the pool is empty, so each create starts cold and says why. The first one fills
    // the engine's object cache (not measured: a warm claim finds it filled).
    let (first, _) = timed_create(&home, &repo, "prime");
    assert_eq!(first["pool"]["start"], "cold", "{first}");
    assert!(
        text(&first["pool"], "reason").contains("no ready container"),
        "{first}"
    );
    home.ok(&["rm", &text(&first, "id"), "--force"]);
    let mut cold = Vec::new();
    for n in 0..3 {
        let (job, ms) = timed_create(&home, &repo, &format!("cold{n}"));
        assert_eq!(job["pool"]["start"], "cold", "{job}");
        cold.push(ms);
        home.ok(&["rm", &text(&job, "id"), "--force"]);
    }

    // A stranger's look-alike on the engine: another install's pool container and volume.
    let stranger = format!("stranger-pool-{}", std::process::id());
    let _ = engine.docker(&["rm", "-f", &stranger]);
    let _ = engine.docker(&["volume", "rm", &format!("{stranger}-workspace")]);
    engine.docker_ok(&[
        "volume",
        "create",
        "--label",
        "dev.paddock.home=another-install",
        "--label",
        "dev.paddock.job=pool-0123abcd",
        &format!("{stranger}-workspace"),
    ]);
    engine.docker_ok(&[
        "run",
        "-d",
        "--name",
        &stranger,
        "--label",
        "dev.paddock.home=another-install",
        "--label",
        "dev.paddock.job=pool-0123abcd",
        "--label",
        "dev.paddock.role=pool",
        &test_image(),
        "sleep",
        "600",
    ]);

    // Fill on eng1: the slots run there (seen with the engine's API), not on the host.
    let filled = fill_eng1(&home, &repo);
    assert_eq!(
        filled["started"].as_array().map(Vec::len),
        Some(2),
        "{filled}"
    );
    let listed = slots(&home);
    assert_eq!(listed.len(), 2, "{listed:?}");
    for slot in &listed {
        assert_eq!(slot["engine"], "eng1", "{slot}");
        assert_eq!(slot["state"], "ready", "{slot}");
        let name = text(slot, "container");
        let state = engine.docker_ok(&[
            "inspect",
            "-f",
            "{{.State.Running}} {{.Config.User}} {{.HostConfig.ReadonlyRootfs}} {{json .HostConfig.CapDrop}} {{index .Config.Labels \"dev.paddock.role\"}}",
            &name,
        ]);
        assert_eq!(state.trim(), "true 1000:1000 true [\"ALL\"] pool", "{name}");
        // Its fill helper waits beside it, with no network.
        let helper = engine.docker_ok(&[
            "inspect",
            "-f",
            "{{.State.Running}} {{.HostConfig.NetworkMode}}",
            &format!("{name}-fill"),
        ]);
        assert_eq!(helper.trim(), "true none", "{name}-fill");
        let mounts = engine.docker_ok(&["inspect", "-f", "{{json .Mounts}}", &name]);
        let mounts: Value = serde_json::from_str(&mounts).expect("mounts json");
        assert!(
            mounts
                .as_array()
                .is_some_and(|m| m.len() == 4 && m.iter().all(|m| m["Type"] == "volume")),
            "volumes only: {mounts}"
        );
        assert!(
            !std::process::Command::new("docker")
                .args(["inspect", &name])
                .output()
                .expect("docker")
                .status
                .success(),
            "no slot container on the local engine"
        );
    }
    let table = home.ok(&["pool", "ls"]);
    assert!(table.contains("eng1"), "{table}");

    // Warm: each create claims a waiting container (refilled between them).
    let mut warm = Vec::new();
    let mut kept = None;
    for n in 0..3 {
        if n > 0 {
            fill_eng1(&home, &repo);
        }
        let waiting: Vec<String> = slots(&home)
            .iter()
            .filter(|s| s["state"] == "ready")
            .map(|s| text(s, "container"))
            .collect();
        let (job, ms) = timed_create(&home, &repo, &format!("warm{n}"));
        assert_eq!(job["pool"]["start"], "warm", "{job}");
        let name = text(&job, "container_name");
        assert!(waiting.contains(&name), "took a waiting container: {name}");
        // The slot's fill helper (root) did the fill and is gone before the job is ready.
        assert!(
            !engine
                .docker(&["inspect", &format!("{name}-fill")])
                .status
                .success()
        );
        warm.push(ms);
        let claimed: Vec<Value> = slots(&home)
            .into_iter()
            .filter(|s| s["state"] == "claimed")
            .collect();
        assert!(
            claimed.iter().any(|s| s["job"] == job["id"]
                && s["container"] == name.as_str()
                && s["engine"] == "eng1"),
            "{claimed:?}"
        );
        if n == 0 {
            kept = Some(job);
        } else {
            home.ok(&["rm", &text(&job, "id"), "--force"]);
        }
    }
    let (cold_ms, warm_ms) = (median(cold), median(warm));
    eprintln!(
        "remote create, median of 3: cold {cold_ms} ms, warm {warm_ms} ms (warm/cold {:.2})",
        warm_ms as f64 / cold_ms as f64
    );
    assert!(warm_ms < cold_ms, "warm {warm_ms} ms, cold {cold_ms} ms");

    // The claimed job works as a cold one: its checkout is there, a commit syncs.
    let job = kept.expect("the first warm job");
    let id = text(&job, "id");
    let container = text(&job, "container_name");
    let branch = text(&job, "branch");
    let listing = home.sh(&id, "cat src/lib.rs && git status --porcelain");
    assert!(listing.contains("pub fn answer"), "{listing}");
    // As a cold job: the agent's uid, the object cache read-only (no object planted for
    // the next job), no other slot's volume in sight.
    let inside = home.sh(
        &id,
        "id -u; touch /paddock-objects/planted 2>/dev/null && echo cache-writable || echo cache-ro; grep -c ' /paddock' /proc/mounts",
    );
    assert_eq!(
        inside.split_whitespace().collect::<Vec<_>>(),
        ["1000", "cache-ro", "3"],
        "{inside}"
    );
    home.sh(
        &id,
        "echo warm > warm.txt && git add warm.txt && git commit -q -m 'from a warm slot'",
    );
    assert_eq!(
        repo.git(&["log", "-1", "--format=%s", &branch]).trim(),
        "from a warm slot"
    );
    let tip = repo.git(&["rev-parse", &branch]);
    // rm keeps the work; the slot's container and volumes go with the job.
    home.ok(&["rm", &id]);
    assert_eq!(repo.git(&["rev-parse", &branch]), tip);
    assert!(!engine.docker(&["inspect", &container]).status.success());
    let volumes = engine.docker_ok(&["volume", "ls", "-q"]);
    assert!(
        !volumes.lines().any(|v| v.starts_with(&container)),
        "{volumes}"
    );

    // Drain: no slot container or volume of this install is left on the engine. (The
    // engine's budget, its CPUs here, holds jobs and waiting slots alike, so the refills
    // above stopped short: fill again first.)
    let refilled = fill_eng1(&home, &repo);
    assert!(
        refilled["started"]
            .as_array()
            .is_some_and(|s| !s.is_empty()),
        "{refilled}"
    );
    let home_id = std::fs::read_to_string(home.root().join("home-id")).expect("home-id");
    let ours = format!("dev.paddock.home={}", home_id.trim());
    let drained = home.json(&["pool", "drain", "--json"]);
    assert!(
        drained["removed"].as_array().is_some_and(|r| !r.is_empty()),
        "{drained}"
    );
    assert!(slots(&home).is_empty());
    let (containers, volumes) = labelled_on_engine(&ours);
    assert!(containers.is_empty(), "{containers:?}");
    assert!(
        volumes.iter().all(|v| v.contains("-objects-")),
        "only the object cache stays: {volumes:?}"
    );
    home.json(&["sweep", "--json"]);
    // The stranger's container and volume are untouched.
    assert_eq!(
        engine
            .docker_ok(&["inspect", "-f", "{{.State.Running}}", &stranger])
            .trim(),
        "true"
    );
    engine.docker_ok(&["volume", "inspect", &format!("{stranger}-workspace")]);
    let _ = engine.docker(&["rm", "-f", &stranger]);
    let _ = engine.docker(&["volume", "rm", &format!("{stranger}-workspace")]);
}

/// Slots on an engine that stops answering are left and reported by `pool drain` and the
/// sweep, still listed, and removed once it answers again. The engine is made unreachable
/// by pointing the user config at a listener of this test that drops every connection.
#[test]
fn slots_on_an_engine_that_does_not_answer_are_left_and_reported() {
    if !available("slots_on_an_engine_that_does_not_answer_are_left_and_reported") {
        return;
    }
    let engine = engine();
    let repo = pooled_repo(1);
    let home = home_with(engine)
        .env("PADDOCK_POOL_REFILL", "off")
        .trusting(repo.path());
    let filled = fill_eng1(&home, &repo);
    assert_eq!(
        filled["started"].as_array().map(Vec::len),
        Some(1),
        "{filled}"
    );
    let container = text(&slots(&home)[0], "container");

    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            drop(stream);
        }
    });
    let config = home.dir.path().join("config/paddock/config.yaml");
    let original = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        original.replace(&engine.host, &format!("tcp://127.0.0.1:{port}")),
    )
    .expect("write config");

    let drained = home.json(&["pool", "drain", "--json"]);
    let left = drained["left"].as_array().cloned().unwrap_or_default();
    assert_eq!(left.len(), 1, "{drained}");
    assert!(
        left[0].as_str().is_some_and(|l| l.contains("eng1")),
        "{drained}"
    );
    assert_eq!(slots(&home).len(), 1, "not forgotten");
    let swept: Value = home.json(&["sweep", "--json"]);
    let kept = swept["kept"].as_array().cloned().unwrap_or_default();
    assert!(
        kept.iter()
            .any(|k| k["kind"] == "pool" && text(k, "reason").contains("does not answer")),
        "{swept}"
    );
    assert!(engine.docker(&["inspect", &container]).status.success());

    // Back: the sweep finishes the removal the drain began.
    std::fs::write(&config, &original).expect("write config");
    home.json(&["sweep", "--json"]);
    assert!(slots(&home).is_empty(), "{:?}", slots(&home));
    assert!(!engine.docker(&["inspect", &container]).status.success());
    let volumes = engine.docker_ok(&["volume", "ls", "-q"]);
    assert!(
        !volumes.lines().any(|v| v.starts_with(&container)),
        "{volumes}"
    );
}

/// A waiting slot whose container went away on the engine is reaped by the sweep, its fill
/// helper and volumes with it (its helper, still running, does not pass for the slot).
#[test]
fn the_sweep_reaps_a_remote_slot_whose_container_is_gone() {
    if !available("the_sweep_reaps_a_remote_slot_whose_container_is_gone") {
        return;
    }
    let engine = engine();
    let repo = pooled_repo(1);
    let home = home_with(engine)
        .env("PADDOCK_POOL_REFILL", "off")
        .trusting(repo.path());
    let filled = fill_eng1(&home, &repo);
    assert_eq!(
        filled["started"].as_array().map(Vec::len),
        Some(1),
        "{filled}"
    );
    let container = text(&slots(&home)[0], "container");
    engine.docker_ok(&["rm", "-f", &container]);
    let swept: Value = home.json(&["sweep", "--json"]);
    let removed = swept["removed"].as_array().cloned().unwrap_or_default();
    assert!(
        removed
            .iter()
            .any(|r| r["kind"] == "pool" && text(r, "reason").contains("gone or stopped")),
        "{swept}"
    );
    assert!(slots(&home).is_empty());
    assert!(
        !engine
            .docker(&["inspect", &format!("{container}-fill")])
            .status
            .success()
    );
    let volumes = engine.docker_ok(&["volume", "ls", "-q"]);
    assert!(
        !volumes.lines().any(|v| v.starts_with(&container)),
        "{volumes}"
    );
}

/// `engine: auto` counts waiting slots in an engine's budget: a fill stops when the engine is
/// full, and a create of the slots' repository still goes there (it claims one) rather than
/// waiting for the place its own slot holds.
#[test]
fn auto_placement_counts_waiting_slots_and_a_create_claims_one() {
    if !available("auto_placement_counts_waiting_slots_and_a_create_claims_one") {
        return;
    }
    let engine = engine();
    let repo = pooled_repo(2);
    let home = home_with(engine)
        .env("PADDOCK_POOL_REFILL", "off")
        .trusting(repo.path());
    let config = home.dir.path().join("config/paddock/config.yaml");
    let mut text_of = std::fs::read_to_string(&config).expect("config");
    text_of.push_str("    jobs: 1\n");
    std::fs::write(&config, text_of).expect("write config");
    let path = repo.path().display().to_string();
    let filled = fill_eng1(&home, &repo);
    assert_eq!(
        filled["started"].as_array().map(Vec::len),
        Some(1),
        "{filled}"
    );
    assert!(
        filled["note"]
            .as_str()
            .is_some_and(|n| n.contains("holds 1 of 1")),
        "{filled}"
    );
    // A local job of the same profile does not take the remote slot.
    let local = home.create(&repo, &["--engine", "local", "--task", "local"]);
    assert!(local["engine"].is_null(), "{local}");
    assert_eq!(local["pool"]["start"], "cold", "{local}");
    home.ok(&["rm", &text(&local, "id"), "--force"]);
    assert_eq!(slots(&home)[0]["state"], "ready");
    let job = home.create(&repo, &["--engine", "auto", "--no-wait", "--task", "auto"]);
    assert_eq!(job["engine"], "eng1", "{job}");
    assert_eq!(job["pool"]["start"], "warm", "{job}");
    // Full now (the job holds the place): the next create does not fit.
    let other = home.run(&[
        "create",
        "--repo",
        &path,
        "--engine",
        "auto",
        "--no-wait",
        "--task",
        "full",
    ]);
    assert!(!other.status.success(), "a second job does not fit");
    home.ok(&["rm", &text(&job, "id"), "--force"]);
}

/// A profile whose `engine:` names a remote engine keeps its pool there: `pool fill` needs
/// no `--engine`, and a claim's background refill starts the next slot on that engine.
#[test]
fn a_profile_on_an_engine_fills_and_refills_its_pool_there() {
    if !available("a_profile_on_an_engine_fills_and_refills_its_pool_there") {
        return;
    }
    let engine = engine();
    let repo = FixtureRepo::new();
    let home = home_with(engine);
    let config = home.dir.path().join("config/paddock/config.yaml");
    let mut text_of = std::fs::read_to_string(&config).expect("config");
    text_of.push_str(&format!(
        "profiles:\n  remote:\n    engine: eng1\n    image: {}\n    memory: 512m\n    pool: {{size: 1}}\n",
        test_image()
    ));
    std::fs::write(&config, text_of).expect("write config");
    let path = repo.path().display().to_string();
    let filled = home.json(&[
        "pool",
        "fill",
        "--repo",
        &path,
        "--profile",
        "remote",
        "--json",
    ]);
    assert_eq!(
        filled["started"].as_array().map(Vec::len),
        Some(1),
        "{filled}"
    );
    assert_eq!(slots(&home)[0]["engine"], "eng1");
    let job = home.create(&repo, &["--profile", "remote", "--task", "profiled"]);
    assert_eq!(job["engine"], "eng1", "{job}");
    assert_eq!(job["pool"]["start"], "warm", "{job}");
    // The background refill (a detached `pool fill --engine eng1`) starts the next slot.
    let deadline = Instant::now() + std::time::Duration::from_secs(120);
    let refilled = loop {
        let ready: Vec<Value> = slots(&home)
            .into_iter()
            .filter(|s| s["state"] == "ready")
            .collect();
        if !ready.is_empty() || Instant::now() > deadline {
            break ready;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    assert_eq!(refilled.len(), 1, "{:?}", slots(&home));
    assert_eq!(refilled[0]["engine"], "eng1");
    assert!(
        engine
            .docker(&["inspect", &text(&refilled[0], "container")])
            .status
            .success()
    );
    home.ok(&["rm", &text(&job, "id"), "--force"]);
    home.json(&["pool", "drain", "--json"]);
    assert!(slots(&home).is_empty());
}
