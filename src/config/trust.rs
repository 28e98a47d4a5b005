//! A repository's `.paddock.yaml` is untrusted input, as the agent is: whoever wrote the
//! repository (or an agent that committed the file, which `apply` and `merge` bring into the
//! user's checkout) must not be able to widen the sandbox its jobs run in. So, unless the
//! user's own file trusts the repository (`trust:`), the repository's file may only *narrow*
//! a job: lower limits, a narrower network and allow-list, a stronger runtime (process <
//! docker < runsc < microvm), and it may set what only touches the job's inside (caches,
//! setup commands run in the sandbox, environment, ports, the checkout kind). Everything else
//! it sets is refused: dropped from the configuration and named (file, line, why) in
//! [`RepoTrust::refusals`], which `create` prints once and `config show` lists.
//!
//! The comparison is always against what the user alone would get (the user file over the
//! built-in defaults; the environment and flags still win over both, as before), so no
//! stacking of the repository's values can add up to more than that.

use std::path::{Path, PathBuf};

use super::files::ConfigFile;
use super::{Config, Source};

/// What the repository's file could not set, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The key as `config show` names it (`profiles.default.runtime`).
    pub key: String,
    /// The value the file gave, as text.
    pub value: String,
    /// Its line in the file, where one could be found (block-style YAML).
    pub line: Option<usize>,
    pub reason: String,
}

/// How paddock treated a repository's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoTrust {
    pub file: PathBuf,
    /// The user's `trust:` entry that trusts this repository; `None`: untrusted.
    pub trusted_by: Option<String>,
    /// The values dropped (untrusted only).
    pub refusals: Vec<Refusal>,
}

impl RepoTrust {
    /// One line per refused value, for `create`'s warning and errors.
    pub fn warning(&self) -> Option<String> {
        if self.refusals.is_empty() {
            return None;
        }
        let lines: Vec<String> = self.refusals.iter().map(|r| self.describe(r)).collect();
        Some(format!(
            "the repository's {} is not trusted, so it may only narrow a job; refused:\n  {}\n(`paddock trust REPO` or `trust:` in your config file lets it widen one)",
            self.file.display(),
            lines.join("\n  ")
        ))
    }

    /// `FILE:LINE: KEY: VALUE: why`.
    pub fn describe(&self, refusal: &Refusal) -> String {
        let place = match refusal.line {
            Some(line) => format!("{}:{line}", self.file.display()),
            None => self.file.display().to_string(),
        };
        // The key and value are the repository's text: one line each, and not a page.
        let value = crate::text::short_line(&refusal.value, 120);
        format!(
            "{place}: `{}: {value}`: {}",
            crate::text::line(&refusal.key),
            refusal.reason
        )
    }
}

/// Takes from a repository's `file` the keys only the user's own file may set (`trust`,
/// `devcontainer_images`), trusted or not, each as a refusal.
pub(super) fn refuse_user_only_keys(file: &mut ConfigFile, text: &str) -> Vec<Refusal> {
    let mut refusals = Vec::new();
    for (key, entries, reason) in [
        (
            "trust",
            file.trust.take(),
            "only the user's own config may trust a repository",
        ),
        (
            "devcontainer_images",
            file.devcontainer_images.take(),
            "only the user's own config may allow images",
        ),
    ] {
        if let Some(entries) = entries {
            refusals.push(Refusal {
                key: key.into(),
                value: format!("[{}]", entries.join(", ")),
                line: super::files::line_of(text, &[key]),
                reason: reason.into(),
            });
        }
    }
    refusals
}

/// The `trust:` entry of the user's file that names `root` (a path, `~/`-relative or not, or
/// a glob over paths), if any.
pub(super) fn trusted_by(root: &Path, entries: &[String], home: Option<&str>) -> Option<String> {
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    entries
        .iter()
        .find(|entry| {
            let expanded = match (entry.strip_prefix("~/"), home) {
                (Some(rest), Some(home)) => Path::new(home).join(rest),
                _ => PathBuf::from(entry.as_str()),
            };
            if entry.contains(['*', '?', '[']) {
                // `*` stays within one directory; `**` crosses them.
                globset::GlobBuilder::new(&expanded.to_string_lossy())
                    .literal_separator(true)
                    .build()
                    .is_ok_and(|glob| glob.compile_matcher().is_match(&root))
            } else {
                std::fs::canonicalize(&expanded).unwrap_or(expanded) == root
            }
        })
        .cloned()
}

/// Whether the user trusts the repository at `root`: as its file was read when it has one,
/// else by the user's `trust:` list (a build from its Dockerfile asks this too).
pub fn trusts_repo(config: &Config, root: &Path) -> bool {
    match &config.repo_trust {
        Some(trust) => trust.trusted_by.is_some(),
        None => {
            let home = std::env::var("HOME").ok();
            trusted_by(root, &config.trust, home.as_deref()).is_some()
        }
    }
}

/// Whether `setup` (a job's commands) came from a repository's file this configuration does
/// not trust: such commands never run outside a sandbox.
pub fn setup_from_untrusted_repo(config: &Config, profile: &str) -> bool {
    let untrusted = config
        .repo_trust
        .as_ref()
        .is_some_and(|trust| trust.trusted_by.is_none());
    let from_repo = |source: &Source| matches!(source, Source::RepoFile(_));
    untrusted
        && (from_repo(&config.setup.commands.source) && !config.setup.commands.value.is_empty()
            || config
                .profiles
                .get(profile)
                .is_some_and(|p| from_repo(&p.setup.source) && !p.setup.value.is_empty()))
}

/// Rows for `config show`: the user's `trust:` list, the repository's trust, then each
/// value of its file that was refused.
pub(super) fn config_rows(config: &Config) -> Vec<(String, String, Source)> {
    let mut rows = Vec::new();
    if !config.trust.is_empty() {
        rows.push((
            "trust".into(),
            config.trust.join(", "),
            config
                .user_file
                .clone()
                .map_or(Source::Default, Source::UserFile),
        ));
    }
    if !config.devcontainer_images.is_empty() {
        rows.push((
            "devcontainer_images".into(),
            config.devcontainer_images.join(", "),
            config
                .user_file
                .clone()
                .map_or(Source::Default, Source::UserFile),
        ));
    }
    if let Some(trust) = &config.repo_trust {
        rows.extend(repo_rows(trust));
    }
    rows
}

fn repo_rows(trust: &RepoTrust) -> Vec<(String, String, Source)> {
    let source = Source::RepoFile(trust.file.clone());
    let mut rows = vec![(
        "repo_trust".to_string(),
        match &trust.trusted_by {
            Some(entry) => format!("trusted (user file `trust: {entry}`)"),
            None => "untrusted: its file may only narrow a job".into(),
        },
        source.clone(),
    )];
    for refusal in &trust.refusals {
        let line = refusal
            .line
            .map(|line| format!(" (line {line})"))
            .unwrap_or_default();
        rows.push((
            refusal.key.clone(),
            format!("REFUSED {}{line}: {}", refusal.value, refusal.reason),
            source.clone(),
        ));
    }
    rows
}

/// Adds `entry` (a repository's root) to the `trust:` list of the user file at `path`,
/// keeping the rest of the file as written; `false` when it is there already. The file is
/// made when missing and replaced atomically, and must still parse afterwards.
pub fn add_trust(path: &Path, entry: &str) -> Result<bool, super::ConfigError> {
    let write_error = |source| super::ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let current = super::files::read_file(path, false)?;
    let (trusted, text) = match current {
        Some((mut file, text)) => (file.trust.take().unwrap_or_default(), text),
        None => (Vec::new(), String::new()),
    };
    if trusted.iter().any(|t| t == entry) {
        return Ok(false);
    }
    let quoted = |s: &str| serde_json::to_string(s).expect("a string serializes");
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    match lines.iter().position(|l| l.starts_with("trust:")) {
        // A block list (or an empty key): the new entry goes right under the key.
        Some(at) if lines[at].trim_end() == "trust:" => {
            lines.insert(at + 1, format!("  - {}", quoted(entry)));
        }
        // A flow list (`trust: [a, b]`): rewritten as a block list of its entries.
        Some(at) => {
            let items = trusted
                .iter()
                .map(String::as_str)
                .chain(std::iter::once(entry))
                .map(|item| format!("  - {}", quoted(item)));
            lines.splice(at..=at, std::iter::once("trust:".to_string()).chain(items));
        }
        None => {
            lines
                .push("# Repositories whose .paddock.yaml may widen a job (paddock trust).".into());
            lines.push("trust:".into());
            lines.push(format!("  - {}", quoted(entry)));
        }
    }
    let text = lines.join("\n") + "\n";
    // What is written must read back, with the entry in it.
    let parsed: super::files::ConfigFile =
        serde_yaml::from_str(&text).map_err(|e| super::ConfigError::Parse {
            path: path.to_path_buf(),
            message: format!("adding the entry would break the file: {e}"),
        })?;
    if !parsed.trust.unwrap_or_default().iter().any(|t| t == entry) {
        return Err(super::ConfigError::Parse {
            path: path.to_path_buf(),
            message: "the `trust:` key is not at the file's top level; add the entry by hand"
                .into(),
        });
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(write_error)?;
    }
    crate::atomic::replace_atomic_lazily(path, text.as_bytes()).map_err(write_error)?;
    Ok(true)
}
