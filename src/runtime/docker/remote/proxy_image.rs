//! The proxy image on a remote engine: `paddock-proxy:<version>-<build id>`, the base image
//! and this very binary, built on the engine by `paddock image build --engine NAME` (the tag
//! is the binary's GNU build id, the linker's hash of it, so a rebuilt paddock asks for a
//! new image and a stale proxy never runs). A job's sidecar, its ports' relay and the job
//! range's guard there run from it.

use std::collections::HashMap;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::OnceLock;

use bollard::Docker;
use bollard::query_parameters::BuildImageOptionsBuilder;

use crate::runtime::RuntimeError;
use crate::runtime::docker::{
    API_TIMEOUT, Daemon, LABEL_HOME, LABEL_IMAGE, io_error, is_not_found,
};

/// The repository of the proxy images paddock builds on engines.
pub const PROXY_REPOSITORY: &str = "paddock-proxy";

const PROXY_DOCKERFILE: &str =
    "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY paddock /paddock/bin/paddock\n";
const SELF_EXE: &str = "/proc/self/exe";

/// The proxy image of this very binary: `paddock-proxy:<version>-<build id>`.
pub async fn proxy_tag() -> Result<String, RuntimeError> {
    static TAG: OnceLock<String> = OnceLock::new();
    if let Some(tag) = TAG.get() {
        return Ok(tag.clone());
    }
    let id = tokio::task::spawn_blocking(binary_id)
        .await
        .expect("reading the binary's id does not panic")
        .map_err(io_error(Path::new(SELF_EXE)))?;
    let version = env!("CARGO_PKG_VERSION");
    Ok(TAG
        .get_or_init(|| format!("{PROXY_REPOSITORY}:{version}-{id}"))
        .clone())
}

/// This binary's identity: its GNU build id (a note the loader maps; a few reads), else the
/// first 20 bytes of a SHA-256 of the whole file.
fn binary_id() -> std::io::Result<String> {
    use sha2::{Digest, Sha256};
    let mut file = std::fs::File::open(SELF_EXE)?;
    if let Some(id) = build_id(&file)? {
        return Ok(hex(&id[..id.len().min(20)]));
    }
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hex(&hasher.finalize()[..20]))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `NT_GNU_BUILD_ID` note of a 64-bit little-endian ELF file, from its `PT_NOTE`
/// segments; `None` when it has none.
fn build_id(file: &std::fs::File) -> std::io::Result<Option<Vec<u8>>> {
    const PT_NOTE: u32 = 4;
    const NT_GNU_BUILD_ID: u32 = 3;
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4"));
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
    let mut header = [0u8; 64];
    file.read_exact_at(&mut header, 0)?;
    if header[..4] != *b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return Ok(None);
    }
    let (offset, size, count) = (
        u64_at(&header, 0x20),
        usize::from(u16_at(&header, 0x36)),
        usize::from(u16_at(&header, 0x38)),
    );
    if size < 56 {
        return Ok(None);
    }
    let mut table = vec![0u8; size * count];
    file.read_exact_at(&mut table, offset)?;
    for entry in table.chunks_exact(size) {
        if u32_at(entry, 0) != PT_NOTE {
            continue;
        }
        let length = usize::try_from(u64_at(entry, 0x20).min(1 << 16)).expect("64 KiB fits");
        let mut notes = vec![0u8; length];
        file.read_exact_at(&mut notes, u64_at(entry, 8))?;
        let align = |n: usize| n.div_ceil(4) * 4;
        let mut at = 0;
        while at + 12 <= notes.len() {
            let name_size = u32_at(&notes, at) as usize;
            let desc_size = u32_at(&notes, at + 4) as usize;
            let kind = u32_at(&notes, at + 8);
            let name = at + 12;
            let desc = name + align(name_size);
            let Some(end) = desc.checked_add(desc_size).filter(|e| *e <= notes.len()) else {
                break;
            };
            if kind == NT_GNU_BUILD_ID && notes.get(name..name + name_size) == Some(b"GNU\0") {
                return Ok(Some(notes[desc..end].to_vec()));
            }
            at = desc + align(desc_size);
        }
    }
    Ok(None)
}

/// Builds the proxy image ([`proxy_tag`]) on the current engine from `base_image`, unless
/// it is there; returns its tag.
pub async fn build_proxy_image(
    daemon: &Daemon,
    base_image: &str,
    home_id: &str,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<String, RuntimeError> {
    let docker = daemon.connect()?;
    let tag = proxy_tag().await?;
    if has_image(&docker, &tag).await? {
        progress(&format!("the proxy image {tag} is there"));
        return Ok(tag);
    }
    let context = tokio::task::spawn_blocking(proxy_context)
        .await
        .expect("reading the binary does not panic")
        .map_err(io_error(Path::new(SELF_EXE)))?;
    let options = BuildImageOptionsBuilder::new()
        .dockerfile("Dockerfile")
        .t(&tag)
        .rm(true)
        .forcerm(true)
        .pull("false")
        .buildargs(&HashMap::from([("BASE_IMAGE", base_image)]))
        .labels(&HashMap::from([
            (LABEL_IMAGE, "proxy"),
            (LABEL_HOME, home_id),
        ]))
        .build();
    crate::runtime::docker::image::run_build(&docker, options, context, &tag, progress).await?;
    progress(&format!("built the proxy image {tag}"));
    Ok(tag)
}

/// The proxy image's build context: its Dockerfile and this binary.
fn proxy_context() -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(PROXY_DOCKERFILE.len() as u64);
    header.set_mode(0o644);
    builder.append_data(&mut header, "Dockerfile", PROXY_DOCKERFILE.as_bytes())?;
    let file = std::fs::File::open(SELF_EXE)?;
    let mut header = tar::Header::new_gnu();
    header.set_size(file.metadata()?.len());
    header.set_mode(0o755);
    builder.append_data(&mut header, "paddock", file)?;
    builder.into_inner()
}

async fn has_image(docker: &Docker, tag: &str) -> Result<bool, RuntimeError> {
    match tokio::time::timeout(API_TIMEOUT, docker.inspect_image(tag)).await {
        Ok(Ok(_)) => Ok(true),
        Ok(Err(e)) if is_not_found(&e) => Ok(false),
        Ok(Err(e)) => Err(RuntimeError::Docker {
            action: "inspect image",
            target: tag.to_string(),
            message: e.to_string(),
        }),
        Err(_) => Err(RuntimeError::DockerTimeout {
            action: "inspect image",
            target: tag.to_string(),
            after: API_TIMEOUT,
        }),
    }
}

/// Refuses (`ImageMissing`, which create turns into the `image build --engine` hint) when
/// the current engine lacks the proxy image of this binary.
pub async fn check_proxy_image(docker: &Docker) -> Result<(), RuntimeError> {
    let tag = proxy_tag().await?;
    if has_image(docker, &tag).await? {
        Ok(())
    } else {
        Err(RuntimeError::ImageMissing { image: tag })
    }
}

/// The proxy image's tag, refused with the command that builds it when the current engine
/// lacks it (a job made by an older paddock whose sidecar or guard is made anew).
pub async fn require_proxy_image(daemon: &Daemon, docker: &Docker) -> Result<String, RuntimeError> {
    let tag = proxy_tag().await?;
    if has_image(docker, &tag).await? {
        return Ok(tag);
    }
    let engine = daemon.engine().unwrap_or_default().to_string();
    Err(RuntimeError::Docker {
        action: "start the egress proxy",
        target: tag,
        message: format!(
            "the engine has no proxy image of this paddock: run `paddock image build --engine {engine}`"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_tag_is_this_binary_s_build_id() {
        let file = std::fs::File::open(SELF_EXE).unwrap();
        let id = build_id(&file)
            .unwrap()
            .expect("Debian's linker writes a build id");
        assert!(id.len() >= 16, "{id:?}");
        let tag = binary_id().unwrap();
        assert_eq!(tag, hex(&id[..id.len().min(20)]));
    }
}
