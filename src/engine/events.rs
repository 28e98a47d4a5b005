//! Reading the event history: a replay from the persisted log after a given id (a `reset`
//! first when that id is older than what is kept), then, following, new events as they are
//! written. Live events come from the same log, read by id, so there is no seam between
//! replay and live: nothing is missed and nothing comes twice. The daemon's broadcast only
//! wakes a follower early; events written by other processes are found by polling.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use chrono::Utc;
use tokio::sync::broadcast;

use super::{Event, EventKind, EventQuery, Paddock, Result};
use crate::eventlog::EventCursor;

/// Events read per look at the log.
const BATCH: usize = 512;
/// The longest a follower waits before it looks at the log again.
const POLL: Duration = Duration::from_millis(250);

/// The events a query asks for, one at a time (see [`Paddock::event_feed`]).
pub struct EventFeed {
    cursor: EventCursor,
    pending: VecDeque<Event>,
    job: Option<String>,
    follow: bool,
    wake: Option<broadcast::Receiver<Event>>,
    deadline: Option<Instant>,
}

impl EventFeed {
    /// The id of the last event read from the log (or skipped by the job filter): a client
    /// that resumes after it misses nothing.
    pub fn position(&self) -> u64 {
        self.cursor.position()
    }

    /// The next event; `None` at the end of the replay (without `follow`) or when the
    /// deadline passed.
    pub async fn next(&mut self) -> Result<Option<Event>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(Some(event));
            }
            let batch = self.cursor.next_batch(BATCH)?;
            if !batch.is_empty() {
                let job = self.job.as_deref();
                self.pending.extend(
                    batch
                        .into_iter()
                        .filter(|e| job.is_none_or(|job| e.job.as_deref() == Some(job))),
                );
                continue;
            }
            if !self.follow {
                return Ok(None);
            }
            let mut wait = POLL;
            if let Some(deadline) = self.deadline {
                let now = Instant::now();
                if now >= deadline {
                    return Ok(None);
                }
                wait = wait.min(deadline - now);
            }
            match &mut self.wake {
                Some(wake) => {
                    if let Ok(Err(broadcast::error::RecvError::Closed)) =
                        tokio::time::timeout(wait, wake.recv()).await
                    {
                        // The engine is going away: poll, never spin.
                        self.wake = None;
                    }
                }
                None => tokio::time::sleep(wait).await,
            }
        }
    }
}

impl Paddock {
    /// The events `query` asks for: after `since` (a `reset` first when events after it are
    /// gone), or, without `since`, every kept event (or, following, only new ones). A follow
    /// ends after `deadline` when one is given.
    pub fn event_feed(&self, query: &EventQuery, deadline: Option<Duration>) -> Result<EventFeed> {
        // Subscribed before the log is read: a wakeup is never lost (the log is the truth).
        let wake = self.events.as_ref().map(broadcast::Sender::subscribe);
        let log = self.event_log();
        let mut pending = VecDeque::new();
        let after = match query.since {
            None if query.follow => log.last_id()?,
            None => 0,
            Some(since) => {
                let oldest = log.oldest_available()?;
                if since.saturating_add(1) < oldest {
                    pending.push_back(Event {
                        id: oldest - 1,
                        kind: EventKind::Reset,
                        job: None,
                        state: None,
                        at: Utc::now(),
                        detail: serde_json::json!({"oldest": oldest, "since": since}),
                    });
                    oldest - 1
                } else {
                    since
                }
            }
        };
        Ok(EventFeed {
            cursor: log.cursor(after),
            pending,
            job: query.job.clone(),
            follow: query.follow,
            wake,
            deadline: deadline.map(|d| Instant::now() + d),
        })
    }
}
