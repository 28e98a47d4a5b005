//! The small enums of the configuration: which runtime, which network, how a timed-out
//! command is stopped, what happens to a removed job's branch. Each parses from and prints
//! as the word a user writes.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::units::UnitError;

/// Which execution runtime a job uses. `runc` and `runsc` are Docker with that OCI runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeChoice {
    Auto,
    Docker,
    Runsc,
    Process,
}

impl FromStr for RuntimeChoice {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Self::Auto),
            "docker" | "runc" => Ok(Self::Docker),
            "runsc" | "gvisor" => Ok(Self::Runsc),
            "process" => Ok(Self::Process),
            _ => Err(UnitError {
                what: "runtime",
                input: s.to_string(),
                expected: "one of auto, docker, runc, runsc, process",
            }),
        }
    }
}

impl fmt::Display for RuntimeChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Auto => "auto",
            Self::Docker => "docker",
            Self::Runsc => "runsc",
            Self::Process => "process",
        })
    }
}

/// Container networking: none unless a profile opts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    None,
    Bridge,
}

impl FromStr for NetworkMode {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Self::None),
            "bridge" => Ok(Self::Bridge),
            _ => Err(UnitError {
                what: "network",
                input: s.to_string(),
                expected: "none or bridge",
            }),
        }
    }
}

impl fmt::Display for NetworkMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Bridge => "bridge",
        })
    }
}

/// How a command that ran out of time is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KillPolicy {
    /// SIGTERM, a grace period, then SIGKILL.
    Graceful,
    /// SIGKILL at once.
    Hard,
}

impl FromStr for KillPolicy {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "graceful" => Ok(Self::Graceful),
            "hard" => Ok(Self::Hard),
            _ => Err(UnitError {
                what: "kill policy",
                input: s.to_string(),
                expected: "graceful or hard",
            }),
        }
    }
}

impl fmt::Display for KillPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Graceful => "graceful",
            Self::Hard => "hard",
        })
    }
}

/// What the sweeper (and `rm`) does with a job's branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BranchPolicy {
    /// Keep it.
    Keep,
    /// Delete it only when it has no commits beyond the base.
    #[default]
    DeleteIfNoCommits,
    /// Delete it (its uncommitted work stays reachable from the wip ref).
    Delete,
}

impl FromStr for BranchPolicy {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "keep" => Ok(Self::Keep),
            "delete-if-no-commits" => Ok(Self::DeleteIfNoCommits),
            "delete" => Ok(Self::Delete),
            _ => Err(UnitError {
                what: "branch policy",
                input: s.to_string(),
                expected: "keep, delete-if-no-commits or delete",
            }),
        }
    }
}

impl fmt::Display for BranchPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Keep => "keep",
            Self::DeleteIfNoCommits => "delete-if-no-commits",
            Self::Delete => "delete",
        })
    }
}
