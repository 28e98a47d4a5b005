//! A job's environment from the repository's devcontainer.json (`environment: auto` or
//! `devcontainer`): the file at the job's base commit is parsed (`devcontainer`), its image
//! built when the engine lacks it, and its settings laid onto the job's profile before
//! anything is reserved, so a bad file or a failed build leaves nothing behind.
//!
//! The job's image is tagged by a digest of everything it is made of (the build context's
//! git tree id, the Dockerfile's path, args and target, or the named base image; and
//! paddock's own agent layer), so a second create of the same commit (or any commit with the
//! same context) finds it and builds nothing.

use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::{Paddock, Result};
use crate::config::{EnvironmentChoice, Profile, RuntimeChoice, Source, Sourced};
use crate::devcontainer::{self, DevcontainerError, DevcontainerReport};
use crate::git::GitRepo;
use crate::job::JobRecord;
use crate::store::PaddockHome;

/// paddock's agent layer (entrypoint, agent user), part of every devcontainer image's name:
/// a new paddock with a different layer builds anew.
const AGENT_LAYER: [&str; 2] = [
    include_str!("../../Dockerfile.agent"),
    include_str!("../../entrypoint.sh"),
];

/// The repository name of devcontainer images (`paddock-devc:<digest>`).
pub const IMAGE_REPO: &str = "paddock-devc";

impl Paddock {
    /// Reads the devcontainer.json of `commit` (per the profile's `environment`), makes its
    /// image, and lays its settings onto `profile`. `None`: the job is made as without one.
    /// `allowance`: what the user lets the repository's devcontainer use (its images; with
    /// trust, any, and a build where the engine cannot cap its processes).
    pub(super) async fn devcontainer_env(
        &self,
        repo: &GitRepo,
        commit: &str,
        profile: &mut Profile,
        allowance: &RepoAllowance<'_>,
    ) -> Result<Option<DevcontainerReport>> {
        let choice = profile.environment.value;
        if choice == EnvironmentChoice::Image {
            return Ok(None);
        }
        let mut found = None;
        for path in devcontainer::PATHS {
            if let Some(bytes) = repo
                .read_at_most(commit, path, crate::config::MAX_CONFIG_FILE)
                .await?
            {
                found = Some((path, bytes));
                break;
            }
        }
        let Some((file, bytes)) = found else {
            if choice == EnvironmentChoice::Devcontainer {
                return Err(DevcontainerError::Unusable {
                    file: devcontainer::PATHS.join(" or "),
                    reason: format!(
                        "`environment: devcontainer` and commit {commit} has no such file"
                    ),
                }
                .into());
            }
            return Ok(None);
        };
        let text = String::from_utf8(bytes).map_err(|_| DevcontainerError::Unusable {
            file: file.to_string(),
            reason: "not UTF-8 text".into(),
        })?;
        let mut id = Sha256::new();
        id.update(format!("{}\0{file}", repo.root.display()).as_bytes());
        let vars = devcontainer::Vars {
            local_workspace_folder: repo.root.display().to_string(),
            container_workspace_folder: profile.workspace_dir.value.clone(),
            devcontainer_id: format!("{:x}", id.finalize())[..20].to_string(),
        };
        let mut report = devcontainer::parse(file, &text, &vars)?;
        if let Source::Flag(_) = profile.image.source {
            report
                .ignored
                .push("image: an explicit `--image` wins".into());
        } else if profile.runtime.value == RuntimeChoice::Process {
            report
                .ignored
                .push("image: the process runtime runs no image".into());
        } else {
            let limits = crate::runtime::BuildLimits {
                memory: profile.memory.value.0,
                cpus: profile.cpus.value.0,
                pids: profile.pids.value,
                trusted: allowance.trusted,
                network: profile
                    .build_network
                    .as_ref()
                    .is_some_and(|n| n.value == crate::config::NetworkMode::Open),
            };
            if !allowance.trusted {
                let mut allowed = allowance.images.to_vec();
                allowed.push(profile.image.value.clone());
                check_images(repo, commit, &report, &allowed).await?;
            }
            let image_env = self.make_image(repo, commit, &mut report, limits).await?;
            // `${containerEnv:VAR}` in env values: the image's env under the file's.
            let mut known: std::collections::BTreeMap<String, String> = image_env
                .iter()
                .filter_map(|entry| entry.split_once('='))
                .map(|(name, value)| (name.to_string(), value.to_string()))
                .collect();
            known.extend(
                report
                    .env
                    .iter()
                    .filter(|(_, value)| !value.contains("${containerEnv:"))
                    .map(|(name, value)| (name.clone(), value.clone())),
            );
            for value in report.env.values_mut() {
                *value = devcontainer::container_env(value, &known);
            }
        }
        apply(&report, profile);
        check_host(&mut report, profile);
        for ignored in report.ignored.iter().chain(&report.unsupported) {
            tracing::warn!(file = %report.file, "devcontainer: ignored {ignored}");
        }
        Ok(Some(report))
    }

    /// Makes the job's image of `report` unless the engine has it: the repository's build
    /// (or its named image), then paddock's agent layer on top, as `image build` does.
    /// Returns the image's env.
    async fn make_image(
        &self,
        repo: &GitRepo,
        commit: &str,
        report: &mut DevcontainerReport,
        limits: crate::runtime::BuildLimits,
    ) -> Result<Vec<String>> {
        let engine = self.runtimes.with_sandboxes();
        let runtime = engine
            .capabilities()
            .images
            .ok_or_else(|| crate::runtime::lacks(engine, "build a devcontainer's image"))?;
        let mut digest = Sha256::new();
        for part in AGENT_LAYER {
            digest.update(part.as_bytes());
            digest.update([0]);
        }
        let context = match &report.build {
            Some(build) => {
                let (tree, tar) = repo.tar_at(commit, &build.context).await?;
                let spec = serde_json::to_string(build).expect("a build spec serializes");
                digest.update(format!("build\0{tree}\0{spec}").as_bytes());
                Some(tar)
            }
            None => {
                let image = report.base_image.as_deref().unwrap_or_default();
                digest.update(format!("image\0{image}").as_bytes());
                None
            }
        };
        // A build with the network may make another image than one without.
        digest.update(format!("\0network\0{}", limits.network).as_bytes());
        let hex = format!("{:x}", digest.finalize());
        let tag = format!("{IMAGE_REPO}:{}", &hex[..20]);
        report.image = tag.clone();
        note_use(&self.home, &tag);
        if let Some(env) = runtime.image_env(&tag).await? {
            return Ok(env);
        }
        let mut log = |line: &str| tracing::debug!(target: "paddock::devcontainer", "{line}");
        let base = match (context, &report.build) {
            (Some(tar), Some(build)) => {
                let base = format!("{tag}-base");
                let spec = crate::runtime::ContextBuild {
                    dockerfile: &build.dockerfile,
                    args: &build.args,
                    target: build.target.as_deref(),
                    tag: &base,
                    limits,
                };
                runtime.build_from_context(tar, &spec, &mut log).await?;
                base
            }
            _ => report.base_image.clone().unwrap_or_default(),
        };
        // The devcontainer's image brings its tools: paddock's layer adds only its own.
        runtime
            .build_image(
                &base,
                &tag,
                crate::runtime::capabilities::AgentTools::Minimal,
                &mut log,
            )
            .await?;
        report.built = true;
        Ok(runtime.image_env(&tag).await?.unwrap_or_default())
    }
}

/// What the user lets a repository's devcontainer use: with `trusted` (the user's `trust:`
/// names the repository), anything; else only the profile's image and `images` (the user's
/// `devcontainer_images` globs), as its image, a `FROM` or a `COPY --from`.
pub(super) struct RepoAllowance<'a> {
    pub trusted: bool,
    pub images: &'a [String],
}

/// Refuses an untrusted repository's devcontainer that names or builds from an image
/// `allowed` does not list: a local image may hold what the user never meant an agent to
/// read (a tool image with a token baked in), and no job may read it on a repository's word.
async fn check_images(
    repo: &GitRepo,
    commit: &str,
    report: &DevcontainerReport,
    allowed: &[String],
) -> Result<()> {
    let refused = |image: &str, at: String| DevcontainerError::ImageRefused {
        file: report.file.clone(),
        at,
        // The repository's text: one line, and not a page.
        image: crate::text::short_line(image, 200),
    };
    let Some(build) = &report.build else {
        let image = report.base_image.as_deref().unwrap_or_default();
        if devcontainer::from::image_allowed(image, allowed) {
            return Ok(());
        }
        return Err(refused(image, String::new()).into());
    };
    let path = if build.context.is_empty() {
        build.dockerfile.clone()
    } else {
        format!("{}/{}", build.context, build.dockerfile)
    };
    let unusable = |reason: String| DevcontainerError::Unusable {
        file: report.file.clone(),
        reason,
    };
    let bytes = repo
        .read_at_most(commit, &path, crate::config::MAX_CONFIG_FILE)
        .await?
        .ok_or_else(|| unusable(format!("its Dockerfile `{path}` is not in commit {commit}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| unusable(format!("its Dockerfile `{path}` is not UTF-8 text")))?;
    let used = devcontainer::from::images_used(&text, &build.args).map_err(|why| {
        unusable(format!(
            "cannot tell which images its Dockerfile `{path}` uses ({why}), so an untrusted repository's build is refused"
        ))
    })?;
    match used
        .iter()
        .find(|used| !devcontainer::from::image_allowed(&used.image, allowed))
    {
        None => Ok(()),
        Some(used) => Err(refused(
            &used.image,
            format!(" (its Dockerfile `{path}` line {})", used.line),
        )
        .into()),
    }
}

/// Where this install notes when it last used each devcontainer image (the sweep removes
/// images unused for long; an image itself says only when it was made).
fn uses_dir(home: &PaddockHome) -> PathBuf {
    home.root().join("devcontainer-images")
}

/// Notes that a create used the image `tag` now. A failure only makes the image look
/// older to the sweep (which still never removes an image a job names).
fn note_use(home: &PaddockHome, tag: &str) {
    let dir = uses_dir(home);
    let file = dir.join(tag.replace(':', "_"));
    if let Err(error) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&file, tag)) {
        tracing::debug!(file = %file.display(), %error, "cannot note a devcontainer image's use");
    }
}

/// When this install last used the image `tag` (see [`note_use`]).
pub fn last_used(home: &PaddockHome, tag: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let file = uses_dir(home).join(tag.replace(':', "_"));
    let modified = std::fs::metadata(file).and_then(|m| m.modified()).ok()?;
    Some(modified.into())
}

/// Lays `report` onto `profile`: its image, its env under the profile's own (a user's
/// explicit value wins), its ports added, its workspace folder unless a layer set one.
fn apply(report: &DevcontainerReport, profile: &mut Profile) {
    let source = Source::RepoFile(PathBuf::from(&report.file));
    let sourced = |value| Sourced {
        value,
        source: source.clone(),
    };
    if !report.image.is_empty() {
        profile.image = sourced(report.image.clone());
    }
    for (name, value) in &report.env {
        profile
            .env
            .entry(name.clone())
            .or_insert_with(|| sourced(value.clone()));
    }
    for port in &report.ports {
        if !profile.ports.value.contains(port) {
            profile.ports.value.push(*port);
        }
    }
    if let Some(dir) = &report.workspace_dir
        && profile.workspace_dir.source == Source::Default
    {
        profile.workspace_dir = sourced(dir.clone());
    }
}

/// Notes each `hostRequirements` part the profile's caps do not meet: the profile's limits
/// win (a repository cannot raise what a job may take), and the user sees why a build or a
/// test may be slow or run out of memory.
fn check_host(report: &mut DevcontainerReport, profile: &Profile) {
    if let Some(cpus) = report.host_cpus
        && profile.cpus.value.0 < cpus
    {
        report.ignored.push(format!(
            "hostRequirements.cpus: {cpus} asked, the profile gives {} (the profile's limits win)",
            profile.cpus.value
        ));
    }
    let memory = profile.memory.value;
    if let Some(asked) = report.host_memory
        && memory.0 != 0
        && memory.0 < asked
    {
        report.ignored.push(format!(
            "hostRequirements.memory: {} asked, the profile gives {memory} (the profile's limits win)",
            crate::units::ByteSize(asked)
        ));
    }
}

/// Marks, in the container's `/tmp` (a tmpfs each start empties), that this start's
/// `postStartCommand` ran.
const POST_START_MARK: &str = "/tmp/.paddock-post-start";

/// The script that runs a job's `postStartCommand` once per start of its container.
fn post_start_script(lines: &[String]) -> String {
    let commands: Vec<String> = lines.iter().map(|line| format!("({line})")).collect();
    format!(
        "[ -e {POST_START_MARK} ] && exit 0; : > {POST_START_MARK}; {}",
        commands.join(" && ")
    )
}

impl Paddock {
    /// Runs the job's `postStartCommand` (if its devcontainer.json has one) unless this start
    /// of its container already ran it: at create after the setup (`at_create`: its run is
    /// kept with the setup's, and a failure fails the create as a setup command's does), and
    /// before each exec, where it runs only when the container started since (a stop, a
    /// reboot, a recreate: its `/tmp` is new) and a failure is a warning. The process
    /// runtime has no container to start: there it runs at create only.
    pub(super) async fn post_start(&self, record: &mut JobRecord, at_create: bool) -> Result<()> {
        let Some(lines) = record
            .devcontainer
            .as_ref()
            .map(|dc| dc.post_start.clone())
            .filter(|lines| !lines.is_empty())
        else {
            return Ok(());
        };
        let container = self.runtimes.in_engine(record.runtime);
        if !container && !at_create {
            return Ok(());
        }
        if !at_create && self.post_start_ran(record).await {
            return Ok(());
        }
        let script = if container {
            post_start_script(&lines)
        } else {
            lines.join(" && ")
        };
        let timeout = record.limits.timeout.0;
        let (run, log) = self
            .setup_one(record, &script, timeout, &super::setup::SetupPlace::Job)
            .await;
        if at_create {
            let ok = run.ok;
            record.setup.push(run.clone());
            self.store.save(record)?;
            if !ok {
                return Err(super::setup::setup_failed(record, &run, timeout, log));
            }
        } else if !run.ok {
            tracing::warn!(job = %record.id, log = %log.display(), "devcontainer postStartCommand failed: {}", run.outcome());
        }
        Ok(())
    }

    /// Whether this start of the job's container ran its `postStartCommand` (the mark is
    /// there). A short exec that is not recorded: the run itself, when due, is. A failed
    /// look counts as not run (the script checks the mark again).
    async fn post_start_ran(&self, record: &JobRecord) -> bool {
        let request = crate::runtime::ExecRequest {
            cmd: vec!["test".into(), "-e".into(), POST_START_MARK.into()],
            env: std::collections::BTreeMap::new(),
            workdir: None,
            timeout: std::time::Duration::from_secs(30),
            kill_policy: record.limits.kill_policy,
            grace: record.limits.grace.0,
            output_cap: 1024,
            after: None,
            stdin: Default::default(),
            user: None,
        };
        let mut discard = crate::output::Discard;
        self.runtime_of(record)
            .exec(record, &request, &mut discard)
            .await
            .is_ok_and(|done| done.result.exit_code == 0)
    }
}

/// The job's devcontainer `mounts` volumes as caches: each a `mount` cache of the
/// repository (one shared entry per name), at its place in the workspace.
pub(super) fn volume_caches(record: &JobRecord) -> Vec<crate::cache::CacheSpec> {
    record
        .devcontainer
        .iter()
        .flat_map(|dc| &dc.volumes)
        .map(|volume| crate::cache::CacheSpec {
            path: Some(volume.path.clone()),
            env: None,
            name: Some(volume.name.clone()),
            key: Vec::new(),
            strategy: Some("mount".into()),
            readonly: false,
        })
        .collect()
}
