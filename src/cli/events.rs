//! `paddock events`: the install's event history (and, following, new events) as a table or
//! JSON lines; through the daemon's event stream when one runs, else from the persisted log.

use std::io::Write;

use clap::Args;

use super::exit;
use crate::error::Result;
use crate::ops::Operations;
use crate::wire::{Event, EventQuery};

#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Keep printing new events, until Ctrl-C (without --since: only new ones).
    #[arg(long, short)]
    follow: bool,
    /// Only events after this id (a `reset` event first when some are no longer kept).
    #[arg(long, value_name = "ID")]
    since: Option<u64>,
    /// Only the events of this job.
    #[arg(long, value_name = "JOB", value_parser = super::job_id)]
    job: Option<String>,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
}

pub async fn run(ops: &impl Operations, args: EventsArgs) -> Result<i32> {
    let query = EventQuery {
        since: args.since,
        job: args.job,
        follow: args.follow,
    };
    let json = args.json;
    if !json {
        say!(
            "{}",
            row(["ID", "TIME", "TYPE", "JOB", "STATE", "DETAIL"].map(String::from))
        );
    }
    ops.events(query, &mut |event| {
        let line = if json {
            let text = serde_json::to_string(&event).expect("events serialize");
            super::say::json(&text).into_owned()
        } else {
            crate::text::block(&table_row(&event)).into_owned()
        };
        // A closed pipe (`| head`) ends the command.
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}").and_then(|()| out.flush()).is_ok()
    })
    .await?;
    Ok(exit::OK)
}

fn row(cells: [String; 6]) -> String {
    let [id, time, kind, job, state, detail] = cells;
    format!("{id:<8}  {time:<20}  {kind:<20}  {job:<24}  {state:<9}  {detail}")
        .trim_end()
        .to_string()
}

fn table_row(event: &Event) -> String {
    row([
        event.id.to_string(),
        event.at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        event.kind.name().to_string(),
        event
            .job
            .as_deref()
            .map_or_else(|| "-".into(), |job| crate::text::line(job).into_owned()),
        event.state.map_or_else(|| "-".into(), |s| s.to_string()),
        short_detail(&event.detail),
    ])
}

/// The detail's fields as `key=value`, on one line of at most 80 characters.
fn short_detail(detail: &serde_json::Value) -> String {
    let text = match detail {
        serde_json::Value::Object(fields) => fields
            .iter()
            .filter(|(_, value)| !value.is_null())
            .map(|(key, value)| match value {
                serde_json::Value::String(s) => format!("{key}={s}"),
                other => format!("{key}={other}"),
            })
            .collect::<Vec<_>>()
            .join(" "),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    };
    // Details carry agent text (an egress host, a reason quoting a path): one safe line.
    let text = crate::text::line(&text);
    if text.chars().count() > 80 {
        format!("{}...", text.chars().take(77).collect::<String>())
    } else {
        text.into_owned()
    }
}
