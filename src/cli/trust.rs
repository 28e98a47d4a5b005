//! `paddock trust REPO`: lets a repository's `.paddock.yaml` widen its jobs (by default it
//! may only narrow them; see `config::trust`), by adding the repository's root to `trust:`
//! in the user's config file. Only the user's own file can do this, never a repository's.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use super::exit;
use super::render::print_json;
use crate::Paddock;
use crate::error::Result;

#[derive(Debug, Args)]
pub struct TrustArgs {
    /// The repository to trust (default: the one around the current directory).
    #[arg(default_value = ".")]
    repo: PathBuf,
    #[arg(long)]
    json: bool,
}

/// `trust --json`.
#[derive(Serialize)]
struct Trusted {
    repo: PathBuf,
    user_file: PathBuf,
    /// Whether this call added it (false: it was trusted already).
    added: bool,
}

pub async fn run(paddock: &Paddock, args: TrustArgs) -> Result<i32> {
    let repo = crate::git::GitRepo::open(&args.repo, &paddock.home().locks_dir()).await?;
    let Some((user_file, _)) = crate::config::user_config_path(&crate::env::ProcessEnv) else {
        return Err(crate::config::ConfigError::Value {
            origin: "environment".into(),
            key: "HOME".into(),
            message: "no user config file: set HOME, XDG_CONFIG_HOME or PADDOCK_CONFIG".into(),
        }
        .into());
    };
    let root = std::fs::canonicalize(&repo.root).unwrap_or(repo.root.clone());
    let added = crate::config::add_trust(&user_file, &root.to_string_lossy())?;
    if args.json {
        print_json(&Trusted {
            repo: root,
            user_file,
            added,
        });
    } else if added {
        say!(
            "trusted {}: its .paddock.yaml now applies in full (written to {})",
            root.display(),
            user_file.display()
        );
    } else {
        say!(
            "{} is trusted already ({})",
            root.display(),
            user_file.display()
        );
    }
    Ok(exit::OK)
}
