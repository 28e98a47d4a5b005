//! The microVM runtime's row: QEMU and virtiofsd present, the kernel unpacked, static
//! busybox for the initramfs, a cgroup hierarchy for the VMs' host cgroups (v1 or v2), and
//! which accelerator a VM gets here (the KVM probe boot, kept
//! per host boot), and root, which the runtime needs. A warning, not a failure: the other
//! runtimes work without any of it.

use super::{Check, Status, check};
use crate::runtime::microvm::{accel, assets, cgroup, vm};

pub async fn microvm_check(assets_dir: &std::path::Path) -> Check {
    let missing: Vec<String> = [
        ("/usr/bin/qemu-system-x86_64", "qemu-system-x86"),
        (vm::VIRTIOFSD, "qemu-system-x86"),
        (assets::BUSYBOX, "busybox-static"),
    ]
    .iter()
    .filter(|(path, _)| !std::path::Path::new(path).exists())
    .map(|(path, package)| format!("{path} (Debian's {package})"))
    .collect();
    let fix = "apt-get install qemu-system-x86 busybox-static; unpack linux-image-*-cloud-amd64-unsigned into /usr/lib/paddock/microvm (see .ci/run)";
    if !missing.is_empty() {
        return check(
            "microvm runtime",
            Status::Warn,
            format!("missing {}", missing.join(", ")),
            Some(fix),
        );
    }
    // The next create with `runtime: microvm` would be refused: say so before, with why.
    if !crate::sys::is_root() {
        return check(
            "microvm runtime",
            Status::Warn,
            "needs root (virtiofsd, the read-only shares and the VMs' host cgroups): as this user, jobs cannot use `runtime: microvm`",
            Some(
                "run paddock as root for microVM jobs; gVisor (`runtime: runsc`) isolates without root",
            ),
        );
    }
    let cgroups = match cgroup::host_version() {
        Ok(version) => version,
        Err(error) => return check("microvm runtime", Status::Warn, error.to_string(), None),
    };
    let kernel = match assets::Kernel::locate() {
        Ok(kernel) => kernel,
        Err(error) => {
            return check(
                "microvm runtime",
                Status::Warn,
                error.to_string(),
                Some(fix),
            );
        }
    };
    let built = {
        let (dir, kernel) = (assets_dir.to_path_buf(), kernel.clone());
        tokio::task::spawn_blocking(move || assets::initramfs(&dir, &kernel))
            .await
            .expect("building the initramfs does not panic")
    };
    let initramfs = match built {
        Ok(path) => path,
        Err(error) => {
            return check(
                "microvm runtime",
                Status::Warn,
                error.to_string(),
                Some(fix),
            );
        }
    };
    match accel::choose(assets_dir, &kernel.image, &initramfs).await {
        Ok((accel::Accel::Kvm, _)) => check(
            "microvm runtime",
            Status::Ok,
            format!(
                "kernel {}; KVM boots it; host cgroups {cgroups}",
                kernel.image.display()
            ),
            None,
        ),
        Ok((accel::Accel::Tcg, warning)) => check(
            "microvm runtime",
            if warning.is_some() {
                Status::Warn
            } else {
                Status::Ok
            },
            format!(
                "kernel {}; host cgroups {cgroups}; {}",
                kernel.image.display(),
                warning
                    .unwrap_or_else(|| "the emulator (TCG), as PADDOCK_MICROVM_ACCEL asks".into())
            ),
            None,
        ),
        Err(error) => check("microvm runtime", Status::Warn, error.to_string(), None),
    }
}
