//! Reading the configuration files: their YAML shapes, strict parsing that names the file and
//! the key, and the checks of names, templates and caches.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{BranchPolicy, ConfigError, EnvLookup, ProfileLayer};
use crate::cache::CacheSpec;
use crate::units::HumanDuration;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RoutingFile {
    #[serde(default)]
    pub(super) agents: BTreeMap<String, String>,
    #[serde(default)]
    pub(super) tasks: BTreeMap<String, String>,
}

/// The `sweep:` section of a config file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SweepFile {
    pub(super) idle: Option<HumanDuration>,
    pub(super) keep_finished: Option<HumanDuration>,
    /// `off`, or a duration.
    pub(super) max_age: Option<String>,
    pub(super) branch_policy: Option<BranchPolicy>,
    pub(super) interval: Option<HumanDuration>,
    /// Remove jobs whose branch is merged into their base branch.
    pub(super) merged: Option<bool>,
    /// Unused pristine checkouts (overlay jobs) go after this long.
    pub(super) pristine_max_age: Option<HumanDuration>,
    /// `off`, or a duration: a job paused this long is stale.
    pub(super) paused_max_age: Option<String>,
}

/// The on-disk shape of both the user file and the repo file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConfigFile {
    pub(super) default_profile: Option<String>,
    pub(super) branch_template: Option<String>,
    pub(super) base: Option<String>,
    #[serde(default)]
    pub(super) profiles: BTreeMap<String, ProfileLayer>,
    pub(super) routing: Option<RoutingFile>,
    pub(super) sweep: Option<SweepFile>,
    /// Caches of every job in the repository (usually set in `.paddock.yaml`).
    pub(super) caches: Option<Vec<CacheSpec>>,
    /// The host budget (user file only: it is the host's, not a repository's).
    pub(super) admission: Option<super::AdmissionSettings>,
    /// Untracked files copied into every job (see `setup`).
    pub(super) copy: Option<Vec<String>>,
    /// Commands run in every job right after create (see `setup`).
    pub(super) setup: Option<Vec<String>>,
    pub(super) setup_optional: Option<bool>,
    pub(super) setup_timeout: Option<HumanDuration>,
    /// The network the setup commands have (see `setup`).
    pub(super) setup_network: Option<super::NetworkMode>,
    /// With `setup_network: allowlist`: what setup may reach besides the job's allow-list.
    pub(super) setup_allow: Option<Vec<crate::egress::AllowEntry>>,
    /// Secrets jobs may be given (user file only: see `secrets`).
    pub(super) secrets: Option<BTreeMap<String, super::SecretSpec>>,
    /// The proxy's settings (user file only).
    pub(super) egress: Option<super::EgressSettings>,
    /// Docker engines besides the local one (user file only: see `engines`).
    pub(super) engines: Option<BTreeMap<String, crate::engines::EngineSpec>>,
    /// Repositories whose `.paddock.yaml` may widen a job (user file only: see `trust`).
    pub(super) trust: Option<Vec<String>>,
    /// Images (globs) an untrusted repository's devcontainer may use (user file only).
    pub(super) devcontainer_images: Option<Vec<String>>,
}

/// Splits an env layer into one layer per variable so each value names its own variable.
pub(super) fn env_layers(layer: &ProfileLayer) -> Vec<(&'static str, ProfileLayer)> {
    let mut out = Vec::new();
    macro_rules! one {
        ($field:ident, $var:literal) => {
            if layer.$field.is_some() {
                out.push((
                    $var,
                    ProfileLayer {
                        $field: layer.$field.clone(),
                        ..ProfileLayer::default()
                    },
                ));
            }
        };
    }
    one!(image, "PADDOCK_IMAGE");
    one!(runtime, "PADDOCK_RUNTIME");
    one!(memory, "PADDOCK_MEMORY");
    one!(cpus, "PADDOCK_CPUS");
    one!(pids, "PADDOCK_PIDS");
    one!(network, "PADDOCK_NETWORK");
    one!(timeout, "PADDOCK_TIMEOUT");
    one!(kill_policy, "PADDOCK_KILL_POLICY");
    one!(checkout, "PADDOCK_CHECKOUT");
    out
}

pub(super) fn check_caches(
    caches: &[CacheSpec],
    origin: &str,
    key: &str,
) -> Result<(), ConfigError> {
    for (i, spec) in caches.iter().enumerate() {
        spec.resolve().map_err(|e| ConfigError::Value {
            origin: origin.to_string(),
            key: format!("{key}[{i}]"),
            message: e.to_string(),
        })?;
    }
    Ok(())
}

/// The most of a config file paddock reads: a repository's file is anyone's, and YAML
/// parsing holds the whole document (and its aliases) in memory.
pub const MAX_CONFIG_FILE: u64 = 1 << 20;

/// Reads and parses a config file, with its text (for line numbers); `None` when it is
/// absent and need not exist. A file over [`MAX_CONFIG_FILE`] is refused unread.
pub(super) fn read_file(
    path: &Path,
    must_exist: bool,
) -> Result<Option<(ConfigFile, String)>, ConfigError> {
    use std::io::Read;
    let read = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => return Ok(None),
        Err(source) => return Err(read(source)),
    };
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(read)?;
    if bytes.len() as u64 > MAX_CONFIG_FILE {
        return Err(ConfigError::Parse {
            path: path.to_path_buf(),
            message: format!(
                "larger than {} (the most paddock reads)",
                crate::units::ByteSize(MAX_CONFIG_FILE)
            ),
        });
    }
    let text = String::from_utf8(bytes).map_err(|_| ConfigError::Parse {
        path: path.to_path_buf(),
        message: "not UTF-8 text".into(),
    })?;
    if text.trim().is_empty() {
        return Ok(Some((ConfigFile::default(), text)));
    }
    serde_yaml::from_str(&text)
        .map(|file| Some((file, text.clone())))
        .map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: name_the_key(&text, &e),
        })
}

/// serde_yaml names the parent mapping (`profiles.big`) when a value inside it is bad; the
/// key itself sits at the error's location, so add it (`profiles.big.memory`).
pub(super) fn name_the_key(text: &str, error: &serde_yaml::Error) -> String {
    let message = error.to_string();
    let Some(location) = error.location() else {
        return message;
    };
    let key = text
        .lines()
        .nth(location.line().saturating_sub(1))
        .and_then(|line| line.get(location.column().saturating_sub(1)..))
        .and_then(|rest| rest.split_once(':'))
        .map(|(key, _)| key.trim().trim_matches(['\'', '"']).to_string())
        .filter(|key| !key.is_empty() && !key.contains(' '));
    match (key, message.split_once(": ")) {
        (Some(key), Some((path, rest)))
            if !path.contains(' ') && !path.ends_with(&format!(".{key}")) && path != key =>
        {
            format!("{path}.{key}: {rest}")
        }
        _ => message,
    }
}

pub(super) fn check_profile_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid profile name `{name}`: use letters, digits, `-`, `_` and `.`"
        ))
    }
}

/// A branch template may use `{agent}`, `{task}` and `{id}` and nothing else in braces.
pub fn check_branch_template(template: &str) -> Result<(), String> {
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| format!("unclosed `{{` in branch template `{template}`"))?;
        let name = &rest[open + 1..open + close];
        if !matches!(name, "agent" | "task" | "id") {
            return Err(format!(
                "unknown placeholder `{{{name}}}` in branch template `{template}`: use {{agent}}, {{task}} or {{id}}"
            ));
        }
        rest = &rest[open + close + 1..];
    }
    Ok(())
}

/// The user config file: `$PADDOCK_CONFIG`, else `$XDG_CONFIG_HOME/paddock/config.yaml`, else
/// `~/.config/paddock/config.yaml`. The flag says whether it was named explicitly (and so
/// must exist).
pub fn user_config_path(env: &dyn EnvLookup) -> Option<(PathBuf, bool)> {
    if let Some(path) = env.var("PADDOCK_CONFIG") {
        return Some((PathBuf::from(path), true));
    }
    let base = env
        .var("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| env.var("HOME").map(|h| Path::new(&h).join(".config")))?;
    Some((base.join("paddock").join("config.yaml"), false))
}

/// The line of `path` (`["profiles", "default", "runtime"]`) in block-style YAML `text`.
pub(super) fn line_of(text: &str, path: &[&str]) -> Option<usize> {
    let mut stack: Vec<(usize, String)> = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('-') {
            continue;
        }
        let Some((key, _)) = trimmed.split_once(':') else {
            continue;
        };
        let indent = line.len() - trimmed.len();
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        stack.push((indent, key.trim().trim_matches(['"', '\'']).to_string()));
        if stack.len() == path.len() && stack.iter().zip(path).all(|((_, k), p)| k == p) {
            return Some(number + 1);
        }
    }
    None
}
