//! paddock's integration tests, one binary: each module drives the real `paddock` binary
//! against real temporary git repositories (fixtures/) and, where it says so, the real Docker
//! daemon. Docker tests fail when Docker is absent unless PADDOCK_SKIP_DOCKER_TESTS=1, and
//! then each says it skipped.

#[path = "../../fixtures/mod.rs"]
mod fixtures;

mod admission;
mod api;
mod api_contract;
mod architecture;
mod bounded_reads;
mod browser;
mod cache;
mod checkpoint;
mod core_commands;
mod core_records;
mod dashboard;
mod deep_trees;
mod default_paths;
mod devcontainer;
mod devcontainer_python;
mod disk;
mod disk_caps;
mod docker;
mod docs;
mod egress;
mod engines;
mod events;
mod exec_server;
mod exec_sync;
mod files;
mod flood;
mod git_inside;
mod hostile;
mod hostile_ids;
mod hostile_pristine;
mod hostile_repo;
mod idempotency;
mod import_graph;
mod installs;
mod isolation;
mod job_privacy;
mod jobsetup;
mod mcp;
mod merge;
mod merge_safety;
mod microvm;
mod microvm_harden;
mod microvm_pool;
mod microvm_shell;
mod microvm_user;
mod net_ranges;
mod objview_race;
mod pause;
mod pool;
mod ports;
mod process;
mod push;
mod push_http;
mod push_ssh;
mod python_sdk;
mod secrets;
mod secrets_upstream;
mod setup_network;
mod snapshots;
mod stdin;
mod sweep;
mod terminal;
mod toolchains;
mod truth;
mod users;
