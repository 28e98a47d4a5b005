//! The user config's `secrets:` and `egress:` sections and their checks (the job side, which
//! reads values and gives placeholders, is the top-level `secrets` module). Both sections
//! are the user's only: a repository's file naming them is refused (see `Config::load`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::ConfigError;
use crate::egress::AllowEntry;

/// One entry of the user config's `secrets:`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSpec {
    /// Read from this variable of paddock's environment (the CLI's, or `serve`'s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// Read from this file (trailing newline dropped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// Read from this command's output (trailing newline dropped), run without a shell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Where the value may go (allow-list syntax); they join the job's allow-list.
    pub hosts: Vec<AllowEntry>,
    /// `Name: template` with `{}` for the value, set on every request to the hosts; without
    /// it the placeholder is replaced wherever it appears in a request header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// The job's variable holding the placeholder (default: the name, upper-cased).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variable: Option<String>,
}

/// The user config's `egress:` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressSettings {
    /// Extra roots (PEM) the proxy trusts for hosts whose TLS it terminates.
    pub upstream_ca: Option<PathBuf>,
}

pub(crate) fn value_error(key: String, message: impl Into<String>) -> ConfigError {
    ConfigError::Value {
        origin: "user config".into(),
        key,
        message: message.into(),
    }
}

/// Checks one `secrets:` entry of the user file.
pub fn check_spec(name: &str, spec: &SecretSpec) -> Result<(), ConfigError> {
    let key = || format!("secrets.{name}");
    let valid_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid_name {
        return Err(value_error(
            key(),
            "a secret's name is letters, digits, _ and -",
        ));
    }
    let sources = usize::from(spec.env.is_some())
        + usize::from(spec.file.is_some())
        + usize::from(spec.command.as_ref().is_some_and(|c| !c.is_empty()));
    if sources != 1 {
        return Err(value_error(
            key(),
            "give exactly one of `env`, `file`, `command`",
        ));
    }
    if spec.hosts.is_empty() {
        return Err(value_error(key(), "`hosts` names where the secret may go"));
    }
    if spec.hosts.iter().any(|h| {
        matches!(&h.pattern, crate::egress::policy::Pattern::Network(a, p) if u32::from(*p) != if a.is_ipv4() { 32 } else { 128 })
    }) {
        return Err(value_error(key(), "a secret's hosts are names, *.domains or single addresses, not ranges"));
    }
    if let Some(header) = &spec.header {
        let ok = header
            .split_once(':')
            .is_some_and(|(name, value)| !name.trim().is_empty() && value.contains("{}"));
        if !ok {
            return Err(value_error(
                key(),
                "`header` is `Name: template` with `{}` for the value",
            ));
        }
    }
    if let Some(variable) = &spec.variable
        && (variable.is_empty()
            || !variable
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        return Err(value_error(key(), "`variable` is a variable name"));
    }
    Ok(())
}
