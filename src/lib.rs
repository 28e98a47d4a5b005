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
pub use error::{Error, ErrorKind, Result};
