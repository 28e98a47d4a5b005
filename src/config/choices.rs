//! The small enums of the configuration: which runtime, which network, how a timed-out
//! command is stopped, what happens to a removed job's branch. Each parses from and prints
//! as the word a user writes (strum derives both; serde reads the same words from YAML and
//! JSON); a word that is not one of them is an error listing the ones that are.

use serde::{Deserialize, Serialize};
use strum::{Display, EnumString};

use crate::units::UnitError;

/// Which execution runtime a job uses. `runc` and `runsc` are Docker with that OCI runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, EnumString, Display)]
#[serde(rename_all = "lowercase")]
#[strum(
    serialize_all = "lowercase",
    parse_err_ty = UnitError,
    parse_err_fn = not_a_runtime
)]
pub enum RuntimeChoice {
    Auto,
    #[strum(to_string = "docker", serialize = "runc")]
    Docker,
    #[strum(to_string = "runsc", serialize = "gvisor")]
    Runsc,
    Process,
    /// One QEMU virtual machine per job (`runtime::microvm`).
    Microvm,
}

fn not_a_runtime(input: &str) -> UnitError {
    UnitError {
        what: "runtime",
        input: input.to_string(),
        expected: "one of auto, docker, runc, runsc, process, microvm",
    }
}

/// Container networking: none unless a profile opts in. `allowlist` reaches only the
/// profile's `allow` entries, through paddock's egress proxy; `open` (formerly `bridge`,
/// still accepted) reaches everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, EnumString, Display)]
#[serde(rename_all = "lowercase")]
#[strum(
    serialize_all = "lowercase",
    parse_err_ty = UnitError,
    parse_err_fn = not_a_network
)]
pub enum NetworkMode {
    None,
    Allowlist,
    #[serde(alias = "bridge")]
    #[strum(to_string = "open", serialize = "bridge")]
    Open,
}

fn not_a_network(input: &str) -> UnitError {
    UnitError {
        what: "network",
        input: input.to_string(),
        expected: "none, allowlist or open (bridge)",
    }
}

/// How a command that ran out of time is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, EnumString, Display)]
#[serde(rename_all = "lowercase")]
#[strum(
    serialize_all = "lowercase",
    parse_err_ty = UnitError,
    parse_err_fn = not_a_kill_policy
)]
pub enum KillPolicy {
    /// SIGTERM, a grace period, then SIGKILL.
    Graceful,
    /// SIGKILL at once.
    Hard,
}

fn not_a_kill_policy(input: &str) -> UnitError {
    UnitError {
        what: "kill policy",
        input: input.to_string(),
        expected: "graceful or hard",
    }
}

/// Whether a job's root filesystem (the image's files) can be written: `read-only` (the
/// default), or `writable`: a layer of the job's own over the image, discarded with the
/// job, so root inside (`exec --user root`) can install packages. Only runtimes whose
/// kernel is not the host's (runsc, microvm) take `writable`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, EnumString, Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(
    serialize_all = "kebab-case",
    parse_err_ty = UnitError,
    parse_err_fn = not_a_rootfs
)]
pub enum RootFs {
    #[default]
    ReadOnly,
    Writable,
}

impl RootFs {
    pub fn is_read_only(&self) -> bool {
        *self == RootFs::ReadOnly
    }
}

fn not_a_rootfs(input: &str) -> UnitError {
    UnitError {
        what: "rootfs",
        input: input.to_string(),
        expected: "read-only or writable",
    }
}

/// What the sweeper (and `rm`) does with a job's branch.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, EnumString, Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(
    serialize_all = "kebab-case",
    parse_err_ty = UnitError,
    parse_err_fn = not_a_branch_policy
)]
pub enum BranchPolicy {
    /// Keep it.
    Keep,
    /// Delete it only when it has no commits beyond the base.
    #[default]
    DeleteIfNoCommits,
    /// Delete it (its uncommitted work stays reachable from the wip ref).
    Delete,
    /// Delete it when it has no commits beyond the base or all its changes are in the
    /// job's base branch (merged, squashed or rebased there), checked after the last sync.
    DeleteIfMerged,
}

fn not_a_branch_policy(input: &str) -> UnitError {
    UnitError {
        what: "branch policy",
        input: input.to_string(),
        expected: "keep, delete-if-no-commits, delete-if-merged or delete",
    }
}

/// When a job's branch is pushed to a remote of the repository (`push:` of a profile).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, EnumString, Display,
)]
#[serde(rename_all = "kebab-case")]
#[strum(
    serialize_all = "kebab-case",
    parse_err_ty = UnitError,
    parse_err_fn = not_a_push_policy
)]
pub enum PushPolicy {
    /// Only on `paddock push` (the default).
    #[default]
    Manual,
    /// After each exec whose sync moved the branch, as `paddock push` would (coalesced).
    OnSync,
}

fn not_a_push_policy(input: &str) -> UnitError {
    UnitError {
        what: "push policy",
        input: input.to_string(),
        expected: "manual or on-sync",
    }
}

/// How a job's checkout is made. `worktree`: the job's own files, checked out by
/// `git read-tree` (portable, the default). `overlay`: an overlay mount of a read-only
/// pristine checkout shared by every job of the same repository and commit, with the job's
/// own upper dir (kernel overlayfs as root, `fuse-overlayfs` otherwise).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, EnumString, Display,
)]
#[serde(rename_all = "lowercase")]
#[strum(
    serialize_all = "lowercase",
    parse_err_ty = UnitError,
    parse_err_fn = not_a_checkout
)]
pub enum CheckoutMode {
    #[default]
    Worktree,
    Overlay,
}

impl CheckoutMode {
    /// Whether this is the default (records leave the default out of their JSON).
    pub fn is_worktree(&self) -> bool {
        *self == CheckoutMode::Worktree
    }
}

fn not_a_checkout(input: &str) -> UnitError {
    UnitError {
        what: "checkout",
        input: input.to_string(),
        expected: "worktree or overlay",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_read_and_print_the_words_users_write() {
        assert_eq!("runc".parse::<RuntimeChoice>(), Ok(RuntimeChoice::Docker));
        assert_eq!("gvisor".parse::<RuntimeChoice>(), Ok(RuntimeChoice::Runsc));
        assert_eq!(RuntimeChoice::Docker.to_string(), "docker");
        assert_eq!(
            BranchPolicy::DeleteIfNoCommits.to_string(),
            "delete-if-no-commits"
        );
        assert_eq!(
            "delete-if-no-commits".parse::<BranchPolicy>(),
            Ok(BranchPolicy::DeleteIfNoCommits)
        );
        assert_eq!(KillPolicy::Graceful.to_string(), "graceful");
        assert_eq!("overlay".parse::<CheckoutMode>(), Ok(CheckoutMode::Overlay));
        assert_eq!(CheckoutMode::Worktree.to_string(), "worktree");
        let error = "kvm".parse::<RuntimeChoice>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid runtime `kvm`: expected one of auto, docker, runc, runsc, process, microvm"
        );
        assert!("Bridge".parse::<NetworkMode>().is_err(), "words are exact");
        assert_eq!("bridge".parse::<NetworkMode>(), Ok(NetworkMode::Open));
        assert_eq!(NetworkMode::Open.to_string(), "open");
        let old: NetworkMode = serde_json::from_str("\"bridge\"").unwrap();
        assert_eq!(
            old,
            NetworkMode::Open,
            "records written before 0.3 read back"
        );
    }
}

/// Where a job's environment comes from (`environment:` of a profile): `auto` (the default)
/// uses the repository's devcontainer.json when its base commit has one, `devcontainer`
/// requires it, `image` ignores it and uses the profile's image.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, EnumString, Display,
)]
#[serde(rename_all = "lowercase")]
#[strum(
    serialize_all = "lowercase",
    parse_err_ty = UnitError,
    parse_err_fn = not_an_environment
)]
pub enum EnvironmentChoice {
    #[default]
    Auto,
    Devcontainer,
    Image,
}

fn not_an_environment(input: &str) -> UnitError {
    UnitError {
        what: "environment",
        input: input.to_string(),
        expected: "auto, devcontainer or image",
    }
}
