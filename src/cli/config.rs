//! `paddock config show`: the effective configuration and where each value came from.

use std::path::PathBuf;

use clap::Subcommand;
use serde::Serialize;

use super::exit;
use super::render::{print_json, print_table};
use crate::Paddock;
use crate::error::Result;

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

/// `config show --json`.
#[derive(Serialize)]
struct Shown {
    user_file: Option<PathBuf>,
    repo_file: Option<PathBuf>,
    home: PathBuf,
    values: Vec<Row>,
}

#[derive(Serialize)]
struct Row {
    key: String,
    value: String,
    source: String,
}

pub async fn run(paddock: &Paddock, command: ConfigCommand) -> Result<i32> {
    let ConfigCommand::Show { repo, json } = command;
    let locks = paddock.home().locks_dir();
    let root = match repo {
        Some(repo) => Some(crate::git::GitRepo::open(&repo, &locks).await?.root),
        None => crate::git::GitRepo::open(std::path::Path::new("."), &locks)
            .await
            .ok()
            .map(|r| r.root),
    };
    let config = paddock.config(root.as_deref())?;
    let rows = config.rows();
    if json {
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
    Ok(exit::OK)
}
