//! The spec's `${...}` variables in a devcontainer.json's strings. Substituted when the file
//! is read: `${localWorkspaceFolder}`, `${localWorkspaceFolderBasename}` (the user's
//! repository), `${containerWorkspaceFolder}` (and its basename, the job's workspace dir),
//! `${devcontainerId}` (a digest of the repository and the file, stable across jobs).
//!
//! `${localEnv:VAR}` would let a repository copy the user's environment (tokens, keys) into
//! a job: it is never read. It becomes its default (`${localEnv:VAR:default}`, text the file
//! itself holds) or nothing, and the report names it. `${containerEnv:VAR}` is the job's own
//! environment: in env values it is resolved from the file's `containerEnv` and the image's
//! env once the image is known ([`container_env`]); in commands it becomes the shell's
//! `${VAR}`, which the job's shell expands.

use std::collections::BTreeMap;

/// What the spec's variables stand for in one job.
#[derive(Debug, Clone, Default)]
pub struct Vars {
    /// The user's repository on the host.
    pub local_workspace_folder: String,
    /// The job's workspace dir inside its sandbox.
    pub container_workspace_folder: String,
    /// A digest of the repository and the file.
    pub devcontainer_id: String,
}

fn basename(path: &str) -> String {
    path.trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Calls `each(name, argument, default)` for every `${name[:argument[:default]]}` in `text`
/// and puts its answer in place (`None`: the reference stays as written).
fn replace(text: &str, mut each: impl FnMut(&str, &str, Option<&str>) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        let inner = &after[..end];
        let mut parts = inner.splitn(3, ':');
        let name = parts.next().unwrap_or_default();
        let argument = parts.next().unwrap_or_default();
        let default = parts.next();
        match each(name, argument, default) {
            Some(value) => out.push_str(&value),
            None => out.push_str(&rest[start..start + 3 + end]),
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
}

/// `text` with the variables known when the file is read put in; each `${localEnv:...}`
/// named in `refused`.
pub fn substitute(text: &str, vars: &Vars, refused: &mut Vec<String>) -> String {
    replace(text, |name, argument, default| match name {
        "localWorkspaceFolder" => Some(vars.local_workspace_folder.clone()),
        "localWorkspaceFolderBasename" => Some(basename(&vars.local_workspace_folder)),
        "containerWorkspaceFolder" => Some(vars.container_workspace_folder.clone()),
        "containerWorkspaceFolderBasename" => Some(basename(&vars.container_workspace_folder)),
        "devcontainerId" => Some(vars.devcontainer_id.clone()),
        "localEnv" | "env" => {
            let note = format!(
                "localEnv: {argument} (the host's environment never enters a job: {})",
                default.map_or_else(
                    || "substituted empty".to_string(),
                    |d| format!("its default `{d}` used")
                )
            );
            if !refused.contains(&note) {
                refused.push(note);
            }
            Some(default.unwrap_or_default().to_string())
        }
        _ => None,
    })
}

/// Every string of `value` (not object keys) through [`substitute`].
pub fn substitute_tree(value: &mut serde_json::Value, vars: &Vars, refused: &mut Vec<String>) {
    match value {
        serde_json::Value::String(text) => *text = substitute(text, vars, refused),
        serde_json::Value::Array(items) => items
            .iter_mut()
            .for_each(|item| substitute_tree(item, vars, refused)),
        serde_json::Value::Object(map) => map
            .values_mut()
            .for_each(|item| substitute_tree(item, vars, refused)),
        _ => {}
    }
}

/// An env value's `${containerEnv:VAR[:default]}` from `env` (the file's `containerEnv` over
/// the image's env), else its default, else empty.
pub fn container_env(text: &str, env: &BTreeMap<String, String>) -> String {
    replace(text, |name, argument, default| {
        (name == "containerEnv").then(|| {
            env.get(argument)
                .cloned()
                .or(default.map(str::to_string))
                .unwrap_or_default()
        })
    })
}

/// An env value's `${containerEnv:VAR}` for the `VAR`s `env` has; the others stay (for
/// [`container_env`] once the image's env is known).
pub fn container_env_known(text: &str, env: &BTreeMap<String, String>) -> String {
    replace(text, |name, argument, _| {
        (name == "containerEnv")
            .then(|| env.get(argument).cloned())
            .flatten()
    })
}

/// A command's `${containerEnv:VAR[:default]}` as the shell's `${VAR[:-default]}`: the
/// command runs in the job, whose shell has that environment.
pub fn container_env_in_shell(text: &str) -> String {
    replace(text, |name, argument, default| {
        let valid = !argument.is_empty()
            && argument
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        (name == "containerEnv" && valid).then(|| match default {
            Some(default) => format!("${{{argument}:-{default}}}"),
            None => format!("${{{argument}}}"),
        })
    })
}
