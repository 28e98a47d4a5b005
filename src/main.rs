//! The `paddock` binary: a helper's command line goes to `paddock::helpers`, any other to
//! the CLI; set up logging, run the command on the library's engine and exit with the code
//! the CLI layer (or the helper) chose.

use clap::Parser;
use paddock::cli::{self, Cli};

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // The helpers paddock runs of itself (a sidecar's proxy, a microVM's agent, ...) are
    // dispatched here, apart from the CLI (`paddock::helpers`).
    if let Some(helper) = paddock::helpers::parse(&args) {
        init_logging(helper.verbose);
        std::process::exit(paddock::helpers::run(helper));
    }
    let cli = Cli::parse_from(args);
    init_logging(cli.verbose);
    let runtime = match paddock::async_runtime() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: failed to start the async runtime: {error}");
            std::process::exit(cli::exit::INTERNAL);
        }
    };
    let code = runtime.block_on(cli::run(cli));
    // Dropping the runtime would wait for blocking tasks; the command is done.
    runtime.shutdown_background();
    std::process::exit(code);
}

/// Logs to stderr: warnings, or more with `-v` (`PADDOCK_LOG` overrides).
fn init_logging(verbose: u8) {
    let filter = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PADDOCK_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter)),
        )
        .with_writer(std::io::stderr)
        .init();
}
