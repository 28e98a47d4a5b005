//! `.devcontainer/devcontainer.json` (or `.devcontainer.json`) as a job's environment: the
//! file is read from the job's base commit (git objects, never a file an agent could
//! change), parsed as JSON with comments, and mapped onto what a profile already has
//! (image, env, ports, workspace dir, setup commands). paddock's hardening always wins: the
//! fields that would loosen a sandbox (`privileged`, `capAdd`, `securityOpt`, `runArgs`,
//! `init: false`, bind mounts of host paths) are ignored, each named in the report, and the
//! report of what was read and ignored is kept in the job's record.

pub mod from;
mod jsonc;
mod mounts;
mod vars;

pub use vars::{Vars, container_env, container_env_in_shell};

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The places the spec looks, in its order.
pub const PATHS: [&str; 2] = [".devcontainer/devcontainer.json", ".devcontainer.json"];

/// A devcontainer.json paddock cannot use.
#[derive(Debug, thiserror::Error)]
pub enum DevcontainerError {
    #[error("`{file}` line {line}, column {column}: {reason}")]
    Invalid {
        file: String,
        line: usize,
        column: usize,
        reason: String,
    },
    #[error("`{file}`: {reason}")]
    Unusable { file: String, reason: String },
    /// An untrusted repository's devcontainer names an image the user does not allow.
    #[error(
        "`{file}`{at}: refusing image `{image}`: an untrusted repository's devcontainer may use only your profile's image and those your config's `devcontainer_images` allows"
    )]
    ImageRefused {
        file: String,
        at: String,
        image: String,
    },
}

/// A command in one of the spec's three forms: a shell string, an argv array, or named
/// commands (each a string or an array), which the spec runs in parallel and paddock runs
/// one after another in name order (a setup command's output stays readable).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Command {
    Shell(String),
    Argv(Vec<String>),
    Named(BTreeMap<String, Command>),
}

impl Command {
    /// The `sh -c` lines this command is.
    fn lines(&self, out: &mut Vec<String>) {
        match self {
            Command::Shell(line) => out.push(line.clone()),
            Command::Argv(argv) => out.push(
                argv.iter()
                    .map(|arg| format!("'{}'", arg.replace('\'', r"'\''")))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            Command::Named(named) => named.values().for_each(|c| c.lines(out)),
        }
    }
}

/// A port: a number, or a string (`"db:5432"` names another service: not supported).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum Port {
    Number(u16),
    Text(String),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

/// `build` of the file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BuildSection {
    dockerfile: Option<String>,
    context: Option<String>,
    #[serde(default)]
    args: BTreeMap<String, String>,
    target: Option<String>,
}

/// The fields of the spec paddock looks at; the others are listed as unsupported.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct File {
    image: Option<String>,
    build: Option<BuildSection>,
    /// The spec's older spelling of `build.dockerfile`.
    docker_file: Option<String>,
    #[serde(default)]
    container_env: BTreeMap<String, String>,
    #[serde(default)]
    remote_env: BTreeMap<String, Option<String>>,
    remote_user: Option<String>,
    container_user: Option<String>,
    workspace_folder: Option<String>,
    #[serde(default)]
    forward_ports: Vec<Port>,
    app_port: Option<OneOrMany<Port>>,
    on_create_command: Option<Command>,
    update_content_command: Option<Command>,
    post_create_command: Option<Command>,
    post_start_command: Option<Command>,
    #[serde(default)]
    mounts: Vec<serde_json::Value>,
    privileged: Option<bool>,
    #[serde(default)]
    cap_add: Vec<String>,
    #[serde(default)]
    security_opt: Vec<String>,
    #[serde(default)]
    run_args: Vec<String>,
    init: Option<bool>,
    #[serde(default)]
    features: BTreeMap<String, serde_json::Value>,
    host_requirements: Option<HostRequirements>,
    #[serde(flatten)]
    rest: BTreeMap<String, serde_json::Value>,
}

/// `hostRequirements`: checked against the profile's caps (the profile wins).
#[derive(Debug, Clone, Default, Deserialize)]
struct HostRequirements {
    cpus: Option<f64>,
    memory: Option<String>,
}

/// Keys of the spec that are understood as harmless metadata (editors, names).
const METADATA: [&str; 5] = [
    "name",
    "customizations",
    "$schema",
    "shutdownAction",
    "overrideCommand",
];

/// How to build the job's base image from the repository (paths inside the base commit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildSpec {
    /// The build context: a directory of the repository ("" is its root).
    pub context: String,
    /// The Dockerfile, relative to the context.
    pub dockerfile: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// A named volume of `mounts`, as a cache: `name` (the volume's source) at `path` in the
/// workspace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Volume {
    pub name: String,
    pub path: String,
}

/// What a devcontainer.json gave a job: kept in its record and shown by `create --json` and
/// `show`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DevcontainerReport {
    /// The file, as a path in the repository.
    pub file: String,
    /// The image named by `image`, when no `build` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildSpec>,
    /// The job's image, with paddock's entrypoint and agent user layered on.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// Whether this create built that image (false: it was there already).
    #[serde(default)]
    pub built: bool,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_dir: Option<String>,
    /// Commands run after the profile's setup (create, content, post-create).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub setup: Vec<String>,
    /// `postStartCommand`: run after the setup at create, and again at each later start of
    /// the job's container (see `engine::devcontainer`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_start: Vec<String>,
    /// Named volumes of `mounts`, each placed as a paddock cache mounted in the workspace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    /// The keys that were applied.
    pub read: Vec<String>,
    /// Keys (or entries) ignored, each with why: paddock's hardening wins over them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<String>,
    /// `hostRequirements.cpus`, checked against the profile's `cpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_cpus: Option<f64>,
    /// `hostRequirements.memory` in bytes, checked against the profile's `memory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_memory: Option<u64>,
    /// Keys paddock does not implement (features need a registry).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsupported: Vec<String>,
}

/// Parses `text`, the file at `file` (a path in the repository), into what it gives a job;
/// `vars` are what the spec's `${...}` variables stand for (see `vars`; the workspace dir
/// in it is the profile's, which the file's `workspaceFolder` replaces).
#[expect(
    clippy::too_many_lines,
    reason = "one arm per devcontainer.json property the spec defines"
)]
pub fn parse(file: &str, text: &str, vars: &Vars) -> Result<DevcontainerReport, DevcontainerError> {
    let stripped = jsonc::strip(text);
    let invalid = |e: serde_json::Error| DevcontainerError::Invalid {
        file: file.to_string(),
        line: e.line(),
        column: e.column(),
        reason: e
            .to_string()
            .split(" at line ")
            .next()
            .unwrap_or_default()
            .to_string(),
    };
    // Typed first, for an error's line and column; then the strings get their variables.
    serde_json::from_str::<File>(&stripped).map_err(invalid)?;
    let mut tree: serde_json::Value = serde_json::from_str(&stripped).map_err(invalid)?;
    let mut refused = Vec::new();
    let mut vars = vars.clone();
    if let Some(folder) = tree.get("workspaceFolder").and_then(|f| f.as_str()) {
        let folder = vars::substitute(folder, &vars, &mut Vec::new());
        if folder.starts_with('/') {
            vars.container_workspace_folder = folder;
        }
    }
    vars::substitute_tree(&mut tree, &vars, &mut refused);
    let parsed: File = serde_json::from_value(tree).map_err(|e| DevcontainerError::Unusable {
        file: file.to_string(),
        reason: e.to_string(),
    })?;
    let mut report = DevcontainerReport {
        file: file.to_string(),
        ignored: refused,
        ..DevcontainerReport::default()
    };
    let dir = file.rsplit_once('/').map_or("", |(dir, _)| dir);
    let dockerfile = parsed
        .build
        .as_ref()
        .and_then(|b| b.dockerfile.clone())
        .or(parsed.docker_file.clone());
    if let Some(dockerfile) = dockerfile {
        let build = parsed.build.clone().unwrap_or_default();
        let context = join(dir, build.context.as_deref().unwrap_or("."), file)?;
        let dockerfile_path = join(dir, &dockerfile, file)?;
        let dockerfile =
            relative_to(&dockerfile_path, &context).ok_or_else(|| DevcontainerError::Unusable {
                file: file.to_string(),
                reason: format!(
                    "the Dockerfile `{dockerfile_path}` is outside the build context `{context}`"
                ),
            })?;
        report.build = Some(BuildSpec {
            context,
            dockerfile,
            args: build.args,
            target: build.target,
        });
        report.read.push("build".into());
        if parsed.image.is_some() {
            report.ignored.push("image: `build` is used instead".into());
        }
    } else if let Some(image) = parsed.image {
        report.base_image = Some(image);
        report.read.push("image".into());
    }
    for (key, env) in [("containerEnv", parsed.container_env.clone())] {
        if !env.is_empty() {
            report.env.extend(env);
            report.read.push(key.into());
        }
    }
    if !parsed.remote_env.is_empty() {
        report.read.push("remoteEnv".into());
        for (name, value) in parsed.remote_env {
            match value {
                // The file's own containerEnv now; the image's env once it is known.
                Some(value) => report.env.insert(
                    name,
                    vars::container_env_known(&value, &parsed.container_env),
                ),
                None => report.env.remove(&name),
            };
        }
    }
    let ports = parsed
        .forward_ports
        .iter()
        .map(|p| ("forwardPorts", p))
        .chain(match &parsed.app_port {
            Some(OneOrMany::One(port)) => vec![("appPort", port)],
            Some(OneOrMany::Many(ports)) => ports.iter().map(|p| ("appPort", p)).collect(),
            None => Vec::new(),
        });
    for (key, port) in ports {
        match port {
            Port::Number(0) => report.ignored.push(format!("{key}: port 0")),
            Port::Number(port) if !report.ports.contains(port) => report.ports.push(*port),
            Port::Number(_) => {}
            Port::Text(text) => match text.parse::<u16>() {
                Ok(port) if port > 0 && !report.ports.contains(&port) => report.ports.push(port),
                _ => report.ignored.push(format!(
                    "{key}: `{text}` (only ports of the job itself are served)"
                )),
            },
        }
        if !report.read.iter().any(|r| r == key) {
            report.read.push(key.into());
        }
    }
    if let Some(folder) = parsed.workspace_folder {
        if folder.starts_with('/') && !folder.contains("${") && !folder.contains("/../") {
            report.workspace_dir = Some(folder);
            report.read.push("workspaceFolder".into());
        } else {
            report.ignored.push(format!(
                "workspaceFolder: `{folder}` (an absolute path without variables is needed)"
            ));
        }
    }
    for (key, command) in [
        ("onCreateCommand", &parsed.on_create_command),
        ("updateContentCommand", &parsed.update_content_command),
        ("postCreateCommand", &parsed.post_create_command),
    ] {
        if let Some(command) = command {
            command.lines(&mut report.setup);
            report.read.push(key.into());
        }
    }
    if let Some(command) = &parsed.post_start_command {
        command.lines(&mut report.post_start);
        report.read.push("postStartCommand".into());
    }
    for line in report.setup.iter_mut().chain(report.post_start.iter_mut()) {
        *line = vars::container_env_in_shell(line);
    }
    for (key, user) in [
        ("remoteUser", &parsed.remote_user),
        ("containerUser", &parsed.container_user),
    ] {
        if let Some(user) = user {
            report.ignored.push(format!(
                "{key}: `{user}` (the job runs as paddock's agent user, the profile's `uid`, never root)"
            ));
        }
    }
    for mount in &parsed.mounts {
        match mounts::volume(mount, &vars.container_workspace_folder) {
            Ok(volume) => {
                if !report.read.iter().any(|r| r == "mounts") {
                    report.read.push("mounts".into());
                }
                report.volumes.push(volume);
            }
            Err(why) => report.ignored.push(format!("mounts: {mount} ({why})")),
        }
    }
    if parsed.privileged == Some(true) {
        report
            .ignored
            .push("privileged: paddock's hardening wins".into());
    }
    for (key, list) in [
        ("capAdd", &parsed.cap_add),
        ("securityOpt", &parsed.security_opt),
        ("runArgs", &parsed.run_args),
    ] {
        if !list.is_empty() {
            report.ignored.push(format!(
                "{key}: {} (paddock's hardening wins)",
                list.join(" ")
            ));
        }
    }
    if parsed.init == Some(false) {
        report
            .ignored
            .push("init: false (paddock's init always runs)".into());
    }
    if let Some(host) = &parsed.host_requirements {
        report.host_cpus = host.cpus;
        if let Some(memory) = &host.memory {
            report.host_memory =
                Some(bytes_of(memory).ok_or_else(|| DevcontainerError::Unusable {
                    file: file.to_string(),
                    reason: format!("hostRequirements.memory `{memory}` is not a size (like 4gb)"),
                })?);
        }
        report.read.push("hostRequirements".into());
    }
    for feature in parsed.features.keys() {
        report
            .unsupported
            .push(format!("features: {feature} (features are not fetched)"));
    }
    for key in parsed.rest.keys() {
        if !METADATA.contains(&key.as_str()) {
            report.unsupported.push(key.clone());
        }
    }
    if report.build.is_none() && report.base_image.is_none() {
        return Err(DevcontainerError::Unusable {
            file: file.to_string(),
            reason: "neither `image` nor `build.dockerfile` is set (Docker Compose files are not supported)".into(),
        });
    }
    Ok(report)
}

/// A size of the spec (`4gb`, `512mb`, `8G`, bytes without a unit) in bytes.
fn bytes_of(text: &str) -> Option<u64> {
    let text = text.trim().to_ascii_lowercase();
    let text = text.strip_suffix('b').unwrap_or(&text);
    let (number, shift) = match text.chars().last()? {
        'k' => (&text[..text.len() - 1], 10),
        'm' => (&text[..text.len() - 1], 20),
        'g' => (&text[..text.len() - 1], 30),
        't' => (&text[..text.len() - 1], 40),
        _ => (text, 0),
    };
    let number: f64 = number.trim().parse().ok()?;
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a size the user wrote, checked to be finite and not negative"
    )]
    (number.is_finite() && number >= 0.0).then(|| (number * (1u64 << shift) as f64) as u64)
}

/// `path` (relative to the repository directory `dir`) as a normalized repository path;
/// refused when it leaves the repository.
fn join(dir: &str, path: &str, file: &str) -> Result<String, DevcontainerError> {
    let mut parts: Vec<&str> = if path.starts_with('/') {
        Vec::new()
    } else {
        dir.split('/').filter(|p| !p.is_empty()).collect()
    };
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return Err(DevcontainerError::Unusable {
                        file: file.to_string(),
                        reason: format!("`{path}` leaves the repository"),
                    });
                }
            }
            part => parts.push(part),
        }
    }
    if path.starts_with('/') {
        return Err(DevcontainerError::Unusable {
            file: file.to_string(),
            reason: format!("`{path}` is a host path; paths are relative to the file"),
        });
    }
    Ok(parts.join("/"))
}

/// `path` relative to the directory `dir` (both repository paths), if it is inside it.
fn relative_to(path: &str, dir: &str) -> Option<String> {
    if dir.is_empty() {
        return Some(path.to_string());
    }
    path.strip_prefix(dir)?
        .strip_prefix('/')
        .map(str::to_string)
}

#[cfg(test)]
mod tests;
