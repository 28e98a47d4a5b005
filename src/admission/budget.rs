//! The host budget: what the host has, what the budget allows by default or by the user
//! config, what a request asks for, and what admitted jobs and running execs hold now
//! (read from the job records, so a crash cannot leave a counter wrong).

use serde::{Deserialize, Serialize};

use super::AdmissionSettings;
use crate::job::{JobRecord, JobState, Limits};
use crate::units::{ByteSize, Cpus};

/// The share of the host's memory the running jobs' limits may add up to by default.
const DEFAULT_MEMORY_SHARE: f64 = 0.8;
/// How many CPUs per host core the running jobs' limits may add up to by default.
const DEFAULT_CPUS_PER_CORE: f64 = 2.0;

/// What the host has.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostCapacity {
    pub cores: usize,
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

/// What all admitted jobs and execs together may hold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    pub memory: u64,
    pub cpus: f64,
    pub max_jobs: Option<usize>,
    pub max_running_execs: Option<usize>,
}

impl Budget {
    pub fn new(settings: &AdmissionSettings, host: HostCapacity) -> Budget {
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "a share of a memory size in bytes: far inside f64's exact range"
        )]
        let memory = settings
            .memory
            .map_or((host.memory as f64 * DEFAULT_MEMORY_SHARE) as u64, |m| m.0);
        #[expect(clippy::cast_precision_loss, reason = "a count of cores is small")]
        let cpus = settings
            .cpus
            .map_or(host.cores as f64 * DEFAULT_CPUS_PER_CORE, |c| c.0);
        Budget {
            memory,
            cpus,
            max_jobs: settings.max_jobs,
            max_running_execs: settings.max_running_execs,
        }
    }

    pub(crate) fn describe(&self) -> String {
        let jobs = self
            .max_jobs
            .map_or(String::new(), |n| format!(", {n} jobs"));
        format!("{}, {} CPUs{jobs}", ByteSize(self.memory), Cpus(self.cpus))
    }
}

/// What a request asks for: a job's share (create) or an exec slot (exec).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Demand {
    Job { memory: u64, cpus: f64 },
    Exec,
}

impl Demand {
    /// A job's share. No memory limit (`--memory 0`, which Docker takes as unlimited)
    /// counts as all of the host's memory.
    pub fn of_job(limits: &Limits, host: &HostCapacity) -> Demand {
        Demand::Job {
            memory: job_memory(limits, host),
            cpus: limits.cpus.0,
        }
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Demand::Job { memory, cpus } => format!("{}, {} CPUs", ByteSize(*memory), Cpus(*cpus)),
            Demand::Exec => "an exec slot".into(),
        }
    }
}

/// What admitted jobs and running execs hold now.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Held {
    pub memory: u64,
    pub cpus: f64,
    pub jobs: usize,
    pub execs: usize,
}

impl Held {
    /// Adds up the records that hold a share: every state but `queued` and `removed`.
    pub fn of(records: &[JobRecord], execs: usize, host: &HostCapacity) -> Held {
        let mut held = Held {
            execs,
            ..Held::default()
        };
        for record in records.iter().filter(|r| holds_share(r.state)) {
            held.memory = held.memory.saturating_add(job_memory(&record.limits, host));
            held.cpus += record.limits.cpus.0;
            held.jobs += 1;
        }
        held
    }

    /// Counts one more job's share as held (a warm pool slot's container).
    pub fn hold(&mut self, demand: &Demand) {
        if let Demand::Job { memory, cpus } = demand {
            self.memory = self.memory.saturating_add(*memory);
            self.cpus += cpus;
            self.jobs += 1;
        }
    }

    pub(crate) fn fits(&self, demand: &Demand, budget: &Budget) -> bool {
        match demand {
            Demand::Job { memory, cpus } => {
                self.memory.saturating_add(*memory) <= budget.memory
                    && self.cpus + cpus <= budget.cpus + 1e-9
                    && budget.max_jobs.is_none_or(|max| self.jobs < max)
            }
            Demand::Exec => budget.max_running_execs.is_none_or(|max| self.execs < max),
        }
    }

    pub(super) fn describe(&self, demand: &Demand) -> String {
        match demand {
            Demand::Job { .. } => format!(
                "{}, {} CPUs, {} jobs",
                ByteSize(self.memory),
                Cpus(self.cpus),
                self.jobs
            ),
            Demand::Exec => format!("{} execs", self.execs),
        }
    }
}

fn job_memory(limits: &Limits, host: &HostCapacity) -> u64 {
    if limits.memory.0 == 0 {
        host.memory
    } else {
        limits.memory.0
    }
}

/// Whether a job in `state` holds its share of the budget.
pub fn holds_share(state: JobState) -> bool {
    !matches!(state, JobState::Queued | JobState::Removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(memory_gib: u64, cpus: f64) -> Budget {
        Budget {
            memory: memory_gib << 30,
            cpus,
            max_jobs: None,
            max_running_execs: Some(1),
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
            held.memory += 2 << 30;
            held.cpus += 1.0;
        }
        assert!(!held.fits(&job, &b), "a fourth 2 GiB job exceeds 6 GiB");
        assert!(held.fits(&Demand::Exec, &b));
        held.execs = 1;
        assert!(!held.fits(&Demand::Exec, &b));
        let cpu_bound = budget(100, 2.5);
        let two = Held {
            cpus: 2.0,
            ..Held::default()
        };
        assert!(!two.fits(&job, &cpu_bound));
    }

    #[test]
    fn the_default_budget_is_80_percent_of_memory_and_twice_the_cores() {
        let host = HostCapacity {
            cores: 2,
            memory: 10 << 30,
        };
        let b = Budget::new(&AdmissionSettings::default(), host);
        assert_eq!(b.memory, 8 << 30);
        assert!((b.cpus - 4.0).abs() < 1e-9);
        let set = AdmissionSettings {
            memory: Some(ByteSize(1 << 30)),
            cpus: Some(Cpus(16.0)),
            max_jobs: Some(3),
            max_running_execs: None,
        };
        let b = Budget::new(&set, host);
        assert_eq!((b.memory, b.max_jobs), (1 << 30, Some(3)));
    }
}
