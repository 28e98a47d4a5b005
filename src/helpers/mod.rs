//! The binary's helper lives: the programs paddock runs of itself beside, around or inside a
//! job, never typed by a user (hidden from `--help`). Each is one file here, and `main`
//! hands a command line to [`run`] when its first word names one ([`parse`]), before the
//! CLI sees it, so none of them goes through the CLI's install, daemon or output path:
//!
//! | helper | run by | file |
//! |---|---|---|
//! | `egress-proxy` | a job's sidecar container (its proxy and port relays) | `egress_proxy.rs` |
//! | `egress-load` | an exec in a remote engine's sidecar (the secrets, from stdin) | `egress_load.rs` |
//! | `guard-ranges` | a short-lived container, or the remote engine's guard | `guard_ranges.rs` |
//! | `port-bridge` | a remote job's relay container on its engine | `port_bridge.rs` |
//! | `port-relay` | paddock, detached, for a remote job's ports on this host | `port_relay.rs` |
//! | `exec-server` | a Docker or gVisor job container's main process (issue 46) | `exec_server.rs` |
//! | `root-caps` | a privileged exec as root in a gVisor job with its own root | `root_caps.rs` |
//! | `no-caps` | every Docker exec in a container that runs the exec server | `root_caps.rs` |
//! | `guest-agent` | a microVM's init, inside the VM | `runtime/microvm/guest.rs` |
//! | `vm-shell` | `paddock shell` of a microVM job | `runtime/microvm/shell.rs` |
//! | `vm-virtiofsd` | paddock as root, for a microVM's writable share | `runtime/microvm/jail.rs` |
//!
//! Only `port-relay` opens the install (it serves a job of it); the others need none. A
//! failure is one `error:` line on stderr and the exit code of its kind (`cli::exit`, the
//! one table of exit codes).

mod egress_load;
mod egress_proxy;
pub mod exec_server;
mod guard_ranges;
mod port_bridge;
mod port_relay;
mod root_caps;

use std::ffi::OsString;
use std::io::Write as _;

use clap::{Parser, Subcommand};

use crate::cli::exit;
use crate::error::Error;

/// A helper's command line: `paddock HELPER ARGS`.
#[derive(Debug, Parser)]
#[command(name = "paddock")]
pub struct HelperLine {
    /// Log what the helper does to stderr (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    helper: Helper,
}

#[derive(Debug, Subcommand)]
enum Helper {
    /// The egress proxy of an allowlist job (run by its sidecar container).
    EgressProxy(egress_proxy::EgressProxyArgs),
    /// Hand a job's secrets from stdin to its proxy (run in a remote engine's sidecar).
    EgressLoad(egress_load::EgressLoadArgs),
    /// Add the job range's unreachable route (run by a short-lived container).
    GuardRanges,
    /// Bridge stdio with a job's port (run in a remote job's relay container).
    PortBridge(port_bridge::PortBridgeArgs),
    /// Serve a remote job's ports on this host's loopback (started by paddock, detached).
    PortRelay(port_relay::PortRelayArgs),
    /// The resident exec server of a job container (its main process).
    ExecServer,
    /// Keep root's few capabilities, then exec the command (a gVisor job's root exec).
    RootCaps {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        argv: Vec<std::ffi::OsString>,
    },
    /// Keep no capability, then exec the command (every Docker exec in an exec server's
    /// container).
    NoCaps {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
        argv: Vec<std::ffi::OsString>,
    },
    /// The guest agent of a microVM job (run by the VM's init, inside the VM).
    GuestAgent,
    /// A shell in a microVM job over its agent's channel (run by `paddock shell`).
    VmShell(crate::runtime::microvm::shell::ShellArgs),
    /// virtiofsd for a microVM's writable share, in a user namespace (run by paddock as
    /// root, before any async runtime: a user namespace needs a process of one thread).
    VmVirtiofsd(crate::runtime::microvm::jail::JailArgs),
}

/// The helpers' names, as their command lines start.
const NAMES: &[&str] = &[
    "egress-proxy",
    "egress-load",
    "guard-ranges",
    "port-bridge",
    "port-relay",
    "exec-server",
    "root-caps",
    "no-caps",
    "guest-agent",
    "vm-shell",
    "vm-virtiofsd",
];

/// The helper a command line runs, when its first word (after global flags) names one;
/// `None` hands the line to the CLI. A helper's bad arguments end the process as clap's
/// usage errors do.
pub fn parse(args: &[OsString]) -> Option<HelperLine> {
    let first = args
        .iter()
        .skip(1)
        .find(|arg| !arg.to_string_lossy().starts_with('-'))?;
    NAMES
        .contains(&first.to_string_lossy().as_ref())
        .then(|| HelperLine::parse_from(args))
}

/// Runs a helper to its end; its exit code.
pub fn run(line: HelperLine) -> i32 {
    // The jail makes a user namespace, which needs a process of one thread: before any
    // async runtime starts.
    if let Helper::VmVirtiofsd(args) = &line.helper {
        return crate::runtime::microvm::jail::run(args);
    }
    // Blocking std code, and no more of the binary's machinery than it needs.
    if let Helper::ExecServer = &line.helper {
        return exec_server::serve();
    }
    // Privileged until it has dropped: nothing more of the binary runs first.
    if let Helper::RootCaps { argv } = &line.helper {
        return root_caps::run(argv);
    }
    if let Helper::NoCaps { argv } = &line.helper {
        return root_caps::run_without(argv);
    }
    let runtime = match crate::async_runtime() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: failed to start the async runtime: {error}");
            return exit::INTERNAL;
        }
    };
    let code = runtime.block_on(run_async(line.helper));
    runtime.shutdown_background();
    code
}

async fn run_async(helper: Helper) -> i32 {
    let outcome = match helper {
        Helper::EgressProxy(args) => egress_proxy::run(args).await,
        Helper::EgressLoad(args) => egress_load::run(args).await,
        Helper::GuardRanges => guard_ranges::run(),
        Helper::PortBridge(args) => port_bridge::run(&args),
        Helper::PortRelay(args) => port_relay::run(args).await,
        // Inside a microVM there is no install: the agent serves the host's channel.
        Helper::GuestAgent => {
            return tokio::task::spawn_blocking(crate::runtime::microvm::guest::serve)
                .await
                .unwrap_or(exit::INTERNAL);
        }
        Helper::VmShell(args) => return crate::runtime::microvm::shell::attach(args).await,
        Helper::ExecServer => return exec_server::serve(),
        Helper::RootCaps { argv } => return root_caps::run(&argv),
        Helper::NoCaps { argv } => return root_caps::run_without(&argv),
        Helper::VmVirtiofsd(args) => return crate::runtime::microvm::jail::run(&args),
    };
    outcome.unwrap_or_else(|error| report(&error))
}

/// A helper's failure: one line on stderr (with its causes, shown safely) and the exit code
/// of its kind.
fn report(error: &Error) -> i32 {
    let message = format!("error: {}", error.with_causes());
    eprintln!("{}", crate::text::block(&message));
    exit::of(error.kind())
}

/// A helper's answer on stdout: one line (a closed pipe is not the helper's failure).
fn print_line(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// clap's parser of a job-id argument: the one id rule.
fn job_id(raw: &str) -> Result<String, String> {
    crate::job::JobId::parse(raw)
        .map(String::from)
        .map_err(|error| error.to_string())
}
