//! `paddock doctor`: machine checks, each with what to do about it.

use clap::Args;

use super::exit;
use super::render::print_json;
use crate::Paddock;
use crate::doctor::Status;
use crate::error::Result;

#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// The repository whose jobs to check for (its config, whether the agent can read its
    /// objects).
    #[arg(long, default_value = ".")]
    repo: std::path::PathBuf,
    #[arg(long)]
    json: bool,
}

pub async fn run(paddock: &Paddock, args: DoctorArgs) -> Result<i32> {
    let repo = crate::git::GitRepo::open(&args.repo, &paddock.home().locks_dir())
        .await
        .ok();
    let config = paddock.config(repo.as_ref().map(|r| r.root.as_path()))?;
    let checks = crate::doctor::run(
        paddock.home(),
        paddock.runtimes(),
        &config,
        repo.as_ref().map(|r| r.common_dir.as_path()),
    )
    .await;
    if args.json {
        print_json(&checks);
    } else {
        for check in &checks {
            let status = match check.status {
                Status::Ok => "ok  ",
                Status::Warn => "warn",
                Status::Fail => "FAIL",
            };
            say!("{status}  {:<16} {}", check.name, check.detail);
            if let Some(fix) = &check.fix {
                say!("      {:<16} fix: {fix}", "");
            }
        }
    }
    if checks.iter().any(|c| c.status == Status::Fail) {
        return Ok(exit::RUNTIME_UNAVAILABLE);
    }
    Ok(exit::OK)
}
