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
use std::time::Duration;

use crate::ops::Operations;

/// How often the view is read while a request runs.
const LOOK: Duration = Duration::from_millis(250);

/// A tag for a request whose waiting should be shown: on a terminal, and not under `--json`.
pub fn tag(json: bool) -> Option<String> {
    use std::io::IsTerminal;
    (!json && std::io::stderr().is_terminal()).then(|| format!("w-{}", crate::ids::random_hex(12)))
}

/// Runs `work` (a request tagged `tag`); meanwhile prints its place in its queue on stderr
/// whenever the place or the reason changes. Without a tag, just runs it.
pub async fn noting<T>(
    ops: &impl Operations,
    tag: Option<&str>,
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
            eprintln!("paddock: {}", waiter.line());
            shown = Some(now);
        }
    }
}
