//! The budget as people and programs read it: what the host has, what the budget allows,
//! what is held and by whom, and who waits where and why. `GET /v1/admission`, `doctor`,
//! the line under `ls`, and the terminal line of a waiting create or exec all read this one
//! view, so they never disagree.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::ledger::{Turn, turn};
use super::{Admission, Budget, Held, HostCapacity, Ticket, cpus};
use crate::job::JobId;
use crate::units::format_size;

/// What a request waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, strum::Display)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum WaitKind {
    /// A create, for room for the job's reserve.
    Create,
    /// An exec, for an exec slot.
    Exec,
    /// A create, for an engine with room (`--engine auto`; see `placing`).
    Place,
}

/// One waiting request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waiter {
    pub kind: WaitKind,
    pub job: JobId,
    /// Its place in its queue (1 = next).
    pub place: usize,
    /// How many wait in that queue.
    pub of: usize,
    /// Why it waits, e.g. `4 of 4 exec slots busy`.
    pub reason: String,
    /// Its turn has come: it leaves the queue at its next look (within a fraction of a
    /// second).
    #[serde(default)]
    pub going: bool,
    pub since: DateTime<Utc>,
    /// When it fails if no room comes (`admission.max_wait` after `since`).
    pub gives_up_at: DateTime<Utc>,
    /// The tag its caller gave, by which the caller finds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// The budget and what holds it: `GET /v1/admission`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdmissionView {
    pub host: HostCapacity,
    pub budget: Budget,
    /// What existing jobs reserve, and how many exec slots are busy.
    pub held: Held,
    /// The jobs whose execs hold the busy slots (one entry per exec).
    pub running_execs: Vec<JobId>,
    /// Waiting creates, then waiting execs, each in its queue's order, then creates waiting
    /// for an engine with room (`place`), by when they began waiting.
    pub waiting: Vec<Waiter>,
}

impl AdmissionView {
    pub(super) fn new(
        admission: &Admission,
        held: Held,
        creates: &[Ticket],
        execs: &[Ticket],
        running_execs: Vec<JobId>,
    ) -> AdmissionView {
        let budget = *admission.budget();
        let mut waiting = Vec::new();
        for (kind, tickets) in [(WaitKind::Create, creates), (WaitKind::Exec, execs)] {
            let live: Vec<&Ticket> = tickets.iter().filter(|t| t.is_live()).collect();
            for (place, ticket) in live.iter().enumerate() {
                let (reason, going) = match turn(tickets, ticket.seq, &held, &budget) {
                    Some(Turn::Wait { reason }) => (reason, false),
                    _ => ("its turn has come".to_string(), true),
                };
                waiting.push(Waiter {
                    kind,
                    job: ticket.job.clone(),
                    place: place + 1,
                    of: live.len(),
                    reason,
                    going,
                    since: ticket.queued_at,
                    gives_up_at: ticket.gives_up_at(&budget),
                    tag: ticket.waiter.clone(),
                });
            }
        }
        AdmissionView {
            host: *admission.host(),
            budget,
            held,
            running_execs,
            waiting,
        }
    }

    /// The waiting request tagged `tag`.
    pub fn waiter(&self, tag: &str) -> Option<&Waiter> {
        self.waiting.iter().find(|w| w.tag.as_deref() == Some(tag))
    }

    /// One line for people: what jobs reserve of the budget, how many exec slots are busy,
    /// and who waits (`doctor`, under `ls`).
    pub fn summary(&self) -> String {
        let (held, budget) = (&self.held, &self.budget);
        let jobs = match held.jobs {
            1 => "1 job reserves".to_string(),
            n => format!("{n} jobs reserve"),
        };
        let max_jobs = budget
            .max_jobs
            .map_or(String::new(), |max| format!(" (at most {max} jobs)"));
        let count = |kind| self.waiting.iter().filter(|w| w.kind == kind).count();
        let creates = count(WaitKind::Create) + count(WaitKind::Place);
        let waiting = match (creates, count(WaitKind::Exec)) {
            (0, 0) => "nothing waits".to_string(),
            (creates, execs) => format!(
                "waiting: {}, {}",
                plural(creates, "create"),
                plural(execs, "exec")
            ),
        };
        format!(
            "{jobs} {} of {} CPUs and {} of {} memory{max_jobs}; {} of {} exec slots busy; {waiting}",
            cpus(held.cpus),
            cpus(budget.cpus),
            format_size(held.memory),
            format_size(budget.memory),
            held.execs,
            budget.exec_slots,
        )
    }
}

impl Waiter {
    /// What a waiting request's terminal says: why, its place, and how to not wait.
    pub fn line(&self) -> String {
        let patience = (self.gives_up_at - self.since).to_std().unwrap_or_default();
        format!(
            "waiting for room: {}; place {} of {}; gives up after {}; --no-wait fails at once",
            self.reason,
            self.place,
            self.of,
            crate::units::HumanDuration(patience)
        )
    }
}

/// `1 create`, `2 creates`.
fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}
