//! The microVM runtime as people run paddock without root: uid 4243, no `PADDOCK_HOME`, a
//! 0700 home. The runtime needs root (virtiofsd, the read-only shares, the host cgroup), so
//! a create asking for it is refused at once with that reason, and leaves nothing: no
//! record, no branch, no process; `doctor` says the same before anyone tries.

use crate::default_paths::{Machine, Who};

#[test]
fn an_unprivileged_user_is_told_the_microvm_runtime_needs_root_and_nothing_is_left() {
    if !crate::fixtures::microvm_available(
        "an_unprivileged_user_is_told_the_microvm_runtime_needs_root_and_nothing_is_left",
    ) {
        return;
    }
    let machine = Machine::new(Who::User);
    let refused = machine.run(&["create", "--runtime", "microvm", "--task", "vm", "--json"]);
    assert!(!refused.status.success(), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("needs root"), "{said}");
    assert_eq!(machine.repo_git(&["branch", "--list", "agent/*"]), "");
    let jobs = machine.state_root().join("jobs");
    let records = std::fs::read_dir(&jobs).map_or(0, Iterator::count);
    assert_eq!(records, 0, "no record in {}", jobs.display());

    let doctor = machine.run(&["doctor", "--json"]);
    let checks: serde_json::Value = serde_json::from_slice(&doctor.stdout).expect("doctor json");
    let row = checks
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"].as_str().is_some_and(|n| n.contains("microvm")))
        .unwrap_or_else(|| panic!("a microvm row in {checks}"))
        .clone();
    assert_ne!(row["status"], "ok", "{row}");
    assert!(
        row["detail"].as_str().is_some_and(|d| d.contains("root")),
        "{row}"
    );
}
