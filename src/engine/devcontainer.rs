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
use crate::job::RuntimeKind;

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
    pub(super) async fn devcontainer_env(
        &self,
        repo: &GitRepo,
        commit: &str,
        profile: &mut Profile,
    ) -> Result<Option<DevcontainerReport>> {
        let choice = profile.environment.value;
        if choice == EnvironmentChoice::Image {
            return Ok(None);
        }
        let mut found = None;
        for path in devcontainer::PATHS {
            if let Some(bytes) = repo.read_at(commit, path).await? {
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
        let mut report = devcontainer::parse(file, &text)?;
        if let Source::Flag(_) = profile.image.source {
            report
                .ignored
                .push("image: an explicit `--image` wins".into());
        } else if profile.runtime.value == RuntimeChoice::Process {
            report
                .ignored
                .push("image: the process runtime runs no image".into());
        } else {
            self.make_image(repo, commit, &mut report).await?;
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
    async fn make_image(
        &self,
        repo: &GitRepo,
        commit: &str,
        report: &mut DevcontainerReport,
    ) -> Result<()> {
        let runtime = self.runtimes.of(RuntimeKind::Docker);
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
        let hex = format!("{:x}", digest.finalize());
        let tag = format!("{IMAGE_REPO}:{}", &hex[..20]);
        report.image = tag.clone();
        if runtime.image_present(&tag).await? {
            return Ok(());
        }
        let mut log = |line: &str| tracing::debug!(target: "paddock::devcontainer", "{line}");
        let base = match (context, &report.build) {
            (Some(tar), Some(build)) => {
                let base = format!("{tag}-base");
                runtime
                    .build_from_context(
                        tar,
                        &build.dockerfile,
                        &build.args,
                        build.target.as_deref(),
                        &base,
                        &mut log,
                    )
                    .await?;
                base
            }
            _ => report.base_image.clone().unwrap_or_default(),
        };
        runtime.build_image(&base, &tag, &mut log).await?;
        report.built = true;
        Ok(())
    }
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
