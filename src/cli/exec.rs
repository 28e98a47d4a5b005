//! `paddock exec`: one command in a job, output live, paddock's exit code the command's.

use clap::Args;

use super::exit;
use super::render::{Terminal, command_exit_code, explain_result, print_json};
use crate::error::Result;
use crate::ops::Operations;
use crate::output::Discard;
use crate::runtime::exec::ExecStdin;
use crate::units::HumanDuration;
use crate::wire::ExecOptions;

#[derive(Debug, Args)]
pub struct ExecArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
    /// Deadline for this command (default: the profile's timeout).
    #[arg(long)]
    timeout: Option<HumanDuration>,
    #[command(flatten)]
    exec: ExecFlags,
    /// Print the ExecResult as JSON instead of streaming output.
    #[arg(long)]
    json: bool,
    /// Fail at once instead of waiting when every exec slot is busy
    /// (`admission.max_running_execs`); like every error of paddock's own, exit 125.
    #[arg(long)]
    no_wait: bool,
    /// Resume the job first when it is paused (without it, an exec on a paused job fails).
    #[arg(long)]
    resume: bool,
    /// Pass this command's standard input to the command, as it comes (a pipe, a file or
    /// the terminal, line by line); without it the command reads end-of-file.
    #[arg(short = 'i', long)]
    interactive: bool,
    /// Run as `agent` (the default), `root` or UID[:GID]; another user than the agent only
    /// in a runsc or microvm job, where root has no power over the host (nor capabilities).
    #[arg(short = 'u', long, value_name = "USER")]
    user: Option<crate::wire::ExecUser>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    cmd: Vec<String>,
}

/// Options of one exec, shared with `run`.
#[derive(Debug, Args, Default, Clone)]
pub struct ExecFlags {
    /// Working directory, relative to the workspace.
    #[arg(long)]
    pub workdir: Option<String>,
    /// Extra environment, K=V (repeatable).
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
}

impl ExecFlags {
    /// The exec's options, or the message for a malformed `--env`.
    pub fn options(
        &self,
        cmd: Vec<String>,
        timeout: Option<HumanDuration>,
    ) -> std::result::Result<ExecOptions, String> {
        let mut env = std::collections::BTreeMap::new();
        for pair in &self.env {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("invalid --env `{pair}`: expected K=V"))?;
            env.insert(key.to_string(), value.to_string());
        }
        Ok(ExecOptions {
            cmd,
            timeout,
            env,
            workdir: self.workdir.clone(),
            ..ExecOptions::default()
        })
    }
}

pub async fn run(ops: &impl Operations, args: ExecArgs) -> Result<i32> {
    let tag = super::waiting::tag(args.json);
    let options = match args.exec.options(args.cmd, args.timeout) {
        Ok(options) => ExecOptions {
            no_wait: args.no_wait,
            resume: args.resume,
            user: args.user,
            waiter: tag.clone(),
            stdin_stream: if args.interactive {
                ExecStdin::reader(Box::pin(tokio::io::stdin()))
            } else {
                ExecStdin::default()
            },
            ..options
        },
        Err(message) => {
            tell!("error: {message}");
            return Ok(exit::USAGE);
        }
    };
    let result = if args.json {
        ops.exec(&args.job, options, &mut Discard).await?
    } else {
        let mut terminal = Terminal;
        let (mut sink, started) = super::waiting::Starts::new(&mut terminal);
        let exec = ops.exec(&args.job, options, &mut sink);
        super::waiting::noting(ops, tag.as_deref(), Some(&started), exec).await?
    };
    if args.json {
        print_json(&result);
    } else {
        explain_result(&result);
    }
    Ok(command_exit_code(&result))
}
