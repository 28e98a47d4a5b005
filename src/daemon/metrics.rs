//! The daemon's Prometheus metrics, kept and written by `prometheus-client` (OpenMetrics
//! text): jobs by state (read from the records at each scrape), create and exec latency
//! histograms, sweeps and sweep removals. Names are part of the API's contract
//! (`paddock_jobs`, `paddock_create_seconds`, `paddock_exec_seconds`, `paddock_sweeps_total`,
//! `paddock_sweep_removals_total`, `paddock_egress_denied_total`).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::job::JobState;

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Latency buckets (seconds) of the histograms.
const BUCKETS: [f64; 10] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0];

/// The states a live job can be in, each reported even at zero.
const STATES: [JobState; 7] = [
    JobState::Queued,
    JobState::Creating,
    JobState::Ready,
    JobState::Running,
    JobState::Exited,
    JobState::Failed,
    JobState::TimedOut,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: String,
}

pub struct Metrics {
    registry: Registry,
    jobs: Family<StateLabel, Gauge>,
    create_seconds: Histogram,
    exec_seconds: Histogram,
    sweeps: Counter,
    sweep_removals: Counter,
    egress_denied: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        let jobs = Family::<StateLabel, Gauge>::default();
        let create_seconds = Histogram::new(BUCKETS);
        let exec_seconds = Histogram::new(BUCKETS);
        let sweeps = Counter::default();
        let sweep_removals = Counter::default();
        let egress_denied = Counter::default();
        let mut registry = Registry::default();
        registry.register("paddock_jobs", "Jobs by state", jobs.clone());
        registry.register(
            "paddock_create_seconds",
            "Latency of job creation",
            create_seconds.clone(),
        );
        registry.register(
            "paddock_exec_seconds",
            "Latency of execs",
            exec_seconds.clone(),
        );
        // prometheus-client appends `_total` to counters.
        registry.register("paddock_sweeps", "Sweeps run", sweeps.clone());
        registry.register(
            "paddock_sweep_removals",
            "Items removed by sweeps",
            sweep_removals.clone(),
        );
        registry.register(
            "paddock_egress_denied",
            "Connections refused by the jobs' egress proxies",
            egress_denied.clone(),
        );
        Metrics {
            registry,
            jobs,
            create_seconds,
            exec_seconds,
            sweeps,
            sweep_removals,
            egress_denied,
        }
    }
}

impl Metrics {
    pub fn observe_create(&self, elapsed: Duration) {
        self.create_seconds.observe(elapsed.as_secs_f64());
    }

    pub fn observe_exec(&self, elapsed: Duration) {
        self.exec_seconds.observe(elapsed.as_secs_f64());
    }

    pub fn count_egress_denials(&self, denied: u64) {
        self.egress_denied.inc_by(denied);
    }

    pub fn count_sweep(&self, removals: u64) {
        self.sweeps.inc();
        self.sweep_removals.inc_by(removals);
    }

    /// The metrics as OpenMetrics text, with the job gauge set from `states` (one entry per
    /// job).
    pub fn render(&self, states: impl IntoIterator<Item = JobState>) -> String {
        let mut counts: std::collections::BTreeMap<String, i64> =
            STATES.iter().map(|state| (state.to_string(), 0)).collect();
        for state in states {
            *counts.entry(state.to_string()).or_default() += 1;
        }
        for (state, count) in counts {
            self.jobs.get_or_create(&StateLabel { state }).set(count);
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}
