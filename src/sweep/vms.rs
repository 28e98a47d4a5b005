//! The sweep's part for microVM jobs: a QEMU or virtiofsd process that names the `vm/`
//! directory of a job with no record (paddock killed mid-create or mid-rm) is ended, and its
//! host cgroup (`paddock/<install>/vm-<job>`) removed. VMs of recorded jobs are the job's
//! business: a job whose QEMU died gets a new VM at its next exec, and its virtiofsd
//! processes end with their QEMU; only its cgroup, once empty, is removed (the next boot
//! makes it again).

use super::{SweepOptions, SweepReport};
use crate::engine::Paddock;
use crate::job::{JobState, RuntimeKind};

impl Paddock {
    pub(super) async fn reap_orphan_vms(&self, options: &SweepOptions, report: &mut SweepReport) {
        let runtime = self.runtimes().of(RuntimeKind::Microvm);
        let Ok(vms) = runtime.list_sandboxes().await else {
            return;
        };
        for vm in vms {
            let recorded = self.store().exists_str(&vm.job);
            // A job being created or running an exec may be booting: its cgroup is made
            // just before its first process enters it.
            let busy = || {
                self.store()
                    .load(&vm.job)
                    .is_ok_and(|r| matches!(r.state, JobState::Creating | JobState::Running))
            };
            if recorded && (vm.running || busy()) {
                continue;
            }
            let reason = if recorded {
                "the empty host cgroup of a VM that no longer runs"
            } else {
                "microVM processes (or their host cgroup) of a job with no record"
            };
            if options.dry_run {
                report.removed("vm", vm.name, reason);
                continue;
            }
            match runtime.remove_sandbox(&vm).await {
                Ok(()) => report.removed("vm", vm.name, reason),
                Err(error) => report.error("vm", vm.name, reason, error),
            }
        }
    }
}
