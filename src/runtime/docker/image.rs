//! Building the agent image from the Dockerfile and entrypoint built into paddock, so
//! `paddock image build` works from anywhere and needs no registry when the base is local.

use std::collections::HashMap;
use std::path::PathBuf;

use bollard::query_parameters::BuildImageOptionsBuilder;
use futures_util::StreamExt;

use super::{BUILD_TIMEOUT, connect};
use crate::runtime::RuntimeError;

/// The Dockerfile and entrypoint built into the binary, so `paddock image build` works from
/// anywhere.
const DOCKERFILE: &str = include_str!("../../../Dockerfile.agent");

const ENTRYPOINT: &str = include_str!("../../../entrypoint.sh");

/// Builds the agent image from the Dockerfile built into paddock. `progress` receives each
/// line of build output. Returns the image id.
pub async fn build_image(
    base_image: &str,
    tag: &str,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<String, RuntimeError> {
    let docker = connect()?;
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
        .buildargs(&HashMap::from([("BASE_IMAGE", base_image)]))
        .build();
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
