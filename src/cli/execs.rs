//! `paddock execs`: a job's execs (id, state, exit, command), or one exec's output again,
//! from an offset and, following, until it ends.

use std::io::Write;

use clap::Args;

use super::exit;
use super::render::{print_json, print_table};
use crate::error::Result;
use crate::ops::Operations;
use crate::units::format_age;
use crate::wire::ExecState;

#[derive(Debug, Args)]
pub struct ExecsArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
    /// An exec id (`x-...`): print its output (stdout and stderr) instead of the list.
    exec: Option<String>,
    /// With an exec: start at this byte offset of its output log.
    #[arg(long, default_value_t = 0, requires = "exec")]
    offset: u64,
    /// With an exec: keep printing until it ends.
    #[arg(long, short, requires = "exec")]
    follow: bool,
    /// The list (or, with an exec, its status and result) as JSON.
    #[arg(long)]
    json: bool,
    /// With an exec: its output's own bytes even on a terminal (escape sequences included).
    #[arg(long, requires = "exec")]
    raw: bool,
}

pub async fn run(ops: &impl Operations, args: ExecsArgs) -> Result<i32> {
    let Some(exec) = args.exec else {
        let execs = ops.execs(&args.job).await?;
        if args.json {
            print_json(&execs);
            return Ok(exit::OK);
        }
        let now = chrono::Utc::now();
        let rows: Vec<Vec<String>> = execs
            .iter()
            .map(|e| {
                vec![
                    e.id.clone(),
                    match e.state {
                        ExecState::Running => "running",
                        ExecState::Finished => "finished",
                        ExecState::Lost => "lost",
                    }
                    .to_string(),
                    format_age(now - e.started_at),
                    e.result
                        .as_ref()
                        .map_or_else(|| "-".into(), |r| r.exit_code.to_string()),
                    e.command.join(" "),
                ]
            })
            .collect();
        print_table(&["EXEC", "STATE", "AGE", "EXIT", "COMMAND"], &rows);
        return Ok(exit::OK);
    };
    if args.json {
        print_json(&ops.exec_info(&args.job, &exec).await?);
        return Ok(exit::OK);
    }
    let safe = !args.raw && std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut pending = Vec::new();
    ops.exec_output(&args.job, &exec, args.offset, args.follow, &mut |bytes| {
        pending.extend_from_slice(bytes);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            print_output_line(&line, safe);
        }
    })
    .await?;
    Ok(exit::OK)
}

/// One line of the output log: its data to stdout or stderr (made terminal-safe when `safe`),
/// the truncation marker as a note.
fn print_output_line(line: &[u8], safe: bool) {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(line) else {
        return;
    };
    let data = value["data"].as_str().unwrap_or_default();
    let data = if safe {
        crate::text::block(data)
    } else {
        std::borrow::Cow::Borrowed(data)
    };
    let data = data.as_bytes();
    let _ = match value["stream"].as_str() {
        Some("stderr") => std::io::stderr().write_all(data),
        Some(_) => std::io::stdout().lock().write_all(data),
        None if value["truncated"] == true => {
            writeln!(
                std::io::stderr(),
                "[paddock: output cut at {} bytes]",
                value["limit"]
            )
        }
        None => Ok(()),
    };
}
