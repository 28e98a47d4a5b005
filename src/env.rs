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
