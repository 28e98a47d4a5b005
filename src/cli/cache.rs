//! `paddock cache ls|prune`: the shared dependency cache entries.

use clap::Subcommand;

use super::exit;
use super::render::{print_cache_table, print_json};
use crate::Paddock;
use crate::error::Result;
use crate::units::HumanDuration;

#[derive(Debug, Clone, Copy, Subcommand)]
pub enum CacheCommand {
    /// List cache entries: size, last use, jobs using them.
    Ls {
        #[arg(long)]
        json: bool,
    },
    /// Remove entries no live job uses and unused for a while.
    Prune {
        /// Only entries unused for at least this long (default 7d).
        #[arg(long, default_value = "7d")]
        unused_for: HumanDuration,
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(paddock: &Paddock, command: CacheCommand) -> Result<i32> {
    match command {
        CacheCommand::Ls { json } => {
            let mut entries = paddock.cache_entries()?;
            // A remote engine's cache volumes (`ENGINE:VOLUME`) after the host's entries.
            entries.extend(paddock.engine_cache_entries().await?);
            if json {
                print_json(&entries);
            } else {
                print_cache_table(&entries);
            }
        }
        CacheCommand::Prune {
            unused_for,
            dry_run,
            json,
        } => {
            let (mut pruned, mut kept) = paddock.cache_prune(unused_for.0, dry_run)?;
            let (engine_pruned, engine_kept) =
                paddock.engine_cache_prune(unused_for.0, dry_run).await?;
            pruned.extend(engine_pruned);
            kept.extend(engine_kept);
            if json {
                print_json(
                    &serde_json::json!({ "dry_run": dry_run, "removed": pruned, "kept": kept }),
                );
            } else {
                print_cache_table(&pruned);
                say!(
                    "{} entr{} {}, {} kept",
                    pruned.len(),
                    if pruned.len() == 1 { "y" } else { "ies" },
                    if dry_run {
                        "would be removed"
                    } else {
                        "removed"
                    },
                    kept.len()
                );
            }
        }
    }
    Ok(exit::OK)
}
