//! The command line: clap definitions, output rendering and the one error layer that maps
//! engine errors to documented exit codes and adds hints.
//!
//! Commands are thin: parse, call one engine function, render. Data goes to stdout (a table
//! or, with `--json`, stable JSON); warnings and errors go to stderr.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;

use crate::config::{ProfileLayer, RuntimeChoice};
use crate::engine::{
    BranchPolicy, CreateRequest, Error, ExecOptions, JobView, Paddock, RemoveOptions,
};
use crate::runtime::exec::{Discard, OutputSink, StreamKind};
use crate::units::{ByteSize, Cpus, HumanDuration, format_age};

/// Exit codes; the README documents them.
pub mod exit {
    pub const OK: i32 = 0;
    pub const INTERNAL: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const CONFIG: i32 = 3;
    pub const INVALID_INPUT: i32 = 4;
    pub const NOT_FOUND: i32 = 5;
    pub const CONFLICT: i32 = 6;
    pub const GIT: i32 = 7;
    pub const RUNTIME_UNAVAILABLE: i32 = 8;
    pub const REFUSED: i32 = 9;
    /// `exec`/`run`: the command ran out of time.
    pub const TIMED_OUT: i32 = 124;
    /// `exec`/`run`: paddock itself failed (the command's own codes pass through).
    pub const EXEC_FAILED: i32 = 125;

    /// The exit code of each kind of library error: the one table of them.
    pub fn of(kind: crate::ErrorKind) -> i32 {
        use crate::ErrorKind as K;
        match kind {
            K::Usage => USAGE,
            K::Config => CONFIG,
            K::InvalidInput => INVALID_INPUT,
            K::NotFound => NOT_FOUND,
            K::Conflict => CONFLICT,
            K::Refused => REFUSED,
            K::Git => GIT,
            K::RuntimeUnavailable => RUNTIME_UNAVAILABLE,
            K::Internal => INTERNAL,
        }
    }
}

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
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a job: a branch, a worktree and (with Docker) a container.
    Create(Box<CreateArgs>),
    /// List jobs.
    Ls {
        /// Only jobs of this repository.
        #[arg(long)]
        repo: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// Show a job: branch, base, commits ahead, changed files, state and ages.
    Show {
        job: String,
        #[arg(long)]
        json: bool,
    },
    /// Committed and uncommitted changes of a job against its base.
    Diff {
        job: String,
        /// A diffstat instead of the patch.
        #[arg(long)]
        stat: bool,
    },
    /// Commits on the job's branch since its base.
    Log {
        job: String,
        #[arg(long)]
        json: bool,
    },
    /// Remove a job; uncommitted work is kept in refs/paddock/wip/<job>.
    Rm {
        job: String,
        /// Remove even if saving uncommitted work fails.
        #[arg(long)]
        force: bool,
        /// Delete the branch even when it has commits.
        #[arg(long, conflicts_with = "keep_branch")]
        delete_branch: bool,
        /// Keep the branch even when it has no commits.
        #[arg(long)]
        keep_branch: bool,
        #[arg(long)]
        json: bool,
    },
    /// Run a command in a job; output streams live and paddock exits with its exit code.
    Exec {
        job: String,
        /// Deadline for this command (default: the profile's timeout).
        #[arg(long)]
        timeout: Option<HumanDuration>,
        #[command(flatten)]
        exec: ExecArgs,
        /// Print the ExecResult as JSON instead of streaming output.
        #[arg(long)]
        json: bool,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Create a job, run one command, then remove the job as `rm` does (the branch stays
    /// when it has commits); exits with the command's exit code.
    Run {
        #[command(flatten)]
        create: Box<CreateArgs>,
        #[command(flatten)]
        exec: ExecArgs,
        /// Keep the job after the command ends.
        #[arg(long)]
        keep: bool,
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// An interactive shell in the job (its container, or its worktree).
    Shell { job: String },
    /// Every exec's command, output and exit code.
    Logs {
        job: String,
        /// Keep printing as new output arrives, until the job is removed or Ctrl-C.
        #[arg(long, short)]
        follow: bool,
    },
    /// Stop what runs in a job (SIGTERM, the grace period, then SIGKILL).
    Stop {
        job: String,
        #[arg(long)]
        grace: Option<HumanDuration>,
    },
    /// Agent image commands.
    Image {
        #[command(subcommand)]
        command: ImageCommand,
    },
    /// Check git, Docker, the image, runtimes, limits and disk space.
    Doctor {
        #[arg(long)]
        json: bool,
    },
    /// Remove stale jobs and orphans (containers, worktrees, git metadata); never loses work.
    Sweep(SweepArgs),
    /// Run the activity watcher and a sweep every interval, until SIGTERM.
    Serve {
        /// How often to sweep (default: config `sweep.interval`, 5m).
        #[arg(long)]
        sweep_interval: Option<HumanDuration>,
        /// The Unix socket to listen on (default: $PADDOCK_HOME/paddock.sock, mode 0600).
        #[arg(long)]
        socket: Option<PathBuf>,
        /// Also listen on TCP (e.g. 127.0.0.1:7777); requires --token-file.
        #[arg(long)]
        listen: Option<String>,
        /// File holding the bearer token TCP clients must send.
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// Creates allowed at once; more wait up to 30s, then get 503 with Retry-After.
        #[arg(long, default_value_t = 8)]
        max_concurrent_creates: usize,
        #[command(flatten)]
        sweep: SweepArgs,
    },
    /// Shared dependency cache commands.
    Cache {
        #[command(subcommand)]
        command: CacheCommand,
    },
    /// Configuration commands.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Build the agent image (Dockerfile.agent, built into paddock) through the Docker API.
    Build {
        /// The image to build from; needs a shell (git is installed when missing).
        #[arg(long, default_value = "debian:bookworm-slim")]
        base_image: String,
        #[arg(long, default_value = crate::config::DEFAULT_IMAGE)]
        tag: String,
        /// Print only the image id.
        #[arg(long)]
        json: bool,
    },
}

/// `--max-age`: a duration or `off`.
#[derive(Debug, Clone, Copy)]
pub struct MaxAge(pub Option<HumanDuration>);

impl std::str::FromStr for MaxAge {
    type Err = crate::units::UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::config::parse_optional_duration(s).map(MaxAge)
    }
}

/// Staleness settings; each overrides the config's `sweep:` section.
#[derive(Debug, Args, Default, Clone)]
pub struct SweepArgs {
    /// Report what would be removed; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// A job with no exec and no file change for this long is stale (default 1h).
    #[arg(long)]
    pub idle: Option<HumanDuration>,
    /// A finished job is stale this long after it finished (default 1h).
    #[arg(long)]
    pub keep_finished: Option<HumanDuration>,
    /// A job older than this is stale whatever it does; `off` (the default) disables.
    #[arg(long, value_name = "DUR|off")]
    pub max_age: Option<MaxAge>,
    /// keep | delete-if-no-commits | delete.
    #[arg(long)]
    pub branch_policy: Option<crate::config::BranchPolicy>,
    /// Pretend it is this time (RFC 3339); for tests and what-if runs.
    #[arg(long, hide = true)]
    pub now: Option<chrono::DateTime<chrono::Utc>>,
    #[arg(long)]
    pub json: bool,
}

impl SweepArgs {
    fn options(
        &self,
        config: &crate::config::Config,
        health_check: bool,
    ) -> crate::sweep::SweepOptions {
        let sweep = &config.sweep;
        crate::sweep::SweepOptions {
            dry_run: self.dry_run,
            idle: self.idle.unwrap_or(sweep.idle.value).0,
            keep_finished: self.keep_finished.unwrap_or(sweep.keep_finished.value).0,
            max_age: self
                .max_age
                .map_or(sweep.max_age.value, |m| m.0)
                .map(|d| d.0),
            branch_policy: self.branch_policy.unwrap_or(sweep.branch_policy.value),
            now: self.now.unwrap_or_else(chrono::Utc::now),
            health_check,
            index_lock_age: std::time::Duration::from_secs(600),
        }
    }
}

fn print_cache_table(entries: &[crate::cache::EntryInfo]) {
    let now = chrono::Utc::now();
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            vec![
                e.repo_key.clone(),
                e.cache.clone(),
                e.key.clone(),
                crate::units::format_size(e.size_bytes),
                e.last_used_at
                    .map(|t| format!("{} ago", format_age(now - t)))
                    .unwrap_or_else(|| "-".into()),
                e.jobs.join(","),
            ]
        })
        .collect();
    print_table(&["REPO", "CACHE", "KEY", "SIZE", "LAST USE", "JOBS"], &rows);
}

fn print_sweep(report: &crate::sweep::SweepReport) {
    let verb = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let mut rows = Vec::new();
    for (action, items) in [
        (verb, &report.removed),
        ("kept", &report.kept),
        ("ERROR", &report.errors),
    ] {
        for item in items {
            let mut reason = item.reason.clone();
            if let Some(error) = &item.error {
                reason.push_str(&format!(": {error}"));
            }
            rows.push(vec![
                action.to_string(),
                item.kind.to_string(),
                item.name.clone(),
                reason,
            ]);
        }
    }
    if rows.is_empty() {
        println!("nothing to sweep");
    } else {
        print_table(&["ACTION", "KIND", "NAME", "REASON"], &rows);
    }
    println!(
        "{} {verb}, {} kept, {} errors",
        report.removed.len(),
        report.kept.len(),
        report.errors.len()
    );
}

/// Options of one exec.
#[derive(Debug, Args, Default, Clone)]
pub struct ExecArgs {
    /// Working directory, relative to the workspace.
    #[arg(long)]
    pub workdir: Option<String>,
    /// Extra environment, K=V (repeatable).
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
}

impl ExecArgs {
    fn options(
        &self,
        cmd: Vec<String>,
        timeout: Option<HumanDuration>,
    ) -> Result<ExecOptions, String> {
        let mut env = std::collections::BTreeMap::new();
        for pair in &self.env {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("invalid --env `{pair}`: expected K=V"))?;
            env.insert(key.to_string(), value.to_string());
        }
        Ok(ExecOptions {
            cmd,
            timeout: timeout.map(|t| t.0),
            env,
            workdir: self.workdir.clone(),
            output_cap: None,
        })
    }
}

#[derive(Debug, Subcommand)]
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

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective configuration and where each value came from.
    Show {
        /// Include this repository's `.paddock.yaml` (default: the repository around the
        /// current directory, if any).
        #[arg(long)]
        repo: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The repository to branch from.
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// The ref to branch from (default: the repo file's `base`, else HEAD).
    #[arg(long)]
    pub base: Option<String>,
    /// The agent's name (goes into the branch name and routing).
    #[arg(long)]
    pub agent: Option<String>,
    /// The task id (goes into the branch name and routing).
    #[arg(long)]
    pub task: Option<String>,
    /// The job id (default: a slug of the task and a random suffix).
    #[arg(long)]
    pub id: Option<String>,
    /// The profile to use (default: routing, then `default_profile`).
    #[arg(long)]
    pub profile: Option<String>,
    /// Check out the branch if it already exists instead of failing.
    #[arg(long)]
    pub reuse_branch: bool,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[arg(long)]
    pub json: bool,
}

/// Profile settings that can be given as flags.
#[derive(Debug, Args, Default, Clone)]
pub struct LimitArgs {
    /// auto | docker | runc | runsc | process.
    #[arg(long)]
    pub runtime: Option<RuntimeChoice>,
    #[arg(long)]
    pub image: Option<String>,
    /// Memory limit, e.g. 512m or 2g.
    #[arg(long)]
    pub memory: Option<ByteSize>,
    /// CPU limit, e.g. 1.5.
    #[arg(long)]
    pub cpus: Option<Cpus>,
    /// Process count limit.
    #[arg(long)]
    pub pids: Option<u32>,
    /// none | bridge.
    #[arg(long)]
    pub network: Option<crate::config::NetworkMode>,
    /// The job's per-exec deadline default, e.g. 10m.
    #[arg(long)]
    pub timeout: Option<HumanDuration>,
}

impl LimitArgs {
    fn layer(&self) -> ProfileLayer {
        ProfileLayer {
            image: self.image.clone(),
            runtime: self.runtime,
            memory: self.memory,
            cpus: self.cpus,
            pids: self.pids,
            network: self.network,
            timeout: self.timeout,
            ..ProfileLayer::default()
        }
    }
}

/// Runs one parsed command and returns the process exit code.
pub async fn run(cli: Cli) -> i32 {
    let exec_like = matches!(cli.command, Command::Exec { .. } | Command::Run { .. });
    let paddock = match Paddock::from_env() {
        Ok(paddock) => paddock,
        Err(error) => return report(&error, exec_like),
    };
    match dispatch(&paddock, cli.command).await {
        Ok(code) => code,
        Err(error) => report(&error, exec_like),
    }
}

async fn dispatch(paddock: &Paddock, command: Command) -> Result<i32, Error> {
    // Job commands go through a running daemon when there is one (see `client`).
    let road = match crate::client::DaemonClient::connect(paddock.home()).await {
        Some(daemon) => crate::client::Road::Daemon(daemon),
        None => crate::client::Road::Direct(paddock),
    };
    match command {
        Command::Create(args) => {
            let json = args.json;
            let (view, warning) = road.create(create_request(*args)).await?;
            if let Some(warning) = &warning {
                eprintln!("warning: {warning}");
            }
            if json {
                print_json(&view);
            } else {
                println!(
                    "created job {} on branch {} at {}",
                    view.id,
                    view.branch,
                    view.worktree.display()
                );
            }
        }
        Command::Ls { repo, json } => {
            let views: Vec<JobView> = road.list(repo.as_deref()).await?;
            if json {
                print_json(&views);
            } else {
                print_job_table(&views);
            }
        }
        Command::Show { job, json } => {
            let details = road.show(&job).await?;
            if json {
                print_json(&details);
            } else {
                print_details(&details);
            }
        }
        Command::Diff { job, stat } => {
            let text = road.diff(&job, stat).await?;
            print!("{text}");
        }
        Command::Log { job, json } => {
            let commits = road.log(&job).await?;
            if json {
                print_json(&commits);
            } else {
                let now = chrono::Utc::now();
                for commit in commits {
                    println!(
                        "{} {} ({}, {} ago)",
                        &commit.sha[..commit.sha.len().min(10)],
                        commit.summary,
                        commit.author,
                        format_age(now - commit.time)
                    );
                }
            }
        }
        Command::Rm {
            job,
            force,
            delete_branch,
            keep_branch,
            json,
        } => {
            let branch_policy = if delete_branch {
                BranchPolicy::Delete
            } else if keep_branch {
                BranchPolicy::Keep
            } else {
                BranchPolicy::DeleteIfNoCommits
            };
            let report = road
                .remove(
                    &job,
                    RemoveOptions {
                        branch_policy,
                        force,
                    },
                )
                .await?;
            if json {
                print_json(&report);
            } else {
                println!("removed job {}", report.id);
                if report.branch_kept {
                    println!(
                        "kept branch {} ({} commit{} ahead of its base)",
                        report.branch,
                        report.commits_ahead,
                        if report.commits_ahead == 1 { "" } else { "s" }
                    );
                } else {
                    println!("deleted branch {}", report.branch);
                }
                if let (Some(wip_ref), Some(commit)) = (&report.wip_ref, &report.wip_commit) {
                    println!(
                        "saved uncommitted work in {wip_ref} ({})",
                        &commit[..commit.len().min(10)]
                    );
                }
            }
        }
        Command::Exec {
            job,
            timeout,
            exec,
            json,
            cmd,
        } => {
            let options = match exec.options(cmd, timeout) {
                Ok(options) => options,
                Err(message) => {
                    eprintln!("error: {message}");
                    return Ok(exit::USAGE);
                }
            };
            let result = if json {
                road.exec(&job, options, &mut Discard).await?
            } else {
                road.exec(&job, options, &mut Terminal).await?
            };
            if json {
                print_json(&result);
            } else {
                explain_result(&result);
            }
            return Ok(command_exit_code(&result));
        }
        Command::Run {
            create,
            exec,
            keep,
            cmd,
        } => {
            let json = create.json;
            let options = match exec.options(cmd, create.limits.timeout) {
                Ok(options) => options,
                Err(message) => {
                    eprintln!("error: {message}");
                    return Ok(exit::USAGE);
                }
            };
            let request = create_request(*create);
            let (report, warning) = if json {
                road.run(request, options, keep, &mut Discard).await?
            } else {
                road.run(request, options, keep, &mut Terminal).await?
            };
            if let Some(warning) = warning {
                eprintln!("warning: {warning}");
            }
            if json {
                print_json(&report);
            } else {
                explain_result(&report.result);
                eprintln!(
                    "paddock: job {} {}; branch {} {}",
                    report.job.id,
                    if keep { "kept" } else { "removed" },
                    report.job.branch,
                    if report.branch_kept {
                        "kept"
                    } else {
                        "deleted (no commits)"
                    }
                );
            }
            return Ok(command_exit_code(&report.result));
        }
        Command::Shell { job } => return paddock.shell(&job).await,
        Command::Logs { job, follow } => {
            let path = paddock.output_log(&job)?;
            follow_log(paddock, &job, &path, follow).await?;
        }
        Command::Stop { job, grace } => {
            let stopped = road.stop(&job, grace.map(|g| g.0)).await?;
            println!(
                "{}",
                if stopped {
                    format!("stopped job {job}")
                } else {
                    format!("job {job} had nothing running")
                }
            );
        }
        Command::Image {
            command:
                ImageCommand::Build {
                    base_image,
                    tag,
                    json,
                },
        } => {
            let mut progress = |line: &str| {
                if !json {
                    eprintln!("{line}");
                }
            };
            let id = crate::runtime::docker::build_image(&base_image, &tag, &mut progress)
                .await
                .map_err(Error::Runtime)?;
            if json {
                print_json(&serde_json::json!({ "tag": tag, "id": id }));
            } else {
                println!("built {tag} from {base_image}");
            }
        }
        Command::Doctor { json } => {
            let root =
                crate::git::GitRepo::open(std::path::Path::new("."), &paddock.home().locks_dir())
                    .await
                    .ok()
                    .map(|r| r.root);
            let config = paddock.config(root.as_deref())?;
            let checks = crate::doctor::run(paddock.home(), &config).await;
            if json {
                print_json(&checks);
            } else {
                for check in &checks {
                    let status = match check.status {
                        crate::doctor::Status::Ok => "ok  ",
                        crate::doctor::Status::Warn => "warn",
                        crate::doctor::Status::Fail => "FAIL",
                    };
                    println!("{status}  {:<16} {}", check.name, check.detail);
                    if let Some(fix) = &check.fix {
                        println!("      {:<16} fix: {fix}", "");
                    }
                }
            }
            if checks
                .iter()
                .any(|c| c.status == crate::doctor::Status::Fail)
            {
                return Ok(exit::RUNTIME_UNAVAILABLE);
            }
        }
        Command::Cache {
            command: CacheCommand::Ls { json },
        } => {
            let entries = paddock.cache_entries()?;
            if json {
                print_json(&entries);
            } else {
                print_cache_table(&entries);
            }
        }
        Command::Cache {
            command:
                CacheCommand::Prune {
                    unused_for,
                    dry_run,
                    json,
                },
        } => {
            let (pruned, kept) = paddock.cache_prune(unused_for.0, dry_run)?;
            if json {
                print_json(
                    &serde_json::json!({ "dry_run": dry_run, "removed": pruned, "kept": kept }),
                );
            } else {
                print_cache_table(&pruned);
                println!(
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
        Command::Sweep(args) => {
            let config = paddock.config(None)?;
            let report = paddock.sweep(&args.options(&config, false)).await?;
            if args.json {
                print_json(&report);
            } else {
                print_sweep(&report);
            }
            if !report.errors.is_empty() {
                return Ok(exit::INTERNAL);
            }
        }
        Command::Serve {
            sweep_interval,
            socket,
            listen,
            token_file,
            max_concurrent_creates,
            sweep,
        } => {
            let config = paddock.config(None)?;
            let options = crate::serve::ServeOptions {
                sweep_interval: sweep_interval.unwrap_or(config.sweep.interval.value).0,
                sweep: sweep.options(&config, true),
                socket,
                listen,
                token_file,
                max_concurrent_creates,
                shutdown_grace: std::time::Duration::from_secs(30),
            };
            crate::serve::serve(options).await?;
        }
        Command::Config {
            command: ConfigCommand::Show { repo, json },
        } => {
            let root = match repo {
                Some(repo) => Some(
                    crate::git::GitRepo::open(&repo, &paddock.home().locks_dir())
                        .await?
                        .root,
                ),
                None => crate::git::GitRepo::open(
                    std::path::Path::new("."),
                    &paddock.home().locks_dir(),
                )
                .await
                .ok()
                .map(|r| r.root),
            };
            let config = paddock.config(root.as_deref())?;
            let rows = config.rows();
            if json {
                #[derive(Serialize)]
                struct Row {
                    key: String,
                    value: String,
                    source: String,
                }
                #[derive(Serialize)]
                struct Shown {
                    user_file: Option<PathBuf>,
                    repo_file: Option<PathBuf>,
                    home: PathBuf,
                    values: Vec<Row>,
                }
                print_json(&Shown {
                    user_file: config.user_file.clone(),
                    repo_file: config.repo_file.clone(),
                    home: paddock.home().root().to_path_buf(),
                    values: rows
                        .into_iter()
                        .map(|(key, value, source)| Row {
                            key,
                            value,
                            source: source.to_string(),
                        })
                        .collect(),
                });
            } else {
                let table: Vec<Vec<String>> = rows
                    .into_iter()
                    .map(|(key, value, source)| vec![key, value, source.to_string()])
                    .collect();
                print_table(&["KEY", "VALUE", "SOURCE"], &table);
            }
        }
    }
    Ok(exit::OK)
}

/// Live output to the terminal: the command's stdout to ours, its stderr to ours.
struct Terminal;

impl OutputSink for Terminal {
    fn write(&mut self, stream: StreamKind, bytes: &[u8]) {
        let _ = match stream {
            StreamKind::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(bytes).and_then(|()| out.flush())
            }
            StreamKind::Stderr => std::io::stderr().lock().write_all(bytes),
        };
    }
}

/// paddock's own word on how a command ended, on stderr, when it was not a plain exit.
fn explain_result(result: &crate::runtime::ExecResult) {
    if result.timed_out {
        eprintln!(
            "paddock: the command timed out after {}ms and was killed",
            result.duration_ms
        );
    }
    if result.oom_killed {
        eprintln!("paddock: the command was killed for running out of memory");
    }
    if result.truncated {
        eprintln!(
            "paddock: the output kept in the result was cut in the middle (cap 1 MiB per stream)"
        );
    }
}

/// The exit code of `exec`/`run`: the command's own, or 124 when it timed out.
fn command_exit_code(result: &crate::runtime::ExecResult) -> i32 {
    if result.timed_out {
        exit::TIMED_OUT
    } else {
        i32::try_from(result.exit_code.clamp(0, 255)).unwrap_or(exit::INTERNAL)
    }
}

/// Prints the job's output log; with `follow`, keeps printing new output until the job is
/// removed.
async fn follow_log(
    paddock: &Paddock,
    job: &str,
    path: &std::path::Path,
    follow: bool,
) -> Result<(), Error> {
    use std::io::{Read, Seek, SeekFrom};
    let mut offset = 0u64;
    loop {
        if let Ok(mut file) = std::fs::File::open(path) {
            let mut text = Vec::new();
            if file.seek(SeekFrom::Start(offset)).is_ok() && file.read_to_end(&mut text).is_ok() {
                offset += text.len() as u64;
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&text).and_then(|()| out.flush());
            }
        }
        if !follow {
            return Ok(());
        }
        if paddock.load(job).is_err() {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

fn create_request(args: CreateArgs) -> CreateRequest {
    CreateRequest {
        repo: args.repo,
        base: args.base,
        agent: args.agent,
        task: args.task,
        id: args.id,
        profile: args.profile,
        reuse_branch: args.reuse_branch,
        overrides: args.limits.layer(),
    }
}

fn print_json<T: Serialize + ?Sized>(value: &T) {
    let text = serde_json::to_string_pretty(value).expect("paddock's output types serialize");
    println!("{text}");
}

/// Prints rows as aligned columns.
pub fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut out = std::io::stdout().lock();
    let line = |cells: Vec<&str>| {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        text
    };
    let _ = writeln!(out, "{}", line(headers.to_vec()));
    for row in rows {
        let _ = writeln!(out, "{}", line(row.iter().map(String::as_str).collect()));
    }
}

fn print_job_table(views: &[JobView]) {
    if views.is_empty() {
        println!("no jobs");
        return;
    }
    let now = chrono::Utc::now();
    let rows: Vec<Vec<String>> = views
        .iter()
        .map(|v| {
            vec![
                v.id.to_string(),
                v.state.to_string(),
                v.runtime.clone(),
                format_age(now - v.created_at),
                format_age(now - v.last_activity_at),
                v.branch.clone(),
            ]
        })
        .collect();
    print_table(&["ID", "STATE", "RUNTIME", "AGE", "IDLE", "BRANCH"], &rows);
}

fn print_details(details: &crate::engine::JobDetails) {
    let v = &details.view;
    let now = chrono::Utc::now();
    println!("job       {}", v.id);
    println!(
        "state     {} (created {} ago, last active {} ago)",
        v.state,
        format_age(now - v.created_at),
        format_age(now - v.last_activity_at)
    );
    if let Some(code) = v.exit_code {
        println!(
            "exit      {code}{}",
            if v.oom_killed {
                " (killed: out of memory)"
            } else {
                ""
            }
        );
    }
    println!("repo      {}", v.repo.display());
    println!(
        "branch    {} (base {} @ {})",
        v.branch,
        v.base,
        &v.base_commit[..v.base_commit.len().min(10)]
    );
    println!("worktree  {}", v.worktree.display());
    println!("profile   {}", v.profile);
    println!("runtime   {}", details.isolation);
    if let Some(id) = &v.container_id {
        println!("container {}", &id[..id.len().min(12)]);
    }
    match (&details.changes, &details.changes_error) {
        (Some(changes), _) => {
            println!(
                "commits   {} ahead of base; {} file(s) committed, {} uncommitted (+{} -{})",
                changes.commits_ahead,
                changes.committed.len(),
                changes.uncommitted.len(),
                changes.insertions,
                changes.deletions
            );
            for change in &changes.committed {
                println!("  committed    {:<10} {}", change.status, change.path);
            }
            for change in &changes.uncommitted {
                println!("  uncommitted  {:<10} {}", change.status, change.path);
            }
        }
        (None, Some(error)) => println!("changes   unavailable: {error}"),
        (None, None) => {}
    }
}

/// The exit code for an error, and a hint when the user can act on it.
/// Prints an error with its causes and hint; returns the exit code.
fn report(error: &Error, exec_like: bool) -> i32 {
    let (code, hint) = (exit::of(error.kind()), error.hint());
    let mut message = format!("error: {error}");
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(&format!(": {text}"));
        }
        source = cause.source();
    }
    eprintln!("{message}");
    if let Some(hint) = hint {
        eprintln!("hint: {hint}");
    }
    if exec_like { exit::EXEC_FAILED } else { code }
}
