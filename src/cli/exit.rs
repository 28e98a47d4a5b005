//! Exit codes: one table over the library's error kinds. docs/commands.md documents them.

use crate::ErrorKind;

pub const OK: i32 = 0;
pub const INTERNAL: i32 = 1;
pub const USAGE: i32 = 2;
pub const CONFIG: i32 = 3;
pub const INVALID_INPUT: i32 = 4;
pub const NOT_FOUND: i32 = 5;
pub const CONFLICT: i32 = 6;
pub const GIT: i32 = 7;
pub const RUNTIME_UNAVAILABLE: i32 = 8;
pub const REFUSED: i32 = 9;
/// `--no-wait`: the host budget had no room.
pub const QUEUE_FULL: i32 = 10;
/// `create`: a setup command of the new job failed; nothing was kept.
pub const SETUP_FAILED: i32 = 11;
/// `show`: the job's changes could not be read now (its sync failed, a cap was hit, the
/// sandbox did not answer); what was printed is marked stale.
pub const STATE_UNKNOWN: i32 = 12;
/// The file API: the job's own user may not read or write that file.
pub const PERMISSION_DENIED: i32 = 13;
/// `exec`/`run`: the command ran out of time.
pub const TIMED_OUT: i32 = 124;
/// `exec`/`run`: paddock itself failed (the command's own codes pass through).
pub const EXEC_FAILED: i32 = 125;

/// The exit code of each kind of library error.
pub fn of(kind: ErrorKind) -> i32 {
    match kind {
        ErrorKind::Usage => USAGE,
        ErrorKind::Config => CONFIG,
        // A file over the read limit is a wrong input; HTTP tells it apart (413).
        ErrorKind::InvalidInput | ErrorKind::TooLarge => INVALID_INPUT,
        ErrorKind::NotFound => NOT_FOUND,
        ErrorKind::Conflict => CONFLICT,
        ErrorKind::Refused => REFUSED,
        ErrorKind::Git => GIT,
        ErrorKind::RuntimeUnavailable => RUNTIME_UNAVAILABLE,
        ErrorKind::QueueFull => QUEUE_FULL,
        ErrorKind::SetupFailed => SETUP_FAILED,
        ErrorKind::PermissionDenied => PERMISSION_DENIED,
        ErrorKind::Internal => INTERNAL,
    }
}
