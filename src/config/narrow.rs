//! The rules by which an untrusted repository's file may only narrow a job (see `trust`):
//! each profile field compared with what the user alone would get ([`widenings`]), the
//! file's values that fail dropped before it is applied ([`narrow`]), and its picks of a
//! profile checked after ([`check_picks`]).

use std::path::Path;

use super::files::{ConfigFile, line_of};
use super::trust::{Refusal, RepoTrust};
use super::{
    Config, ConfigError, EnvLookup, NetworkMode, Profile, ProfileLayer, RuntimeChoice, Source,
};
use crate::egress::AllowEntry;

impl Config {
    /// Applies the repository's file: as the user's own when the user's `trust:` names the
    /// repository, else only what narrows a job (see `trust`), recording what was refused.
    pub(super) fn apply_repo_file(
        &mut self,
        root: &Path,
        mut file: ConfigFile,
        text: &str,
        path: &Path,
        env: &dyn EnvLookup,
    ) -> Result<(), ConfigError> {
        let home = env.var("HOME");
        let trusted_by = super::trust::trusted_by(root, &self.trust, home.as_deref());
        let mut refusals = Vec::new();
        refusals.extend(super::trust::refuse_user_only_keys(&mut file, text));
        let source = Source::RepoFile(path.to_path_buf());
        if trusted_by.is_some() {
            self.apply_file(file, &source)?;
        } else {
            let user = self.clone();
            refusals.extend(narrow(&mut file, &user, text));
            seed_new_profiles(self, &file);
            self.apply_file(file, &source)?;
            refusals.extend(check_picks(self, &user, text));
        }
        self.repo_trust = Some(RepoTrust {
            file: path.to_path_buf(),
            trusted_by,
            refusals,
        });
        Ok(())
    }
}

/// Strength of a runtime's walls: a repository may move a job up this order, never down.
/// `auto` may fall back to the process runtime, so it counts as that.
fn runtime_rank(runtime: RuntimeChoice) -> u8 {
    match runtime {
        RuntimeChoice::Process | RuntimeChoice::Auto => 0,
        RuntimeChoice::Docker => 1,
        RuntimeChoice::Runsc => 2,
        RuntimeChoice::Microvm => 3,
    }
}

fn network_rank(network: NetworkMode) -> u8 {
    match network {
        NetworkMode::None => 0,
        NetworkMode::Allowlist => 1,
        NetworkMode::Open => 2,
    }
}

/// A cap where 0 means none (memory, pids): `value` is within `base`.
fn within_cap(value: u64, base: u64) -> bool {
    value != 0 && (base == 0 || value <= base)
}

fn entries(list: &[AllowEntry]) -> String {
    let shown: Vec<String> = list.iter().map(ToString::to_string).collect();
    format!("[{}]", shown.join(", "))
}

/// Entries of `wanted` that `granted` does not hold (exact entries: a repository cannot
/// widen `github.com` to `*.github.com`).
fn beyond(wanted: &[AllowEntry], granted: &[AllowEntry]) -> Vec<String> {
    wanted
        .iter()
        .filter(|entry| !granted.contains(entry))
        .map(ToString::to_string)
        .collect()
}

/// One refused key of a layer: (key within the profile, value, why).
type Refused = (&'static str, String, String);

/// What of `layer` would widen a job of profile `base` (the user's): each refused field with
/// its value and why. Fields not named here only touch the job's inside.
#[expect(
    clippy::too_many_lines,
    reason = "one rule per profile field, in the order of ProfileLayer: split, the table reads worse"
)]
pub(super) fn widenings(layer: &ProfileLayer, base: &Profile) -> Vec<Refused> {
    let mut out: Vec<Refused> = Vec::new();
    let mut refuse = |key: &'static str, value: String, reason: String| {
        out.push((key, value, reason));
    };
    if let Some(image) = &layer.image
        && *image != base.image.value
    {
        refuse(
            "image",
            image.clone(),
            format!(
                "a repository may not choose the image jobs run (the user's is `{}`)",
                base.image.value
            ),
        );
    }
    if let Some(runtime) = layer.runtime
        && runtime != base.runtime.value
        && runtime_rank(runtime) <= runtime_rank(base.runtime.value)
    {
        refuse(
            "runtime",
            runtime.to_string(),
            format!(
                "weaker walls than the user's `{}` (a repository may only choose a stronger runtime: docker < runsc < microvm)",
                base.runtime.value
            ),
        );
    }
    if let Some(engine) = &layer.engine
        && Some(engine) != base.engine.as_ref().map(|e| &e.value)
    {
        refuse(
            "engine",
            engine.clone(),
            "a repository may not send its jobs to another engine".into(),
        );
    }
    for (key, value, base_value, zero_is_none) in [
        ("memory", layer.memory, base.memory.value, true),
        ("git_disk", layer.git_disk, base.git_disk.value, false),
    ] {
        let Some(value) = value else { continue };
        let fits = if zero_is_none {
            within_cap(value.0, base_value.0)
        } else {
            value <= base_value
        };
        if !fits {
            refuse(
                key,
                value.to_string(),
                format!("above the user's limit ({base_value})"),
            );
        }
    }
    if let Some(pids) = layer.pids
        && !within_cap(pids.into(), base.pids.value.into())
    {
        refuse(
            "pids",
            pids.to_string(),
            format!("above the user's limit ({})", base.pids.value),
        );
    }
    if let Some(disk) = layer.disk
        && base.disk.as_ref().is_some_and(|limit| disk > limit.value)
    {
        refuse(
            "disk",
            disk.to_string(),
            "above the user's disk limit".into(),
        );
    }
    if layer.rootfs == Some(super::RootFs::Writable) && base.rootfs.value.is_read_only() {
        refuse(
            "rootfs",
            "writable".into(),
            "a repository may not make the job's root filesystem writable".into(),
        );
    }
    if let Some(cpus) = layer.cpus
        && cpus.0 > base.cpus.value.0
    {
        refuse(
            "cpus",
            cpus.to_string(),
            format!("above the user's limit ({})", base.cpus.value),
        );
    }
    if let Some(reserve) = layer.reserve {
        if reserve
            .cpus
            .is_some_and(|c| c.0 > base.reserve_cpus.value.0)
        {
            refuse(
                "reserve.cpus",
                reserve.cpus.map(|c| c.to_string()).unwrap_or_default(),
                "holds more of the host's budget than the user's profile".into(),
            );
        }
        if reserve
            .memory
            .is_some_and(|m| m > base.reserve_memory.value)
        {
            refuse(
                "reserve.memory",
                reserve.memory.map(|m| m.to_string()).unwrap_or_default(),
                "holds more of the host's budget than the user's profile".into(),
            );
        }
    }
    let network = layer.network.unwrap_or(base.network.value);
    if network_rank(network) > network_rank(base.network.value) {
        refuse(
            "network",
            network.to_string(),
            format!("wider than the user's `{}`", base.network.value),
        );
    }
    if let Some(allow) = &layer.allow
        && base.network.value == NetworkMode::Allowlist
    {
        let extra = beyond(allow, &base.allow.value);
        if !extra.is_empty() {
            refuse(
                "allow",
                entries(allow),
                format!(
                    "{} not in the user's allow-list {}",
                    extra.join(", "),
                    entries(&base.allow.value)
                ),
            );
        }
    }
    for (key, value, base_value) in [
        ("timeout", layer.timeout, base.timeout.value),
        ("grace", layer.grace, base.grace.value),
    ] {
        if let Some(value) = value
            && value > base_value
        {
            refuse(
                key,
                value.to_string(),
                format!("longer than the user's {base_value}"),
            );
        }
    }
    if layer.uid == Some(0) && base.uid.value != 0 {
        refuse(
            "uid",
            "0".into(),
            "a repository may not run its agent as root".into(),
        );
    }
    if let Some(copy) = &layer.copy
        && copy.iter().any(|path| !base.copy.value.contains(path))
    {
        refuse(
            "copy",
            format!("[{}]", copy.join(", ")),
            "copies the user's untracked files (credentials, often) into the job".into(),
        );
    }
    let base_setup_network = base
        .setup_network
        .as_ref()
        .map_or(base.network.value, |n| n.value);
    if let Some(setup_network) = layer.setup_network
        && network_rank(setup_network) > network_rank(base_setup_network)
    {
        refuse(
            "setup_network",
            setup_network.to_string(),
            format!("wider than the user's `{base_setup_network}`"),
        );
    }
    let base_build_network = base
        .build_network
        .as_ref()
        .map_or(NetworkMode::None, |n| n.value);
    if let Some(build_network) = layer.build_network
        && network_rank(build_network) > network_rank(base_build_network)
    {
        refuse(
            "build_network",
            build_network.to_string(),
            format!(
                "wider than the user's `{base_build_network}` for builds of the repository's Dockerfile"
            ),
        );
    }
    if let Some(setup_allow) = &layer.setup_allow {
        let mut granted = base.allow.value.clone();
        granted.extend(
            base.setup_allow
                .iter()
                .flat_map(|a| a.value.iter().cloned()),
        );
        let extra = beyond(setup_allow, &granted);
        if !extra.is_empty() && base_setup_network != NetworkMode::Open {
            refuse(
                "setup_allow",
                entries(setup_allow),
                format!("{} not in the user's allow-lists", extra.join(", ")),
            );
        }
    }
    let base_setup_timeout = base
        .setup_timeout
        .as_ref()
        .map_or(base.timeout.value, |t| t.value);
    if let Some(timeout) = layer.setup_timeout
        && timeout > base_setup_timeout
    {
        refuse(
            "setup_timeout",
            timeout.to_string(),
            format!("longer than the user's {base_setup_timeout}"),
        );
    }
    if let Some(pool) = layer.pool
        && (pool.size > base.pool.value.size || pool.idle > base.pool.value.idle)
    {
        refuse(
            "pool",
            format!("{{size: {}, idle: {}}}", pool.size, pool.idle),
            format!(
                "more warm containers, or kept longer, than the user's {{size: {}, idle: {}}}",
                base.pool.value.size, base.pool.value.idle
            ),
        );
    }
    if let Some(secrets) = &layer.secrets
        && secrets.iter().any(|s| !base.secrets.value.contains(s))
    {
        refuse(
            "secrets",
            format!("[{}]", secrets.join(", ")),
            "secrets are the user's to give".into(),
        );
    }
    if let Some(push) = layer.push
        && push != base.push.value
    {
        refuse(
            "push",
            push.to_string(),
            "only the user's config may make paddock publish".into(),
        );
    }
    out
}

/// Every value of `profile` as a layer, to compare a whole profile with
/// [`widenings`].
fn layer_of(profile: &Profile) -> ProfileLayer {
    ProfileLayer {
        image: Some(profile.image.value.clone()),
        runtime: Some(profile.runtime.value),
        engine: profile.engine.as_ref().map(|e| e.value.clone()),
        checkout: Some(profile.checkout.value),
        memory: Some(profile.memory.value),
        disk: profile.disk.as_ref().map(|d| d.value),
        git_disk: Some(profile.git_disk.value),
        cpus: Some(profile.cpus.value),
        reserve: Some(super::ReserveLayer {
            cpus: Some(profile.reserve_cpus.value),
            memory: Some(profile.reserve_memory.value),
        }),
        pids: Some(profile.pids.value),
        network: Some(profile.network.value),
        allow: Some(profile.allow.value.clone()),
        timeout: Some(profile.timeout.value),
        kill_policy: Some(profile.kill_policy.value),
        rootfs: Some(profile.rootfs.value),
        grace: Some(profile.grace.value),
        workspace_dir: None,
        uid: Some(profile.uid.value),
        env: std::collections::BTreeMap::new(),
        caches: None,
        ports: None,
        copy: Some(profile.copy.value.clone()),
        setup: None,
        setup_optional: None,
        setup_timeout: profile.setup_timeout.as_ref().map(|t| t.value),
        setup_network: profile.setup_network.as_ref().map(|n| n.value),
        setup_allow: profile.setup_allow.as_ref().map(|a| a.value.clone()),
        pool: Some(profile.pool.value),
        secrets: Some(profile.secrets.value.clone()),
        push: Some(profile.push.value),
        checkpoint: None,
        environment: None,
        build_network: profile.build_network.as_ref().map(|n| n.value),
    }
}

/// Drops from an untrusted repository's `file` everything that would widen a job beyond
/// what `user` (the configuration before this file) gives, and returns what it dropped.
/// `text` is the file's text, for line numbers.
pub(super) fn narrow(file: &mut ConfigFile, user: &Config, text: &str) -> Vec<Refusal> {
    let mut refusals = Vec::new();
    let mut refuse = |path: &[&str], value: String, reason: &str| {
        refusals.push(Refusal {
            key: path.join("."),
            value,
            line: line_of(text, path),
            reason: reason.to_string(),
        });
    };
    let fallback = user
        .profiles
        .get(&user.default_profile.value)
        .cloned()
        .unwrap_or_default();
    for (name, layer) in &mut file.profiles {
        // A profile the user does not have is measured against the one the user gets by
        // default (and, below, made from it rather than the built-in defaults).
        let base = user.profiles.get(name).unwrap_or(&fallback);
        for (key, value, reason) in widenings(layer, base) {
            // A repository's `secrets` fail the load outright (`apply_secrets`), as before.
            if key == "secrets" {
                continue;
            }
            let path: Vec<&str> = ["profiles", name.as_str()]
                .into_iter()
                .chain(key.split('.'))
                .collect();
            refuse(&path, value, &reason);
            drop_field(layer, key);
        }
    }
    // The top level's job-wide lists, measured against the user's default profile.
    let top = ProfileLayer {
        copy: file.copy.clone(),
        setup_network: file.setup_network,
        setup_allow: file.setup_allow.clone(),
        setup_timeout: file.setup_timeout,
        ..ProfileLayer::default()
    };
    for (key, value, reason) in widenings(&top, &fallback) {
        refuse(&[key], value, &reason);
        match key {
            "copy" => file.copy = None,
            "setup_network" => file.setup_network = None,
            "setup_allow" => file.setup_allow = None,
            _ => file.setup_timeout = None,
        }
    }
    if let Some(template) = file.branch_template.take() {
        refuse(
            &["branch_template"],
            template,
            "it names the branches jobs write to; only the user's config may",
        );
    }
    if file.sweep.take().is_some() {
        refuse(
            &["sweep"],
            "…".into(),
            "when jobs are removed is the user's to say",
        );
    }
    refusals
}

/// Unsets the field `key` (as [`widenings`] names it) of `layer`.
fn drop_field(layer: &mut ProfileLayer, key: &str) {
    match key {
        "image" => layer.image = None,
        "runtime" => layer.runtime = None,
        "engine" => layer.engine = None,
        "memory" => layer.memory = None,
        "pids" => layer.pids = None,
        "git_disk" => layer.git_disk = None,
        "disk" => layer.disk = None,
        "cpus" => layer.cpus = None,
        "reserve.cpus" | "reserve.memory" => layer.reserve = None,
        "network" => layer.network = None,
        "allow" => layer.allow = None,
        "timeout" => layer.timeout = None,
        "grace" => layer.grace = None,
        "rootfs" => layer.rootfs = None,
        "uid" => layer.uid = None,
        "copy" => layer.copy = None,
        "setup_network" => layer.setup_network = None,
        "build_network" => layer.build_network = None,
        "setup_allow" => layer.setup_allow = None,
        "setup_timeout" => layer.setup_timeout = None,
        "pool" => layer.pool = None,
        "secrets" => layer.secrets = None,
        "push" => layer.push = None,
        other => unreachable!("widenings names no field `{other}`"),
    }
}

/// Before an untrusted file is applied: its profiles the user does not have start from the
/// user's default profile, not the built-in defaults (which may be wider than the user's).
pub(super) fn seed_new_profiles(config: &mut Config, file: &ConfigFile) {
    let Some(fallback) = config.profiles.get(&config.default_profile.value).cloned() else {
        return;
    };
    for name in file.profiles.keys() {
        config
            .profiles
            .entry(name.clone())
            .or_insert_with(|| fallback.clone());
    }
}

/// After an untrusted file is applied: its `default_profile` and routes may pick only a
/// profile no wider than the one the user would get by default; a wider pick is undone (the
/// user's own choice stays) and refused.
pub(super) fn check_picks(config: &mut Config, user: &Config, text: &str) -> Vec<Refusal> {
    let baseline = user
        .profiles
        .get(&user.default_profile.value)
        .cloned()
        .unwrap_or_default();
    let wider = |config: &Config, name: &str| -> Option<String> {
        let profile = config.profiles.get(name)?;
        let why: Vec<String> = widenings(&layer_of(profile), &baseline)
            .into_iter()
            .map(|(key, value, reason)| format!("its {key} `{value}` is {reason}"))
            .collect();
        (!why.is_empty()).then(|| {
            format!(
                "profile `{name}` is wider than the user's default `{}`: {}",
                user.default_profile.value,
                why.join("; ")
            )
        })
    };
    let mut refusals = Vec::new();
    if matches!(config.default_profile.source, Source::RepoFile(_))
        && let Some(reason) = wider(config, &config.default_profile.value)
    {
        refusals.push(Refusal {
            key: "default_profile".into(),
            value: config.default_profile.value.clone(),
            line: line_of(text, &["default_profile"]),
            reason,
        });
        config.default_profile = user.default_profile.clone();
    }
    for kind in ["agents", "tasks"] {
        let (routes, user_routes) = match kind {
            "agents" => (&config.routing.agents, &user.routing.agents),
            _ => (&config.routing.tasks, &user.routing.tasks),
        };
        let refused: Vec<(String, Refusal)> = routes
            .values()
            .filter(|route| matches!(route.source, Source::RepoFile(_)))
            .filter_map(|route| {
                let reason = wider(config, &route.profile)?;
                Some((
                    route.pattern.clone(),
                    Refusal {
                        key: format!("routing.{kind}.{}", route.pattern),
                        value: route.profile.clone(),
                        line: line_of(text, &["routing", kind, &route.pattern]),
                        reason,
                    },
                ))
            })
            .collect();
        let user_routes = user_routes.clone();
        let routes = match kind {
            "agents" => &mut config.routing.agents,
            _ => &mut config.routing.tasks,
        };
        for (pattern, refusal) in refused {
            match user_routes.get(&pattern) {
                Some(route) => routes.insert(pattern, route.clone()),
                None => routes.remove(&pattern),
            };
            refusals.push(refusal);
        }
    }
    refusals
}
