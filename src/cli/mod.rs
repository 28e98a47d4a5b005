//! The command line: clap definitions and the dispatch, one file per command (its arguments,
//! its call, its human output), rendering in [`render`], exit codes in [`exit`].
//!
//! Commands are thin: parse, call one operation, render. Job commands are written against
//! [`Operations`]; which implementation serves them (a running daemon, else the engine) is
//! decided once, in [`run`]. Data goes to stdout (a table or, with `--json`, stable JSON);
//! warnings and errors go to stderr.

use clap::{Parser, Subcommand};

use crate::Paddock;
use crate::client::DaemonClient;
use crate::error::{Error, Result};
use crate::ops::Operations;

#[macro_use]
mod say;
mod apply;
mod cache;
mod cat;
mod checkpoint;
mod config;
mod conflicts;
mod cp;
mod cp_dir;
mod create;
mod dashboard;
mod diff;
mod doctor;
mod events;
mod exec;
mod execs;
pub mod exit;
mod image;
mod log;
mod logs;
mod ls;
mod mcp;
mod merge;
mod net;
mod pause;
mod pool;
mod port;
mod push;
mod render;
mod rm;
mod run;
mod serve;
mod shell;
mod show;
mod stop;
mod sweep;
mod trust;
mod waiting;

#[derive(Debug, Parser)]
#[command(
    name = "paddock",
    version,
    about = "One git branch, one worktree and one resource-limited container per coding-agent task",
    propagate_version = true
)]
pub struct Cli {
    /// Log what paddock does to stderr (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Make a mutating command safe to retry: the same key with the same request gets the
    /// first answer instead of doing the work again (kept 24 h). Honoured by the daemon for
    /// every mutating command, and by `create` without a daemon.
    #[arg(long, global = true, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Create a job: a branch, a worktree and (with Docker) a container.
    Create(Box<create::CreateArgs>),
    /// List jobs.
    Ls(ls::LsArgs),
    /// Show a job: branch, base, commits ahead, changed files, state and ages.
    Show(show::ShowArgs),
    /// Committed and uncommitted changes of a job against its base.
    Diff(diff::DiffArgs),
    /// Commits on the job's branch since its base.
    Log(log::LogArgs),
    /// Remove a job; uncommitted work is kept in refs/paddock/wip/<job> of paddock's wip store.
    Rm(rm::RmArgs),
    /// Run a command in a job; output streams live and paddock exits with its exit code.
    Exec(exec::ExecArgs),
    /// Create a job, run one command, then remove the job as `rm` does (the branch stays
    /// when it has commits); exits with the command's exit code.
    Run(run::RunArgs),
    /// An interactive shell in the job (its container, or its worktree).
    Shell(shell::ShellArgs),
    /// Every exec's command, output and exit code.
    Logs(logs::LogsArgs),
    /// A job's execs, or one exec's output (again, from an offset, or following it).
    Execs(execs::ExecsArgs),
    /// The event history (job.created, exec.finished, ...), or new events with --follow.
    Events(events::EventsArgs),
    /// Stop what runs in a job (SIGTERM, the grace period, then SIGKILL).
    Stop(stop::StopArgs),
    /// Freeze a job's processes in place (memory kept, no CPU, no exec) until `resume`.
    Pause(pause::PauseArgs),
    /// Thaw a paused job's processes.
    Resume(pause::PauseArgs),
    /// Save a job's state as a named checkpoint (branch tip, index, changes, untracked and
    /// `copy` files); `checkpoint rm JOB NAME` removes one.
    Checkpoint(checkpoint::CheckpointArgs),
    /// A job's checkpoints (also of a removed job).
    Checkpoints(checkpoint::CheckpointsArgs),
    /// Put a job's workspace back to a checkpoint (files made since are removed).
    Restore(checkpoint::RestoreArgs),
    /// Make new jobs, each on its own branch, from a checkpoint of a job.
    Fork(checkpoint::ForkArgs),
    /// Change what a running allowlist job may reach (from its next connection).
    Net(net::NetArgs),
    /// Where a job's ports are served on the host (127.0.0.1:PORT).
    Port(port::PortArgs),
    /// Copy a file into or out of a job's workspace (JOB:PATH names the job's side).
    Cp(cp::CpArgs),
    /// Print a file of a job's workspace.
    Cat(cat::CatArgs),
    /// Serve the Model Context Protocol on stdin/stdout: job and file tools for an agent.
    Mcp(mcp::McpArgs),
    /// Which jobs merge cleanly into their base and which conflict with each other (no
    /// working tree is touched).
    Conflicts(conflicts::ConflictsArgs),
    /// Land a job's branch on a branch of the repository (refused when it would conflict).
    Merge(merge::MergeArgs),
    /// Apply a job's committed and uncommitted changes to the repository's checkout,
    /// without committing.
    Apply(apply::ApplyArgs),
    /// Push exactly a job's branch to a remote of the repository, with your own git
    /// credentials (the job never sees them).
    Push(push::PushArgs),
    /// Agent image commands.
    Image {
        #[command(subcommand)]
        command: image::ImageCommand,
    },
    /// Check git, Docker, the image, runtimes, limits and disk space.
    Doctor(doctor::DoctorArgs),
    /// Remove stale jobs and orphans (containers, worktrees, git metadata); never loses work.
    Sweep(sweep::SweepArgs),
    /// Warm pools: containers started ahead of creates (`pool: {size: N}` in a profile).
    Pool {
        #[command(subcommand)]
        command: pool::PoolCommand,
    },
    /// Run the activity watcher and a sweep every interval, until SIGTERM.
    Serve(serve::ServeArgs),
    /// Open the web dashboard of the running daemon on a loopback port and print its URL.
    Dashboard(dashboard::DashboardArgs),
    /// Shared dependency cache commands.
    Cache {
        #[command(subcommand)]
        command: cache::CacheCommand,
    },
    /// Let a repository's .paddock.yaml widen its jobs (by default it may only narrow them):
    /// adds it to `trust:` in your config file.
    Trust(trust::TrustArgs),
    /// Configuration commands.
    Config {
        #[command(subcommand)]
        command: config::ConfigCommand,
    },
}

/// Runs one parsed command and returns the process exit code.
pub async fn run(cli: Cli) -> i32 {
    let exec_like = matches!(cli.command, Command::Exec(_) | Command::Run(_));
    let paddock = match Paddock::from_env() {
        Ok(paddock) => paddock,
        Err(error) => return report(&error, exec_like),
    };
    // Job commands go through a running daemon when there is one (see `client`): the one
    // place that chooses.
    let key = cli.idempotency_key.clone();
    let outcome = match DaemonClient::connect(paddock.home()).await {
        Some(daemon) => {
            let daemon = daemon.with_idempotency_key(key);
            dispatch(&daemon, &paddock, cli.command).await
        }
        None => match key {
            Some(key) => keyed_without_daemon(&paddock, &key, cli.command).await,
            None => dispatch(&paddock, &paddock, cli.command).await,
        },
    };
    match outcome {
        Ok(code) => code,
        Err(error) => report(&error, exec_like),
    }
}

/// Hands a command to its file: job operations through `ops`, commands about this machine
/// and install (shell, logs, images, doctor, caches, sweep, serve, config) to the engine.
async fn dispatch(ops: &impl Operations, paddock: &Paddock, command: Command) -> Result<i32> {
    match command {
        Command::Create(args) => create::run(ops, *args).await,
        Command::Ls(args) => ls::run(ops, args).await,
        Command::Show(args) => show::run(ops, args).await,
        Command::Diff(args) => diff::run(ops, args).await,
        Command::Log(args) => log::run(ops, args).await,
        Command::Rm(args) => rm::run(ops, args).await,
        Command::Exec(args) => exec::run(ops, args).await,
        Command::Run(args) => run::run(ops, args).await,
        Command::Stop(args) => stop::run(ops, args).await,
        Command::Pause(args) => pause::pause(ops, args).await,
        Command::Resume(args) => pause::resume(ops, args).await,
        Command::Checkpoint(args) => checkpoint::checkpoint(ops, args).await,
        Command::Checkpoints(args) => checkpoint::checkpoints(ops, args).await,
        Command::Restore(args) => checkpoint::restore(ops, args).await,
        Command::Fork(args) => checkpoint::fork(ops, args).await,
        Command::Net(args) => net::run(ops, args).await,
        Command::Port(args) => port::run(ops, args).await,
        Command::Cp(args) => cp::run(ops, args).await,
        Command::Cat(args) => cat::run(ops, args).await,
        Command::Mcp(args) => mcp::run(ops, args).await,
        Command::Conflicts(args) => conflicts::run(ops, args).await,
        Command::Merge(args) => merge::run(ops, args).await,
        Command::Apply(args) => apply::run(ops, args).await,
        Command::Push(args) => push::run(ops, args).await,
        Command::Execs(args) => execs::run(ops, args).await,
        Command::Events(args) => events::run(ops, args).await,
        Command::Shell(args) => shell::run(paddock, args).await,
        Command::Logs(args) => logs::run(paddock, args).await,
        Command::Image { command } => image::run(paddock, command).await,
        Command::Doctor(args) => doctor::run(paddock, args).await,
        Command::Sweep(args) => sweep::run(paddock, args).await,
        Command::Pool { command } => pool::run(paddock, command).await,
        Command::Serve(args) => serve::run(paddock, args).await,
        Command::Dashboard(args) => dashboard::run(paddock, args).await,
        Command::Cache { command } => cache::run(paddock, command).await,
        Command::Config { command } => config::run(paddock, command).await,
        Command::Trust(args) => trust::run(paddock, args).await,
    }
}

/// `--idempotency-key` without a daemon: `create` keeps its answer in the install's store,
/// under the daemon's operation and body (so a key means one job whichever way it came);
/// other mutating commands need the daemon for it; commands that change nothing ignore it.
async fn keyed_without_daemon(paddock: &Paddock, key: &str, command: Command) -> Result<i32> {
    match command {
        Command::Create(args) => create::run_keyed(paddock, key, *args).await,
        Command::Exec(_)
        | Command::Run(_)
        | Command::Stop(_)
        | Command::Rm(_)
        | Command::Merge(_)
        | Command::Apply(_)
        | Command::Push(_)
        | Command::Net(_)
        | Command::Checkpoint(_)
        | Command::Restore(_)
        | Command::Fork(_) => {
            tell!(
                "error: --idempotency-key needs a running daemon (`paddock serve`) for this command"
            );
            Ok(exit::USAGE)
        }
        other => dispatch(paddock, paddock, other).await,
    }
}

/// Prints an error with its causes and hint; returns the exit code.
fn report(error: &Error, exec_like: bool) -> i32 {
    let (code, hint) = (exit::of(error.kind()), error.hint());
    let message = format!("error: {}", error.with_causes());
    // Errors quote what they failed on (a path, a ref, an agent's message): shown safely.
    tell!("{}", crate::text::block(&message));
    if let Some(hint) = hint {
        tell!("hint: {}", crate::text::block(&hint));
    }
    if exec_like { exit::EXEC_FAILED } else { code }
}

/// clap's parser of a job-id argument: the one id rule ([`JobId::parse`](crate::job::JobId::parse)),
/// so `paddock exec a/git/evil` is a usage error naming the rule before any path is built.
fn job_id(raw: &str) -> std::result::Result<String, String> {
    crate::job::JobId::parse(raw)
        .map(String::from)
        .map_err(|error| error.to_string())
}
