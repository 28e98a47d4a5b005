//! A remote engine that stops answering mid-job: its job shows `unreachable`, the sweep
//! removes nothing (not even with every staleness limit at zero), and once the engine is
//! back the next exec works and its commit reaches the user's branch. An orphan on an engine
//! that answers is reaped once its work is saved.

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
/// the local engine, once its work is saved: its commit and its uncommitted file come out of
/// its (stopped) container's volumes into the wip store, and then its volumes go; an orphan
/// whose work cannot be saved keeps its volumes. A stranger's container and
/// volume on the engine, and another install's, are untouched.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn the_sweep_saves_an_orphan_on_a_remote_engine_then_reaps_it_and_nothing_else() {
    if !available("the_sweep_saves_an_orphan_on_a_remote_engine_then_reaps_it_and_nothing_else") {
        return;
    }
    let engine = super::engine();
    let repo = FixtureRepo::new();
    let home = home_with(engine);
    let id = create_on(&home, engine, &repo, &["--task", "orphan"]);
    home.sh(
        &id,
        "echo kept > kept.txt && git add kept.txt && git commit -q -m orphan-commit && echo agent work > unsaved.txt",
    );
    let container = home.json(&["show", &id, "--json"])["job"]["container_name"]
        .as_str()
        .expect("a container")
        .to_string();
    let image = crate::fixtures::test_image();
    let pid = std::process::id();
    let stranger = format!("stranger-{pid}");
    let other_install = format!("other-install-{pid}");
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
    let stranger_volume = format!("stranger-{pid}-ws");
    let other_volume = format!("other-install-{pid}-ws");
    engine.docker_ok(&["volume", "create", &stranger_volume]);
    engine.docker_ok(&[
        "volume",
        "create",
        "--label",
        "dev.paddock.home=0000000000000000",
        "--label",
        &format!("dev.paddock.job={id}"),
        &other_volume,
    ]);
    // A second orphan whose work cannot be saved (its repository unknown here): its
    // volumes stay, and the report says why.
    let lost_repo = FixtureRepo::new();
    let lost = create_on(&home, engine, &lost_repo, &["--task", "lost"]);
    let lost_container = home.json(&["show", &lost, "--json"])["job"]["container_name"]
        .as_str()
        .expect("a container")
        .to_string();
    let lost_path = home.root().join("jobs").join(format!("{lost}.json"));
    let lost_record: Value =
        serde_json::from_str(&std::fs::read_to_string(&lost_path).expect("the record"))
            .expect("a record");
    let lost_key = lost_record["repo_key"].as_str().expect("a repo key");
    std::fs::remove_file(home.root().join("repos").join(lost_key)).expect("forget the repo");
    std::fs::remove_file(&lost_path).expect("rm record");
    let record_path = home.root().join("jobs").join(format!("{id}.json"));
    let record: Value =
        serde_json::from_str(&std::fs::read_to_string(&record_path).expect("the record"))
            .expect("a record");
    let key = record["repo_key"].as_str().expect("a repo key").to_string();
    std::fs::remove_file(&record_path).expect("rm record");
    // Stopped, as a crash leaves it: its sync runs in a throwaway container beside it.
    engine.docker_ok(&["stop", "-t", "1", &container]);

    let swept: Value = home.json(&["sweep", "--json"]);
    let removed = swept["removed"].as_array().expect("removed");
    assert!(
        removed
            .iter()
            .any(|r| r["kind"] == "container" && r["name"] == container),
        "{swept}"
    );
    assert!(!engine.docker(&["inspect", &container]).status.success());
    // Its work was saved before its volumes went: the commit and the uncommitted file.
    let store = home.root().join("wip").join(format!("{key}.git"));
    let wip = format!("refs/paddock/wip/{id}");
    let git = |args: &[&str]| {
        let output = std::process::Command::new("git")
            .arg("--git-dir")
            .arg(&store)
            .args(args)
            .output()
            .expect("git runs");
        assert!(output.status.success(), "git {args:?}: {swept}");
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    };
    assert_eq!(git(&["show", &format!("{wip}:unsaved.txt")]), "agent work");
    assert_eq!(git(&["show", &format!("{wip}:kept.txt")]), "kept");
    assert!(
        git(&["log", "--format=%s", &wip]).contains("orphan-commit"),
        "{swept}"
    );
    let saved = removed
        .iter()
        .find(|r| r["kind"] == "volume")
        .unwrap_or_else(|| panic!("its volumes removed: {swept}"));
    assert!(
        saved["name"]
            .as_str()
            .is_some_and(|n| n.contains(&format!("{container}-ws"))),
        "{swept}"
    );
    assert!(
        saved["reason"]
            .as_str()
            .is_some_and(|r| r.contains(&format!("git fetch {}", store.display()))),
        "{swept}"
    );
    let volumes = engine.docker_ok(&["volume", "ls", "-q"]);
    for kind in ["ws", "git", "outbox"] {
        assert!(
            !volumes.contains(&format!("{container}-{kind}")),
            "{volumes}"
        );
    }
    let kept = swept["kept"].as_array().expect("kept");
    assert!(
        kept.iter().any(|k| k["kind"] == "volume"
            && k["name"]
                .as_str()
                .is_some_and(|n| n.contains(&format!("{lost_container}-ws")))
            && k["reason"]
                .as_str()
                .is_some_and(|r| r.contains("could not be saved"))),
        "{swept}"
    );
    assert!(
        volumes.contains(&format!("{lost_container}-ws")),
        "{volumes}"
    );
    assert!(volumes.contains(&stranger_volume), "{volumes}");
    assert!(volumes.contains(&other_volume), "{volumes}");
    for name in [&stranger, &other_install] {
        let running = engine.docker_ok(&["inspect", "-f", "{{.State.Running}}", name]);
        assert_eq!(running.trim(), "true", "{name} untouched");
        engine.docker_ok(&["rm", "-f", name]);
    }
    for kind in ["ws", "git", "outbox"] {
        let _ = engine.docker(&["volume", "rm", &format!("{lost_container}-{kind}")]);
    }
    for name in [&stranger_volume, &other_volume] {
        engine.docker_ok(&["volume", "rm", name]);
    }
}
