//! The host budget: what the host has, what the budget allows by default or by the user
//! config, what a request asks for, and what existing jobs and running execs hold now (read
//! from the job records and the exec slot files, so a crash cannot leave a counter wrong).
//!
//! Jobs hold their *reserve* (a small share an idle sandbox needs), never their limits: a
//! limit is a cap on what a job may use, and an agent's sandbox idles while its agent waits
//! on its model. What runs is bounded by exec slots instead, derived from the host's cores.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::AdmissionSettings;
use crate::config::Reserve;
use crate::job::{JobRecord, JobState};
use crate::units::{HumanDuration, format_size};

/// What the host has.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostCapacity {
    pub cores: usize,
    #[serde(rename = "memory_bytes")]
    pub memory: u64,
}

impl HostCapacity {
    /// Reads the host's cores and memory (`/proc/meminfo`).
    pub fn read() -> HostCapacity {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| {
                let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
                let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
                Some(kib * 1024)
            })
            .unwrap_or(u64::MAX);
        HostCapacity { cores, memory }
    }
}

/// What all existing jobs' reserves and running execs together may hold, and how long a
/// request waits for room.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    /// The memory the jobs' reserves may add up to.
    #[serde(rename = "memory_bytes")]
    pub memory: u64,
    /// The CPUs the jobs' reserves may add up to.
    pub cpus: f64,
    pub max_jobs: Option<usize>,
    /// How many execs may run at once, over all jobs.
    pub exec_slots: usize,
    pub max_wait: HumanDuration,
}

impl Budget {
    pub fn new(settings: &AdmissionSettings, host: HostCapacity) -> Budget {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "a share of a memory size in bytes: far inside f64's exact range"
        )]
        let memory = settings.memory.map_or(
            (host.memory as f64 * AdmissionSettings::DEFAULT_MEMORY_SHARE) as u64,
            |m| m.0,
        );
        #[expect(clippy::cast_precision_loss, reason = "a count of cores is small")]
        let cpus = settings.cpus.map_or(
            host.cores as f64 * AdmissionSettings::DEFAULT_CPUS_PER_CORE,
            |c| c.0,
        );
        Budget {
            memory,
            cpus,
            max_jobs: settings.max_jobs,
            exec_slots: settings
                .max_running_execs
                .unwrap_or(host.cores.max(1) * AdmissionSettings::DEFAULT_EXECS_PER_CORE),
            max_wait: settings
                .max_wait
                .unwrap_or(AdmissionSettings::DEFAULT_MAX_WAIT),
        }
    }

    /// How long a request waits for room.
    pub fn max_wait(&self) -> Duration {
        self.max_wait.0
    }

    /// The part of the budget `demand` is measured against.
    pub(crate) fn describe(&self, demand: &Demand) -> String {
        match demand {
            Demand::Job { .. } => {
                let jobs = self
                    .max_jobs
                    .map_or(String::new(), |n| format!(", {n} jobs"));
                format!(
                    "{}, {} CPUs{jobs}",
                    format_size(self.memory),
                    cpus(self.cpus)
                )
            }
            Demand::Exec => format!("{} exec slots", self.exec_slots),
        }
    }
}

/// What a request asks for: a job's reserve (create) or an exec slot (exec).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Demand {
    Job { memory: u64, cpus: f64 },
    Exec,
}

impl Demand {
    /// A job's share: its reserve.
    pub fn of_job(reserve: &Reserve) -> Demand {
        Demand::Job {
            memory: reserve.memory.0,
            cpus: reserve.cpus.0,
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Demand::Job { memory, cpus: c } => {
                format!("a reserve of {}, {} CPUs", format_size(*memory), cpus(*c))
            }
            Demand::Exec => "an exec slot".into(),
        }
    }
}

/// What existing jobs and running execs hold now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Held {
    #[serde(rename = "memory_bytes")]
    pub memory: u64,
    pub cpus: f64,
    pub jobs: usize,
    /// Busy exec slots.
    pub execs: usize,
}

impl Held {
    /// Adds up the reserves of the records that hold one: every state but `queued` and
    /// `removed`. A paused job holds its memory but no CPU: its processes are frozen.
    pub fn of(records: &[JobRecord], execs: usize) -> Held {
        let mut held = Held {
            execs,
            ..Held::default()
        };
        for record in records.iter().filter(|r| holds_share(r.state)) {
            let mut reserve = record.reserve();
            if record.paused_at.is_some() {
                reserve.cpus = crate::units::Cpus(0.0);
            }
            held.hold(&Demand::of_job(&reserve));
        }
        held
    }

    /// Counts `demand` as held: one more job's reserve (a record, a warm pool slot's
    /// container), or one more busy exec slot.
    pub fn hold(&mut self, demand: &Demand) {
        match demand {
            Demand::Job { memory, cpus } => {
                self.memory = self.memory.saturating_add(*memory);
                self.cpus += cpus;
                self.jobs += 1;
            }
            Demand::Exec => self.execs += 1,
        }
    }

    pub(crate) fn fits(&self, demand: &Demand, budget: &Budget) -> bool {
        self.blocker(demand, budget).is_none()
    }

    /// Why `demand` does not fit now, in words (`None`: it fits).
    pub(crate) fn blocker(&self, demand: &Demand, budget: &Budget) -> Option<String> {
        match demand {
            Demand::Job { memory, cpus: c } => {
                if self.memory.saturating_add(*memory) > budget.memory {
                    Some(format!(
                        "jobs reserve {} of {} memory",
                        format_size(self.memory),
                        format_size(budget.memory)
                    ))
                } else if self.cpus + c > budget.cpus + 1e-9 {
                    Some(format!(
                        "jobs reserve {} of {} CPUs",
                        cpus(self.cpus),
                        cpus(budget.cpus)
                    ))
                } else {
                    budget.max_jobs.filter(|max| self.jobs >= *max).map(|max| {
                        format!("{} of {max} jobs exist (admission.max_jobs)", self.jobs)
                    })
                }
            }
            Demand::Exec => (self.execs >= budget.exec_slots)
                .then(|| format!("{} of {} exec slots busy", self.execs, budget.exec_slots)),
        }
    }
}

/// A CPU count for people: at most two decimals (sums of reserves like 0.1 are not exact).
pub fn cpus(value: f64) -> String {
    let text = format!("{value:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Whether a job in `state` holds its share of the budget.
pub fn holds_share(state: JobState) -> bool {
    !matches!(state, JobState::Queued | JobState::Removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{ByteSize, Cpus};

    fn budget(memory_gib: u64, cpus: f64) -> Budget {
        Budget {
            memory: memory_gib << 30,
            cpus,
            max_jobs: None,
            exec_slots: 1,
            max_wait: AdmissionSettings::DEFAULT_MAX_WAIT,
        }
    }

    #[test]
    fn a_job_fits_while_memory_and_cpus_last() {
        let job = Demand::Job {
            memory: 2 << 30,
            cpus: 1.0,
        };
        let b = budget(6, 8.0);
        let mut held = Held::default();
        for _ in 0..3 {
            assert!(held.fits(&job, &b));
            held.hold(&job);
        }
        assert!(!held.fits(&job, &b), "a fourth 2 GiB job exceeds 6 GiB");
        assert_eq!(
            held.blocker(&job, &b).as_deref(),
            Some("jobs reserve 6.0 GiB of 6.0 GiB memory")
        );
        assert!(held.fits(&Demand::Exec, &b));
        held.execs = 1;
        assert_eq!(
            held.blocker(&Demand::Exec, &b).as_deref(),
            Some("1 of 1 exec slots busy")
        );
        let cpu_bound = budget(100, 2.5);
        let two = Held {
            cpus: 2.0,
            ..Held::default()
        };
        assert_eq!(
            two.blocker(&job, &cpu_bound).as_deref(),
            Some("jobs reserve 2 of 2.5 CPUs")
        );
    }

    #[test]
    fn the_default_budget_is_80_percent_of_memory_twice_the_cores_and_two_slots_a_core() {
        let host = HostCapacity {
            cores: 2,
            memory: 10 << 30,
        };
        let b = Budget::new(&AdmissionSettings::default(), host);
        assert_eq!(b.memory, 8 << 30);
        assert!((b.cpus - 4.0).abs() < 1e-9);
        assert_eq!(b.exec_slots, 4);
        assert_eq!(b.max_wait(), Duration::from_secs(1800));
        let set = AdmissionSettings {
            memory: Some(ByteSize(1 << 30)),
            cpus: Some(Cpus(16.0)),
            max_jobs: Some(3),
            max_running_execs: Some(7),
            max_wait: Some(HumanDuration(Duration::from_secs(5))),
        };
        let b = Budget::new(&set, host);
        assert_eq!(
            (b.memory, b.max_jobs, b.exec_slots, b.max_wait()),
            (1 << 30, Some(3), 7, Duration::from_secs(5))
        );
    }

    /// The point of reserves: with the defaults, a 2-core 24 GiB host holds 20 jobs (their
    /// limits, 2 CPUs and 2g each, would have filled it with 2).
    #[test]
    fn twenty_default_jobs_fit_a_two_core_host() {
        let host = HostCapacity {
            cores: 2,
            memory: 24 << 30,
        };
        let b = Budget::new(&AdmissionSettings::default(), host);
        let job = Demand::of_job(&Reserve::DEFAULT.within(Cpus(2.0), ByteSize(2 << 30)));
        let mut held = Held::default();
        for n in 0..20 {
            assert!(held.fits(&job, &b), "job {n}: {held:?}");
            held.hold(&job);
        }
        assert_eq!(cpus(held.cpus), "2");
    }

    #[test]
    fn cpu_sums_print_short() {
        assert_eq!(cpus(0.1 + 0.2), "0.3");
        assert_eq!(cpus(4.0), "4");
        assert_eq!(cpus(2.5), "2.5");
        assert_eq!(cpus(1.0 / 3.0), "0.33");
    }
}
