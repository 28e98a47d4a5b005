//! paddock: one git branch, one git worktree and one resource-limited container per
//! coding-agent task, and cleanup when the task is stale.
//!
//! The engine ([`engine::Paddock`]) is the single implementation of every operation; the CLI
//! (`src/main.rs`, [`cli`]) and the daemon are thin layers over it.

pub mod api;
pub mod cache;
pub mod cli;
pub mod client;
pub mod config;
pub mod doctor;
pub mod engine;
pub mod git;
pub mod job;
pub mod runtime;
pub mod serve;
pub mod store;
pub mod sweep;
pub mod units;

pub use engine::{CreateRequest, Error, Paddock, RemoveOptions};
