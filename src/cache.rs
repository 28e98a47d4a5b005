//! Shared dependency caches: one entry per (repository, cache, key), linked, copied or
//! mounted into each job, so ten agents do not install `node_modules` ten times.
//!
//! Entries live at `$PADDOCK_HOME/caches/<repo-key>/<cache-name>/<key-hash>/`, with a
//! `<key-hash>.meta` file beside each. The key hash covers the content of the cache's key
//! files (a missing file hashes as "none"), so jobs with the same lockfile share an entry and a
//! new lockfile gets a new entry, seeded with a copy of the most recently used entry of the
//! same cache.
//!
//! Invariants:
//! - Entries are created in a temporary directory and renamed into place, so two jobs creating
//!   the same entry at once both end up with one complete entry.
//! - paddock never writes through a path the repository controls: before placing a cache at
//!   `<worktree>/<path>`, every component of that path is checked not to be a symlink (a
//!   tracked `node_modules -> /etc` is refused) and not to exist in the checkout.
//! - Cache paths are excluded from git through the repository's `info/exclude` (a `/path`
//!   pattern, which matches a symlink too, unlike `path/`), never through a tracked file.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::atomic::write_atomic;
use crate::ids::random_hex;
use crate::units::UnitError;

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("invalid cache `{name}`: {message}")]
    Spec { name: String, message: String },
    #[error(
        "refusing cache `{name}`: `{path}` in the repository is a symlink (to `{target}`); paddock never writes through links the repository controls"
    )]
    TrackedSymlink {
        name: String,
        path: PathBuf,
        target: String,
    },
    #[error("refusing cache `{name}`: `{path}` already exists in the checkout (is it tracked?)")]
    PathExists { name: String, path: PathBuf },
    #[error("failed to prepare cache `{name}` at `{path}`")]
    Io {
        name: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// How a cache reaches the job.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::Display, strum::EnumString,
)]
#[serde(rename_all = "lowercase")]
#[strum(
    serialize_all = "lowercase",
    parse_err_ty = UnitError,
    parse_err_fn = not_a_strategy
)]
pub enum Strategy {
    /// The worktree path is a symlink to the entry (mounted at the same path in containers).
    Symlink,
    /// The entry is copied into the worktree; the job may change it freely.
    Copy,
    /// The entry is bind-mounted at the worktree path in the container (symlink for the
    /// process runtime).
    Mount,
    /// The entry's path is exported in an environment variable.
    Env,
}

fn not_a_strategy(input: &str) -> UnitError {
    UnitError {
        what: "cache strategy",
        input: input.to_string(),
        expected: "symlink, copy, mount or env",
    }
}

/// One cache as written in a config file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheSpec {
    /// A path in the worktree (symlink, copy, mount).
    pub path: Option<String>,
    /// An environment variable that receives the entry's path.
    pub env: Option<String>,
    /// The cache's name (default: from `path` or `env`).
    pub name: Option<String>,
    /// Files whose content selects the entry; none = one shared entry.
    #[serde(default)]
    pub key: Vec<String>,
    pub strategy: Option<String>,
    /// For `mount`: mount read-only.
    #[serde(default)]
    pub readonly: bool,
}

/// A cache as placed in one job; kept in the job record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobCache {
    pub name: String,
    pub strategy: Strategy,
    /// Worktree-relative path (symlink, copy, mount).
    pub path: Option<String>,
    /// Variable name (env).
    pub env: Option<String>,
    pub entry: PathBuf,
    pub readonly: bool,
}

/// The side file of an entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct EntryMeta {
    created_at: DateTime<Utc>,
    last_used_at: DateTime<Utc>,
    key_files: Vec<String>,
}

impl CacheSpec {
    /// Checks the spec and returns (name, strategy).
    pub fn resolve(&self) -> Result<(String, Strategy), CacheError> {
        let label = self
            .name
            .clone()
            .or_else(|| self.path.clone())
            .or_else(|| self.env.clone())
            .unwrap_or_else(|| "?".into());
        let bad = |message: String| CacheError::Spec {
            name: label.clone(),
            message,
        };
        let strategy = match (&self.path, &self.env) {
            (Some(_), Some(_)) => return Err(bad("give `path` or `env`, not both".into())),
            (None, None) => {
                return Err(bad("give `path` (a path in the worktree) or `env`".into()));
            }
            (None, Some(var)) => {
                if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(bad(format!("`{var}` is not an environment variable name")));
                }
                if self.strategy.is_some() {
                    return Err(bad("`strategy` goes with `path`, not `env`".into()));
                }
                Strategy::Env
            }
            (Some(path), None) => {
                let relative = Path::new(path);
                let clean = !path.is_empty()
                    && relative
                        .components()
                        .all(|c| matches!(c, Component::Normal(n) if n != ".git"));
                if !clean {
                    return Err(bad(format!(
                        "`{path}` must be a relative path inside the worktree, without `..` or `.git`"
                    )));
                }
                match &self.strategy {
                    None => Strategy::Symlink,
                    Some(s) => s.parse().map_err(|e: UnitError| bad(e.to_string()))?,
                }
            }
        };
        if self.readonly && strategy != Strategy::Mount {
            return Err(bad("`readonly` applies to `strategy: mount` only".into()));
        }
        for key in &self.key {
            let ok = Path::new(key)
                .components()
                .all(|c| matches!(c, Component::Normal(_)));
            if !ok {
                return Err(bad(format!(
                    "key file `{key}` must be a relative path in the repository"
                )));
            }
        }
        let name = match (&self.name, &self.path, &self.env) {
            (Some(name), _, _) => name.clone(),
            (None, Some(path), _) => path.replace('/', "-").trim_start_matches('.').to_string(),
            (None, None, Some(var)) => var.to_ascii_lowercase().replace('_', "-"),
            (None, None, None) => unreachable!("checked above"),
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        {
            return Err(bad(format!("invalid cache name `{name}`")));
        }
        Ok((name, strategy))
    }
}

fn io(name: &str, path: &Path) -> impl FnOnce(std::io::Error) -> CacheError {
    let name = name.to_string();
    let path = path.to_path_buf();
    move |source| CacheError::Io { name, path, source }
}

/// The key hash of a job's caches: `read` gives each key file's content (`None`: missing or
/// not a regular file, hashed as "none"); from the checkout here, from the commit for a job
/// on a remote engine, so both name the same entry.
pub fn key_hash_with(keys: &[String], read: impl Fn(&str) -> Option<Vec<u8>>) -> String {
    if keys.is_empty() {
        return "shared".into();
    }
    let mut hasher = Sha256::new();
    for key in keys {
        hasher.update(key.as_bytes());
        hasher.update([0]);
        hasher.update(read(key).as_deref().unwrap_or(b"none"));
        hasher.update([0]);
    }
    crate::ids::hex(&hasher.finalize()[..8])
}

/// [`key_hash_with`] the key files of the checkout (a link is not followed out of it).
fn key_hash(worktree: &Path, keys: &[String]) -> String {
    key_hash_with(keys, |key| {
        let path = worktree.join(key);
        let is_file = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file());
        is_file.then(|| std::fs::read(&path)).and_then(Result::ok)
    })
}

/// Refuses a cache path whose any component exists as a symlink in the checkout, or whose
/// final component exists at all.
fn check_target(name: &str, worktree: &Path, relative: &str) -> Result<PathBuf, CacheError> {
    let mut current = worktree.to_path_buf();
    let parts: Vec<_> = Path::new(relative).components().collect();
    for (i, part) in parts.iter().enumerate() {
        current.push(part);
        match std::fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(CacheError::TrackedSymlink {
                    name: name.to_string(),
                    path: PathBuf::from(relative),
                    target: std::fs::read_link(&current)
                        .map(|t| t.display().to_string())
                        .unwrap_or_default(),
                });
            }
            Ok(_) if i + 1 == parts.len() => {
                return Err(CacheError::PathExists {
                    name: name.to_string(),
                    path: PathBuf::from(relative),
                });
            }
            Ok(_) => {}
            Err(_) => {}
        }
    }
    Ok(current)
}

/// Copies a tree: symlinks recreated as symlinks (never followed), files cloned with a
/// reflink where possible, else copied. Jobs write these trees: an explicit stack, not
/// recursion (a path past `PATH_MAX` is an error); async callers use a blocking thread.
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    let mut pending = vec![(from.to_path_buf(), to.to_path_buf())];
    while let Some((from, to)) = pending.pop() {
        for entry in std::fs::read_dir(&from)? {
            let entry = entry?;
            let source = entry.path();
            let target = to.join(entry.file_name());
            let kind = entry.file_type()?;
            if kind.is_symlink() {
                std::os::unix::fs::symlink(std::fs::read_link(&source)?, &target)?;
            } else if kind.is_dir() {
                std::fs::create_dir(&target)?;
                pending.push((source, target));
            } else if kind.is_file() {
                clone_file(&source, &target)?;
            }
        }
    }
    Ok(())
}

fn clone_file(from: &Path, to: &Path) -> std::io::Result<()> {
    let source = std::fs::File::open(from)?;
    let target = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)?;
    // Share the blocks where the filesystem can (btrfs, xfs); elsewhere copy.
    let cloned = crate::sys::reflink(&source, &target);
    drop(target);
    if !cloned {
        std::fs::remove_file(to)?;
        std::fs::copy(from, to)?;
    } else {
        std::fs::set_permissions(to, source.metadata()?.permissions())?;
    }
    Ok(())
}

/// The directory of one cache of one repository.
fn cache_dir(caches_root: &Path, repo_key: &str, name: &str) -> PathBuf {
    caches_root.join(repo_key).join(name)
}

/// Finds or creates the entry for `hash`; a new entry is seeded from the most recently used
/// entry of the same cache. Safe when several jobs create the same entry at once.
fn ensure_entry(
    dir: &Path,
    name: &str,
    hash: &str,
    keys: &[String],
) -> Result<PathBuf, CacheError> {
    let entry = dir.join(hash);
    let meta_path = dir.join(format!("{hash}.meta"));
    let now = Utc::now();
    if !entry.is_dir() {
        std::fs::create_dir_all(dir).map_err(io(name, dir))?;
        let staging = dir.join(format!(".staging-{hash}-{}", random_hex(8)));
        let seed = most_recent_entry(dir);
        let staged = match &seed {
            Some(seed) => copy_tree(seed, &staging),
            None => std::fs::create_dir(&staging),
        };
        staged.map_err(io(name, &staging))?;
        match std::fs::rename(&staging, &entry) {
            Ok(()) => {}
            // Another job won the race: use its entry.
            Err(_) if entry.is_dir() => {
                let _ = crate::tree::remove_tree(&staging);
            }
            Err(source) => {
                let _ = crate::tree::remove_tree(&staging);
                return Err(CacheError::Io {
                    name: name.to_string(),
                    path: entry,
                    source,
                });
            }
        }
    }
    let created_at = read_meta(&meta_path).map_or(now, |m| m.created_at);
    let meta = EntryMeta {
        created_at,
        last_used_at: now,
        key_files: keys.to_vec(),
    };
    let bytes = serde_json::to_vec(&meta).expect("entry metadata serializes");
    write_atomic(&meta_path, &bytes, false).map_err(io(name, &meta_path))?;
    Ok(entry)
}

fn read_meta(path: &Path) -> Option<EntryMeta> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn most_recent_entry(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let hash = name.strip_suffix(".meta")?.to_string();
            let meta = read_meta(&e.path())?;
            let entry = dir.join(&hash);
            entry.is_dir().then_some((meta.last_used_at, entry))
        })
        .max_by_key(|(used, _)| *used)
        .map(|(_, entry)| entry)
}

/// Places every cache of a job into its checkout (links, copies) and returns what the record
/// and the runtime need. `container` says whether a container will mount them; without one,
/// `mount` falls back to `symlink`.
pub fn place(
    caches_root: &Path,
    repo_key: &str,
    worktree: &Path,
    specs: &[CacheSpec],
    container: bool,
) -> Result<Vec<JobCache>, CacheError> {
    let mut placed = Vec::new();
    for spec in specs {
        let (name, strategy) = spec.resolve()?;
        let hash = key_hash(worktree, &spec.key);
        let dir = cache_dir(caches_root, repo_key, &name);
        // Check the target before creating anything, so a refused repo leaves no entry.
        let target = match &spec.path {
            Some(path) => Some(check_target(&name, worktree, path)?),
            None => None,
        };
        let entry = ensure_entry(&dir, &name, &hash, &spec.key)?;
        let effective = match strategy {
            Strategy::Mount if !container => Strategy::Symlink,
            other => other,
        };
        if let Some(target) = &target {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent).map_err(io(&name, parent))?;
            }
            match effective {
                Strategy::Symlink => {
                    std::os::unix::fs::symlink(&entry, target).map_err(io(&name, target))?;
                }
                Strategy::Copy => copy_tree(&entry, target).map_err(io(&name, target))?,
                // The container runtime mounts it; the checkout keeps an empty mount point.
                Strategy::Mount => std::fs::create_dir(target).map_err(io(&name, target))?,
                Strategy::Env => {}
            }
        }
        placed.push(JobCache {
            name,
            strategy: effective,
            path: spec.path.clone(),
            env: spec.env.clone(),
            entry,
            readonly: spec.readonly,
        });
    }
    Ok(placed)
}

/// The `info/exclude` patterns that keep cache paths out of git (`/path` also matches a
/// symlink, unlike `path/`).
pub fn exclude_patterns(caches: &[JobCache]) -> Vec<String> {
    caches
        .iter()
        .filter_map(|c| c.path.as_ref())
        .map(|p| format!("/{p}"))
        .collect()
}

/// Environment variables a job's execs get from its `env` caches.
pub fn env_vars(caches: &[JobCache]) -> BTreeMap<String, String> {
    caches
        .iter()
        .filter_map(|c| Some((c.env.clone()?, c.entry.display().to_string())))
        .collect()
}

/// One entry, for `paddock cache ls`.
#[derive(Debug, Clone, Serialize)]
pub struct EntryInfo {
    pub repo_key: String,
    pub cache: String,
    pub key: String,
    pub path: PathBuf,
    pub size_bytes: u64,
    pub created_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub jobs: Vec<String>,
}

/// Every entry under the caches root; `users` maps an entry path to the jobs using it.
pub fn list_entries(caches_root: &Path, users: &BTreeMap<PathBuf, Vec<String>>) -> Vec<EntryInfo> {
    let mut out = Vec::new();
    let Ok(repos) = std::fs::read_dir(caches_root) else {
        return out;
    };
    for repo in repos.flatten().filter(|e| e.path().is_dir()) {
        let Ok(caches) = std::fs::read_dir(repo.path()) else {
            continue;
        };
        for cache in caches.flatten().filter(|e| e.path().is_dir()) {
            let Ok(entries) = std::fs::read_dir(cache.path()) else {
                continue;
            };
            for entry in entries.flatten() {
                let key = entry.file_name().to_string_lossy().into_owned();
                if key.starts_with('.') || !entry.path().is_dir() {
                    continue;
                }
                let meta = read_meta(&cache.path().join(format!("{key}.meta")));
                out.push(EntryInfo {
                    repo_key: repo.file_name().to_string_lossy().into_owned(),
                    cache: cache.file_name().to_string_lossy().into_owned(),
                    path: entry.path(),
                    size_bytes: crate::tree::size(&entry.path()),
                    created_at: meta.as_ref().map(|m| m.created_at),
                    last_used_at: meta.as_ref().map(|m| m.last_used_at),
                    jobs: users.get(&entry.path()).cloned().unwrap_or_default(),
                    key,
                });
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Removes an entry and its side file.
pub fn remove_entry(entry: &EntryInfo) -> std::io::Result<()> {
    crate::tree::remove_tree(&entry.path)?;
    let meta = entry
        .path
        .parent()
        .map(|dir| dir.join(format!("{}.meta", entry.key)));
    if let Some(meta) = meta {
        let _ = std::fs::remove_file(meta);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> CacheSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn specs_are_checked() {
        assert_eq!(
            spec("path: node_modules\nkey: [package-lock.json]")
                .resolve()
                .unwrap(),
            ("node_modules".into(), Strategy::Symlink)
        );
        assert_eq!(
            spec("env: CARGO_HOME\nname: cargo-home").resolve().unwrap(),
            ("cargo-home".into(), Strategy::Env)
        );
        assert_eq!(
            spec("path: .venv\nstrategy: copy").resolve().unwrap().0,
            "venv"
        );
        for bad in [
            "path: ../x",
            "path: /abs",
            "path: .git/hooks",
            "env: X\npath: y",
            "{}",
            "path: x\nstrategy: teleport",
            "path: x\nreadonly: true",
            "path: x\nkey: [../secret]",
        ] {
            assert!(spec(bad).resolve().is_err(), "{bad}");
        }
    }

    #[test]
    fn copies_a_deep_chain_without_recursion() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        let mut bottom = from.clone();
        for _ in 0..1_000 {
            bottom.push("d");
        }
        std::fs::create_dir_all(&bottom).unwrap();
        std::fs::write(bottom.join("f"), "x").unwrap();
        let (source, target) = (from, dir.path().join("to"));
        let copied = std::thread::Builder::new()
            .stack_size(64 * 1024) // one frame per level would overflow it
            .spawn(move || copy_tree(&source, &target))
            .unwrap()
            .join()
            .expect("no overflow");
        copied.unwrap();
        let mut copy = dir.path().join("to");
        for _ in 0..1_000 {
            copy.push("d");
        }
        assert_eq!(std::fs::read_to_string(copy.join("f")).unwrap(), "x");
        crate::tree::remove_tree(dir.path()).unwrap();
    }

    #[test]
    fn copies_keep_symlinks_as_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("from");
        std::fs::create_dir_all(from.join(".bin")).unwrap();
        std::fs::write(from.join("lib.js"), "x").unwrap();
        std::os::unix::fs::symlink("../lib.js", from.join(".bin/tool")).unwrap();
        copy_tree(&from, &dir.path().join("to")).unwrap();
        let link = dir.path().join("to/.bin/tool");
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("../lib.js"));
    }

    #[test]
    fn key_hash_follows_content_and_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        let keys = vec!["lock".to_string()];
        let missing = key_hash(dir.path(), &keys);
        std::fs::write(dir.path().join("lock"), "a").unwrap();
        let a = key_hash(dir.path(), &keys);
        std::fs::write(dir.path().join("lock"), "b").unwrap();
        assert_ne!(a, key_hash(dir.path(), &keys));
        assert_ne!(a, missing);
        assert_eq!(key_hash(dir.path(), &[]), "shared");
    }
}
