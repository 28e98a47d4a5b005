//! Profiles: one layer's optional settings ([`ProfileLayer`]) and the effective settings a
//! job runs with ([`Profile`]), each value with where it came from.
//!
//! A profile's `cpus` and `memory` are the container's caps; its `reserve` is what the job
//! holds of the host budget while it exists (see `admission`). The two are kept apart
//! because an agent's sandbox idles most of its life (the agent waits on its model): counting
//! caps as held would fill a laptop with two or three idle jobs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    CheckoutMode, ConfigError, DEFAULT_IMAGE, EnvironmentChoice, KillPolicy, NetworkMode,
    PushPolicy, RootFs, RuntimeChoice, Source, Sourced,
    show_rows::{cache_names, source_origin},
};
use crate::cache::CacheSpec;
use crate::egress::AllowEntry;
use crate::units::{ByteSize, Cpus, HumanDuration};

/// A container job's git disk without a limit (`git_disk`, see `disk`): room for the
/// objects an agent makes and its syncs' output, far from what a runaway write would take.
pub const DEFAULT_GIT_DISK: ByteSize = ByteSize(2 << 30);

/// The source of a setting no layer set.
static UNSET: Source = Source::Default;

/// One layer's view of a profile: every field optional, so layers can be stacked.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileLayer {
    pub image: Option<String>,
    pub runtime: Option<RuntimeChoice>,
    /// The engine of `engines:` the profile's jobs run on, `auto` (the one with the most
    /// free budget) or `local` (the default); `create --engine` wins.
    pub engine: Option<String>,
    /// How the job's checkout is made: `worktree` (default) or `overlay`.
    pub checkout: Option<CheckoutMode>,
    pub memory: Option<ByteSize>,
    /// The most the job's checkout may hold (its changes, in a filesystem of this size);
    /// implies `checkout: overlay`.
    pub disk: Option<ByteSize>,
    /// Without `disk`: the size of a container job's own filesystem for its git dir and
    /// outbox (as root; see `disk`).
    pub git_disk: Option<ByteSize>,
    pub cpus: Option<Cpus>,
    /// What the job holds of the host budget while it exists (its limits stay caps).
    pub reserve: Option<ReserveLayer>,
    pub pids: Option<u32>,
    pub network: Option<NetworkMode>,
    /// Allow-list entries for `network: allowlist`.
    pub allow: Option<Vec<AllowEntry>>,
    pub timeout: Option<HumanDuration>,
    pub kill_policy: Option<KillPolicy>,
    /// `writable`: the job's own writable layer over the image (runsc, microvm only).
    pub rootfs: Option<RootFs>,
    pub grace: Option<HumanDuration>,
    pub workspace_dir: Option<String>,
    pub uid: Option<u32>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Caches of jobs with this profile, added to the file's top-level `caches`.
    pub caches: Option<Vec<CacheSpec>>,
    /// Ports inside the job served to the host, each on a loopback port paddock chooses.
    pub ports: Option<Vec<u16>>,
    /// Untracked files copied from the user's checkout into the job, added to the file's
    /// top-level `copy`.
    pub copy: Option<Vec<String>>,
    /// Commands run in the job right after create, after the file's top-level `setup`.
    pub setup: Option<Vec<String>>,
    /// Whether a failed setup command leaves the job in place (default: it fails the create).
    pub setup_optional: Option<bool>,
    /// Each setup command's deadline (default: the profile's `timeout`).
    pub setup_timeout: Option<HumanDuration>,
    /// The network setup commands have (default: the job's own).
    pub setup_network: Option<NetworkMode>,
    /// With `setup_network: allowlist`: what setup may reach besides the job's allow-list.
    pub setup_allow: Option<Vec<AllowEntry>>,
    /// A warm pool of this profile's containers, started ahead of creates.
    pub pool: Option<PoolSettings>,
    /// Secrets of the user config its jobs get (user file only).
    pub secrets: Option<Vec<String>>,
    /// `on-sync`: push the job's branch after each exec that moved it (user config only).
    pub push: Option<PushPolicy>,
    /// Automatic checkpoints: one before each exec, the newest `keep` kept (user config only).
    pub checkpoint: Option<CheckpointPolicy>,
    /// Whether the repository's devcontainer.json defines the job's environment.
    pub environment: Option<EnvironmentChoice>,
    /// The network of an image build from the repository's Dockerfile (a devcontainer's
    /// `build`): `none` (the default) or `open`.
    pub build_network: Option<NetworkMode>,
}

/// `pool:` of a profile: how many containers wait, started ahead, for this profile's jobs
/// (per repository), and how long an unused pool stays before it drains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSettings {
    pub size: u32,
    /// No claim for this long and the pool drains (default 30m).
    #[serde(default = "default_pool_idle")]
    pub idle: HumanDuration,
}

/// `checkpoint:` of a profile: a checkpoint before every exec (`auto-…`), so an orchestrator
/// can roll back any exec; the newest `keep` (1 to 50) stay, older ones are removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointPolicy {
    #[serde(default)]
    pub before_exec: bool,
    #[serde(default = "default_keep", deserialize_with = "keep_in_range")]
    pub keep: u32,
}

/// The most automatic checkpoints a job keeps.
pub const MAX_AUTO_CHECKPOINTS: u32 = 50;

fn default_keep() -> u32 {
    10
}

fn keep_in_range<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    let keep = u32::deserialize(deserializer)?;
    if keep == 0 || keep > MAX_AUTO_CHECKPOINTS {
        return Err(serde::de::Error::custom(format!(
            "checkpoint.keep takes 1 to {MAX_AUTO_CHECKPOINTS}, not {keep}"
        )));
    }
    Ok(keep)
}

impl Default for CheckpointPolicy {
    fn default() -> Self {
        CheckpointPolicy {
            before_exec: false,
            keep: default_keep(),
        }
    }
}

/// `reserve:` of a profile in one layer: either part may be set alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReserveLayer {
    pub cpus: Option<Cpus>,
    pub memory: Option<ByteSize>,
}

/// What a job holds of the host budget while it exists: the share admission counts, not a
/// cap (the container's caps are the limits `cpus` and `memory`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reserve {
    pub cpus: Cpus,
    pub memory: ByteSize,
}

impl Reserve {
    /// A job's reserve when no layer sets one (and the reserve of records made before
    /// reserves): an idle sandbox's share, so 20 jobs fit a 2-core laptop's budget.
    pub const DEFAULT: Reserve = Reserve {
        cpus: Cpus(0.1),
        memory: ByteSize(256 << 20),
    };

    /// This reserve cut down to the caps `cpus` and `memory` (a memory cap of 0 is none).
    pub fn within(self, cpus: Cpus, memory: ByteSize) -> Reserve {
        Reserve {
            cpus: Cpus(self.cpus.0.min(cpus.0)),
            memory: if memory.0 == 0 {
                self.memory
            } else {
                ByteSize(self.memory.0.min(memory.0))
            },
        }
    }
}

impl Default for Reserve {
    fn default() -> Self {
        Reserve::DEFAULT
    }
}

fn default_pool_idle() -> HumanDuration {
    HumanDuration(std::time::Duration::from_secs(1800))
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            size: 0,
            idle: default_pool_idle(),
        }
    }
}

/// The effective settings a job runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub image: Sourced<String>,
    pub runtime: Sourced<RuntimeChoice>,
    pub checkout: Sourced<CheckoutMode>,
    pub memory: Sourced<ByteSize>,
    /// Unset (no limit) unless a layer sets it.
    pub disk: Option<Sourced<ByteSize>>,
    /// Where the job runs (`engine:`); `None`: the local engine.
    pub engine: Option<Sourced<String>>,
    /// The cap of a container job's git dir and outbox when it has no `disk` (root only).
    pub git_disk: Sourced<ByteSize>,
    pub cpus: Sourced<Cpus>,
    /// The reserve's parts (see [`Profile::reserve`]).
    pub reserve_cpus: Sourced<Cpus>,
    pub reserve_memory: Sourced<ByteSize>,
    pub pids: Sourced<u32>,
    pub network: Sourced<NetworkMode>,
    pub allow: Sourced<Vec<AllowEntry>>,
    pub timeout: Sourced<HumanDuration>,
    pub kill_policy: Sourced<KillPolicy>,
    pub rootfs: Sourced<RootFs>,
    pub grace: Sourced<HumanDuration>,
    pub workspace_dir: Sourced<String>,
    /// The unprivileged uid the agent runs as when paddock itself runs as root.
    pub uid: Sourced<u32>,
    pub env: BTreeMap<String, Sourced<String>>,
    pub caches: Sourced<Vec<CacheSpec>>,
    pub ports: Sourced<Vec<u16>>,
    pub copy: Sourced<Vec<String>>,
    pub setup: Sourced<Vec<String>>,
    /// Unset unless a layer sets it for this profile (then it wins over the top-level value).
    pub setup_optional: Option<Sourced<bool>>,
    pub setup_timeout: Option<Sourced<HumanDuration>>,
    pub setup_network: Option<Sourced<NetworkMode>>,
    pub setup_allow: Option<Sourced<Vec<AllowEntry>>>,
    pub pool: Sourced<PoolSettings>,
    /// Names of user-config secrets its jobs get.
    pub secrets: Sourced<Vec<String>>,
    pub push: Sourced<PushPolicy>,
    pub checkpoint: Sourced<CheckpointPolicy>,
    pub environment: Sourced<EnvironmentChoice>,
    /// Unset: builds of the repository's Dockerfile have no network.
    pub build_network: Option<Sourced<NetworkMode>>,
}

impl Default for Profile {
    fn default() -> Self {
        Profile {
            image: Sourced::default_value(DEFAULT_IMAGE.to_string()),
            runtime: Sourced::default_value(RuntimeChoice::Auto),
            checkout: Sourced::default_value(CheckoutMode::Worktree),
            memory: Sourced::default_value(ByteSize(2 << 30)),
            disk: None,
            engine: None,
            git_disk: Sourced::default_value(DEFAULT_GIT_DISK),
            cpus: Sourced::default_value(Cpus(2.0)),
            reserve_cpus: Sourced::default_value(Reserve::DEFAULT.cpus),
            reserve_memory: Sourced::default_value(Reserve::DEFAULT.memory),
            pids: Sourced::default_value(512),
            network: Sourced::default_value(NetworkMode::None),
            allow: Sourced::default_value(Vec::new()),
            timeout: Sourced::default_value(HumanDuration(std::time::Duration::from_secs(600))),
            kill_policy: Sourced::default_value(KillPolicy::Graceful),
            rootfs: Sourced::default_value(RootFs::ReadOnly),
            grace: Sourced::default_value(HumanDuration(std::time::Duration::from_secs(5))),
            workspace_dir: Sourced::default_value("/workspace".to_string()),
            uid: Sourced::default_value(1000),
            env: BTreeMap::new(),
            caches: Sourced::default_value(Vec::new()),
            ports: Sourced::default_value(Vec::new()),
            copy: Sourced::default_value(Vec::new()),
            setup: Sourced::default_value(Vec::new()),
            setup_optional: None,
            setup_timeout: None,
            setup_network: None,
            setup_allow: None,
            pool: Sourced::default_value(PoolSettings::default()),
            secrets: Sourced::default_value(Vec::new()),
            push: Sourced::default_value(PushPolicy::Manual),
            checkpoint: Sourced::default_value(CheckpointPolicy::default()),
            environment: Sourced::default_value(EnvironmentChoice::Auto),
            build_network: None,
        }
    }
}

impl Profile {
    /// Stacks `layer` on top of this profile; every value it sets is attributed to `source`.
    #[expect(clippy::too_many_lines, reason = "one assignment per profile key")]
    pub fn apply(&mut self, layer: &ProfileLayer, source: &Source) {
        macro_rules! set {
            ($($field:ident),*) => {$(
                if let Some(value) = &layer.$field {
                    self.$field = Sourced { value: value.clone(), source: source.clone() };
                }
            )*};
        }
        set!(
            image,
            runtime,
            checkout,
            memory,
            cpus,
            pids,
            network,
            allow,
            timeout,
            kill_policy,
            rootfs,
            grace,
            workspace_dir,
            uid,
            caches,
            ports,
            copy,
            setup,
            pool,
            secrets,
            environment
        );
        let sourced = |value| Sourced {
            value,
            source: source.clone(),
        };
        if let Some(reserve) = layer.reserve {
            if let Some(value) = reserve.cpus {
                self.reserve_cpus = Sourced {
                    value,
                    source: source.clone(),
                };
            }
            if let Some(value) = reserve.memory {
                self.reserve_memory = Sourced {
                    value,
                    source: source.clone(),
                };
            }
        }
        // Nor make paddock keep up to 50 checkpoints of every job (its disk, the user's host).
        if let Some(value) = layer.checkpoint {
            if matches!(source, Source::RepoFile(_)) {
                tracing::warn!(%source, "`checkpoint` is honoured only outside the repository's file");
            } else {
                self.checkpoint = Sourced {
                    value,
                    source: source.clone(),
                };
            }
        }
        // A repository's own file cannot make paddock publish with the user's credentials.
        if let Some(value) = layer.push {
            if matches!(source, Source::RepoFile(_)) {
                tracing::warn!(%source, "`push` is honoured only outside the repository's file");
            } else {
                self.push = Sourced {
                    value,
                    source: source.clone(),
                };
            }
        }
        if let Some(value) = layer.setup_optional {
            self.setup_optional = Some(sourced(value));
        }
        if let Some(value) = layer.git_disk {
            self.git_disk = Sourced {
                value,
                source: source.clone(),
            };
        }
        if let Some(value) = layer.disk {
            self.disk = Some(Sourced {
                value,
                source: source.clone(),
            });
        }
        if let Some(value) = layer.engine.clone() {
            self.engine = Some(Sourced {
                value,
                source: source.clone(),
            });
        }
        if let Some(value) = layer.setup_timeout {
            self.setup_timeout = Some(Sourced {
                value,
                source: source.clone(),
            });
        }
        if let Some(value) = layer.setup_network {
            self.setup_network = Some(Sourced {
                value,
                source: source.clone(),
            });
        }
        if let Some(value) = layer.build_network {
            self.build_network = Some(Sourced {
                value,
                source: source.clone(),
            });
        }
        if let Some(value) = &layer.setup_allow {
            self.setup_allow = Some(Sourced {
                value: value.clone(),
                source: source.clone(),
            });
        }
        for (key, value) in &layer.env {
            self.env.insert(
                key.clone(),
                Sourced {
                    value: value.clone(),
                    source: source.clone(),
                },
            );
        }
    }

    /// The reserve a job of this profile holds. A reserve no layer set is cut down to the
    /// job's caps; one a layer set above a cap is refused, naming both and where each came
    /// from (a job cannot use more than its cap, so reserving more only wastes the budget).
    pub fn reserve(&self) -> Result<Reserve, ConfigError> {
        let over = |what: &str, reserve: String, from: &Source, cap: String, cap_from: &Source| {
            ConfigError::Value {
                origin: source_origin(from),
                key: format!("reserve.{what}"),
                message: format!(
                    "a reserve of {reserve} is more than the job's {what} limit {cap} (from {cap_from}): a job cannot use more than its limit"
                ),
            }
        };
        let (cpus, memory) = (&self.reserve_cpus, &self.reserve_memory);
        if cpus.source != Source::Default && cpus.value.0 > self.cpus.value.0 {
            return Err(over(
                "cpus",
                format!("{} CPUs", cpus.value),
                &cpus.source,
                self.cpus.value.to_string(),
                &self.cpus.source,
            ));
        }
        let capped = self.memory.value.0 != 0;
        if memory.source != Source::Default && capped && memory.value > self.memory.value {
            return Err(over(
                "memory",
                memory.value.to_string(),
                &memory.source,
                self.memory.value.to_string(),
                &self.memory.source,
            ));
        }
        Ok(Reserve {
            cpus: cpus.value,
            memory: memory.value,
        }
        .within(self.cpus.value, self.memory.value))
    }

    /// The profile's settings as `(key, value, source)` rows, for `config show`.
    #[expect(
        clippy::too_many_lines,
        reason = "one row per profile key, in `config show`'s order"
    )]
    pub fn rows(&self) -> Vec<(String, String, &Source)> {
        let mut rows = vec![
            ("image".into(), self.image.value.clone(), &self.image.source),
            (
                "runtime".into(),
                self.runtime.value.to_string(),
                &self.runtime.source,
            ),
            (
                "checkout".into(),
                self.checkout.value.to_string(),
                &self.checkout.source,
            ),
            (
                "memory".into(),
                self.memory.value.to_string(),
                &self.memory.source,
            ),
            match &self.disk {
                Some(disk) => ("disk".into(), disk.value.to_string(), &disk.source),
                None => ("disk".into(), "none".into(), &UNSET),
            },
            match &self.engine {
                Some(engine) => ("engine".into(), engine.value.clone(), &engine.source),
                None => ("engine".into(), "local".into(), &UNSET),
            },
            (
                "git_disk".into(),
                self.git_disk.value.to_string(),
                &self.git_disk.source,
            ),
            (
                "cpus".into(),
                self.cpus.value.to_string(),
                &self.cpus.source,
            ),
            (
                "reserve.cpus".into(),
                self.reserve_cpus.value.to_string(),
                &self.reserve_cpus.source,
            ),
            (
                "reserve.memory".into(),
                self.reserve_memory.value.to_string(),
                &self.reserve_memory.source,
            ),
            (
                "pids".into(),
                self.pids.value.to_string(),
                &self.pids.source,
            ),
            (
                "network".into(),
                self.network.value.to_string(),
                &self.network.source,
            ),
            (
                "allow".into(),
                self.allow
                    .value
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                &self.allow.source,
            ),
            (
                "timeout".into(),
                self.timeout.value.to_string(),
                &self.timeout.source,
            ),
            (
                "kill_policy".into(),
                self.kill_policy.value.to_string(),
                &self.kill_policy.source,
            ),
            (
                "rootfs".into(),
                self.rootfs.value.to_string(),
                &self.rootfs.source,
            ),
            (
                "grace".into(),
                self.grace.value.to_string(),
                &self.grace.source,
            ),
            (
                "workspace_dir".into(),
                self.workspace_dir.value.clone(),
                &self.workspace_dir.source,
            ),
            ("uid".into(), self.uid.value.to_string(), &self.uid.source),
        ];
        for (key, value) in &self.env {
            rows.push((format!("env.{key}"), value.value.clone(), &value.source));
        }
        if !self.ports.value.is_empty() {
            rows.push((
                "ports".into(),
                self.ports
                    .value
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
                &self.ports.source,
            ));
        }
        if !self.secrets.value.is_empty() {
            // Names only: where a value comes from is in the user file.
            rows.push((
                "secrets".into(),
                self.secrets.value.join(", "),
                &self.secrets.source,
            ));
        }
        if self.pool.value.size > 0 {
            rows.push((
                "pool".into(),
                format!(
                    "size {}, drains after {} unused",
                    self.pool.value.size, self.pool.value.idle
                ),
                &self.pool.source,
            ));
        }
        if self.checkpoint.value.before_exec {
            rows.push((
                "checkpoint".into(),
                format!(
                    "before each exec, the newest {} kept",
                    self.checkpoint.value.keep
                ),
                &self.checkpoint.source,
            ));
        }
        if self.push.value != PushPolicy::Manual {
            rows.push((
                "push".into(),
                self.push.value.to_string(),
                &self.push.source,
            ));
        }
        if self.environment.value != EnvironmentChoice::Auto {
            rows.push((
                "environment".into(),
                self.environment.value.to_string(),
                &self.environment.source,
            ));
        }
        if !self.caches.value.is_empty() {
            rows.push((
                "caches".into(),
                cache_names(&self.caches.value),
                &self.caches.source,
            ));
        }
        rows.extend(super::show_rows::rows(
            &self.copy,
            &self.setup,
            self.setup_optional.as_ref(),
            self.setup_timeout.as_ref(),
        ));
        rows.extend(super::show_rows::network_rows(
            self.setup_network.as_ref(),
            self.setup_allow.as_ref(),
        ));
        if let Some(network) = &self.build_network {
            rows.push((
                "build_network".into(),
                network.value.to_string(),
                &network.source,
            ));
        }
        rows
    }
}
