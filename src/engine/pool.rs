//! The warm pool (`pool: {size: N}` per profile; see `crate::pool` for slots and their
//! mounts): `pool_fill` starts slots of a profile for a repository up to its size, within
//! the admission budget (every waiting slot counts as a job's share); a create claims a
//! ready slot (`start_warm`) and asks for a refill; `pool_drain` and the sweep remove slots.
//! A job that cannot start in a slot (gVisor, published ports, a cache at its own path, an
//! empty pool) starts cold, and its record says why (`show`).

use std::path::{Path, PathBuf};

use chrono::Utc;

use super::admit::blocking;
use super::failpoints::crash_point;
use super::{Paddock, Result};
use crate::admission::{Budget, Demand, Held, HostCapacity};
use crate::config::PoolSettings;
use crate::git::GitRepo;
use crate::job::{JobRecord, Limits, PoolStart, ProcessId};
use crate::pool::{PoolSlot, PoolSlots, SLOT_SCHEMA, SlotState};
use crate::wire::{PoolChange, PoolSlotView};

/// A pool to refill: (profile, repository root, remote engine or `None` for the local one).
pub type PoolKey = (String, PathBuf, Option<String>);

impl Paddock {
    pub(super) fn slots(&self) -> PoolSlots {
        PoolSlots::of(self.home())
    }

    /// Claims a ready slot that fits `record` on `engine` (`None`: this host), under the
    /// pool lock. The record names the slot before the slot says it is claimed, so a sweep
    /// never sees a claim without its job; a remote job also takes the slot's container
    /// name, which its volumes follow (a local slot's container is renamed at adoption).
    pub(super) fn claim_slot(
        &self,
        record: &mut JobRecord,
        engine: Option<&str>,
    ) -> Result<Option<PoolSlot>> {
        let slots = self.slots();
        let runtime = self.runtime_of(record);
        let fixed_limits = runtime
            .capabilities()
            .pool
            .is_some_and(crate::runtime::capabilities::Pool::fixed_limits);
        let claimed = blocking(|| -> Result<Option<PoolSlot>> {
            let _lock = slots.lock()?;
            for (_, slot) in slots.list() {
                let Ok(mut slot) = slot else { continue };
                if slot.fits(
                    &record.profile,
                    &record.repo_key,
                    (record.runtime, engine),
                    &record.limits,
                    fixed_limits,
                ) {
                    record.pool = Some(PoolStart::Warm {
                        slot: slot.id.clone(),
                    });
                    if engine.is_some() {
                        record.container_name = Some(slot.container_name.clone());
                    }
                    self.store().save(record)?;
                    slot.state = SlotState::Claimed {
                        job: record.id.to_string(),
                    };
                    slots.save(&slot)?;
                    return Ok(Some(slot));
                }
            }
            Ok(None)
        })?;
        slots.touch_used(&record.profile, &record.repo_key);
        Ok(claimed)
    }

    /// Every pool slot of the install.
    pub fn pool_status(&self) -> Vec<PoolSlotView> {
        self.slots()
            .list()
            .into_iter()
            .filter_map(|(_, slot)| slot.ok())
            .map(|slot| {
                let (state, job) = match &slot.state {
                    SlotState::Starting { .. } => ("starting", None),
                    SlotState::Removing => ("removing", None),
                    SlotState::Ready => ("ready", None),
                    SlotState::Claimed { job } => ("claimed", Some(job.clone())),
                };
                PoolSlotView {
                    // A claim renames a local slot's container; a remote job takes its name.
                    container: match &job {
                        Some(job) if slot.engine.is_none() => crate::job::JobId::parse(job)
                            .map_or_else(
                                |_| slot.container_name.clone(),
                                |id| crate::runtime::container_name(self.home(), &id),
                            ),
                        _ => slot.container_name.clone(),
                    },
                    id: slot.id,
                    engine: slot.engine,
                    profile: slot.profile,
                    repo_key: slot.repo_key,
                    state: state.to_string(),
                    job,
                    image: slot.limits.image,
                    created_at: slot.created_at,
                }
            })
            .collect()
    }

    /// Starts slots of `profile` (the default profile when `None`) for the repository at
    /// `repo` on `engine` (`--engine`, else the profile's `engine:`; local when neither)
    /// until the pool has its size or the budget (the host's, or the remote engine's) has
    /// no room for another.
    #[expect(
        clippy::too_many_lines,
        reason = "a pool fill's slots made one by one, each failure undone (issue 42 gives the pool one home)"
    )]
    pub async fn pool_fill(
        &self,
        repo: &Path,
        profile: Option<&str>,
        engine: Option<&str>,
    ) -> Result<PoolChange> {
        let repo = GitRepo::open(repo, &self.home().locks_dir()).await?;
        let config = self.config(Some(&repo.root))?;
        let (profile_name, profile) = config.select_profile(profile, "agent", None)?;
        let settings = profile.pool.value;
        let mut change = PoolChange::default();
        if settings.size == 0 {
            change.note = Some(format!(
                "profile `{profile_name}` has no pool (`pool: {{size: N}}`)"
            ));
            return Ok(change);
        }
        let engine = engine
            .or(profile.engine.as_ref().map(|e| e.value.as_str()))
            .filter(|name| *name != "local")
            .map(str::to_string);
        if engine.as_deref() == Some("auto") {
            change.note = Some(
                "a pool is kept on one engine: name it with `pool fill --engine NAME` (`engine: auto` jobs claim the slots of the engine they are placed on)".into(),
            );
            return Ok(change);
        }
        let runtime = match &engine {
            Some(name) => {
                crate::engines::find(&config.engines, name)?;
                self.resolve_remote(name, &profile).await?
            }
            None => {
                self.runtimes()
                    .resolve(
                        profile.runtime.value,
                        &profile.image.value,
                        profile.network.value,
                    )
                    .await?
            }
        };
        let limits = Limits::from(&profile);
        if let Some(reason) = crate::runtime::pool_refusal(
            self.runtimes()
                .on_engine(runtime.kind, engine.as_deref())
                .as_ref(),
        ) {
            change.note = Some(reason.to_string());
            return Ok(change);
        }
        // A profile with secrets gets the allowlist network (and its proxy) at create.
        if limits.network == crate::config::NetworkMode::Allowlist
            || !profile.secrets.value.is_empty()
        {
            change.note = Some(
                "an allowlist profile starts cold (its sealed network and proxy are made with each container)".into(),
            );
            return Ok(change);
        }
        if !limits.ports.is_empty() {
            change.note = Some(
                "a profile with ports starts cold (ports are set when a container is made)".into(),
            );
            return Ok(change);
        }
        // A remote job with a disk limit is refused at create; one with caches starts cold
        // (its cache volumes are mounted when its container is made): no slot for either.
        // `copy` files go in with the fill, as a cold job's.
        let caches = !config.caches.value.is_empty() || !profile.caches.value.is_empty();
        if engine.is_some() && (profile.disk.is_some() || caches) {
            change.note = Some(
                "a remote job with a disk limit is refused, and one with caches starts cold (its cache volumes are mounted when its container is made)".into(),
            );
            return Ok(change);
        }
        // A remote slot mounts nothing of the host: only the local pool needs root.
        if engine.is_none() && !crate::sys::is_root() {
            return Err(crate::pool::PoolError::NotRoot.into());
        }
        self.home()
            .register_repo(&repo.key(), &repo.root, &repo.common_dir)?;
        let slots = self.slots();
        let budget = Budget::new(&config.admission, HostCapacity::read());
        let engine_budget = match &engine {
            Some(name) => Some(self.engine_room(&config, name).await?),
            None => None,
        };
        loop {
            let next = blocking(|| -> Result<std::result::Result<PoolSlot, String>> {
                let _lock = slots.lock()?;
                let live = slots.live();
                let mine = live
                    .iter()
                    .filter(|s| {
                        s.profile == profile_name && s.repo_key == repo.key() && s.engine == engine
                    })
                    .count();
                if mine >= settings.size as usize {
                    return Ok(Err(String::new()));
                }
                if let (Some(name), Some(jobs)) = (&engine, engine_budget) {
                    // The engine's budget (`engine: auto`'s) holds its jobs and its slots.
                    let held = super::placement::engine_held(&self.store().list()?.0, &live, name);
                    if held >= jobs {
                        return Ok(Err(format!(
                            "engine `{name}` holds {held} of {jobs} jobs and waiting containers: no room for another"
                        )));
                    }
                }
                // A waiting container holds what an idle job holds: the default reserve.
                let idle = |limits: &crate::job::Limits| {
                    Demand::of_job(
                        &crate::config::Reserve::DEFAULT.within(limits.cpus, limits.memory),
                    )
                };
                let mut held = Held::of(&self.store().list()?.0, 0);
                // The host's budget holds what runs here: a remote slot runs on its engine.
                for slot in live.iter().filter(|s| s.engine.is_none()) {
                    held.hold(&idle(&slot.limits));
                }
                let demand = idle(&limits);
                if engine.is_none() && !held.fits(&demand, &budget) {
                    return Ok(Err(format!(
                        "the admission budget ({}) has no room for another waiting container",
                        budget.describe(&demand)
                    )));
                }
                let id = PoolSlots::new_id();
                let slot = PoolSlot {
                    schema: SLOT_SCHEMA,
                    container_name: format!("paddock-{}-{id}", self.home().tag()),
                    id,
                    profile: profile_name.clone(),
                    repo_key: repo.key(),
                    git_common_dir: repo.common_dir.clone(),
                    runtime: runtime.kind,
                    limits: limits.clone(),
                    idle: settings.idle,
                    container_id: None,
                    state: SlotState::Starting {
                        owner: ProcessId::current(),
                    },
                    created_at: Utc::now(),
                    objects_point: true,
                    engine: engine.clone(),
                };
                slots.save(&slot)?;
                Ok(Ok(slot))
            })?;
            let mut slot = match next {
                Ok(slot) => slot,
                Err(note) => {
                    change.note = (!note.is_empty()).then_some(note);
                    break;
                }
            };
            let started = async {
                if slot.engine.is_none() {
                    blocking(|| slots.prepare(&slot.id))?;
                }
                let runtime = self
                    .runtimes()
                    .on_engine(slot.runtime, slot.engine.as_deref());
                let pool = runtime
                    .capabilities()
                    .pool
                    .ok_or_else(|| crate::runtime::lacks(runtime.as_ref(), "keep a warm pool"))?;
                let id = pool.start_pool_slot(&slot).await?;
                Result::Ok(id)
            }
            .await;
            match started {
                Ok(id) => {
                    slot.container_id = Some(id);
                    slot.state = SlotState::Ready;
                    slots.save(&slot)?;
                    change.started.push(slot.id);
                }
                Err(error) => {
                    slot.state = SlotState::Removing;
                    let _ = slots.save(&slot);
                    let _ = self.remove_slot(&slot, None).await;
                    return Err(error);
                }
            }
        }
        slots.touch_used(&profile_name, &repo.key());
        Ok(change)
    }

    /// Removes the waiting slots (of `profile` when given); claimed ones are their jobs'. A
    /// remote slot whose engine does not answer is left (marked for removal, which the
    /// sweep finishes once it does) and named in `left`.
    pub async fn pool_drain(&self, profile: Option<&str>) -> Result<PoolChange> {
        let slots = self.slots();
        let mut change = PoolChange::default();
        let taken = blocking(|| -> Result<Vec<PoolSlot>> {
            let _lock = slots.lock()?;
            let mut taken = Vec::new();
            for (_, slot) in slots.list() {
                let Ok(mut slot) = slot else { continue };
                if slot.state == SlotState::Ready && profile.is_none_or(|p| p == slot.profile) {
                    // Marked as being removed, so no claim takes it meanwhile (and a sweep
                    // finishes the removal if this one fails).
                    slot.state = SlotState::Removing;
                    slots.save(&slot)?;
                    taken.push(slot);
                }
            }
            Ok(taken)
        })?;
        for slot in taken {
            match self.remove_slot(&slot, None).await {
                Ok(()) => change.removed.push(slot.id),
                Err(error) if slot.engine.is_some() => change.left.push(format!(
                    "{} on engine `{}`: {error}",
                    slot.id,
                    slot.engine.as_deref().unwrap_or_default()
                )),
                Err(error) => return Err(error),
            }
        }
        Ok(change)
    }

    /// Removes a slot: its container (under its waiting name or `job_name`), its mounts and
    /// its directory.
    pub(crate) async fn remove_slot(&self, slot: &PoolSlot, job_name: Option<&str>) -> Result<()> {
        let runtime = self
            .runtimes()
            .on_engine(slot.runtime, slot.engine.as_deref());
        // A runtime without a pool made no slot's sandbox: only the slot's files remain.
        if let Some(pool) = runtime.capabilities().pool {
            pool.remove_pool_slot(slot, job_name).await?;
        }
        let slots = self.slots();
        blocking(|| slots.remove(&slot.id))?;
        Ok(())
    }

    /// Starts the job's container from a ready pool slot when its profile has a pool and
    /// the job can start in one; returns the container id, or `None` to start cold (the
    /// record's `pool` then says why).
    pub(super) async fn start_warm(
        &self,
        record: &mut JobRecord,
        settings: PoolSettings,
    ) -> Result<Option<String>> {
        if self.runtime_of(record).capabilities().volumes.is_some() {
            // Claimed before its fill (`claim_remote`): the slot's container takes its limits.
            return self.adopt_remote(record).await;
        }
        if settings.size == 0 {
            return Ok(None);
        }
        let runtime = self.runtime_of(record);
        let Some(pool) = runtime.capabilities().pool else {
            record.pool = Some(PoolStart::Cold {
                reason: crate::runtime::pool_refusal(runtime.as_ref())
                    .unwrap_or_default()
                    .into(),
            });
            return Ok(None);
        };
        let binds = match pool.pool_binds(record) {
            Ok(binds) => binds,
            Err(reason) => {
                record.pool = Some(PoolStart::Cold { reason });
                return Ok(None);
            }
        };
        let slots = self.slots();
        let claimed = self.claim_slot(record, None)?;
        self.request_refill(&record.profile, &record.repo, None);
        let Some(slot) = claimed else {
            // A waiting VM of this pool that does not fit: the job asked for other limits.
            let other_limits = pool.fixed_limits()
                && slots
                    .list()
                    .into_iter()
                    .filter_map(|(_, s)| s.ok())
                    .any(|s| {
                        s.state == SlotState::Ready
                            && s.profile == record.profile
                            && s.repo_key == record.repo_key
                    });
            record.pool = Some(PoolStart::Cold {
                reason: if other_limits {
                    "the waiting VMs have other CPU, memory or pids limits (a VM's are fixed at its boot)".into()
                } else {
                    "the pool had no ready container".into()
                },
            });
            return Ok(None);
        };
        // Named in the record (above) before anything of the job's goes into the slot: from
        // here the slot is the job's, and a removal (rm, rollback, sweep) takes it along.
        crash_point("claimed");
        // The job's files go to the agent's uid, and the container gets the job's limits
        // and name, before any of them is mounted where the container can see it.
        let adopted = async {
            let id = pool.adopt_pool_slot(record, &slot).await?;
            blocking(|| slots.attach(&slot.id, &binds))?;
            crash_point("pool-mounted");
            pool.pool_claimed(record, &slot).await?;
            Result::<String>::Ok(id)
        }
        .await;
        match adopted {
            Ok(id) => Ok(Some(id)),
            Err(error) => {
                // A slot whose container died while it waited, or a mount refused (a link
                // in the checkout where a mount would go): the job starts cold.
                tracing::warn!(job = %record.id, slot = %slot.id, %error, "a claimed pool container could not be adopted");
                self.release_pool_slot(record).await?;
                record.pool = Some(PoolStart::Cold {
                    reason: format!("the claimed pool container failed: {error}"),
                });
                self.store().save(record)?;
                Ok(None)
            }
        }
    }

    /// Removes the pool slot a job holds (its container, if still there, and the slot's
    /// mounts and directory); nothing when the job started cold.
    pub(super) async fn release_pool_slot(&self, record: &JobRecord) -> Result<()> {
        let Some(id) = record.pool_slot() else {
            return Ok(());
        };
        let job_name = record.container_name.as_deref();
        let slots = self.slots();
        // Under the pool lock: only a slot this job claimed is this job's to remove (a
        // create that failed before its claim was written names a slot another job may
        // hold by now); marked `removing` so nothing claims it meanwhile.
        let mine = blocking(|| -> Result<Option<Option<PoolSlot>>> {
            let _lock = slots.lock()?;
            match slots.load(id) {
                Ok(mut slot) => {
                    let claimed_by_me = matches!(&slot.state, SlotState::Claimed { job } if job == record.id.as_str())
                        || slot.state == SlotState::Removing;
                    if !claimed_by_me {
                        return Ok(None);
                    }
                    let original = slot.clone();
                    slot.state = SlotState::Removing;
                    slots.save(&slot)?;
                    Ok(Some(Some(original)))
                }
                Err(_) if !slots.dir(id).exists() => Ok(None),
                // A slot without a readable record that no other record names: its mounts
                // and skeleton still go.
                Err(_) => {
                    let (records, _) = self.store().list()?;
                    let other = records
                        .iter()
                        .any(|r| r.id != record.id && r.pool_slot() == Some(id));
                    Ok((!other).then_some(None))
                }
            }
        })?;
        match mine {
            None => Ok(()),
            Some(Some(slot)) => self.remove_slot(&slot, job_name).await,
            Some(None) => {
                blocking(|| slots.remove(id))?;
                Ok(())
            }
        }
    }

    /// Asks for the pool of (`profile`, `repo`) to be refilled in the background: by the
    /// daemon's refill task, or (in a CLI process, which is about to exit) by a detached
    /// `paddock pool fill`.
    pub(super) fn request_refill(&self, profile: &str, repo: &Path, engine: Option<&str>) {
        if let Some(refills) = &self.pool_refills {
            let _ = refills.send((
                profile.to_string(),
                repo.to_path_buf(),
                engine.map(str::to_string),
            ));
            return;
        }
        if self.env.var("PADDOCK_POOL_REFILL").as_deref() == Some("off") {
            return;
        }
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        // Nobody reads a detached fill's terminal: what it says goes to the install's log.
        let log = self.slots().root().join(".refill.log");
        let _ = std::fs::create_dir_all(self.slots().root());
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_or_else(|_| std::process::Stdio::null(), std::process::Stdio::from);
        let mut command = std::process::Command::new(exe);
        command
            .args(["pool", "fill", "--quiet", "--profile", profile, "--repo"])
            .arg(repo)
            .args(
                engine
                    .map(|engine| ["--engine", engine])
                    .into_iter()
                    .flatten(),
            )
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(stderr);
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        if let Err(error) = command.spawn() {
            tracing::warn!(%error, "could not start a background pool refill");
        }
    }
}
