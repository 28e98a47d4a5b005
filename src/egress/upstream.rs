//! The proxy's way to an upstream: resolve the name here, check every address against the
//! job's policy, connect to the first allowed one, each step with a deadline. Shared by the
//! plain proxy and the TLS interception of a secret's host.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::net::TcpStream;

use super::policy::{EgressPolicy, Verdict};

/// Deadline for resolving a name and for connecting upstream.
const UPSTREAM_DEADLINE: Duration = Duration::from_secs(10);

/// A refusal with its reason.
pub(super) fn deny(reason: impl Into<String>) -> Verdict {
    Verdict {
        allowed: false,
        reason: reason.into(),
    }
}

/// Resolves `host` here, checks every address, connects to the first allowed one.
pub(super) async fn connect(
    policy: &EgressPolicy,
    host: &str,
    port: u16,
) -> Result<TcpStream, Verdict> {
    let literal = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>();
    let addresses: Vec<SocketAddr> = match literal {
        Ok(addr) => vec![SocketAddr::new(addr, port)],
        Err(_) => {
            match tokio::time::timeout(UPSTREAM_DEADLINE, tokio::net::lookup_host((host, port)))
                .await
            {
                Ok(Ok(found)) => found.collect(),
                Ok(Err(e)) => return Err(deny(format!("cannot resolve {host}: {e}"))),
                Err(_) => return Err(deny(format!("cannot resolve {host}: no answer in time"))),
            }
        }
    };
    let mut refusal = deny(format!("cannot resolve {host}: no addresses"));
    for address in addresses {
        let verdict = policy.check_address(address.ip(), port);
        if !verdict.allowed {
            refusal = verdict;
            continue;
        }
        match tokio::time::timeout(UPSTREAM_DEADLINE, TcpStream::connect(address)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => refusal = deny(format!("cannot connect to {address}: {e}")),
            Err(_) => refusal = deny(format!("cannot connect to {address}: no answer in time")),
        }
    }
    Err(refusal)
}
