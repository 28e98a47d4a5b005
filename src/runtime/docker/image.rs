//! Building the agent image from the Dockerfile and entrypoint built into paddock, so
//! `paddock image build` works from anywhere and needs no registry when the base is local.

use std::collections::HashMap;
use std::path::PathBuf;

use bollard::query_parameters::BuildImageOptionsBuilder;
use futures_util::StreamExt;

use super::{API_TIMEOUT, BUILD_TIMEOUT, LABEL_HOME, LABEL_IMAGE};
use crate::runtime::RuntimeError;

/// The Dockerfile and entrypoint built into the binary, so `paddock image build` works from
/// anywhere.
const DOCKERFILE: &str = include_str!("../../../Dockerfile.agent");

const ENTRYPOINT: &str = include_str!("../../../entrypoint.sh");

/// Builds the agent image from the Dockerfile built into paddock. `progress` receives each
/// line of build output. Returns the image id.
pub async fn build_image(
    daemon: &super::Daemon,
    (base_image, tag, tools): (&str, &str, crate::runtime::capabilities::AgentTools),
    home_id: &str,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<String, RuntimeError> {
    let docker = daemon.connect()?;
    let context = build_context().map_err(|source| RuntimeError::Io {
        path: PathBuf::from("Dockerfile.agent"),
        source,
    })?;
    let options = BuildImageOptionsBuilder::new()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        .pull("false")
        .buildargs(&HashMap::from([
            ("BASE_IMAGE", base_image),
            ("TOOLCHAINS", tools.arg()),
        ]))
        .labels(&HashMap::from([
            (LABEL_IMAGE, "agent"),
            (LABEL_HOME, home_id),
        ]))
        .build();
    run_build(&docker, options, context, tag, progress).await
}

/// Builds `build.tag` from a repository's build context (a tar, see `git::snapshot`) with
/// its Dockerfile, args and target; nothing is pulled (a base the engine lacks fails the
/// build). Every `RUN` step runs in the job's walls (`build.limits`): no network unless the
/// user's profile opens it, and the job's process, memory (swap the same: none) and CPU caps,
/// held by a cell (`build_cell`). An engine that cannot hold a cell builds only a trusted
/// repository's Dockerfile, with the memory and CPU caps the build API takes.
pub async fn build_from_context(
    daemon: &super::Daemon,
    context: Vec<u8>,
    build: &crate::runtime::ContextBuild<'_>,
    home_id: &str,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<String, RuntimeError> {
    let docker = daemon.connect()?;
    let limits = build.limits;
    let info = super::call("info", "daemon", API_TIMEOUT, docker.info()).await?;
    let support = if crate::env::no_build_cell() {
        Err("PADDOCK_TEST_NO_BUILD_CELL=1".to_string())
    } else {
        super::build_cell::cell_support(&info)
    };
    let cell = match support {
        Ok(arch) => Some(super::build_cell::open(daemon, &docker, arch, limits, home_id).await?),
        Err(why) if limits.trusted => {
            progress(&format!("the build's processes are not capped: {why}"));
            tracing::warn!(
                tag = build.tag,
                "a trusted repository's build runs without a process cap: {why}"
            );
            None
        }
        Err(why) => {
            return Err(RuntimeError::BuildUncapped {
                tag: build.tag.to_string(),
                why,
            });
        }
    };
    let options = context_build_options(build, home_id, cell.is_none());
    let client = match &cell {
        Some(cell) => cell.client(&docker, limits.memory),
        None => docker.clone(),
    };
    let built = run_build(&client, options, context, build.tag, progress).await;
    if let Some(cell) = cell {
        cell.close(&docker).await;
    }
    built.map_err(|error| match error {
        // A failed step of a build with no network says which setting opens it.
        RuntimeError::Docker {
            action,
            target,
            message,
        } if !limits.network => RuntimeError::Docker {
            action,
            target,
            message: format!(
                "{message} (the build had no network: builds of a repository's Dockerfile run with none unless your profile sets `build_network: open`)"
            ),
        },
        other => other,
    })
}

/// The build API's options for a build from repository content; `memory_in_options`: the
/// memory cap goes in bollard's 32-bit field (no cell carries it at full width).
fn context_build_options(
    build: &crate::runtime::ContextBuild<'_>,
    home_id: &str,
    memory_in_options: bool,
) -> bollard::query_parameters::BuildImageOptions {
    let args: HashMap<&str, &str> = build
        .args
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let limits = build.limits;
    let mut options = BuildImageOptionsBuilder::new()
        .dockerfile(build.dockerfile)
        .t(build.tag)
        .rm(true)
        .forcerm(true)
        .pull("false")
        .buildargs(&args)
        .networkmode(if limits.network { "default" } else { "none" })
        .labels(&HashMap::from([
            (LABEL_IMAGE, "devcontainer-base"),
            (LABEL_HOME, home_id),
        ]));
    if limits.memory > 0 && memory_in_options {
        // bollard's field is 32 bits wide: a job's cap above it builds under 2 GiB, a
        // narrower wall than the job's own, never a wider one.
        let memory = i32::try_from(limits.memory).unwrap_or(i32::MAX);
        options = options.memory(memory).memswap(memory);
    }
    if limits.cpus > 0.0 {
        let period: i32 = 100_000;
        // At least 1 ms of each 100 ms; a job's cap is at most 1024 CPUs, so it fits.
        let quota = (limits.cpus * f64::from(period)).round().max(1_000.0);
        #[expect(
            clippy::cast_possible_truncation,
            reason = "at most 1024 × 100,000, checked by Cpus"
        )]
        let quota = quota as i32;
        options = options.cpuperiod(period).cpuquota(quota);
    }
    if let Some(target) = build.target {
        options = options.target(target);
    }
    options.build()
}

/// The env of the image `tag` (`NAME=value` entries) when the engine has it; `None` when it
/// does not.
pub async fn image_env(
    daemon: &super::Daemon,
    tag: &str,
) -> Result<Option<Vec<String>>, RuntimeError> {
    let docker = daemon.connect()?;
    let after = std::time::Duration::from_secs(30);
    let inspected = tokio::time::timeout(after, docker.inspect_image(tag))
        .await
        .map_err(|_| RuntimeError::DockerTimeout {
            action: "inspect image",
            target: tag.to_string(),
            after,
        })?;
    match inspected {
        Ok(image) => Ok(Some(image.config.and_then(|c| c.env).unwrap_or_default())),
        Err(e) if super::calls::is_not_found(&e) => Ok(None),
        Err(e) => Err(RuntimeError::Docker {
            action: "inspect image",
            target: tag.to_string(),
            message: e.to_string(),
        }),
    }
}

/// Sends one build and reads its output to the end (or the build deadline).
pub(super) async fn run_build(
    docker: &bollard::Docker,
    options: bollard::query_parameters::BuildImageOptions,
    context: Vec<u8>,
    tag: &str,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<String, RuntimeError> {
    let mut stream = docker.build_image(
        options,
        None,
        Some(bollard::body_full(bytes::Bytes::from(context))),
    );
    let deadline = tokio::time::Instant::now() + BUILD_TIMEOUT;
    let mut image_id = String::new();
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next())
            .await
            .map_err(|_| RuntimeError::DockerTimeout {
                action: "build image",
                target: tag.to_string(),
                after: BUILD_TIMEOUT,
            })?;
        let Some(item) = next else { break };
        let info = item.map_err(|e| RuntimeError::Docker {
            action: "build image",
            target: tag.to_string(),
            message: e.to_string(),
        })?;
        if let Some(detail) = info.error_detail {
            return Err(RuntimeError::Docker {
                action: "build image",
                target: tag.to_string(),
                message: detail.message.unwrap_or_default(),
            });
        }
        if let Some(line) = info.stream {
            for line in line.lines().filter(|l| !l.trim().is_empty()) {
                progress(line);
                if let Some(id) = line.strip_prefix("Successfully built ") {
                    image_id = id.trim().to_string();
                }
            }
        }
        if let Some(aux) = info.aux.and_then(|a| a.id) {
            image_id = aux;
        }
    }
    Ok(image_id)
}

fn build_context() -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (name, text, mode) in [
        ("Dockerfile", DOCKERFILE, 0o644),
        ("entrypoint.sh", ENTRYPOINT, 0o755),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_size(text.len() as u64);
        header.set_mode(mode);
        header.set_mtime(0);
        header.set_cksum();
        builder.append_data(&mut header, name, text.as_bytes())?;
    }
    builder.into_inner()
}

/// The images tagged `repository:*` that carry [`LABEL_IMAGE`] and this install's
/// [`LABEL_HOME`] (`home_id`): (tag, created).
pub async fn labelled_images(
    daemon: &super::Daemon,
    repository: &str,
    home_id: &str,
) -> Result<Vec<(String, Option<chrono::DateTime<chrono::Utc>>)>, RuntimeError> {
    let docker = daemon.connect()?;
    let filters = HashMap::from([
        (
            "label",
            vec![LABEL_IMAGE.to_string(), format!("{LABEL_HOME}={home_id}")],
        ),
        ("reference", vec![format!("{repository}:*")]),
    ]);
    let options = bollard::query_parameters::ListImagesOptionsBuilder::new()
        .filters(&filters)
        .build();
    let after = std::time::Duration::from_secs(30);
    let images = tokio::time::timeout(after, docker.list_images(Some(options)))
        .await
        .map_err(|_| RuntimeError::DockerTimeout {
            action: "list images",
            target: repository.to_string(),
            after,
        })?
        .map_err(|e| RuntimeError::Docker {
            action: "list images",
            target: repository.to_string(),
            message: e.to_string(),
        })?;
    let prefix = format!("{repository}:");
    Ok(images
        .into_iter()
        // Checked again here: the label filter is the daemon's, the rule is ours.
        .filter(|image| {
            image.labels.contains_key(LABEL_IMAGE)
                && image.labels.get(LABEL_HOME).map(String::as_str) == Some(home_id)
        })
        .flat_map(|image| {
            let created = chrono::DateTime::from_timestamp(image.created, 0);
            image
                .repo_tags
                .into_iter()
                .filter(|tag| tag.starts_with(&prefix))
                .map(move |tag| (tag, created))
        })
        .collect())
}

/// Removes the tag `tag` (its image once no other tag names it). Never forced: the engine
/// refuses while any container, running or stopped, uses the image.
pub async fn remove_image(daemon: &super::Daemon, tag: &str) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    let after = std::time::Duration::from_secs(60);
    let options = bollard::query_parameters::RemoveImageOptionsBuilder::new()
        .force(false)
        .noprune(false)
        .build();
    tokio::time::timeout(after, docker.remove_image(tag, Some(options), None))
        .await
        .map_err(|_| RuntimeError::DockerTimeout {
            action: "remove image",
            target: tag.to_string(),
            after,
        })?
        .map_err(|e| RuntimeError::Docker {
            action: "remove image",
            target: tag.to_string(),
            message: e.to_string(),
        })?;
    Ok(())
}
