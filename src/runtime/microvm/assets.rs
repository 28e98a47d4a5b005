//! What a microVM boots: the kernel (Debian's, unpacked where `.ci/run` puts it, or
//! `PADDOCK_MICROVM_KERNEL`), an initramfs made here (static busybox, the kernel's virtio,
//! virtiofs and overlay modules, and [`INIT`]), and the root filesystem: the agent image's
//! files with paddock's binary added as the guest agent, in an ext4 image made once per
//! image and binary and attached read-only (the guest writes to a tmpfs overlay).
//!
//! Built files are written beside their final name and renamed, under a lock, so a crash
//! or two jobs starting at once never leave a half-made image in use.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::Digest as _;

use super::MicrovmError;

/// Where `.ci/run` unpacks Debian's kernel package: `vmlinuz` and `modules/` (the package's
/// `lib/modules/<release>`).
pub const DEFAULT_KERNEL: &str = "/usr/lib/paddock/microvm/vmlinuz";
/// busybox from Debian's `busybox-static` (the initramfs has no libc to link against).
pub const BUSYBOX: &str = "/bin/busybox";

/// The kernel modules the init loads (none is built into Debian's cloud kernel), put in
/// the order of their `depends=` at build time: it changes between kernel releases (since
/// 6.1.0-56 `virtio` needs `virtio_ring`).
const MODULES: &[&str] = &[
    "drivers/virtio/virtio_ring",
    "drivers/virtio/virtio",
    "drivers/virtio/virtio_pci_legacy_dev",
    "drivers/virtio/virtio_pci_modern_dev",
    "drivers/virtio/virtio_pci",
    "drivers/block/virtio_blk",
    "drivers/char/virtio_console",
    "fs/fuse/fuse",
    "fs/fuse/virtiofs",
    "fs/overlayfs/overlay",
    "net/core/failover",
    "drivers/net/net_failover",
    "drivers/net/virtio_net",
];

/// The guest's init (busybox sh): modules, the read-only root with a tmpfs overlay, the
/// job's shares (`paddock.share=tag:path:ro|rw`, each a virtiofs export of one host
/// directory), the network (`paddock.net=none|user|proxy`: `proxy` has no DNS, its only
/// way out being the proxy QEMU forwards), the job cgroup with its memory and
/// pids limits, then the guest agent as PID 1 of the new root. `paddock.probe=1` only
/// prints a marker and powers off (the KVM probe).
pub const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox mkdir -p /bin /proc /sys /dev /lower /rw /newroot
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for arg in $(cat /proc/cmdline); do
  case "$arg" in
    paddock.probe=1) echo PADDOCK-PROBE-OK; poweroff -f ;;
    paddock.share=*) shares="$shares ${arg#paddock.share=}" ;;
    paddock.net=*) net=${arg#paddock.net=} ;;
    paddock.mem=*) mem=${arg#paddock.mem=} ;;
    paddock.pids=*) pids=${arg#paddock.pids=} ;;
    paddock.cpu=*) cpu=${arg#paddock.cpu=} ;;
    paddock.uid=*) uid=${arg#paddock.uid=} ;;
  esac
done
for m in $(cat /lib/modules/order); do insmod /lib/modules/$m 2>/dev/null; done
# virtio devices are probed asynchronously: the disk's node may come after the modules load
# (seen on a busy host, and with fewer devices to probe).
n=0; while [ ! -b /dev/vda ] && [ $n -lt 300 ]; do sleep 0.1; n=$((n+1)); done
mount -t ext4 -o ro /dev/vda /lower || { echo "paddock init: no root disk"; poweroff -f; }
mount -t tmpfs -o size=256m,mode=0755 tmpfs /rw && mkdir /rw/upper /rw/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work /newroot
for share in $shares; do
  tag=${share%%:*}; rest=${share#*:}; path=${rest%:*}; mode=${rest##*:}
  mkdir -p "/newroot$path"
  mount -t virtiofs -o "$mode" "$tag" "/newroot$path" || echo "paddock init: cannot mount $tag"
done
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
mkdir -p /newroot/home/agent && mount -t tmpfs -o mode=0700 tmpfs /newroot/home/agent
chown "$uid:$uid" /newroot/home/agent
ip link set lo up
if [ "$net" = user ] || [ "$net" = proxy ]; then
  ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2
fi
[ "$net" = user ] && echo "nameserver 10.0.2.3" > /newroot/etc/resolv.conf
[ "$net" = proxy ] && : > /newroot/etc/resolv.conf
mount --move /proc /newroot/proc; mount --move /sys /newroot/sys; mount --move /dev /newroot/dev
# A devpts of the guest's own, so `shell` gets a pseudo-terminal (`script` in the guest).
mkdir -p /newroot/dev/pts && mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /newroot/dev/pts && ln -sf pts/ptmx /newroot/dev/ptmx
mount -t cgroup2 cgroup2 /newroot/sys/fs/cgroup
echo "+memory +pids +cpu" > /newroot/sys/fs/cgroup/cgroup.subtree_control
mkdir /newroot/sys/fs/cgroup/job
[ -n "$mem" ] && echo "$mem" > /newroot/sys/fs/cgroup/job/memory.max
echo 0 > /newroot/sys/fs/cgroup/job/memory.swap.max 2>/dev/null
[ -n "$pids" ] && echo "$pids" > /newroot/sys/fs/cgroup/job/pids.max
[ -n "$cpu" ] && echo "$cpu 100000" > /newroot/sys/fs/cgroup/job/cpu.max
echo PADDOCK-INIT-DONE
exec switch_root /newroot /usr/local/bin/paddock-guest guest-agent
"#;

/// The modules a `.ko` file names in its `.modinfo` `depends=` entry.
fn module_depends(bytes: &[u8]) -> Vec<String> {
    let key = b"depends=";
    bytes
        .windows(key.len())
        .position(|w| w == key)
        .map(|at| {
            let rest = &bytes[at + key.len()..];
            let end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
            String::from_utf8_lossy(&rest[..end])
                .split(',')
                .filter(|d| !d.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// `names` with each module after the ones of `names` it depends on (listed order kept
/// otherwise; a cycle keeps the listed order for what remains).
fn load_order(
    names: &[String],
    depends: &std::collections::HashMap<String, Vec<String>>,
) -> Vec<String> {
    let mut done: Vec<String> = Vec::new();
    while done.len() < names.len() {
        let next = names.iter().find(|name| {
            !done.contains(name)
                && depends
                    .get(*name)
                    .is_none_or(|deps| deps.iter().all(|d| done.contains(d) || !names.contains(d)))
        });
        match next {
            Some(name) => done.push(name.clone()),
            None => {
                let rest: Vec<String> = names
                    .iter()
                    .filter(|n| !done.contains(n))
                    .cloned()
                    .collect();
                done.extend(rest);
            }
        }
    }
    done
}

/// The kernel to boot and its modules' tree.
#[derive(Debug, Clone)]
pub struct Kernel {
    pub image: PathBuf,
    pub modules: PathBuf,
}

impl Kernel {
    /// The configured kernel (`PADDOCK_MICROVM_KERNEL`, else [`DEFAULT_KERNEL`]), or what is
    /// missing.
    pub fn locate() -> Result<Kernel, MicrovmError> {
        let image = std::env::var_os("PADDOCK_MICROVM_KERNEL")
            .map_or_else(|| PathBuf::from(DEFAULT_KERNEL), PathBuf::from);
        let modules = image.with_file_name("modules");
        for needed in [&image, &modules.join("kernel")] {
            if !needed.exists() {
                return Err(MicrovmError::Missing {
                    what: "the microVM kernel",
                    path: needed.clone(),
                    hint: "unpack Debian's linux-image-*-cloud-amd64-unsigned there (see .ci/run) or set PADDOCK_MICROVM_KERNEL",
                });
            }
        }
        Ok(Kernel { image, modules })
    }
}

/// The initramfs for `kernel` under `dir`, made now when missing.
pub fn initramfs(dir: &Path, kernel: &Kernel) -> Result<PathBuf, MicrovmError> {
    if !Path::new(BUSYBOX).exists() {
        return Err(MicrovmError::Missing {
            what: "static busybox",
            path: BUSYBOX.into(),
            hint: "install Debian's busybox-static",
        });
    }
    let key = digest(&[
        // How the initramfs is laid out (bump when that changes: modules in `depends` order).
        b"layout 2",
        INIT.as_bytes(),
        kernel.modules.as_os_str().as_encoded_bytes(),
        &stamp(&kernel.modules)?,
        &stamp(Path::new(BUSYBOX))?,
    ]);
    let path = dir.join(format!("initramfs-{key}.cpio"));
    if path.exists() {
        return Ok(path);
    }
    let _lock = lock(dir)?;
    if path.exists() {
        return Ok(path);
    }
    let stage = dir.join(format!(".initramfs-{}", crate::ids::random_hex(8)));
    let result = (|| {
        let io = |p: &Path| {
            let p = p.to_path_buf();
            move |source| MicrovmError::Io { path: p, source }
        };
        std::fs::create_dir_all(stage.join("bin")).map_err(io(&stage))?;
        std::fs::create_dir_all(stage.join("lib/modules")).map_err(io(&stage))?;
        std::fs::copy(BUSYBOX, stage.join("bin/busybox")).map_err(io(Path::new(BUSYBOX)))?;
        let mut names = Vec::new();
        let mut depends = std::collections::HashMap::new();
        for module in MODULES {
            let source = kernel.modules.join("kernel").join(format!("{module}.ko"));
            let name = module.rsplit('/').next().expect("a module has a name");
            let bytes = std::fs::read(&source).map_err(io(&source))?;
            depends.insert(name.to_string(), module_depends(&bytes));
            std::fs::write(stage.join("lib/modules").join(format!("{name}.ko")), bytes)
                .map_err(io(&source))?;
            names.push(name.to_string());
        }
        let order: String = load_order(&names, &depends)
            .into_iter()
            .map(|name| format!("{name}.ko\n"))
            .collect();
        std::fs::write(stage.join("lib/modules/order"), order).map_err(io(&stage))?;
        let init = stage.join("init");
        std::fs::write(&init, INIT).map_err(io(&init))?;
        std::fs::set_permissions(&init, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .map_err(io(&init))?;
        let names = "init\nbin\nbin/busybox\nlib\nlib/modules\n".to_string()
            + &std::fs::read_dir(stage.join("lib/modules"))
                .map_err(io(&stage))?
                .flatten()
                .map(|e| format!("lib/modules/{}\n", e.file_name().to_string_lossy()))
                .collect::<String>();
        let partial = path.with_extension("partial");
        let out = std::fs::File::create(&partial).map_err(io(&partial))?;
        let mut cpio = std::process::Command::new(BUSYBOX)
            .args(["cpio", "-o", "-H", "newc"])
            .current_dir(&stage)
            .stdin(std::process::Stdio::piped())
            .stdout(out)
            .stderr(std::process::Stdio::null())
            .spawn()
            .map_err(io(Path::new(BUSYBOX)))?;
        cpio.stdin
            .take()
            .expect("stdin is piped")
            .write_all(names.as_bytes())
            .map_err(io(&stage))?;
        let status = cpio.wait().map_err(io(Path::new(BUSYBOX)))?;
        if !status.success() {
            return Err(MicrovmError::Build {
                what: "initramfs",
                message: format!("busybox cpio exited {status}"),
            });
        }
        std::fs::rename(&partial, &path).map_err(io(&path))
    })();
    let _ = std::fs::remove_dir_all(&stage);
    result.map(|()| path)
}

/// The root filesystem image of `image` (its id `image_id`) with this binary as the guest
/// agent, made now when missing (an export of the image and `mkfs.ext4 -d`).
pub async fn rootfs(dir: &Path, home_id: &str, image: &str) -> Result<PathBuf, MicrovmError> {
    let image_id =
        crate::runtime::docker::export::image_id(&crate::runtime::docker::Daemon::local(), image)
            .await?;
    let exe = std::env::current_exe().map_err(|source| MicrovmError::Io {
        path: "/proc/self/exe".into(),
        source,
    })?;
    let key = digest(&[image_id.as_bytes(), &stamp(&exe)?]);
    let path = dir.join(format!("rootfs-{key}.ext4"));
    if path.exists() {
        return Ok(path);
    }
    let lock_dir = dir.to_path_buf();
    let _lock = tokio::task::spawn_blocking(move || lock(&lock_dir))
        .await
        .expect("locking does not panic")?;
    if path.exists() {
        return Ok(path);
    }
    let stage = dir.join(format!(".rootfs-{}", crate::ids::random_hex(8)));
    let result = async {
        crate::runtime::docker::export::export_image(
            &crate::runtime::docker::Daemon::local(),
            image,
            home_id,
            &stage,
        )
        .await?;
        let guest = stage.join("usr/local/bin/paddock-guest");
        std::fs::copy(&exe, &guest).map_err(|source| MicrovmError::Io {
            path: guest.clone(),
            source,
        })?;
        // Room for the files plus ext4's own metadata; the image is read-only in use.
        let size_mb = tree_size(&stage) / (1 << 20) * 13 / 10 + 64;
        let partial = path.with_extension("partial");
        let out = tokio::time::timeout(
            Duration::from_secs(600),
            tokio::process::Command::new("mkfs.ext4")
                .args([
                    "-q",
                    "-F",
                    "-L",
                    "paddock-root",
                    "-E",
                    "root_owner=0:0",
                    "-d",
                ])
                .arg(&stage)
                .arg(&partial)
                .arg(format!("{size_mb}M"))
                .kill_on_drop(true)
                .output(),
        )
        .await
        .map_err(|_| MicrovmError::Build {
            what: "root filesystem",
            message: "mkfs.ext4 took over 600s".into(),
        })?
        .map_err(|source| MicrovmError::Io {
            path: "mkfs.ext4".into(),
            source,
        })?;
        if !out.status.success() {
            return Err(MicrovmError::Build {
                what: "root filesystem",
                message: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        std::fs::rename(&partial, &path).map_err(|source| MicrovmError::Io {
            path: path.clone(),
            source,
        })
    }
    .await;
    let stage_copy = stage.clone();
    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(stage_copy)).await;
    result.map(|()| path)
}

/// Bytes of the regular files under `root` (symlinks not followed).
fn tree_size(root: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => stack.push(entry.path()),
                Ok(kind) if kind.is_file() => {
                    total += entry
                        .metadata()
                        .map_or(0, |m| m.len().div_ceil(4096) * 4096);
                }
                _ => total += 4096,
            }
        }
    }
    total
}

/// Size and modification time of `path`: a file that changed gets a new key.
fn stamp(path: &Path) -> Result<Vec<u8>, MicrovmError> {
    let meta = std::fs::metadata(path).map_err(|source| MicrovmError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let modified = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    Ok(format!("{}:{modified}", meta.len()).into_bytes())
}

fn digest(parts: &[&[u8]]) -> String {
    let mut hash = sha2::Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn lock(dir: &Path) -> Result<crate::store::FileLock, MicrovmError> {
    std::fs::create_dir_all(dir).map_err(|source| MicrovmError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    crate::store::FileLock::acquire(&dir.join("build.lock"), Duration::from_secs(900)).map_err(
        |e| MicrovmError::Build {
            what: "microVM assets",
            message: e.to_string(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_load_after_what_they_depend_on() {
        let ko = |depends: &str| format!("\0license=GPL\0depends={depends}\0vermagic=6.1\0");
        assert_eq!(
            module_depends(ko("virtio_ring,virtio").as_bytes()),
            ["virtio_ring", "virtio"]
        );
        assert!(module_depends(ko("").as_bytes()).is_empty());
        let names: Vec<String> = ["virtio", "virtio_ring", "virtio_blk", "fuse"]
            .map(String::from)
            .to_vec();
        let depends = std::collections::HashMap::from([
            ("virtio".to_string(), vec!["virtio_ring".to_string()]),
            ("virtio_ring".to_string(), vec![]),
            (
                "virtio_blk".to_string(),
                vec!["virtio".into(), "virtio_ring".into()],
            ),
            // Built into the kernel, or not in the list: no wait for it.
            ("fuse".to_string(), vec!["builtin_thing".into()]),
        ]);
        assert_eq!(
            load_order(&names, &depends),
            ["virtio_ring", "virtio", "virtio_blk", "fuse"]
        );
    }
}
