//! `paddock conflicts`: which jobs merge cleanly into their base and which conflict with
//! each other, computed without touching any working tree.

use std::path::PathBuf;

use clap::Args;

use super::exit;
use super::render::{print_json, print_table};
use crate::error::Result;
use crate::ops::Operations;
use crate::wire::{ConflictFile, ConflictsQuery};

#[derive(Debug, Args)]
pub struct ConflictsArgs {
    /// The jobs (default: every job with a branch).
    #[arg(value_parser = super::job_id)]
    jobs: Vec<String>,
    /// Merge into this ref instead of each job's base branch at its current tip.
    #[arg(long, value_name = "REF")]
    base: Option<String>,
    /// Only jobs of this repository (without JOB arguments).
    #[arg(long)]
    repo: Option<PathBuf>,
    #[arg(long)]
    json: bool,
}

fn listed(conflicts: &[ConflictFile]) -> String {
    conflicts
        .iter()
        .map(|c| format!("{} ({})", c.path, c.kind))
        .collect::<Vec<_>>()
        .join(", ")
}

pub async fn run(ops: &impl Operations, args: ConflictsArgs) -> Result<i32> {
    let query = ConflictsQuery {
        jobs: args.jobs,
        base: args.base,
        repo: args.repo,
    };
    let report = ops.conflicts(query).await?;
    if args.json {
        print_json(&report);
        return Ok(exit::OK);
    }
    if report.jobs.is_empty() {
        say!("no jobs");
        return Ok(exit::OK);
    }
    let rows: Vec<Vec<String>> = report
        .jobs
        .iter()
        .map(|job| {
            let status = &job.status;
            let verdict = if job.sync_error.is_some() {
                // Say first that the job's branch may have moved since the host last saw it.
                format!("UNKNOWN (sync failed; last known: {})", known(status))
            } else {
                known(status)
            };
            vec![
                job.id.to_string(),
                status.base.clone(),
                status.files.len().to_string(),
                verdict,
            ]
        })
        .collect();
    print_table(&["JOB", "BASE", "FILES", "MERGE"], &rows);
    print_pairs(&report);
    Ok(exit::OK)
}

/// The verdict of a job's branch as the host has it.
fn known(status: &crate::wire::MergeStatus) -> String {
    if status.branch_tip.is_none() {
        "no branch".to_string()
    } else if status.merged {
        "merged".to_string()
    } else if status.clean {
        "clean".to_string()
    } else {
        format!("conflicts: {}", listed(&status.conflicts))
    }
}

/// Pairs of jobs that touch the same files.
fn print_pairs(report: &crate::wire::ConflictsReport) {
    if !report.pairs.is_empty() {
        say!();
        let rows: Vec<Vec<String>> = report
            .pairs
            .iter()
            .map(|pair| {
                vec![
                    format!("{} + {}", pair.jobs[0], pair.jobs[1]),
                    pair.shared_files.join(", "),
                    if pair.clean {
                        "clean".to_string()
                    } else {
                        format!("conflicts: {}", listed(&pair.conflicts))
                    },
                ]
            })
            .collect();
        print_table(&["JOBS", "SHARED FILES", "MERGE"], &rows);
    }
}
