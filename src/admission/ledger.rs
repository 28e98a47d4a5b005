//! The decisions made under the admission lock: a new create or exec is admitted at once,
//! queued with a ticket, or refused; a queued one goes when it is first among the live
//! tickets of its lane and fits. The same [`turn`] answers a waiter under the lock and the
//! lock-free view (`doctor`, `ls`, a waiter's terminal line), so both say the same thing.

use chrono::Utc;

use super::{
    Admission, AdmissionError, Budget, Demand, ExecSlot, Held, Lane, TICKET_SCHEMA, Ticket,
};
use crate::job::{JobId, ProcessId};
use crate::store::StoreError;

/// How a create entered: admitted at once, or queued with a ticket number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Admitted,
    Queued { seq: u64, position: usize },
}

/// How an exec entered: with a slot at once, or queued with a ticket number.
#[derive(Debug)]
pub enum ExecEntry {
    Slot(ExecSlot),
    Queued { seq: u64 },
}

/// Whether a queued request may go now, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Turn {
    Go,
    Wait { reason: String },
}

/// The turn of ticket `seq` among `tickets` (one lane's, in order), or `None` when it is gone:
/// it goes when no live ticket is ahead of it and its demand fits what is held.
///
/// Why it waits is said as the queue sees it: the live tickets ahead are counted as if
/// admitted in order, and the first one (or this one) that does not fit names the reason.
/// So a waiter's reason does not flicker while those ahead of it are being admitted (the
/// lock-free view may see a grant half made); only its place moves.
pub(super) fn turn(tickets: &[Ticket], seq: u64, held: &Held, budget: &Budget) -> Option<Turn> {
    let ticket = tickets.iter().find(|t| t.seq == seq)?;
    let mut projected = *held;
    let ahead: Vec<&Ticket> = tickets
        .iter()
        .filter(|t| t.is_live() && t.seq < seq)
        .collect();
    for earlier in &ahead {
        if let Some(reason) = projected.blocker(&earlier.demand, budget) {
            return Some(Turn::Wait { reason });
        }
        projected.hold(&earlier.demand);
    }
    Some(match projected.blocker(&ticket.demand, budget) {
        Some(reason) => Turn::Wait { reason },
        None if ahead.is_empty() => Turn::Go,
        None => Turn::Wait {
            reason: format!(
                "{} earlier {} first",
                ahead.len(),
                match (ticket.demand, ahead.len()) {
                    (Demand::Exec, 1) => "exec goes",
                    (Demand::Exec, _) => "execs go",
                    (Demand::Job { .. }, 1) => "create goes",
                    (Demand::Job { .. }, _) => "creates go",
                }
            ),
        },
    })
}

/// Live tickets ahead of `seq` (all of them for a new request).
fn live_ahead(tickets: &[Ticket], seq: Option<u64>) -> usize {
    tickets
        .iter()
        .filter(|t| t.is_live())
        .filter(|t| seq.is_none_or(|seq| t.seq < seq))
        .count()
}

/// What a decision under the lock sees.
pub struct Ledger<'a> {
    admission: &'a Admission,
    creates: Vec<Ticket>,
    execs: Vec<Ticket>,
    held: Held,
}

impl<'a> Ledger<'a> {
    pub(super) fn new(
        admission: &'a Admission,
        creates: Vec<Ticket>,
        execs: Vec<Ticket>,
        held: Held,
    ) -> Ledger<'a> {
        Ledger {
            admission,
            creates,
            execs,
            held,
        }
    }

    pub fn held(&self) -> Held {
        self.held
    }

    pub fn admission(&self) -> &Admission {
        self.admission
    }

    fn budget(&self) -> Budget {
        self.admission.budget
    }

    fn tickets(&self, lane: Lane) -> &[Ticket] {
        match lane {
            Lane::Create => &self.creates,
            Lane::Exec => &self.execs,
        }
    }

    fn no_room(&self, job: &JobId, demand: &Demand, waiting: usize) -> AdmissionError {
        AdmissionError::NoRoom {
            job: job.clone(),
            needs: demand.describe(),
            reason: self
                .held
                .blocker(demand, &self.budget())
                .unwrap_or_else(|| "earlier requests go first".into()),
            waiting,
        }
    }

    /// Refuses a demand that could never fit, even with nothing held.
    fn check_size(&self, job: &JobId, demand: &Demand) -> Result<(), AdmissionError> {
        if Held::default().fits(demand, &self.budget()) {
            return Ok(());
        }
        Err(AdmissionError::TooBig {
            job: job.clone(),
            needs: demand.describe(),
            budget: match demand {
                Demand::Exec => "admission.max_running_execs: 0".into(),
                Demand::Job { .. } => self.budget().describe(demand),
            },
        })
    }

    /// Queues a new ticket for `demand` in `lane` (the caller knows it waits).
    fn queue(
        &mut self,
        lane: Lane,
        job: &JobId,
        demand: Demand,
        adoptable: bool,
        waiter: Option<&str>,
    ) -> Result<Ticket, StoreError> {
        let ticket = Ticket {
            schema: TICKET_SCHEMA,
            seq: self.admission.next_seq(lane)?,
            job: job.clone(),
            demand,
            owner: ProcessId::current(),
            adoptable,
            queued_at: Utc::now(),
            waiter: waiter.map(str::to_string),
        };
        self.admission.write_ticket(lane, &ticket, true)?;
        match lane {
            Lane::Create => self.creates.push(ticket.clone()),
            Lane::Exec => self.execs.push(ticket.clone()),
        }
        Ok(ticket)
    }

    /// A new create: admitted when nobody waits and it fits, else (unless `no_wait`) queued
    /// with a new ticket. Refused when it could never fit.
    pub fn enter(
        &mut self,
        job: &JobId,
        demand: Demand,
        no_wait: bool,
        adoptable: bool,
        waiter: Option<&str>,
    ) -> Result<Entry, AdmissionError> {
        self.check_size(job, &demand)?;
        let waiting = live_ahead(&self.creates, None);
        if waiting == 0 && self.held.fits(&demand, &self.budget()) {
            return Ok(Entry::Admitted);
        }
        if no_wait {
            return Err(self.no_room(job, &demand, waiting));
        }
        let ticket = self.queue(Lane::Create, job, demand, adoptable, waiter)?;
        Ok(Entry::Queued {
            seq: ticket.seq,
            position: waiting + 1,
        })
    }

    /// A new exec: a slot when nobody waits and one is free, else (unless `no_wait`) queued
    /// with a new ticket. Refused when the budget has no exec slots at all.
    pub fn enter_exec(
        &mut self,
        job: &JobId,
        no_wait: bool,
        waiter: Option<&str>,
    ) -> Result<ExecEntry, AdmissionError> {
        self.check_size(job, &Demand::Exec)?;
        let waiting = live_ahead(&self.execs, None);
        if waiting == 0 && self.held.fits(&Demand::Exec, &self.budget()) {
            return Ok(ExecEntry::Slot(self.admission.take_exec_slot(job)?));
        }
        if no_wait {
            return Err(self.no_room(job, &Demand::Exec, waiting));
        }
        let ticket = self.queue(Lane::Exec, job, Demand::Exec, false, waiter)?;
        Ok(ExecEntry::Queued { seq: ticket.seq })
    }

    /// Whether ticket `seq` of `lane` may go now (first among live tickets, and it fits),
    /// and why not. `None` when the ticket is gone (cancelled by someone else).
    pub fn turn(&self, lane: Lane, seq: u64) -> Option<Turn> {
        turn(self.tickets(lane), seq, &self.held, &self.budget())
    }

    /// Exec ticket `seq`'s grant: its slot taken and the ticket removed (call when its
    /// [`turn`](Self::turn) is `Go`).
    pub fn grant_exec(&mut self, job: &JobId, seq: u64) -> Result<ExecSlot, StoreError> {
        let slot = self.admission.take_exec_slot(job)?;
        self.admission.remove_ticket(Lane::Exec, seq);
        self.execs.retain(|t| t.seq != seq);
        self.held.execs += 1;
        Ok(slot)
    }

    /// Tickets whose owner is gone and that no daemon will adopt: the caller drops them and
    /// their queued records.
    pub fn abandoned(&self) -> Vec<Ticket> {
        self.creates
            .iter()
            .filter(|t| !t.is_live() && !t.adoptable)
            .cloned()
            .collect()
    }

    /// Tickets a restarted daemon takes over: adoptable ones whose owner is gone.
    pub fn orphaned_adoptable(&self) -> Vec<Ticket> {
        self.creates
            .iter()
            .filter(|t| !t.is_live() && t.adoptable)
            .cloned()
            .collect()
    }

    /// Rewrites `ticket` with this process as its owner (same number, same place).
    pub fn adopt(&mut self, ticket: &Ticket) -> Result<Ticket, StoreError> {
        let mut adopted = ticket.clone();
        adopted.owner = ProcessId::current();
        self.admission.write_ticket(Lane::Create, &adopted, false)?;
        Ok(adopted)
    }

    /// Whether create ticket `seq` exists.
    pub fn has_ticket(&self, seq: u64) -> bool {
        self.creates.iter().any(|t| t.seq == seq)
    }

    /// 1-based places of the live create tickets, by job (for `ls` and `show`).
    pub fn positions(&self) -> Vec<(JobId, usize)> {
        // The same tickets `live_ahead` counts, so a position is the number of places to go.
        self.creates
            .iter()
            .filter(|t| t.is_live())
            .zip(1..)
            .map(|(t, place)| (t.job.clone(), place))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::AdmissionSettings;

    fn ticket(seq: u64, demand: Demand) -> Ticket {
        Ticket {
            schema: TICKET_SCHEMA,
            seq,
            job: JobId::parse(&format!("j{seq}")).expect("a valid id"),
            demand,
            owner: ProcessId::current(),
            adoptable: false,
            queued_at: Utc::now(),
            waiter: None,
        }
    }

    const GIB: Demand = Demand::Job {
        memory: 1 << 30,
        cpus: 0.1,
    };

    fn budget() -> Budget {
        Budget {
            memory: 2 << 30,
            cpus: 100.0,
            max_jobs: None,
            exec_slots: 1,
            max_wait: AdmissionSettings::DEFAULT_MAX_WAIT,
        }
    }

    /// A waiter's reason counts those ahead as admitted in order, so it stays the same while
    /// they are being admitted; only the first may go.
    #[test]
    fn the_reason_counts_those_ahead_and_only_the_first_goes() {
        let tickets = [ticket(1, GIB), ticket(2, GIB), ticket(3, GIB)];
        let full = Held {
            memory: 2 << 30,
            jobs: 2,
            ..Held::default()
        };
        let wait = |reason: &str| {
            Some(Turn::Wait {
                reason: reason.into(),
            })
        };
        let busy = "jobs reserve 2.0 GiB of 2.0 GiB memory";
        for seq in 1..=3 {
            assert_eq!(turn(&tickets, seq, &full, &budget()), wait(busy), "{seq}");
        }
        // A job went: the first goes; the second still waits (the first takes the room),
        // for the same reason it gave before.
        let one_gone = Held {
            memory: 1 << 30,
            jobs: 1,
            ..Held::default()
        };
        assert_eq!(turn(&tickets, 1, &one_gone, &budget()), Some(Turn::Go));
        assert_eq!(turn(&tickets, 2, &one_gone, &budget()), wait(busy));
        // Room for two: the second fits too, but the first goes first.
        assert_eq!(
            turn(&tickets, 2, &Held::default(), &budget()),
            wait("1 earlier create goes first")
        );
        assert_eq!(turn(&tickets, 9, &Held::default(), &budget()), None);
    }

    #[test]
    fn execs_wait_for_a_slot_in_order() {
        let tickets = [ticket(4, Demand::Exec), ticket(7, Demand::Exec)];
        let busy = Held {
            execs: 1,
            ..Held::default()
        };
        let why = Some(Turn::Wait {
            reason: "1 of 1 exec slots busy".into(),
        });
        assert_eq!(turn(&tickets, 4, &busy, &budget()), why);
        assert_eq!(turn(&tickets, 7, &busy, &budget()), why);
        assert_eq!(
            turn(&tickets, 4, &Held::default(), &budget()),
            Some(Turn::Go)
        );
        assert_eq!(turn(&tickets, 7, &Held::default(), &budget()), why);
    }
}
