//! A build's cell: the cgroup that holds every `RUN` step of a build from repository
//! content, so the build gets the job's process cap, and its memory cap at full width, which
//! the engine's build API cannot give (it has no pids field, and bollard's memory field is
//! 32 bits wide).
//!
//! The cell is a container of paddock's own tiny image ([`CELL_IMAGE`]: one static program
//! of a few dozen bytes, written out below, that sleeps past the build's deadline and exits)
//! with the job's pids, memory and CPU caps, no network, no capabilities and a read-only
//! root. The build's steps run with `cgroupparent` set to the cell's cgroup, so the kernel
//! counts and caps them together under the cell's limits. Cgroups nest under a running
//! container only where the engine uses cgroup v1 with the cgroupfs driver (the systemd
//! driver takes only slices as parents; cgroup v2 forbids children beside the cell's own
//! process). Elsewhere a build of an untrusted repository is refused, naming why.
//!
//! Invariants: the cell outlives the build (its program sleeps past `BUILD_TIMEOUT`) and
//! is removed right after it, whatever the build's outcome; a cell a crashed paddock left
//! behind exits by itself and the engine removes it (auto-remove). The image is used only
//! when it carries paddock's label: a foreign image of that name is never run or replaced.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerCreateBody, HostConfig, SystemInfo};
use bollard::query_parameters::{CreateImageOptionsBuilder, RemoveContainerOptionsBuilder};
use futures_util::StreamExt;

use super::LABEL_IMAGE;
use super::{API_TIMEOUT, BUILD_TIMEOUT, LABEL_HOME, LABEL_ROLE, call, create_named, start_named};
use crate::runtime::{BuildLimits, RuntimeError};

/// paddock's cell image on an engine (the tag changes when the program does).
pub const CELL_IMAGE: &str = "paddock-build-cell:v1";
/// The cgroup under which cells are made (cgroupfs driver: an absolute cgroup path).
const CELL_PARENT: &str = "/paddock-build";
/// The cell's program path inside its image.
const CELL_PROGRAM: &str = "/cell";
/// How long a cell's program sleeps: past the build's own deadline.
const CELL_LIFETIME: Duration = Duration::from_secs(BUILD_TIMEOUT.as_secs() + 120);

/// A processor the cell's program is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    X86_64,
    Aarch64,
}

/// Whether an engine can hold a build in a cell: its architecture, or why not.
pub fn cell_support(info: &SystemInfo) -> Result<Arch, String> {
    let driver = info
        .cgroup_driver
        .map(|d| d.to_string())
        .unwrap_or_default();
    let version = info
        .cgroup_version
        .map(|v| v.to_string())
        .unwrap_or_default();
    let arch = info.architecture.clone().unwrap_or_default();
    cell_support_of(&driver, &version, &arch)
}

fn cell_support_of(driver: &str, version: &str, arch: &str) -> Result<Arch, String> {
    if driver != "cgroupfs" || version != "1" {
        return Err(format!(
            "the engine's cgroups (version {}, driver {}) do not nest under a container; only cgroup v1 with the cgroupfs driver does",
            if version.is_empty() {
                "unknown"
            } else {
                version
            },
            if driver.is_empty() { "unknown" } else { driver },
        ));
    }
    match arch {
        "x86_64" | "amd64" => Ok(Arch::X86_64),
        "aarch64" | "arm64" => Ok(Arch::Aarch64),
        other => Err(format!(
            "paddock has no cell program for the engine's architecture `{other}`"
        )),
    }
}

/// A static ELF program for `arch` that sleeps `seconds` (nanosleep) and exits 0: no libc,
/// no file, one loadable segment. Written out byte by byte so the cell's image needs
/// nothing from a registry or the host.
pub fn sleeper_elf(arch: Arch, seconds: u64) -> Vec<u8> {
    const BASE: u64 = 0x40_0000;
    const HEADERS: usize = 64 + 56;
    let (machine, mut code): (u16, Vec<u8>) = match arch {
        // mov eax, 35 (nanosleep); lea rdi, [rip+13]; xor esi, esi; syscall;
        // mov eax, 60 (exit); xor edi, edi; syscall; then the timespec.
        Arch::X86_64 => (
            0x3e,
            [
                &[0xb8, 0x23, 0, 0, 0][..],
                &[0x48, 0x8d, 0x3d, 0x0d, 0, 0, 0],
                &[0x31, 0xf6],
                &[0x0f, 0x05],
                &[0xb8, 0x3c, 0, 0, 0],
                &[0x31, 0xff],
                &[0x0f, 0x05],
            ]
            .concat(),
        ),
        // adr x0, #32; mov x1, #0; mov x8, #101 (nanosleep); svc #0;
        // mov x0, #0; mov x8, #93 (exit); svc #0; a pad word; then the timespec.
        Arch::Aarch64 => (
            0xb7,
            [
                0x1000_0100_u32,
                0xd280_0001,
                0xd280_0ca8,
                0xd400_0001,
                0xd280_0000,
                0xd280_0ba8,
                0xd400_0001,
                0xd503_201f,
            ]
            .iter()
            .flat_map(|word| word.to_le_bytes())
            .collect(),
        ),
    };
    code.extend(seconds.to_le_bytes());
    code.extend(0_u64.to_le_bytes());
    let size = (HEADERS + code.len()) as u64;
    let mut elf = Vec::with_capacity(HEADERS + code.len());
    // The ELF header: 64-bit, little-endian, version 1, System V, an executable.
    elf.extend([0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    elf.extend([0; 8]);
    elf.extend(2_u16.to_le_bytes());
    elf.extend(machine.to_le_bytes());
    elf.extend(1_u32.to_le_bytes());
    elf.extend((BASE + HEADERS as u64).to_le_bytes()); // entry
    elf.extend(64_u64.to_le_bytes()); // program headers' offset
    elf.extend(0_u64.to_le_bytes()); // no section headers
    elf.extend(0_u32.to_le_bytes()); // flags
    for half in [64_u16, 56, 1, 64, 0, 0] {
        elf.extend(half.to_le_bytes());
    }
    // One loadable, readable and executable segment: the whole file at BASE.
    elf.extend(1_u32.to_le_bytes());
    elf.extend(5_u32.to_le_bytes());
    for word in [0, BASE, BASE, size, size, 0x1_0000] {
        elf.extend(word.to_le_bytes());
    }
    elf.extend(code);
    elf
}

/// A build's running cell: its container and the cgroup path the build's steps go under.
pub struct Cell {
    name: String,
    pub cgroup: String,
}

/// Makes and starts a cell with `limits` on the engine `docker` (whose `info` said it can
/// hold one), after making sure the cell image is there.
pub async fn open(
    daemon: &super::Daemon,
    docker: &Docker,
    arch: Arch,
    limits: BuildLimits,
    home_id: &str,
) -> Result<Cell, RuntimeError> {
    ensure_image(docker, arch).await?;
    let name = format!("paddock-cell-{}", crate::ids::random_hex(12));
    let memory = i64::try_from(limits.memory).unwrap_or(i64::MAX);
    #[expect(
        clippy::cast_possible_truncation,
        reason = "at most 1024 CPUs, checked by Cpus"
    )]
    let nano_cpus = (limits.cpus * 1e9).round() as i64;
    let body = ContainerCreateBody {
        image: Some(CELL_IMAGE.to_string()),
        entrypoint: Some(vec![CELL_PROGRAM.to_string()]),
        network_disabled: Some(true),
        labels: Some(HashMap::from([
            (LABEL_HOME.to_string(), home_id.to_string()),
            (LABEL_ROLE.to_string(), "build-cell".to_string()),
        ])),
        host_config: Some(HostConfig {
            cgroup_parent: Some(CELL_PARENT.to_string()),
            pids_limit: (limits.pids > 0).then(|| i64::from(limits.pids)),
            memory: (memory > 0).then_some(memory),
            memory_swap: (memory > 0).then_some(memory),
            nano_cpus: (nano_cpus > 0).then_some(nano_cpus),
            network_mode: Some("none".to_string()),
            cap_drop: Some(vec!["ALL".to_string()]),
            security_opt: Some(vec!["no-new-privileges".to_string()]),
            readonly_rootfs: Some(true),
            auto_remove: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    };
    let id = create_named(daemon, docker, &name, body).await?;
    let cell = Cell {
        cgroup: format!("{CELL_PARENT}/{id}"),
        name,
    };
    if let Err(error) = start_named(docker, &cell.name).await {
        cell.close(docker).await;
        return Err(error);
    }
    Ok(cell)
}

impl Cell {
    /// Removes the cell (force: its program is still sleeping). A failure is logged: the
    /// cell exits by itself after [`CELL_LIFETIME`] and the engine removes it then.
    pub async fn close(self, docker: &Docker) {
        let options = RemoveContainerOptionsBuilder::new().force(true).build();
        let removed = call(
            "remove container",
            &self.name,
            API_TIMEOUT,
            docker.remove_container(&self.name, Some(options)),
        )
        .await;
        if let Err(error) = removed {
            tracing::warn!(cell = %self.name, %error, "cannot remove a build's cell; it exits by itself");
        }
    }

    /// The engine client for the build itself: its request carries the cell as its cgroup
    /// parent, and the job's memory cap at full width (the build API reads both from the
    /// query; bollard's options have no cgroup parent and a 32-bit memory field).
    pub fn client(&self, docker: &Docker, memory: u64) -> Docker {
        let mut extra = format!("cgroupparent={}", self.cgroup);
        if memory > 0 {
            extra.push_str(&format!("&memory={memory}&memswap={memory}"));
        }
        docker.clone().with_request_modifier(move |mut request| {
            if request.uri().path().ends_with("/build") {
                let uri = request.uri().to_string();
                let joined = if uri.contains('?') { '&' } else { '?' };
                *request.uri_mut() = format!("{uri}{joined}{extra}")
                    .parse()
                    .expect("a query of digits, hex and slashes parses");
            }
            request
        })
    }
}

/// Imports the cell image unless the engine has it; refuses an image of that name that is
/// not paddock's.
async fn ensure_image(docker: &Docker, arch: Arch) -> Result<(), RuntimeError> {
    let found = super::calls::optional(
        "inspect image",
        CELL_IMAGE,
        API_TIMEOUT,
        docker.inspect_image(CELL_IMAGE),
    )
    .await?;
    if let Some(image) = found {
        let ours = image
            .config
            .and_then(|c| c.labels)
            .is_some_and(|labels| labels.get(LABEL_IMAGE).map(String::as_str) == Some("cell"));
        if ours {
            return Ok(());
        }
        return Err(RuntimeError::NotOurImage {
            image: CELL_IMAGE.to_string(),
        });
    }
    let tar = cell_tar(arch).map_err(|source| RuntimeError::Io {
        path: CELL_PROGRAM.into(),
        source,
    })?;
    let (repo, tag) = CELL_IMAGE
        .split_once(':')
        .expect("the image name has a tag");
    let options = CreateImageOptionsBuilder::new()
        .from_src("-")
        .repo(repo)
        .tag(tag)
        .changes(vec![format!("LABEL {LABEL_IMAGE}=cell")])
        .build();
    let mut stream = docker.create_image(
        Some(options),
        Some(bollard::body_full(bytes::Bytes::from(tar))),
        None,
    );
    let deadline = tokio::time::Instant::now() + API_TIMEOUT;
    loop {
        let next = tokio::time::timeout_at(deadline, stream.next())
            .await
            .map_err(|_| RuntimeError::DockerTimeout {
                action: "import image",
                target: CELL_IMAGE.to_string(),
                after: API_TIMEOUT,
            })?;
        match next {
            None => return Ok(()),
            Some(Ok(_)) => {}
            Some(Err(error)) => {
                return Err(RuntimeError::Docker {
                    action: "import image",
                    target: CELL_IMAGE.to_string(),
                    message: error.to_string(),
                });
            }
        }
    }
}

/// The cell image's root: its one program.
fn cell_tar(arch: Arch) -> std::io::Result<Vec<u8>> {
    let program = sleeper_elf(arch, CELL_LIFETIME.as_secs());
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(program.len() as u64);
    header.set_mode(0o755);
    builder.append_data(
        &mut header,
        CELL_PROGRAM.trim_start_matches('/'),
        &program[..],
    )?;
    builder.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_cgroup_v1_with_cgroupfs_holds_a_cell() {
        assert_eq!(cell_support_of("cgroupfs", "1", "x86_64"), Ok(Arch::X86_64));
        assert_eq!(
            cell_support_of("cgroupfs", "1", "aarch64"),
            Ok(Arch::Aarch64)
        );
        let systemd = cell_support_of("systemd", "2", "x86_64").expect_err("no cell");
        assert!(systemd.contains("version 2, driver systemd"), "{systemd}");
        assert!(cell_support_of("cgroupfs", "2", "x86_64").is_err());
        assert!(cell_support_of("", "", "x86_64").is_err());
        let arch = cell_support_of("cgroupfs", "1", "riscv64").expect_err("no program");
        assert!(arch.contains("riscv64"), "{arch}");
    }

    /// The x86-64 program runs here: it sleeps its time and exits 0.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_cell_program_sleeps_then_exits() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("cell");
        std::fs::write(&path, sleeper_elf(Arch::X86_64, 1)).expect("write the program");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let started = std::time::Instant::now();
        let status = std::process::Command::new(&path)
            .status()
            .expect("the program runs");
        let took = started.elapsed();
        assert!(status.success(), "{status}");
        assert!(took >= Duration::from_millis(900), "{took:?}");
        assert!(took < Duration::from_secs(10), "{took:?}");
    }

    /// Both programs carry a well-formed header: the entry is just past the headers, the
    /// one segment covers the whole file, and the timespec is at the end.
    #[test]
    fn the_programs_headers_describe_the_file() {
        for (arch, machine) in [(Arch::X86_64, 0x3e_u16), (Arch::Aarch64, 0xb7)] {
            let elf = sleeper_elf(arch, 4321);
            assert_eq!(&elf[..4], b"\x7fELF");
            assert_eq!(u16::from_le_bytes([elf[18], elf[19]]), machine);
            let entry = u64::from_le_bytes(elf[24..32].try_into().expect("8 bytes"));
            assert_eq!(entry, 0x40_0000 + 120);
            let filesz = u64::from_le_bytes(elf[96..104].try_into().expect("8 bytes"));
            assert_eq!(filesz, elf.len() as u64);
            let seconds = u64::from_le_bytes(
                elf[elf.len() - 16..elf.len() - 8]
                    .try_into()
                    .expect("8 bytes"),
            );
            assert_eq!(seconds, 4321);
        }
    }
}
