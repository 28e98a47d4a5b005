//! Configuration: the user file, the repo's `.paddock.yaml`, `PADDOCK_*` variables and flags,
//! merged into one effective [`Config`] that remembers where every value came from.
//!
//! Precedence, highest first: CLI flag > environment > repo file > user file > built-in default.
//! All YAML parsing lives here. Files are read with unknown keys denied, so a typo is an error
//! that names the file and the key instead of a setting silently ignored.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use globset::Glob;

use crate::cache::CacheSpec;
pub use crate::env::{EnvLookup, ProcessEnv};

mod choices;
mod engines;
mod files;
mod narrow;
mod profile;
mod rows;
mod secrets;
mod setup;
mod show_rows;
mod trust;
use crate::units::{ByteSize, Cpus, HumanDuration, UnitError};
pub use choices::{
    BranchPolicy, CheckoutMode, EnvironmentChoice, KillPolicy, NetworkMode, PushPolicy, RootFs,
    RuntimeChoice,
};
use files::{ConfigFile, check_caches, check_profile_name, env_layers, read_file};
pub use files::{MAX_CONFIG_FILE, check_branch_template, user_config_path};
pub use profile::{DEFAULT_GIT_DISK, PoolSettings, Profile, ProfileLayer, Reserve, ReserveLayer};
pub(crate) use secrets::value_error;
pub use secrets::{EgressSettings, SecretSpec, check_spec};
pub use setup::{JobSetup, SetupSettings};
use show_rows::{cache_names, source_origin};
pub use trust::{Refusal, RepoTrust, add_trust, setup_from_untrusted_repo, trusts_repo};

/// The name of the repo-level config file, at the target repository's root.
pub const REPO_CONFIG_FILE: &str = ".paddock.yaml";
/// The branch name template used when no file or flag sets one.
pub const DEFAULT_BRANCH_TEMPLATE: &str = "agent/{agent}/{task}";
/// The tag `paddock image build` gives the agent image, and the default profile's image.
pub const DEFAULT_IMAGE: &str = "paddock-agent:latest";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to read config file `{path}`")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid config file `{path}`: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid value in `{origin}` for `{key}`: {message}")]
    Value {
        origin: String,
        key: String,
        message: String,
    },
    #[error("unknown profile `{name}` (known profiles: {known})")]
    UnknownProfile { name: String, known: String },
}

/// Where an effective value came from; shown by `paddock config show`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    UserFile(PathBuf),
    RepoFile(PathBuf),
    Env(String),
    Flag(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::UserFile(path) => write!(f, "user file {}", path.display()),
            Source::RepoFile(path) => write!(f, "repo file {}", path.display()),
            Source::Env(var) => write!(f, "env {var}"),
            Source::Flag(flag) => write!(f, "flag --{flag}"),
        }
    }
}

/// A value together with the layer that set it.
#[derive(Debug, Clone, PartialEq)]
pub struct Sourced<T> {
    pub value: T,
    pub source: Source,
}

impl<T> Sourced<T> {
    fn default_value(value: T) -> Self {
        Sourced {
            value,
            source: Source::Default,
        }
    }
}

/// What the user config's `admission:` section sets; unset fields take the defaults. The
/// budget counts what jobs *reserve* (each profile's `reserve`), not their limits, and bounds
/// what *runs* by exec slots.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdmissionSettings {
    /// The memory the existing jobs' reserves may add up to (default: 80% of the host's).
    pub memory: Option<ByteSize>,
    /// The CPUs the existing jobs' reserves may add up to (default: twice the host's cores).
    pub cpus: Option<Cpus>,
    /// At most this many jobs at once (default: no limit beyond memory and CPUs).
    pub max_jobs: Option<usize>,
    /// At most this many execs running at once, over all jobs (default: twice the host's
    /// cores).
    pub max_running_execs: Option<usize>,
    /// How long a create or an exec waits for room before it fails (default 30m).
    pub max_wait: Option<HumanDuration>,
}

impl AdmissionSettings {
    /// The share of the host's memory the reserves may add up to when `memory` is unset.
    pub const DEFAULT_MEMORY_SHARE: f64 = 0.8;
    /// The reserves' CPUs per host core when `cpus` is unset.
    pub const DEFAULT_CPUS_PER_CORE: f64 = 2.0;
    /// Exec slots per host core when `max_running_execs` is unset.
    pub const DEFAULT_EXECS_PER_CORE: usize = 2;
    /// How long a request waits for room when `max_wait` is unset.
    pub const DEFAULT_MAX_WAIT: HumanDuration =
        HumanDuration(std::time::Duration::from_secs(30 * 60));
}

/// When the sweeper considers a job stale, and what it does with its branch.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepSettings {
    /// No exec, shell or API use and no file change the daemon saw for this long.
    pub idle: Sourced<HumanDuration>,
    /// Finished (exited, failed, timed out) this long ago.
    pub keep_finished: Sourced<HumanDuration>,
    /// Older than this, whatever it does; `None` is off.
    pub max_age: Sourced<Option<HumanDuration>>,
    pub branch_policy: Sourced<BranchPolicy>,
    /// How often `paddock serve` sweeps.
    pub interval: Sourced<HumanDuration>,
    /// Jobs whose branch is merged into their base branch are stale (`sweep --merged`).
    pub merged: Sourced<bool>,
    /// A pristine checkout (of `checkout: overlay` jobs) that no job uses goes once it was
    /// last used this long ago.
    pub pristine_max_age: Sourced<HumanDuration>,
    /// A job paused this long is stale; `None` (the default): a paused job is never swept
    /// but by `max_age`.
    pub paused_max_age: Sourced<Option<HumanDuration>>,
}

impl Default for SweepSettings {
    fn default() -> Self {
        let hour = HumanDuration(std::time::Duration::from_secs(3600));
        SweepSettings {
            idle: Sourced::default_value(hour),
            keep_finished: Sourced::default_value(hour),
            max_age: Sourced::default_value(None),
            branch_policy: Sourced::default_value(BranchPolicy::DeleteIfNoCommits),
            interval: Sourced::default_value(HumanDuration(std::time::Duration::from_secs(300))),
            merged: Sourced::default_value(false),
            pristine_max_age: Sourced::default_value(hour),
            paused_max_age: Sourced::default_value(None),
        }
    }
}

/// One routing rule: a pattern on the agent name or the task id that picks a profile.
#[derive(Debug, Clone)]
pub struct Route {
    pub pattern: String,
    pub profile: String,
    pub source: Source,
}

#[derive(Debug, Clone, Default)]
pub struct Routing {
    pub agents: BTreeMap<String, Route>,
    pub tasks: BTreeMap<String, Route>,
}

/// The effective configuration after every layer has been applied.
#[derive(Debug, Clone)]
pub struct Config {
    pub user_file: Option<PathBuf>,
    pub repo_file: Option<PathBuf>,
    pub default_profile: Sourced<String>,
    pub branch_template: Sourced<String>,
    /// The default base ref for new jobs; `None` means the repository's HEAD.
    pub base: Option<Sourced<String>>,
    pub profiles: BTreeMap<String, Profile>,
    pub routing: Routing,
    /// A profile forced by `PADDOCK_PROFILE`.
    pub forced_profile: Option<Sourced<String>>,
    pub sweep: SweepSettings,
    /// The host budget of the admission queue (`admission:` in the user file).
    pub admission: AdmissionSettings,
    /// Top-level caches; a later layer replaces an earlier one's list.
    pub caches: Sourced<Vec<CacheSpec>>,
    /// Top-level `copy` and `setup` (see [`Config::job_setup`]).
    pub setup: SetupSettings,
    /// The user file's `secrets:` (a repository's file may not have them).
    pub secrets: BTreeMap<String, SecretSpec>,
    /// The user file's `egress:` and `engines:` (a repository's file may not name any).
    pub egress: EgressSettings,
    pub engines: BTreeMap<String, crate::engines::EngineSpec>,
    /// The user file's `trust:`: repositories whose file may widen a job.
    pub trust: Vec<String>,
    /// The user file's `devcontainer_images:` (globs): images an untrusted devcontainer may use.
    pub devcontainer_images: Vec<String>,
    /// How the repository's file was read (trusted, or what of it was refused); `None`
    /// without one.
    pub repo_trust: Option<RepoTrust>,
}

impl Config {
    /// Loads the effective configuration for a repository (or none, outside one).
    pub fn load(repo_root: Option<&Path>, env: &dyn EnvLookup) -> Result<Config, ConfigError> {
        let mut config = Config {
            user_file: None,
            repo_file: None,
            default_profile: Sourced::default_value("default".to_string()),
            branch_template: Sourced::default_value(DEFAULT_BRANCH_TEMPLATE.to_string()),
            base: None,
            profiles: BTreeMap::from([("default".to_string(), Profile::default())]),
            routing: Routing::default(),
            forced_profile: None,
            sweep: SweepSettings::default(),
            admission: AdmissionSettings::default(),
            caches: Sourced::default_value(Vec::new()),
            setup: SetupSettings::default(),
            secrets: BTreeMap::new(),
            egress: EgressSettings::default(),
            engines: BTreeMap::new(),
            trust: Vec::new(),
            devcontainer_images: Vec::new(),
            repo_trust: None,
        };
        if let Some((path, explicit)) = user_config_path(env)
            && let Some((mut file, _)) = read_file(&path, explicit)?
        {
            config.trust = file.trust.take().unwrap_or_default();
            config.devcontainer_images = file.devcontainer_images.take().unwrap_or_default();
            config.apply_file(file, &Source::UserFile(path.clone()))?;
            config.user_file = Some(path);
        }
        if let Some(root) = repo_root {
            let path = root.join(REPO_CONFIG_FILE);
            if let Some((file, text)) = read_file(&path, false)? {
                config.apply_repo_file(root, file, &text, &path, env)?;
                config.repo_file = Some(path);
            }
        }
        config.apply_env(env)?;
        config.check_routes()?;
        Ok(config)
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one arm per top-level key of the config file, in the format's order"
    )]
    fn apply_file(&mut self, mut file: ConfigFile, source: &Source) -> Result<(), ConfigError> {
        let origin = source_origin(source);
        setup::check_file(&mut file, &origin)?;
        self.apply_secrets(&mut file, source, &origin)?;
        self.setup.apply(&file, source);
        if let Some(value) = file.default_profile {
            self.default_profile = Sourced {
                value,
                source: source.clone(),
            };
        }
        if let Some(value) = file.branch_template {
            check_branch_template(&value).map_err(|message| ConfigError::Value {
                origin: origin.clone(),
                key: "branch_template".into(),
                message,
            })?;
            self.branch_template = Sourced {
                value,
                source: source.clone(),
            };
        }
        if let Some(value) = file.base {
            self.base = Some(Sourced {
                value,
                source: source.clone(),
            });
        }
        for (name, layer) in &file.profiles {
            check_profile_name(name).map_err(|message| ConfigError::Value {
                origin: origin.clone(),
                key: format!("profiles.{name}"),
                message,
            })?;
            // A named profile starts from the built-in defaults, then every layer that names it.
            self.profiles
                .entry(name.clone())
                .or_default()
                .apply(layer, source);
        }
        if let Some(caches) = file.caches {
            check_caches(&caches, &origin, "caches")?;
            self.caches = Sourced {
                value: caches,
                source: source.clone(),
            };
        }
        for (name, layer) in &file.profiles {
            if let Some(caches) = &layer.caches {
                check_caches(caches, &origin, &format!("profiles.{name}.caches"))?;
            }
        }
        if let Some(admission) = file.admission {
            if matches!(source, Source::RepoFile(_)) {
                return Err(ConfigError::Value {
                    origin: origin.clone(),
                    key: "admission".into(),
                    message: "the host budget belongs in the user config file, not a repository's"
                        .into(),
                });
            }
            self.admission = admission;
        }
        if let Some(sweep) = file.sweep {
            let sourced = |value| Sourced {
                value,
                source: source.clone(),
            };
            if let Some(v) = sweep.idle {
                self.sweep.idle = sourced(v);
            }
            if let Some(v) = sweep.keep_finished {
                self.sweep.keep_finished = sourced(v);
            }
            if let Some(v) = sweep.interval {
                self.sweep.interval = sourced(v);
            }
            if let Some(v) = sweep.pristine_max_age {
                self.sweep.pristine_max_age = sourced(v);
            }
            if let Some(value) = sweep.merged {
                self.sweep.merged = Sourced {
                    value,
                    source: source.clone(),
                };
            }
            if let Some(value) = sweep.branch_policy {
                self.sweep.branch_policy = Sourced {
                    value,
                    source: source.clone(),
                };
            }
            for (text, key, target) in [
                (sweep.max_age, "sweep.max_age", &mut self.sweep.max_age),
                (
                    sweep.paused_max_age,
                    "sweep.paused_max_age",
                    &mut self.sweep.paused_max_age,
                ),
            ] {
                let Some(text) = text else { continue };
                let value = crate::units::parse_optional_duration(&text).map_err(|e| {
                    ConfigError::Value {
                        origin: origin.clone(),
                        key: key.into(),
                        message: format!("{e} (or `off`)"),
                    }
                })?;
                *target = Sourced {
                    value,
                    source: source.clone(),
                };
            }
        }
        if let Some(routing) = file.routing {
            for (kind, rules, target) in [
                ("agents", routing.agents, &mut self.routing.agents),
                ("tasks", routing.tasks, &mut self.routing.tasks),
            ] {
                for (pattern, profile) in rules {
                    Glob::new(&pattern).map_err(|e| ConfigError::Value {
                        origin: origin.clone(),
                        key: format!("routing.{kind}.{pattern}"),
                        message: format!("invalid glob: {e}"),
                    })?;
                    target.insert(
                        pattern.clone(),
                        Route {
                            pattern,
                            profile,
                            source: source.clone(),
                        },
                    );
                }
            }
        }
        Ok(())
    }

    /// `secrets:`, `egress:`, `engines:` and profiles' `secrets` come from the user file only:
    /// a repository's file could otherwise send the user's tokens to hosts it names.
    fn apply_secrets(
        &mut self,
        file: &mut ConfigFile,
        source: &Source,
        origin: &str,
    ) -> Result<(), ConfigError> {
        let repo = matches!(source, Source::RepoFile(_));
        let refuse = |key: String| ConfigError::Value {
            origin: origin.to_string(),
            key,
            message: "secrets belong in the user config file, never a repository's".into(),
        };
        let in_profile = file.profiles.iter().find(|(_, l)| l.secrets.is_some());
        if repo {
            if file.secrets.is_some() {
                return Err(refuse("secrets".into()));
            }
            if file.egress.is_some() {
                return Err(refuse("egress".into()));
            }
            if let Some((name, _)) = in_profile {
                return Err(refuse(format!("profiles.{name}.secrets")));
            }
        }
        for (name, spec) in file.secrets.take().unwrap_or_default() {
            check_spec(&name, &spec).map_err(|e| match e {
                ConfigError::Value { key, message, .. } => ConfigError::Value {
                    origin: origin.to_string(),
                    key,
                    message,
                },
                other => other,
            })?;
            self.secrets.insert(name, spec);
        }
        if let Some(egress) = file.egress.take() {
            self.egress = egress;
        }
        engines::apply(&mut self.engines, file.engines.take(), repo, origin)?;
        Ok(())
    }

    fn apply_env(&mut self, env: &dyn EnvLookup) -> Result<(), ConfigError> {
        fn parse<T: FromStr<Err = UnitError>>(
            env: &dyn EnvLookup,
            var: &str,
        ) -> Result<Option<T>, ConfigError> {
            env.var(var)
                .map(|raw| {
                    raw.parse().map_err(|e: UnitError| ConfigError::Value {
                        origin: "environment".into(),
                        key: var.to_string(),
                        message: e.to_string(),
                    })
                })
                .transpose()
        }
        let layer = ProfileLayer {
            image: env.var("PADDOCK_IMAGE"),
            runtime: parse(env, "PADDOCK_RUNTIME")?,
            memory: parse(env, "PADDOCK_MEMORY")?,
            cpus: parse(env, "PADDOCK_CPUS")?,
            pids: env
                .var("PADDOCK_PIDS")
                .map(|raw| {
                    raw.parse().map_err(|_| ConfigError::Value {
                        origin: "environment".into(),
                        key: "PADDOCK_PIDS".into(),
                        message: format!("invalid pids `{raw}`: expected a whole number"),
                    })
                })
                .transpose()?,
            network: parse(env, "PADDOCK_NETWORK")?,
            timeout: parse(env, "PADDOCK_TIMEOUT")?,
            kill_policy: parse(env, "PADDOCK_KILL_POLICY")?,
            checkout: parse(env, "PADDOCK_CHECKOUT")?,
            ..ProfileLayer::default()
        };
        // Environment overrides apply to whichever profile a job ends up with; each value is
        // attributed to the variable that set it.
        for profile in self.profiles.values_mut() {
            for (var, one) in env_layers(&layer) {
                profile.apply(&one, &Source::Env(var.to_string()));
            }
        }
        if let Some(value) = env.var("PADDOCK_BRANCH_TEMPLATE") {
            check_branch_template(&value).map_err(|message| ConfigError::Value {
                origin: "environment".into(),
                key: "PADDOCK_BRANCH_TEMPLATE".into(),
                message,
            })?;
            self.branch_template = Sourced {
                value,
                source: Source::Env("PADDOCK_BRANCH_TEMPLATE".into()),
            };
        }
        if let Some(value) = env.var("PADDOCK_PROFILE") {
            self.forced_profile = Some(Sourced {
                value,
                source: Source::Env("PADDOCK_PROFILE".into()),
            });
        }
        Ok(())
    }

    fn check_routes(&self) -> Result<(), ConfigError> {
        let mut names: Vec<(&str, String, &Source)> = vec![(
            &self.default_profile.value,
            "default_profile".to_string(),
            &self.default_profile.source,
        )];
        for (kind, routes) in [
            ("agents", &self.routing.agents),
            ("tasks", &self.routing.tasks),
        ] {
            for route in routes.values() {
                names.push((
                    &route.profile,
                    format!("routing.{kind}.{}", route.pattern),
                    &route.source,
                ));
            }
        }
        for (name, key, source) in names {
            if !self.profiles.contains_key(name) {
                return Err(ConfigError::Value {
                    origin: source_origin(source),
                    key,
                    message: format!(
                        "unknown profile `{name}` (known profiles: {})",
                        self.known_profiles()
                    ),
                });
            }
        }
        Ok(())
    }

    fn known_profiles(&self) -> String {
        self.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    /// Picks the profile for a job. Order: `--profile`, `PADDOCK_PROFILE`, an exact routing
    /// match (task, then agent), a glob match (task, then agent; the longest pattern wins),
    /// then `default_profile`.
    pub fn select_profile(
        &self,
        flag: Option<&str>,
        agent: &str,
        task: Option<&str>,
    ) -> Result<(String, Profile), ConfigError> {
        let name = match flag {
            Some(name) => name.to_string(),
            None => match &self.forced_profile {
                Some(forced) => forced.value.clone(),
                None => self
                    .route(agent, task)
                    .unwrap_or_else(|| self.default_profile.value.clone()),
            },
        };
        let profile =
            self.profiles
                .get(&name)
                .cloned()
                .ok_or_else(|| ConfigError::UnknownProfile {
                    name: name.clone(),
                    known: self.known_profiles(),
                })?;
        Ok((name, profile))
    }

    fn route(&self, agent: &str, task: Option<&str>) -> Option<String> {
        let candidates: Vec<(&BTreeMap<String, Route>, &str)> = task
            .map(|t| (&self.routing.tasks, t))
            .into_iter()
            .chain(std::iter::once((&self.routing.agents, agent)))
            .collect();
        for (routes, value) in &candidates {
            if let Some(route) = routes.get(*value) {
                return Some(route.profile.clone());
            }
        }
        for (routes, value) in &candidates {
            let best = routes
                .values()
                .filter(|route| {
                    Glob::new(&route.pattern).is_ok_and(|g| g.compile_matcher().is_match(value))
                })
                .max_by_key(|route| route.pattern.len());
            if let Some(route) = best {
                return Some(route.profile.clone());
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod trust_tests;
