//! `create --engine auto`: the job goes to the engine of `engines:` with the most free
//! budget, and waits when none has room. An engine's budget is its `jobs:` setting, else its
//! CPUs (its own, as its daemon reports them); what it holds is the jobs whose records name
//! it and the warm pool slots waiting there (`engine_held`). The choice and the record that makes it count are made under
//! `locks/engines.lock`, so two creates never both take an engine's last place; an engine
//! that does not answer is not chosen. A create that waits is shown in the admission view
//! (`admission::placing`), so its terminal says what it waits for.

use std::time::{Duration, Instant};

use chrono::Utc;

use super::{Paddock, Result};
use crate::admission::placing::Placing;
use crate::config::Config;
use crate::engines::EngineError;
use crate::job::JobId;
use crate::store::FileLock;

/// How long a create waits for an engine with room by default (`admission.max_wait` wins).
const DEFAULT_WAIT: Duration = Duration::from_secs(1800);
/// How often a waiting create looks again.
const POLL: Duration = Duration::from_millis(500);

/// The engine `auto` chose, and the lock that holds the choice until the job's record exists.
pub(crate) struct Placed {
    pub engine: String,
    _lock: FileLock,
}

/// What engine `name`'s budget holds: the jobs whose records name it and the warm pool
/// slots waiting (or being started) there.
pub(super) fn engine_held(
    records: &[crate::job::JobRecord],
    live_slots: &[crate::pool::PoolSlot],
    name: &str,
) -> usize {
    let jobs = records.iter().filter(|r| r.is_on_engine(name)).count();
    let slots = live_slots
        .iter()
        .filter(|s| s.engine.as_deref() == Some(name))
        .count();
    jobs + slots
}

impl Paddock {
    /// Engine `name`'s budget (see [`engine_budget`](Self::engine_budget)), or why it has
    /// none now (it does not answer).
    pub(super) async fn engine_room(&self, config: &Config, name: &str) -> Result<usize> {
        let jobs = config.engines.get(name).and_then(|spec| spec.jobs);
        self.engine_budget(name, jobs).await.ok_or_else(|| {
            EngineError::Invalid {
                name: name.to_string(),
                message: "the engine does not answer".into(),
            }
            .into()
        })
    }

    /// An engine's budget: its `jobs:`, else its CPUs; `None` when it does not answer.
    async fn engine_budget(&self, name: &str, jobs: Option<u32>) -> Option<usize> {
        if let Some(jobs) = jobs {
            return usize::try_from(jobs).ok();
        }
        let runtime = self.runtimes.engine(Some(name));
        let images = runtime.capabilities().images?;
        match tokio::time::timeout(Duration::from_secs(5), images.engine_facts()).await {
            Ok(Ok(facts)) => usize::try_from(facts.cpus).ok(),
            _ => None,
        }
    }

    /// Places job `id` by `engine: auto` (see the module docs); waits for room unless
    /// `no_wait`, up to the admission's `max_wait`. While it waits, the admission view shows
    /// it (`admission::placing`), found by the caller's `tag`.
    /// A ready warm pool slot of the job's repository (`repo_key`) on an engine counts as
    /// room there: the job claims it, taking the place the slot held.
    pub(super) async fn place_auto(
        &self,
        config: &Config,
        (id, repo_key): (&JobId, &str),
        tag: Option<&str>,
        no_wait: bool,
    ) -> Result<Placed> {
        let wait = config
            .admission
            .max_wait
            .map_or(DEFAULT_WAIT, |wait| wait.0);
        let started = Instant::now();
        let since = Utc::now();
        let gives_up_at = since + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::MAX);
        let path = self.home.locks_dir().join("engines.lock");
        let mut shown: Option<Placing> = None;
        loop {
            let at = path.clone();
            let lock = tokio::task::spawn_blocking(move || {
                FileLock::acquire(&at, Duration::from_secs(30))
            })
            .await
            .expect("taking a lock does not panic")?;
            let (records, _) = self.store.list()?;
            let live = self.slots().live();
            let mut best: Option<(usize, String)> = None;
            let mut full = Vec::new();
            for (name, spec) in &config.engines {
                let Some(budget) = self.engine_budget(name, spec.jobs).await else {
                    full.push(format!("{name} does not answer"));
                    continue;
                };
                let held = engine_held(&records, &live, name);
                let claimable = live.iter().any(|s| {
                    s.engine.as_deref() == Some(name.as_str())
                        && s.repo_key == repo_key
                        && s.state == crate::pool::SlotState::Ready
                });
                let free = budget.saturating_sub(held) + usize::from(claimable);
                if free > 0 && best.as_ref().is_none_or(|(most, _)| free > *most) {
                    best = Some((free, name.clone()));
                }
                full.push(format!("{name} holds {held} of {budget} jobs"));
            }
            if let Some((_, engine)) = best {
                return Ok(Placed {
                    engine,
                    _lock: lock,
                });
            }
            drop(lock);
            if no_wait || started.elapsed() >= wait {
                return Err(EngineError::NoRoom {
                    engines: config
                        .engines
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", "),
                }
                .into());
            }
            let reason = format!("no engine has room ({})", full.join(", "));
            match &mut shown {
                Some(placing) => placing.update(reason)?,
                None => {
                    shown = Some(Placing::begin(
                        &self.home,
                        id,
                        tag,
                        (since, gives_up_at),
                        reason,
                    )?);
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
