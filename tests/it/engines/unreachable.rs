//! A remote engine that stops answering mid-job: its job shows `unreachable`, the sweep
//! removes nothing (not even with every staleness limit at zero), and once the engine is
//! back the next exec works and its commit reaches the user's branch.

use serde_json::Value;

use super::{Engine, available, create_on, home_with};
use crate::fixtures::FixtureRepo;

#[test]
fn a_job_whose_engine_stops_is_unreachable_kept_and_recovers() {
    if !available("a_job_whose_engine_stops_is_unreachable_kept_and_recovers") {
        return;
    }
    // An engine of this test's own: it is stopped and started again.
    let engine = Engine::start("eng2", 72);
    let repo = FixtureRepo::new();
    let home = home_with(&engine);
    let id = create_on(&home, &engine, &repo, &["--task", "away"]);
    home.sh(
        &id,
        "echo one > one.txt && git add one.txt && git commit -q -m one",
    );
    let branch = "agent/agent/away".to_string();
    assert_eq!(repo.git(&["log", "-1", "--format=%s", &branch]), "one");

    Engine::script(engine.name, 72, &engine.dir, "stop");
    let listed: Value = home.json(&["ls", "--json"]);
    let job = &listed.as_array().expect("a list")[0];
    assert_eq!(job["engine_status"], "unreachable", "{listed}");
    let table = home.ok(&["ls"]);
    assert!(table.contains("unreachable"), "{table}");
    let swept: Value = home.json(&[
        "sweep",
        "--json",
        "--idle",
        "0s",
        "--keep-finished",
        "0s",
        "--max-age",
        "1s",
    ]);
    assert!(
        swept["removed"].as_array().is_none_or(Vec::is_empty),
        "{swept}"
    );
    assert!(
        home.root().join("jobs").join(format!("{id}.json")).exists(),
        "the record stays"
    );
    assert_eq!(repo.git(&["log", "-1", "--format=%s", &branch]), "one");

    Engine::script(engine.name, 72, &engine.dir, "start");
    home.sh(
        &id,
        "cat one.txt && echo two > two.txt && git add two.txt && git commit -q -m two",
    );
    assert_eq!(repo.git(&["log", "-1", "--format=%s", &branch]), "two");
    let listed: Value = home.json(&["ls", "--json"]);
    assert_eq!(listed[0]["engine_status"], "reachable", "{listed}");
    home.ok(&["rm", &id, "--force"]);
    assert_eq!(repo.git(&["log", "-1", "--format=%s", &branch]), "two");
}

/// A container of this install on the engine whose job has no record is reaped there, as on
/// the local engine; its volumes (the job's files) stay and are named; a stranger's
/// container on the engine, and one of another install, are untouched.
#[test]
fn the_sweep_reaps_an_orphan_on_a_remote_engine_and_nothing_else() {
    if !available("the_sweep_reaps_an_orphan_on_a_remote_engine_and_nothing_else") {
        return;
    }
    let engine = super::engine();
    let repo = FixtureRepo::new();
    let home = home_with(engine);
    let id = create_on(&home, engine, &repo, &["--task", "orphan"]);
    let container = home.json(&["show", &id, "--json"])["job"]["container_name"]
        .as_str()
        .expect("a container")
        .to_string();
    let image = crate::fixtures::test_image();
    let stranger = format!("stranger-{}", std::process::id());
    let other_install = format!("other-install-{}", std::process::id());
    engine.docker_ok(&["run", "-d", "--name", &stranger, &image, "sleep", "600"]);
    engine.docker_ok(&[
        "run",
        "-d",
        "--name",
        &other_install,
        "--label",
        "dev.paddock.home=0000000000000000",
        "--label",
        "dev.paddock.job=orphan",
        "--label",
        "dev.paddock.role=job",
        &image,
        "sleep",
        "600",
    ]);
    std::fs::remove_file(home.root().join("jobs").join(format!("{id}.json"))).expect("rm record");

    let swept: Value = home.json(&["sweep", "--json"]);
    let removed = swept["removed"].as_array().expect("removed");
    assert!(
        removed
            .iter()
            .any(|r| r["kind"] == "container" && r["name"] == container),
        "{swept}"
    );
    assert!(!engine.docker(&["inspect", &container]).status.success());
    let kept = swept["kept"].as_array().expect("kept");
    assert!(
        kept.iter().any(|k| k["kind"] == "volume"
            && k["name"]
                .as_str()
                .is_some_and(|n| n.contains(&format!("{container}-ws")))),
        "{swept}"
    );
    let volumes = engine.docker_ok(&["volume", "ls", "-q"]);
    assert!(volumes.contains(&format!("{container}-ws")), "{volumes}");
    for name in [&stranger, &other_install] {
        let running = engine.docker_ok(&["inspect", "-f", "{{.State.Running}}", name]);
        assert_eq!(running.trim(), "true", "{name} untouched");
        engine.docker_ok(&["rm", "-f", name]);
    }
    for kind in ["ws", "git", "outbox"] {
        let _ = engine.docker(&["volume", "rm", &format!("{container}-{kind}")]);
    }
}
