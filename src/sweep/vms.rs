//! The sweep's part for microVM jobs: a QEMU or virtiofsd process that names the `vm/`
//! directory of a job with no record (paddock killed mid-create or mid-rm) is ended, and its
//! host cgroup (`paddock/<install>/vm-<job>`) removed. VMs of recorded jobs are the job's
//! business: a job whose QEMU died gets a new VM at its next exec, and its virtiofsd
//! processes end with their QEMU; only its cgroup, once empty, is removed (the next boot
//! makes it again). A pool slot's VM (cgroup `vm-<slot>`) is the pool sweep's
//! (`sweep/pool.rs`) while its slot directory exists, and a claimed one its job's, as
//! above; one whose slot is gone and that no record claimed is ended here, cgroup too.

use super::{SweepOptions, SweepReport};
use crate::engine::Paddock;
use crate::job::JobState;

impl Paddock {
    pub(super) async fn reap_orphan_vms(&self, options: &SweepOptions, report: &mut SweepReport) {
        let runtimes = self.runtimes().clone();
        for runtime in runtimes.apart_from_engine() {
            self.reap_orphans_apart(runtime, options, report).await;
        }
    }

    /// One runtime's sandboxes apart from the engine (a microVM's VMs), as above.
    async fn reap_orphans_apart(
        &self,
        runtime: &dyn crate::runtime::Runtime,
        options: &SweepOptions,
        report: &mut SweepReport,
    ) {
        let Ok(vms) = crate::runtime::list_sandboxes(runtime).await else {
            return;
        };
        let slots = crate::pool::PoolSlots::of(self.home());
        for vm in vms {
            // The record whose VM this is: the job's own, or the one that claimed the slot.
            let record = if vm.role == crate::runtime::SandboxRole::Pool {
                let claimer = self.store().list().ok().and_then(|(records, _)| {
                    records
                        .into_iter()
                        .find(|r| r.pool_slot() == Some(vm.job.as_str()))
                });
                if claimer.is_none() && slots.dir(&vm.job).exists() {
                    continue;
                }
                claimer.map(|r| r.id.as_str().to_string())
            } else {
                self.store().exists_str(&vm.job).then(|| vm.job.clone())
            };
            // A job being created or running an exec may be booting: its cgroup is made
            // just before its first process enters it.
            let busy = |job: &str| {
                self.store()
                    .load(job)
                    .is_ok_and(|r| matches!(r.state, JobState::Creating | JobState::Running))
            };
            if let Some(job) = &record
                && (vm.running || busy(job))
            {
                continue;
            }
            let reason = match (&record, vm.role) {
                (Some(_), _) => "the empty host cgroup of a VM that no longer runs",
                (None, crate::runtime::SandboxRole::Pool) => {
                    "microVM processes (or their host cgroup) of a pool slot that is gone"
                }
                (None, _) => "microVM processes (or their host cgroup) of a job with no record",
            };
            if options.dry_run {
                report.removed("vm", vm.name, reason);
                continue;
            }
            // Right before acting: the listing may be seconds old (each removal above waited
            // for its processes to end), and a job may have made its record or booted its VM
            // since; a VM that runs now, or a job that now works, is left.
            if record.is_none()
                && vm.role == crate::runtime::SandboxRole::Job
                && self.store().exists_str(&vm.job)
            {
                continue;
            }
            if let Some(job) = &record {
                let fresh = crate::runtime::list_sandboxes(runtime)
                    .await
                    .unwrap_or_default();
                let runs_now = fresh
                    .iter()
                    .any(|s| s.job == vm.job && s.role == vm.role && s.running);
                if runs_now || busy(job) {
                    continue;
                }
            }
            match crate::runtime::remove_sandbox(runtime, &vm).await {
                Ok(()) => report.removed("vm", vm.name, reason),
                Err(error) => report.error("vm", vm.name, reason, error),
            }
        }
    }
}
