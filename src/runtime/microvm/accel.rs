//! Which accelerator a microVM gets: `PADDOCK_MICROVM_ACCEL` = `auto` (the default), `kvm`
//! or `tcg`. `auto` takes KVM only when a probe boot of the real kernel and initramfs under
//! KVM prints the init's marker within [`PROBE_DEADLINE`]; some hosts have a `/dev/kvm`
//! that cannot run a stock kernel (a nested paravirtual backend hangs at boot), and those
//! fall back to QEMU's emulator, which works everywhere at several times the cost. The
//! probe's verdict is kept per host boot (`/proc/sys/kernel/random/boot_id`) in the
//! install's microVM directory, so it runs once, not per job.

use std::path::Path;
use std::time::Duration;

use super::MicrovmError;

/// The kernel arguments every boot starts with. `no_timer_check` skips the kernel's check
/// that the IO-APIC timer ticks within a few emulated instants: under QEMU's emulator on a
/// loaded host that check fails and the kernel panics ("IO-APIC + timer doesn't work",
/// seen in CI with two microVM tests booting beside a build); the timer works all the same.
pub const KERNEL_ARGS: &str = "console=ttyS0 quiet panic=-1 no_timer_check";

/// The emulator every VM runs in.
pub const QEMU: &str = "qemu-system-x86_64";

/// The emulator's translation cache, in MiB. QEMU's own default is 1 GiB, mapped as it
/// fills: a VM that ran enough different code (seen in CI: a checkpoint, a restore, a fork,
/// a shell, then the removal's sync) grew it past its host cgroup's bound (the guest's RAM
/// plus [`super::cgroup::HOST_OVERHEAD`]) and the kernel killed QEMU mid-exec. At this size
/// the cache is flushed and refilled instead, and QEMU stays inside the bound.
pub const TCG_CODE_CACHE_MIB: u64 = 128;

/// How long a probe boot under KVM may take to print the marker (a KVM boot of this
/// kernel and initramfs takes well under a second where KVM works).
pub const PROBE_DEADLINE: Duration = Duration::from_secs(8);

#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::Display)]
#[strum(serialize_all = "lowercase")]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    pub fn qemu_args(self) -> [String; 4] {
        match self {
            // Without `-arch-capabilities` QEMU aborts on MSR 0x10a on some nested hosts.
            Accel::Kvm => ["-accel", "kvm", "-cpu", "host,-arch-capabilities"].map(String::from),
            Accel::Tcg => [
                "-accel".into(),
                format!("tcg,tb-size={TCG_CODE_CACHE_MIB}"),
                "-cpu".into(),
                "max".into(),
            ],
        }
    }
}

/// The accelerator to use and, when `auto` fell back to the emulator, a warning saying so.
pub async fn choose(
    dir: &Path,
    kernel: &Path,
    initramfs: &Path,
) -> Result<(Accel, Option<String>), MicrovmError> {
    let wanted = std::env::var("PADDOCK_MICROVM_ACCEL").unwrap_or_else(|_| "auto".into());
    match wanted.as_str() {
        "kvm" => return Ok((Accel::Kvm, None)),
        "tcg" => return Ok((Accel::Tcg, None)),
        "auto" | "" => {}
        other => {
            return Err(MicrovmError::Config {
                message: format!("PADDOCK_MICROVM_ACCEL is `{other}`: expected auto, kvm or tcg"),
            });
        }
    }
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let cache = dir.join("accel");
    let verdict = match std::fs::read_to_string(&cache) {
        Ok(text) if text.lines().next() == Some(boot_id.trim()) => {
            text.lines().nth(1).unwrap_or("tcg").to_string()
        }
        _ => {
            let works = probe_kvm(kernel, initramfs).await;
            let verdict = if works { "kvm" } else { "tcg" };
            let _ = std::fs::write(&cache, format!("{}\n{verdict}\n", boot_id.trim()));
            verdict.to_string()
        }
    };
    Ok(if verdict == "kvm" {
        (Accel::Kvm, None)
    } else {
        (
            Accel::Tcg,
            Some(
                "KVM cannot boot the microVM kernel here: using QEMU's emulator (TCG), which boots in seconds rather than under one and runs commands several times slower".into(),
            ),
        )
    })
}

/// Whether a KVM boot of `kernel` prints the init's probe marker within the deadline.
pub async fn probe_kvm(kernel: &Path, initramfs: &Path) -> bool {
    if !Path::new("/dev/kvm").exists() {
        return false;
    }
    let mut command = tokio::process::Command::new(QEMU);
    command
        .args([
            "-M",
            "q35",
            "-m",
            "256M",
            "-smp",
            "1",
            "-nodefaults",
            "-no-user-config",
        ])
        .args(Accel::Kvm.qemu_args())
        .args([
            "-display",
            "none",
            "-serial",
            "stdio",
            "-no-reboot",
            "-kernel",
        ])
        .arg(kernel)
        .arg("-initrd")
        .arg(initramfs)
        .args(["-append", &format!("{KERNEL_ARGS} paddock.probe=1")])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    match tokio::time::timeout(PROBE_DEADLINE, command.output()).await {
        Ok(Ok(out)) => String::from_utf8_lossy(&out.stdout).contains("PADDOCK-PROBE-OK"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The emulator's translation cache is bounded, and with QEMU's own needs it fits the
    /// host memory a VM may use beyond its guest's RAM: QEMU's default (1 GiB) did not, and
    /// the kernel killed a long-lived VM's QEMU in its host cgroup.
    #[test]
    fn the_emulators_translation_cache_fits_the_vms_host_cgroup() {
        let args = Accel::Tcg.qemu_args();
        assert_eq!(args[1], format!("tcg,tb-size={TCG_CODE_CACHE_MIB}"));
        // QEMU's own heap, its device threads and the virtiofsd processes measured well
        // under 200 MiB beside the cache (`dmesg` of the OOM kill: QEMU's anonymous memory
        // 626 MiB, 508 MiB of it in huge pages, the cache at its default size).
        let qemu_itself = 200 << 20;
        assert!(
            (TCG_CODE_CACHE_MIB << 20) + qemu_itself <= super::super::cgroup::HOST_OVERHEAD,
            "a {TCG_CODE_CACHE_MIB} MiB cache leaves QEMU too little of the overhead"
        );
        assert!(!Accel::Kvm.qemu_args().iter().any(|a| a.contains("tb-size")));
    }
}
