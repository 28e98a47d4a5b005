//! `engines:` of the user config file: each entry checked (`crate::engines::check`) and
//! refused in a repository's file, which could otherwise send the user's history and jobs to
//! a machine it names.

use std::collections::BTreeMap;

use super::ConfigError;
use crate::engines::EngineSpec;

/// Adds a file's `engines:` to `engines`, refusing them in a repository's file.
pub(super) fn apply(
    engines: &mut BTreeMap<String, EngineSpec>,
    from_file: Option<BTreeMap<String, EngineSpec>>,
    repo: bool,
    origin: &str,
) -> Result<(), ConfigError> {
    let Some(from_file) = from_file else {
        return Ok(());
    };
    if repo {
        return Err(ConfigError::Value {
            origin: origin.to_string(),
            key: "engines".into(),
            message: "engines belong in the user config file, never a repository's".into(),
        });
    }
    for (name, mut spec) in from_file {
        crate::engines::resolve(&name, &mut spec)
            .and_then(|()| crate::engines::check(&name, &spec))
            .map_err(|e| ConfigError::Value {
                origin: origin.to_string(),
                key: format!("engines.{name}"),
                message: e.to_string(),
            })?;
        engines.insert(name, spec);
    }
    Ok(())
}
