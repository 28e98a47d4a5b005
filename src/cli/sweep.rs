//! `paddock sweep`: remove stale jobs and orphans; never loses work.

use clap::Args;

use super::exit;
use super::render::{Progress, print_json, print_sweep};
use crate::Paddock;
use crate::error::Result;
use crate::units::HumanDuration;

/// `--max-age`: a duration or `off`.
#[derive(Debug, Clone, Copy)]
pub struct MaxAge(pub Option<HumanDuration>);

impl std::str::FromStr for MaxAge {
    type Err = crate::units::UnitError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::units::parse_optional_duration(s).map(MaxAge)
    }
}

/// Staleness settings; each overrides the config's `sweep:` section.
#[derive(Debug, Args, Default, Clone)]
pub struct SweepArgs {
    /// Report what would be removed; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// A job with no exec, shell or API use and no file change the daemon saw for this long is
    /// stale (default 1h).
    #[arg(long)]
    pub idle: Option<HumanDuration>,
    /// A finished job is stale this long after it finished (default 1h).
    #[arg(long)]
    pub keep_finished: Option<HumanDuration>,
    /// A job older than this is stale whatever it does; `off` (the default) disables.
    #[arg(long, value_name = "DUR|off")]
    pub max_age: Option<MaxAge>,
    /// keep | delete-if-no-commits | delete-if-merged | delete.
    #[arg(long)]
    pub branch_policy: Option<crate::config::BranchPolicy>,
    /// Also remove jobs whose branch is merged into their base branch (also after a squash
    /// or rebase merge), with their branch; work not in the base is kept.
    #[arg(long)]
    pub merged: bool,
    /// Pretend it is this time (RFC 3339); for tests and what-if runs.
    #[arg(long, hide = true)]
    pub now: Option<chrono::DateTime<chrono::Utc>>,
    #[arg(long)]
    pub json: bool,
}

impl SweepArgs {
    pub fn options(
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
            merged: self.merged || sweep.merged.value,
            index_lock_age: std::time::Duration::from_secs(600),
            pristine_max_age: sweep.pristine_max_age.value.0,
            paused_max_age: sweep.paused_max_age.value.map(|d| d.0),
        }
    }
}

pub async fn run(paddock: &Paddock, args: SweepArgs) -> Result<i32> {
    let config = paddock.config(None)?;
    let progress = Progress::bar(args.json, "jobs");
    let report = paddock
        .sweep_with_progress(&args.options(&config, false), &mut |done, total, job| {
            progress.position(done, total);
            progress.message(job);
        })
        .await;
    progress.finish();
    let report = report?;
    if args.json {
        print_json(&report);
    } else {
        print_sweep(&report);
    }
    if !report.errors.is_empty() {
        return Ok(exit::INTERNAL);
    }
    Ok(exit::OK)
}
