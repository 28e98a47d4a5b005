//! The `paddock` binary: parse the command line, set up logging, run the command on the
//! library's engine and exit with the code the CLI layer chose.

use clap::Parser;
use paddock::cli::{self, Cli};

fn main() {
    let cli = Cli::parse();
    let filter = match cli.verbose {
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
    // The jail of a microVM's virtiofsd makes a user namespace, which needs a process of
    // one thread: before the async runtime starts any.
    if let Some(code) = cli.run_single_threaded() {
        std::process::exit(code);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
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
