//! `paddock checkpoint`, `checkpoints`, `restore` and `fork`: save a job's state, list and
//! remove what was saved, put it back, branch it into new jobs.

use clap::{Args, Subcommand};

use super::exit;
use super::render::{print_job_table, print_json, print_table};
use crate::error::Result;
use crate::ops::Operations;
use crate::wire::{CheckpointRequest, CheckpointView, ForkRequest, RestoreRequest};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct CheckpointArgs {
    #[command(subcommand)]
    action: Option<CheckpointAction>,
    /// The job to checkpoint.
    #[arg(value_parser = super::job_id, required = true)]
    job: Option<String>,
    #[command(flatten)]
    request: CheckpointRequest,
    /// Print the checkpoint as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum CheckpointAction {
    /// Remove a checkpoint (its ref in the wip store and its record).
    Rm {
        /// The job (it may have been removed).
        #[arg(value_parser = super::job_id)]
        job: String,
        /// The checkpoint's name.
        name: String,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
}

pub async fn checkpoint(ops: &impl Operations, args: CheckpointArgs) -> Result<i32> {
    if let Some(CheckpointAction::Rm { job, name, json }) = args.action {
        let removed = ops.checkpoint_remove(&job, &name).await?;
        if json {
            print_json(&removed);
        } else if removed.removed {
            say!("removed checkpoint {} of job {}", removed.name, removed.job);
        } else {
            say!(
                "job {} has no checkpoint {}: nothing to remove",
                removed.job,
                removed.name
            );
        }
        return Ok(exit::OK);
    }
    let job = args.job.expect("clap requires a job without a subcommand");
    let view = ops.checkpoint(&job, args.request).await?;
    if args.json {
        print_json(&view);
    } else {
        say!(
            "checkpoint {} of job {}: {} changed file(s), {} ({})",
            view.name,
            view.job,
            view.files,
            crate::units::format_size(view.bytes),
            short(&view.commit)
        );
        say!(
            "restore it with `paddock restore {} {}`; fetch it with `{}`",
            view.job,
            view.name,
            view.fetch_command()
        );
    }
    Ok(exit::OK)
}

#[derive(Debug, Args)]
pub struct CheckpointsArgs {
    /// The job (it may have been removed).
    #[arg(value_parser = super::job_id)]
    job: String,
    /// Print the list as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn checkpoints(ops: &impl Operations, args: CheckpointsArgs) -> Result<i32> {
    let list = ops.checkpoints(&args.job).await?;
    if args.json {
        print_json(&list);
        return Ok(exit::OK);
    }
    if list.checkpoints.is_empty() {
        say!("job {} has no checkpoints", list.job);
        return Ok(exit::OK);
    }
    let rows: Vec<Vec<String>> = list.checkpoints.iter().map(row).collect();
    print_table(&["NAME", "TAKEN", "TIP", "FILES", "BYTES"], &rows);
    Ok(exit::OK)
}

fn row(view: &CheckpointView) -> Vec<String> {
    vec![
        view.name.clone(),
        view.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
        view.tip.as_deref().map_or_else(|| "-".into(), short),
        view.files.to_string(),
        crate::units::format_size(view.bytes),
    ]
}

fn short(commit: &str) -> String {
    commit.chars().take(12).collect()
}

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The job to restore.
    #[arg(value_parser = super::job_id)]
    job: String,
    #[command(flatten)]
    request: RestoreRequest,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn restore(ops: &impl Operations, args: RestoreArgs) -> Result<i32> {
    let answer = ops.restore(&args.job, args.request).await?;
    if args.json {
        print_json(&answer);
        return Ok(exit::OK);
    }
    if answer.stopped {
        say!("stopped the exec that was running in job {}", answer.job);
    }
    let branch = if answer.branch_moved {
        format!(
            "; its branch is back at {}",
            answer.tip.as_deref().map_or_else(|| "-".into(), short)
        )
    } else {
        String::new()
    };
    say!(
        "restored job {} to checkpoint {}{branch}",
        answer.job,
        answer.checkpoint
    );
    Ok(exit::OK)
}

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The job to fork.
    #[arg(value_parser = super::job_id)]
    job: String,
    #[command(flatten)]
    request: ForkRequest,
    /// Print the answer as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn fork(ops: &impl Operations, mut args: ForkArgs) -> Result<i32> {
    let tag = super::waiting::tag(args.json);
    args.request.waiter.clone_from(&tag);
    let job = args.job.clone();
    let answer =
        super::waiting::noting(ops, tag.as_deref(), None, ops.fork(&job, args.request)).await?;
    if args.json {
        print_json(&answer);
        return Ok(exit::OK);
    }
    say!(
        "forked job {} from checkpoint {} into {} job(s):",
        answer.source,
        answer.checkpoint.name,
        answer.jobs.len()
    );
    print_job_table(&answer.jobs);
    Ok(exit::OK)
}
