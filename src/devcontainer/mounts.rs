//! `mounts` of a devcontainer.json: a named volume (`source=NAME,target=PATH,type=volume`,
//! or the object form) becomes a paddock cache (an entry per repository and name, mounted
//! in the workspace, see `cache`), so it outlives the job as a volume outlives a container.
//! A bind mount hands the sandbox part of the host: refused. A volume whose target is
//! outside the job's workspace has no cache place: ignored, said so.

use std::path::{Component, Path};

use super::Volume;

/// The volume `mount` asks for, or why it is not applied.
pub fn volume(mount: &serde_json::Value, workspace: &str) -> Result<Volume, String> {
    let mut fields = std::collections::BTreeMap::new();
    match mount {
        serde_json::Value::String(text) => {
            for part in text.split(',') {
                let (key, value) = part.split_once('=').unwrap_or((part, ""));
                fields.insert(key.trim().to_ascii_lowercase(), value.trim().to_string());
            }
        }
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                if let Some(text) = value.as_str() {
                    fields.insert(key.to_ascii_lowercase(), text.to_string());
                }
            }
        }
        _ => return Err("not a mount: a string or an object is needed".into()),
    }
    let get = |keys: &[&str]| keys.iter().find_map(|k| fields.get(*k).cloned());
    let kind = get(&["type"]).unwrap_or_else(|| "volume".into());
    match kind.as_str() {
        "bind" => return Err("refused: bind mounts of host paths never enter a job".into()),
        "volume" => {}
        other => return Err(format!("not supported: type `{other}`")),
    }
    let Some(name) = get(&["source", "src"]).filter(|n| !n.is_empty()) else {
        return Err("not supported: an anonymous volume (no source)".into());
    };
    let target = get(&["target", "destination", "dst"]).unwrap_or_default();
    let valid_name = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !valid_name {
        return Err(format!("not supported: volume name `{name}`"));
    }
    let workspace = Path::new(workspace);
    let relative = Path::new(&target)
        .strip_prefix(workspace)
        .ok()
        .filter(|path| {
            !path.as_os_str().is_empty()
                && path
                    .components()
                    .all(|c| matches!(c, Component::Normal(n) if n != ".git"))
        })
        .ok_or_else(|| {
            format!(
                "not supported: only targets inside the workspace `{}` become paddock caches",
                workspace.display()
            )
        })?;
    Ok(Volume {
        name: format!("devcontainer-{name}"),
        path: relative.display().to_string(),
    })
}
