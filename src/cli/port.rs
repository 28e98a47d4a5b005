//! `paddock port`: where a job's ports are served on the host, as `docker port` says it.

use clap::Args;

use super::exit;
use super::render::print_json;
use crate::error::{Error, Result};
use crate::ops::Operations;

#[derive(Debug, Args)]
pub struct PortArgs {
    #[arg(value_parser = super::job_id)]
    job: String,
    /// One port inside the job; prints only its host address.
    port: Option<u16>,
    /// Print `[{"port", "host_ip", "host_port"}]` as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(ops: &impl Operations, args: PortArgs) -> Result<i32> {
    let view = ops.view(&args.job).await?;
    let ports: Vec<_> = match args.port {
        Some(wanted) => {
            let found: Vec<_> = view.ports.iter().filter(|p| p.port == wanted).collect();
            if found.is_empty() {
                return Err(Error::Port {
                    port: wanted,
                    reason: format!(
                        "job `{}` does not serve it (create the job with `--port {wanted}`)",
                        view.id
                    ),
                });
            }
            found
        }
        None => view.ports.iter().collect(),
    };
    if args.json {
        print_json(&ports);
    } else if args.port.is_some() {
        for port in ports {
            say!("{}", port.address());
        }
    } else {
        for port in ports {
            say!("{} -> {}", port.port, port.address());
        }
    }
    Ok(exit::OK)
}
