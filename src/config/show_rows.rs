//! The rows of the setup settings (`copy`, `setup`, `setup_network`...) for `config show`, shared by
//! the top level and each profile, and where a value came from.

use super::{NetworkMode, Source, Sourced};
use crate::egress::AllowEntry;
use crate::units::HumanDuration;

/// `config show` rows of set values (top level, or one profile's).
pub(super) fn rows<'a>(
    copy: &'a Sourced<Vec<String>>,
    commands: &'a Sourced<Vec<String>>,
    optional: Option<&'a Sourced<bool>>,
    timeout: Option<&'a Sourced<HumanDuration>>,
) -> Vec<(String, String, &'a Source)> {
    let mut rows = Vec::new();
    if !copy.value.is_empty() {
        rows.push(("copy".into(), copy.value.join(", "), &copy.source));
    }
    if !commands.value.is_empty() {
        rows.push((
            "setup".into(),
            commands.value.join(" && "),
            &commands.source,
        ));
    }
    if let Some(optional) = optional {
        rows.push((
            "setup_optional".into(),
            optional.value.to_string(),
            &optional.source,
        ));
    }
    if let Some(timeout) = timeout {
        rows.push((
            "setup_timeout".into(),
            timeout.value.to_string(),
            &timeout.source,
        ));
    }
    rows
}

/// `config show` rows of `setup_network` and `setup_allow`, when set.
pub(super) fn network_rows<'a>(
    network: Option<&'a Sourced<NetworkMode>>,
    allow: Option<&'a Sourced<Vec<AllowEntry>>>,
) -> Vec<(String, String, &'a Source)> {
    let mut rows = Vec::new();
    if let Some(network) = network {
        rows.push((
            "setup_network".into(),
            network.value.to_string(),
            &network.source,
        ));
    }
    if let Some(allow) = allow {
        let entries: Vec<String> = allow.value.iter().map(ToString::to_string).collect();
        rows.push(("setup_allow".into(), entries.join(", "), &allow.source));
    }
    rows
}

/// Where a value came from, for a row: the file's path, or the source's name.
pub fn source_origin(source: &Source) -> String {
    match source {
        Source::UserFile(path) | Source::RepoFile(path) => path.display().to_string(),
        other => other.to_string(),
    }
}

/// The caches of a `caches:` list, as `name (spec)`.
pub fn cache_names(caches: &[crate::cache::CacheSpec]) -> String {
    caches
        .iter()
        .map(|c| {
            c.resolve()
                .map(|(name, s)| format!("{name} ({s})"))
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(", ")
}
