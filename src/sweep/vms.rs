//! The sweep's part for microVM jobs: a QEMU or virtiofsd process that names the `vm/`
//! directory of a job with no record (paddock killed mid-create or mid-rm) is ended. VMs of
//! recorded jobs are the job's business: a job whose QEMU died gets a new VM at its next
//! exec, and its virtiofsd processes end with their QEMU. A pool slot's VM is the pool
//! sweep's (`sweep/pool.rs`) while its slot directory exists, and a claimed one its job's;
//! one whose slot is gone and that no record claimed is ended here.

use super::{SweepOptions, SweepReport};
use crate::engine::Paddock;
use crate::job::RuntimeKind;

impl Paddock {
    pub(super) async fn reap_orphan_vms(&self, options: &SweepOptions, report: &mut SweepReport) {
        let runtime = self.runtimes().of(RuntimeKind::Microvm);
        let Ok(vms) = runtime.list_sandboxes().await else {
            return;
        };
        let slots = crate::pool::PoolSlots::of(self.home());
        for vm in vms {
            let reason = if vm.role == crate::runtime::SandboxRole::Pool {
                let claimed = self.store().list().is_ok_and(|(records, _)| {
                    records
                        .iter()
                        .any(|r| r.pool_slot() == Some(vm.job.as_str()))
                });
                if claimed || slots.dir(&vm.job).exists() {
                    continue;
                }
                "microVM processes of a pool slot that is gone"
            } else {
                if self.store().exists_str(&vm.job) {
                    continue;
                }
                "microVM processes of a job with no record"
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
