//! paddock: one git branch, one git worktree and one resource-limited container per
//! coding-agent task, and cleanup when the task is stale.
//!
//! The engine ([`engine::Paddock`]) is the single implementation of every operation; the CLI
//! (`src/main.rs`, [`cli`]) and the daemon are thin layers over it.

pub mod admission;
mod atomic;
pub mod cache;
pub mod cli;
pub mod client;
pub mod config;
pub mod copy_files;
pub(crate) mod daemon;
pub mod devcontainer;
pub mod disk;
pub(crate) mod doctor;
pub mod egress;
pub mod engine;
pub mod engines;
pub mod env;
pub mod error;
pub mod eventlog;
pub(crate) mod git;
pub mod helpers;
pub mod idempotency;
mod ids;
pub mod job;
pub mod mcp;
pub mod ops;
pub mod output;
pub mod overlay;
pub mod place;
pub mod pool;
pub mod runtime;
pub mod secrets;
pub mod store;
pub mod sweep;
mod sys;
pub mod text;
pub mod tree;
pub mod units;
pub mod wire;

pub use engine::{CreateRequest, Paddock, RemoveOptions};

/// The async runtime a paddock process (a command or a helper) runs on: two worker threads,
/// as many as the laptop paddock is sized for has cores, with every driver on.
pub fn async_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}
pub use error::{Error, ErrorKind, Result};
