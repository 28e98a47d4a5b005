//! What `paddock pool status|fill|drain` answer (`--json`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One warm pool slot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolSlotView {
    /// `pool-<hex>`: the slot's id (its container's job label).
    pub id: String,
    /// The remote engine of `engines:` the slot is on; absent: the local engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    pub profile: String,
    /// The repository's key in `$PADDOCK_HOME` (a pool is of one repository).
    pub repo_key: String,
    /// `starting`, `ready` or `claimed`.
    pub state: String,
    /// The job that claimed it.
    pub job: Option<String>,
    /// The container's name now (a claimed one has its job's).
    pub container: String,
    pub image: String,
    pub created_at: DateTime<Utc>,
}

/// What a `pool fill` or `pool drain` did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolChange {
    /// Slots started (fill).
    pub started: Vec<String>,
    /// Slots removed (drain).
    pub removed: Vec<String>,
    /// Slots a drain could not remove (a remote engine that does not answer), each with
    /// why: marked for removal, which the sweep finishes once the engine answers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left: Vec<String>,
    /// Why a fill stopped short of the pool's size (the budget, a runtime that cannot
    /// keep a pool), when it did.
    pub note: Option<String>,
}
