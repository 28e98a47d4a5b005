//! Test-only failpoints of `create` (`PADDOCK_CRASH_AT`, `PADDOCK_FAIL_AT`): the tests
//! kill or fail a create at each named step to prove a sweep or the rollback cleans up
//! every interruption. Each costs one environment lookup when unset.

use super::{Error, Result};

/// A test-only failpoint: when `PADDOCK_CRASH_AT` names this point, the process SIGKILLs
/// itself there, so tests can prove that every interruption of `create` is cleaned up by a
/// sweep. Costs one environment lookup per point otherwise.
pub(crate) fn crash_point(name: &str) {
    if std::env::var("PADDOCK_CRASH_AT").as_deref() == Ok(name) {
        crate::sys::kill_self();
    }
}

/// A test-only failpoint: when `PADDOCK_FAIL_AT` names this point, the step fails there
/// with [`Error::Injected`], so tests can prove that `create` rolls back every step.
pub(super) fn fail_point(point: &'static str) -> Result<()> {
    if crate::env::fail_at(point) {
        return Err(Error::Injected { point });
    }
    Ok(())
}

/// The points `PADDOCK_FAIL_AT` accepts, in the order `create` passes them:
/// after the branch is made, after the checkout, after the `copy` files are placed, after
/// the caches are placed, after the container is created (Docker runtimes only), after it
/// started (Docker runtimes only), after the setup commands ran, and in place of the final
/// record write.
pub const FAIL_POINTS: &[&str] = &[
    "branch",
    "checkout",
    "copy",
    "caches",
    "container-create",
    "container-start",
    "setup",
    "record",
];

/// The points `PADDOCK_CRASH_AT` accepts, in the order `create` passes them (`disk`, right
/// after the job's disk is mounted, by jobs with a disk limit or a git disk only;
/// `pristine`, after the pristine checkout is made and named in the record, and `mounted`,
/// right after the overlay is mounted, by `checkout: overlay` jobs only; `claimed`, after a pool slot
/// is claimed and named in the record, and `pool-mounted`, after the job's files are
/// mounted into it, by warm starts only).
pub const CRASH_POINTS: &[&str] = &[
    "reserved",
    "marked",
    "registered",
    "disk",
    "recorded",
    "pristine",
    "mounted",
    "checked-out",
    "claimed",
    "pool-mounted",
    "started",
];

/// The points `PADDOCK_CRASH_AT` accepts in checkpoints, restores and forks: with the job
/// frozen for a checkpoint, before its sync (`checkpoint-frozen`); after the checkpoint's
/// ref is in the wip store, before its record (`checkpoint-published`); after a restore's
/// bundle is in the workspace, before it is checked out (`restore-bundled`); after a fork's
/// checkpoint is in its new job, before its setup (`restored`).
pub const CHECKPOINT_CRASH_POINTS: &[&str] = &[
    "checkpoint-frozen",
    "checkpoint-published",
    "restore-bundled",
    "restored",
];
