//! `paddock pool status|fill|drain`: the warm pools of this install (see `engine::pool`).
//! Host-local like `sweep`: pool slots are mounts and containers of this machine (or, for a
//! remote engine's, records of this install), so these call the engine directly, daemon or not.

use std::path::PathBuf;

use clap::Subcommand;

use super::exit;
use super::render::{Progress, print_json, print_table};
use crate::Paddock;
use crate::error::Result;
use crate::wire::PoolChange;

#[derive(Debug, Clone, Subcommand)]
pub enum PoolCommand {
    /// List the pool slots: waiting, starting, and claimed by a job, and their engine.
    #[command(alias = "ls")]
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Start waiting containers of a profile for a repository, up to its `pool.size`
    /// (within the admission budget).
    Fill {
        /// The profile (default: the config's default profile).
        #[arg(long)]
        profile: Option<String>,
        /// The repository (default: the current directory's).
        #[arg(long, default_value = ".")]
        repo: PathBuf,
        /// The engine of `engines:` to keep the slots on (default: the profile's `engine:`).
        #[arg(long)]
        engine: Option<String>,
        /// Print nothing (a background refill).
        #[arg(long)]
        quiet: bool,
        #[arg(long)]
        json: bool,
    },
    /// Remove the waiting containers (of one profile); claimed ones stay their jobs'.
    Drain {
        #[arg(long)]
        profile: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(paddock: &Paddock, command: PoolCommand) -> Result<i32> {
    match command {
        PoolCommand::Status { json } => {
            let slots = paddock.pool_status();
            if json {
                print_json(&slots);
                return Ok(exit::OK);
            }
            let now = chrono::Utc::now();
            let rows: Vec<Vec<String>> = slots
                .iter()
                .map(|s| {
                    vec![
                        s.id.clone(),
                        s.profile.clone(),
                        s.state.clone(),
                        s.job.clone().unwrap_or_else(|| "-".into()),
                        s.engine.clone().unwrap_or_else(|| "local".into()),
                        crate::units::HumanDuration(
                            (now - s.created_at).to_std().unwrap_or_default(),
                        )
                        .to_string(),
                        s.container.clone(),
                    ]
                })
                .collect();
            print_table(
                &[
                    "SLOT",
                    "PROFILE",
                    "STATE",
                    "JOB",
                    "ENGINE",
                    "AGE",
                    "CONTAINER",
                ],
                &rows,
            );
        }
        PoolCommand::Fill {
            profile,
            repo,
            engine,
            quiet,
            json,
        } => {
            let progress = Progress::spinner(json || quiet);
            progress.message("starting pool slots (containers, or microVMs: each boots in 10-60 s under the emulator)");
            let change = paddock
                .pool_fill(&repo, profile.as_deref(), engine.as_deref())
                .await;
            progress.finish();
            let change = change?;
            if !quiet {
                print_change(&change, json);
            }
        }
        PoolCommand::Drain { profile, json } => {
            let change = paddock.pool_drain(profile.as_deref()).await?;
            print_change(&change, json);
        }
    }
    Ok(exit::OK)
}

fn print_change(change: &PoolChange, json: bool) {
    if json {
        print_json(change);
        return;
    }
    for id in &change.started {
        say!("started {id}");
    }
    for id in &change.removed {
        say!("removed {id}");
    }
    for left in &change.left {
        say!("left {left}");
    }
    if let Some(note) = &change.note {
        say!("note: {note}");
    }
    if change.started.is_empty()
        && change.removed.is_empty()
        && change.left.is_empty()
        && change.note.is_none()
    {
        say!("nothing to do");
    }
}
