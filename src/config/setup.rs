//! A new job's own preparation: `copy` (untracked files from the user's checkout) and `setup`
//! (commands run in the job right after create), with `setup_optional` and `setup_timeout`.
//! Each may be set at the top level of a config file (every job of the repository) and per
//! profile: a profile's `copy` and `setup` come after the top-level ones, its
//! `setup_optional` and `setup_timeout` win over them. A later file replaces an earlier
//! file's value of the same key, as everywhere else.

use std::time::Duration;

use super::files::ConfigFile;
use super::{Config, ConfigError, NetworkMode, Source, Sourced};
use crate::egress::AllowEntry;
use crate::units::HumanDuration;

/// The top-level `copy`, `setup`, `setup_optional` and `setup_timeout` in effect.
#[derive(Debug, Clone, PartialEq)]
pub struct SetupSettings {
    pub copy: Sourced<Vec<String>>,
    pub commands: Sourced<Vec<String>>,
    pub optional: Option<Sourced<bool>>,
    pub timeout: Option<Sourced<HumanDuration>>,
    pub network: Option<Sourced<NetworkMode>>,
    pub allow: Option<Sourced<Vec<AllowEntry>>>,
}

impl Default for SetupSettings {
    fn default() -> Self {
        SetupSettings {
            copy: Sourced::default_value(Vec::new()),
            commands: Sourced::default_value(Vec::new()),
            optional: None,
            timeout: None,
            network: None,
            allow: None,
        }
    }
}

/// What a new job of one profile copies and runs before it is `ready`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobSetup {
    /// Relative paths in the repository (checked and normalized), in order.
    pub copy: Vec<String>,
    /// Shell commands (`sh -c`), in order.
    pub commands: Vec<String>,
    /// A failed command leaves the job in place (reported in `show`) instead of failing the
    /// create.
    pub optional: bool,
    /// Each command's deadline; `None`: the job's exec timeout.
    pub timeout: Option<Duration>,
    /// The network the commands have; `None`: the job's own (`setup_allow` alone means
    /// `allowlist`).
    pub network: Option<NetworkMode>,
    /// With an `allowlist` setup network: reachable during setup besides the job's list.
    pub allow: Vec<AllowEntry>,
}

/// Checks a file's `copy` entries (normalizing them in place) and `setup` commands, at the top
/// level and in every profile, naming the file and the key of a bad one.
pub(super) fn check_file(file: &mut ConfigFile, origin: &str) -> Result<(), ConfigError> {
    let lists = std::iter::once((String::new(), &mut file.copy, &file.setup)).chain(
        file.profiles
            .iter_mut()
            .map(|(name, layer)| (format!("profiles.{name}."), &mut layer.copy, &layer.setup)),
    );
    for (prefix, copy, setup) in lists {
        for (i, entry) in copy.iter_mut().flatten().enumerate() {
            *entry =
                crate::copy_files::check_entry(entry).map_err(|message| ConfigError::Value {
                    origin: origin.to_string(),
                    key: format!("{prefix}copy[{i}]"),
                    message,
                })?;
        }
        for (i, command) in setup.iter().flatten().enumerate() {
            if command.trim().is_empty() {
                return Err(ConfigError::Value {
                    origin: origin.to_string(),
                    key: format!("{prefix}setup[{i}]"),
                    message: "a setup command must not be empty".into(),
                });
            }
        }
    }
    Ok(())
}

impl SetupSettings {
    /// Stacks a file's top-level values on these.
    pub(super) fn apply(&mut self, file: &ConfigFile, source: &Source) {
        let sourced = |value| Sourced {
            value,
            source: source.clone(),
        };
        if let Some(copy) = &file.copy {
            self.copy = sourced(copy.clone());
        }
        if let Some(commands) = &file.setup {
            self.commands = sourced(commands.clone());
        }
        if let Some(optional) = file.setup_optional {
            self.optional = Some(Sourced {
                value: optional,
                source: source.clone(),
            });
        }
        if let Some(timeout) = file.setup_timeout {
            self.timeout = Some(Sourced {
                value: timeout,
                source: source.clone(),
            });
        }
        if let Some(network) = file.setup_network {
            self.network = Some(Sourced {
                value: network,
                source: source.clone(),
            });
        }
        if let Some(allow) = &file.setup_allow {
            self.allow = Some(Sourced {
                value: allow.clone(),
                source: source.clone(),
            });
        }
    }
}

impl Config {
    /// What a new job of `profile` copies and runs: the top-level lists, then the profile's;
    /// the profile's `setup_optional` and `setup_timeout` over the top-level ones.
    pub fn job_setup(&self, profile: &str) -> JobSetup {
        self.job_setup_where(profile, true)
    }

    /// [`job_setup`](Self::job_setup) without the commands of a repository's file the user
    /// does not trust (`repo_commands: false`): what a job outside any sandbox (the process
    /// runtime) may run.
    pub fn job_setup_where(&self, profile: &str, repo_commands: bool) -> JobSetup {
        let top = &self.setup;
        let own = self.profiles.get(profile);
        let untrusted = self
            .repo_trust
            .as_ref()
            .is_some_and(|trust| trust.trusted_by.is_none());
        let keep =
            |source: &Source| repo_commands || !untrusted || !matches!(source, Source::RepoFile(_));
        let mut copy = top.copy.value.clone();
        let mut commands = Vec::new();
        if keep(&top.commands.source) {
            commands.extend(top.commands.value.iter().cloned());
        }
        if let Some(own) = own {
            copy.extend(own.copy.value.iter().cloned());
            if keep(&own.setup.source) {
                commands.extend(own.setup.value.iter().cloned());
            }
        }
        JobSetup {
            copy,
            commands,
            optional: own
                .and_then(|p| p.setup_optional.as_ref())
                .or(top.optional.as_ref())
                .is_some_and(|o| o.value),
            timeout: own
                .and_then(|p| p.setup_timeout.as_ref())
                .or(top.timeout.as_ref())
                .map(|t| t.value.0),
            network: own
                .and_then(|p| p.setup_network.as_ref())
                .or(top.network.as_ref())
                .map(|n| n.value),
            allow: own
                .and_then(|p| p.setup_allow.as_ref())
                .or(top.allow.as_ref())
                .map(|a| a.value.clone())
                .unwrap_or_default(),
        }
    }
}
