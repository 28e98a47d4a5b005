//! The sweep's part of the warm pool (see `crate::pool`): slots a killed fill left
//! (`starting` with a dead filler), waiting slots whose container is gone or whose pool saw
//! no claim for its `idle` time (a microVM slot whose QEMU died counts as gone), slots claimed by a job that has no record (a create killed
//! mid-claim), and pool containers whose slot directory is gone. Each decision is taken
//! under the pool lock, after looking at the records again; a slot claimed by a recorded
//! job is that job's and goes with it. A remote engine's slots are looked at on that engine;
//! when it does not answer they are left, named in the report, for a later sweep.

use super::{SweepOptions, SweepReport};
use crate::engine::Paddock;
use crate::job::ProcessId;
use crate::pool::{PoolSlots, SlotState};
use crate::runtime::{Sandbox, SandboxRole};

impl Paddock {
    #[expect(
        clippy::too_many_lines,
        reason = "each warm slot's verdict and removal"
    )]
    pub(super) async fn reap_pool_slots(&self, options: &SweepOptions, report: &mut SweepReport) {
        let slots = PoolSlots::of(self.home());
        let listed_at = chrono::Utc::now();
        let containers = crate::runtime::list_sandboxes(self.runtimes().with_sandboxes())
            .await
            .ok();
        // A slot's sandbox apart from the engine is its runtime's own (a microVM's VM,
        // listed while its QEMU runs).
        // `None` when one of them did not answer.
        let mut vms = Some(Vec::new());
        for runtime in self.runtimes().apart_from_engine() {
            let listed = crate::runtime::list_sandboxes(runtime).await.ok();
            vms = vms.zip(listed).map(|(mut all, listed)| {
                all.extend(listed);
                all
            });
        }
        // Each remote engine with slots, listed once (`None`: it did not answer).
        let mut engines = std::collections::BTreeMap::new();
        for (_, slot) in slots.list() {
            if let Some(engine) = slot.ok().and_then(|s| s.engine)
                && !engines.contains_key(&engine)
            {
                let runtime = self.runtimes().engine(Some(&engine));
                let listed = crate::runtime::list_sandboxes(runtime.as_ref()).await.ok();
                engines.insert(engine, listed);
            }
        }
        for (id, _) in slots.list() {
            let verdict = {
                let Ok(_lock) = slots.lock() else { return };
                match slots.load(&id) {
                    // A record naming it makes it a job's, whatever its own record says.
                    Err(_)
                        if self.store().list().is_ok_and(|(records, _)| {
                            records.iter().any(|r| r.pool_slot() == Some(id.as_str()))
                        }) =>
                    {
                        None
                    }
                    Err(_) if slots.dir(&id).join("slot.json").exists() => {
                        Some((None, "a pool slot with an unreadable record".to_string()))
                    }
                    Err(_) => Some((None, "a pool slot a killed fill left".to_string())),
                    Ok(slot) => {
                        // Containers were listed before this slot may have been filled.
                        let listed = if let Some(engine) = &slot.engine {
                            engines.get(engine).and_then(Option::as_deref)
                        } else if !self.runtimes().in_engine(slot.runtime) {
                            vms.as_deref()
                        } else {
                            containers.as_deref()
                        }
                        .filter(|_| slot.created_at < listed_at);
                        let mut reason = self.slot_verdict(&slot, options, listed);
                        if let (Some(why), Some(engine)) = (&reason, &slot.engine)
                            && engines.get(engine).is_none_or(Option::is_none)
                        {
                            // Its container and volumes are on a machine that does not
                            // answer: left, not forgotten (the record stays).
                            report.kept(
                                "pool",
                                id.clone(),
                                format!("{why}; its engine `{engine}` does not answer: left for a later sweep"),
                            );
                            reason = None;
                        }
                        if let Some(reason) = &reason
                            && !options.dry_run
                        {
                            // Ours to remove from here: no claim can take it meanwhile.
                            let mut taken = slot.clone();
                            taken.state = SlotState::Removing;
                            if let Err(error) = slots.save(&taken) {
                                report.error("pool", id.clone(), reason.clone(), error);
                                continue;
                            }
                        }
                        reason.map(|reason| (Some(slot), reason))
                    }
                }
            };
            let Some((slot, reason)) = verdict else {
                continue;
            };
            if options.dry_run {
                report.removed("pool", id, reason);
                continue;
            }
            let removed = match &slot {
                Some(slot) => {
                    let job_name = match &slot.state {
                        SlotState::Claimed { job } => crate::job::JobId::parse(job)
                            .ok()
                            .map(|job| crate::runtime::container_name(self.home(), &job)),
                        _ => None,
                    };
                    self.remove_slot(slot, job_name.as_deref()).await
                }
                None => slots.remove(&id).map_err(Into::into),
            };
            match removed {
                Ok(()) => {
                    report.removed("pool", id, reason);
                    // A remote slot a job claimed holds that job's files in its volumes:
                    // kept (with no record the sweep cannot save its work first) and named.
                    if let Some(slot) = slot.as_ref().filter(|s| {
                        s.engine.is_some() && matches!(s.state, SlotState::Claimed { .. })
                    }) {
                        let names: Vec<String> = crate::engines::JOB_VOLUMES
                            .iter()
                            .map(|(kind, _)| crate::engines::job_volume(&slot.container_name, kind))
                            .collect();
                        report.kept(
                            "volume",
                            format!(
                                "{} on engine `{}`",
                                names.join(", "),
                                slot.engine.as_deref().unwrap_or_default()
                            ),
                            "the files of a job with no record (look with `docker volume ls --filter label=dev.paddock.job=SLOT`, remove with `docker volume rm`)",
                        );
                    }
                }
                Err(error) => report.error("pool", id, reason, error),
            }
        }
    }

    /// Why a slot goes, or `None` to keep it.
    fn slot_verdict(
        &self,
        slot: &crate::pool::PoolSlot,
        options: &SweepOptions,
        containers: Option<&[Sandbox]>,
    ) -> Option<String> {
        match &slot.state {
            SlotState::Removing => Some("a pool slot whose removal did not finish".into()),
            SlotState::Starting { owner } => {
                if owner.as_ref().is_some_and(ProcessId::is_alive) {
                    return None;
                }
                Some("a pool slot a killed fill left".into())
            }
            SlotState::Claimed { job } => {
                let held = self
                    .store()
                    .load(job)
                    .is_ok_and(|record| record.pool_slot() == Some(slot.id.as_str()));
                (!held).then(|| format!("claimed by job {job}, which has no record"))
            }
            SlotState::Ready => {
                let running = containers.map(|all| {
                    // By name too: a remote slot's fill helper carries the same labels.
                    all.iter().any(|c| {
                        c.job == slot.id
                            && c.role == SandboxRole::Pool
                            && c.running
                            && (slot.engine.is_none() || c.name == slot.container_name)
                    })
                });
                if running == Some(false) {
                    return Some("a waiting pool container that is gone or stopped".into());
                }
                let idle = PoolSlots::of(self.home())
                    .last_used(&slot.profile, &slot.repo_key)
                    .map(|used| {
                        options
                            .now
                            .signed_duration_since(chrono::DateTime::<chrono::Utc>::from(used))
                            .to_std()
                            .unwrap_or_default()
                    })
                    .unwrap_or_default();
                (idle > slot.idle.0).then(|| {
                    format!(
                        "the pool of profile {} saw no claim for {}",
                        slot.profile,
                        crate::units::HumanDuration(idle)
                    )
                })
            }
        }
    }

    /// A pool container whose slot directory is gone (its slot's sweep above keeps the
    /// others).
    pub(super) async fn reap_orphan_pool_container(
        &self,
        runtime: &dyn crate::runtime::Runtime,
        options: &SweepOptions,
        container: Sandbox,
        report: &mut SweepReport,
    ) {
        if PoolSlots::of(self.home()).dir(&container.job).exists() {
            return;
        }
        // A job's container started from a slot carries the slot's id: its record names it.
        let (records, _) = self.store().list().unwrap_or_default();
        if records
            .iter()
            .any(|r| r.pool_slot() == Some(container.job.as_str()))
        {
            return;
        }
        let reason = "pool container with no pool slot";
        // A remote slot's volumes may hold a claimed job's files: kept and named, as an
        // orphaned remote job's are.
        let volumes = runtime.describe().engine.map(|engine| {
            crate::engines::JOB_VOLUMES
                .iter()
                .map(|(kind, _)| crate::engines::job_volume(&container.name, kind))
                .collect::<Vec<_>>()
                .join(", ")
                + &format!(" on engine `{engine}`")
        });
        self.remove_listed_sandbox(runtime, options, container, reason, report)
            .await;
        if let Some(volumes) = volumes {
            report.kept(
                "volume",
                volumes,
                "the volumes of a pool container with no slot (look with `docker volume ls --filter label=dev.paddock.job=SLOT`, remove with `docker volume rm`)",
            );
        }
    }
}
