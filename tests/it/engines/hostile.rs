//! The hostile-agent attack (`hostile.rs`) in a job on the remote engine: the user's
//! repository, its refs, config, hooks and owners are untouched, nothing planted runs on the
//! host, and another job of the same repository on that engine (sharing its object cache)
//! keeps working, as does the next job made there.

use super::{available, create_on, engine, home_with};
use crate::fixtures::FixtureRepo;

#[test]
fn a_hostile_agent_on_a_remote_engine_cannot_touch_the_repository_or_other_jobs() {
    if !available("a_hostile_agent_on_a_remote_engine") {
        return;
    }
    attack_on_the_engine("docker");
}

/// The same under gVisor on the remote engine (registered there as on the local one).
#[test]
fn a_hostile_agent_under_gvisor_on_a_remote_engine_cannot_touch_the_repository() {
    if !available("a_hostile_agent_under_gvisor_on_a_remote_engine") {
        return;
    }
    attack_on_the_engine("runsc");
}

fn attack_on_the_engine(runtime: &str) {
    let engine = engine();
    let repo = FixtureRepo::new();
    let home = home_with(engine);
    let bystander = create_on(&home, engine, &repo, &["--task", "bystander"]);
    crate::hostile::attack_in_home(&home, &repo, &["--engine", engine.name], runtime, false);

    // The other job's files and history, which borrow the engine's object cache, hold.
    let check = home.sh(
        &bystander,
        "git fsck --no-dangling --no-progress && git status --porcelain && cat src/lib.rs",
    );
    assert!(check.contains("pub fn answer"), "{check}");
    let next = create_on(&home, engine, &repo, &["--task", "after"]);
    let log = home.sh(&next, "git log --oneline | wc -l && cat src/lib.rs");
    assert!(log.contains("pub fn answer"), "{log}");
    home.ok(&["rm", &bystander, "--force"]);
    home.ok(&["rm", &next, "--force"]);
}
