//! Stage timings for the debug log (`-vv`): how long each part of an exec or of a sync's
//! host half took, where the time goes beyond the runtime's own.

use crate::job::JobId;

/// How long each part of an exec (or a sync's host half) took, for the debug log (`-vv`):
/// where the time goes beyond the runtime's own.
pub(super) struct StageClock {
    started: std::time::Instant,
    marks: Vec<(&'static str, u64)>,
}

impl StageClock {
    pub(super) fn start() -> StageClock {
        StageClock {
            started: std::time::Instant::now(),
            marks: Vec::with_capacity(8),
        }
    }

    /// Notes that the stage `name` ended now.
    pub(super) fn mark(&mut self, name: &'static str) {
        let micros = u64::try_from(self.started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.marks.push((name, micros));
    }

    /// Logs the stages as `what` (`exec`, `sync`) of `job`.
    pub(super) fn log(&self, job: &JobId, what: &'static str) {
        let mut last = 0;
        let stages: Vec<String> = self
            .marks
            .iter()
            .map(|(name, at)| {
                let took = at - last;
                last = *at;
                format!("{name}={}.{:03}ms", took / 1000, took % 1000)
            })
            .collect();
        tracing::debug!(job = %job, what, stages = %stages.join(" "), "timings");
    }
}
