//! A create or exec that waits for room says so on a terminal: one line when it starts
//! waiting, and a new one only when its place or the reason changes, so a person at the
//! terminal never faces a silent command. Scripts (`--json`, stderr not a terminal) see
//! nothing until the answer.
//!
//! The request carries a random tag; its ticket keeps it, and this side finds its place by
//! that tag in the install's admission view (`Operations::admission`), read every quarter of
//! a second while the request runs. The engine and the daemon keep the same view, so this
//! works the same with and without a daemon, and the request's answer is not touched.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::ops::Operations;
use crate::output::{OutputSink, StreamKind};

/// How often the view is read while a request runs.
const LOOK: Duration = Duration::from_millis(250);

/// A tag for a request whose waiting should be shown: on a terminal, and not under `--json`.
pub fn tag(json: bool) -> Option<String> {
    use std::io::IsTerminal;
    (!json && std::io::stderr().is_terminal()).then(|| format!("w-{}", crate::ids::random_hex(12)))
}

/// Runs `work` (a request tagged `tag`); meanwhile prints its place in its queue on stderr
/// whenever the place or the reason changes. Without a tag, just runs it. Once `past` is
/// set (an exec started: it waits no more), it stops looking.
pub async fn noting<T>(
    ops: &impl Operations,
    tag: Option<&str>,
    past: Option<&AtomicBool>,
    work: impl Future<Output = T>,
) -> T {
    let Some(tag) = tag else {
        return work.await;
    };
    let mut work = std::pin::pin!(work);
    let mut shown: Option<(usize, String)> = None;
    loop {
        tokio::select! {
            out = &mut work => return out,
            () = tokio::time::sleep(LOOK) => {}
        }
        if past.is_some_and(|past| past.load(Ordering::Relaxed)) {
            return work.await;
        }
        // A daemon too old to have the view: the request just runs.
        let Ok(view) = ops.admission().await else {
            return work.await;
        };
        // A waiter whose turn has come leaves at its next look: nothing new to say.
        let Some(waiter) = view.waiter(tag).filter(|w| !w.going) else {
            continue;
        };
        let now = (waiter.place, waiter.reason.clone());
        if shown.as_ref() != Some(&now) {
            tell!("paddock: {}", waiter.line());
            shown = Some(now);
        }
    }
}

/// An exec's output sink that also tells when the exec started (got its id): past any wait
/// for an exec slot.
pub struct Starts<'a> {
    inner: &'a mut dyn OutputSink,
    started: Arc<AtomicBool>,
}

impl<'a> Starts<'a> {
    pub fn new(inner: &'a mut dyn OutputSink) -> (Starts<'a>, Arc<AtomicBool>) {
        let started = Arc::new(AtomicBool::new(false));
        let sink = Starts {
            inner,
            started: started.clone(),
        };
        (sink, started)
    }
}

impl OutputSink for Starts<'_> {
    fn write(&mut self, stream: StreamKind, bytes: &[u8]) {
        self.inner.write(stream, bytes);
    }

    fn started(&mut self, exec: &str) {
        self.started.store(true, Ordering::Relaxed);
        self.inner.started(exec);
    }
}
