//! Jobs on a remote Docker engine (`engines:`; see `crate::engines`): everything that
//! differs when a job's engine is not this host's. No host path reaches such an engine, so
//! the job's files live in volumes there (`volumes`), filled at create by a stream through
//! the engine's API (`fill`) and read back the same way (`outbox`); its egress sidecar runs
//! from a proxy image built on the engine (`proxy_image`, `egress`), its secrets go through
//! an exec's stdin (`secrets`), its warm pool slots own volumes of their own (`pool`), and
//! the engine is reached over TLS or ssh (`connect`, `ssh`).
//!
//! This folder sits below the Docker runtime's files that run a job on either kind of
//! engine (`egress`, `secrets`, `sandbox`): they call into it where a remote engine needs
//! its own step; nothing here calls back into them, only into the shared primitives beside
//! them (`calls`, `archive`, `exec`, `image`, `sidecar`).
//!
//! Trust: nothing the job can write is trusted on the host. The fill runs in a helper
//! container before any agent of the job has run; the object cache volume is written only by
//! such helpers and mounted read-only in job containers, so one job cannot plant objects or
//! a `shallow` file for the next. The outbox comes back as a tar whose entries are taken only
//! when they are regular files with the names a sync writes, each under its cap, and then
//! read by `engine::outbox` as if they had been on the host all along.

pub(crate) mod connect;
pub(crate) mod egress;
pub(crate) mod fill;
pub(crate) mod outbox;
pub(crate) mod pool;
pub(crate) mod proxy_image;
pub(crate) mod secrets;
pub mod ssh;
pub(crate) mod volumes;
