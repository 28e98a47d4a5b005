//! `paddock run`: create a job, run one command, remove the job as `rm` does.

use clap::Args;

use super::create::CreateArgs;
use super::exec::ExecFlags;
use super::exit;
use super::render::{Terminal, command_exit_code, explain_result, print_json};
use crate::error::Result;
use crate::ops::Operations;
use crate::output::Discard;

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    create: Box<CreateArgs>,
    #[command(flatten)]
    exec: ExecFlags,
    /// Keep the job after the command ends.
    #[arg(long)]
    keep: bool,
    #[arg(last = true, required = true)]
    cmd: Vec<String>,
}

pub async fn run(ops: &impl Operations, args: RunArgs) -> Result<i32> {
    let CreateArgs { mut request, json } = *args.create;
    // One tag for both waits (the create's, then the exec's): only one waits at a time.
    let tag = super::waiting::tag(json);
    request.waiter.clone_from(&tag);
    let options = match args.exec.options(args.cmd, request.timeout) {
        Ok(options) => crate::wire::ExecOptions {
            waiter: tag.clone(),
            ..options
        },
        Err(message) => {
            tell!("error: {message}");
            return Ok(exit::USAGE);
        }
    };
    let (report, warning) = if json {
        ops.run(request, options, args.keep, &mut Discard).await?
    } else {
        let mut terminal = Terminal;
        let (mut sink, started) = super::waiting::Starts::new(&mut terminal);
        let run = ops.run(request, options, args.keep, &mut sink);
        super::waiting::noting(ops, tag.as_deref(), Some(&started), run).await?
    };
    if let Some(warning) = warning {
        tell!("warning: {warning}");
    }
    if json {
        print_json(&report);
    } else {
        explain_result(&report.result);
        tell!(
            "paddock: job {} {}; branch {} {}",
            report.job.id,
            if args.keep { "kept" } else { "removed" },
            report.job.branch,
            if report.branch_kept {
                "kept"
            } else {
                "deleted (no commits)"
            }
        );
    }
    Ok(command_exit_code(&report.result))
}
