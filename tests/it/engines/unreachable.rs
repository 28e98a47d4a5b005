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
