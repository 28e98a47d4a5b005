//! `paddock dashboard`: asks the running daemon for a loopback listener serving the web
//! dashboard with a one-time sign-in token, prints the URL, and holds the listener open until
//! Ctrl-C (or the daemon stops). On a daemon started with `--listen`, its printed URL works
//! as well, without this command.

use clap::Args;

use super::exit;
use super::render::print_json;
use crate::Paddock;
use crate::client::DaemonClient;
use crate::error::{Error, Result};
use crate::wire::DashboardRequest;

#[derive(Debug, Args)]
pub struct DashboardArgs {
    /// The loopback address to listen on (default: 127.0.0.2 and a free port; not 127.0.0.1,
    /// where jobs' ports are served).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Print `{"address", "url"}` as JSON instead of the URL alone.
    #[arg(long)]
    json: bool,
}

pub async fn run(paddock: &Paddock, args: DashboardArgs) -> Result<i32> {
    let Some(daemon) = DaemonClient::connect(paddock.home()).await else {
        return Err(Error::Serve {
            message: "the dashboard is served by the daemon, and none answers on this install's \
                      socket: start `paddock serve` first"
                .into(),
        });
    };
    let request = DashboardRequest {
        listen: args.listen,
    };
    let json = args.json;
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    daemon
        .dashboard(
            &request,
            |lease| {
                if json {
                    print_json(lease);
                } else {
                    say!("{}", lease.url);
                    tell!(
                        "paddock dashboard: open the URL above (it signs one browser in, once); \
                         Ctrl-C closes the dashboard"
                    );
                }
            },
            ctrl_c,
        )
        .await?;
    Ok(exit::OK)
}
