//! The warm pool on a remote engine (see `crate::pool`, `runtime/docker/remote/pool.rs`): a
//! create of a remote job claims a ready slot of its engine before its fill
//! ([`claim_remote`](Paddock::claim_remote)), taking the slot's container name, so the fill
//! writes the slot's volumes by the same stream as a cold create (the object cache makes it
//! cheap) and every later call finds the slot's container and volumes as the job's own; once
//! filled, the container takes the job's limits ([`adopt_remote`](Paddock::adopt_remote)).
//! A job that cannot claim (an allowlist network, an empty pool, a slot whose container
//! went away) starts cold, and its record says why.

use super::admit::blocking;
use super::failpoints::crash_point;
use super::{Paddock, Result};
use crate::config::PoolSettings;
use crate::job::{JobRecord, PoolStart};

impl Paddock {
    /// Claims a ready slot of the remote job's engine for `record` when its profile has a
    /// pool: the record then names the slot and the slot's container (whose volumes the fill
    /// that follows writes). Otherwise the record says why it starts cold.
    pub(super) async fn claim_remote(
        &self,
        record: &mut JobRecord,
        settings: PoolSettings,
        caches: bool,
    ) -> Result<()> {
        if settings.size == 0 {
            return Ok(());
        }
        let runtime = self.runtime_of(record);
        let engine = runtime.describe().engine.map(str::to_string);
        if let Some(reason) = crate::runtime::pool_refusal(runtime.as_ref()) {
            record.pool = Some(PoolStart::Cold {
                reason: reason.to_string(),
            });
            return Ok(());
        }
        if caches {
            // A slot's container was made with only its own volumes; a cache volume is
            // mounted when the job's container is made.
            record.pool = Some(PoolStart::Cold {
                reason: "a remote job's cache volumes are mounted when its container is made"
                    .into(),
            });
            return Ok(());
        }
        if record.limits.network == crate::config::NetworkMode::Allowlist {
            record.pool = Some(PoolStart::Cold {
                reason:
                    "an allowlist job's sealed network and egress proxy are made with its container"
                        .into(),
            });
            return Ok(());
        }
        let own_name = record.container_name.clone();
        let claimed = self.claim_slot(record, engine.as_deref())?;
        self.request_refill(&record.profile, &record.repo, engine.as_deref());
        let Some(slot) = claimed else {
            record.pool = Some(PoolStart::Cold {
                reason: "the pool had no ready container on this engine".into(),
            });
            return Ok(());
        };
        crash_point("claimed");
        let runtime = self.runtime_of(record);
        let claimed = match runtime.capabilities().pool {
            Some(pool) => pool.pool_claimed(record, &slot).await,
            None => Err(crate::runtime::lacks(runtime.as_ref(), "keep a warm pool")),
        };
        if let Err(error) = claimed {
            // A slot whose container went away while it waited: it goes (its empty volumes
            // too, label-checked), and the job starts cold under its own name.
            tracing::warn!(job = %record.id, slot = %slot.id, %error, "a claimed pool container on a remote engine is gone");
            runtime.destroy(record).await?;
            if let Some(volumes) = runtime.capabilities().volumes {
                volumes.remove_files(record).await?;
            }
            self.release_pool_slot(record).await?;
            record.container_name = own_name;
            record.pool = Some(PoolStart::Cold {
                reason: format!("the claimed pool container failed: {error}"),
            });
            self.store().save(record)?;
        }
        Ok(())
    }

    /// Gives a remote job that claimed a slot (its volumes filled) the slot's container,
    /// with the job's limits; returns its id, or `None` when the job starts cold.
    pub(super) async fn adopt_remote(&self, record: &JobRecord) -> Result<Option<String>> {
        let Some(id) = record.pool_slot() else {
            return Ok(None);
        };
        let slots = self.slots();
        let slot = blocking(|| slots.load(id))?;
        let runtime = self.runtime_of(record);
        let pool = runtime
            .capabilities()
            .pool
            .ok_or_else(|| crate::runtime::lacks(runtime.as_ref(), "keep a warm pool"))?;
        let container = pool.adopt_pool_slot(record, &slot).await?;
        Ok(Some(container))
    }
}
