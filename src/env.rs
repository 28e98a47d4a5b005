//! Where paddock reads its environment: a trait, so the config loader and the state root can
//! be tested with a map instead of the process environment.

use std::collections::BTreeMap;

/// What the loader reads besides files: the environment, passed in so tests can control it.
pub trait EnvLookup {
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
pub struct ProcessEnv;

impl EnvLookup for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl EnvLookup for BTreeMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

/// A test-only failpoint: whether `PADDOCK_FAIL_AT` names `point`, where the caller then
/// fails as if that step had (so tests can prove a failed step is rolled back). Costs one
/// environment lookup.
pub fn fail_at(point: &str) -> bool {
    std::env::var("PADDOCK_FAIL_AT").as_deref() == Ok(point)
}

/// A test-only switch: `PADDOCK_TEST_NO_BUILD_CELL=1` makes the engine look as if it could
/// not hold a build's cell (cgroup v2, the systemd driver), which this project's own test
/// machine cannot otherwise show.
pub fn no_build_cell() -> bool {
    std::env::var("PADDOCK_TEST_NO_BUILD_CELL").as_deref() == Ok("1")
}
