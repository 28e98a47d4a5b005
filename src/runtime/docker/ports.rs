//! How a job's ports reach the host's loopback, for every network mode:
//! - `open`: the job's container is on Docker's bridge and publishes each port itself
//!   (`127.0.0.1:<host port>` → `<port>`), as `docker run -p 127.0.0.1:…` does;
//! - `allowlist` and `none`: the job is on its sealed network, where Docker publishes
//!   nothing, so its sidecar (on the sealed network and the bridge) publishes a relay port
//!   per job port and forwards each connection to the job's fixed address there
//!   (`paddock egress-proxy --relay`).
//!
//! Either way the job's server must listen on the job's addresses (0.0.0.0), not only on
//! its loopback, as with any published container port.

use std::net::Ipv4Addr;

use bollard::models::{PortBinding, PortMap};

use crate::job::PublishedPort;

/// The sidecar's first relay port; the job's i-th port is relayed on `RELAY_BASE + i`
/// (outside the proxy's 3128 and any port a job asks for being the same as one of them).
pub const RELAY_BASE: u16 = 41000;

/// What a container needs to publish ports: its exposed ports and their host bindings.
#[derive(Default)]
pub struct Published {
    pub exposed_ports: Option<Vec<String>>,
    pub port_bindings: Option<PortMap>,
    /// For the sidecar: its `--relay` arguments.
    pub args: Vec<String>,
}

fn publish(pairs: impl Iterator<Item = (u16, PublishedPort)>) -> Published {
    let mut exposed = Vec::new();
    let mut bindings = PortMap::new();
    for (inside, port) in pairs {
        let key = format!("{inside}/tcp");
        exposed.push(key.clone());
        bindings.insert(
            key,
            Some(vec![PortBinding {
                host_ip: Some(port.host_ip.to_string()),
                host_port: Some(port.host_port.to_string()),
            }]),
        );
    }
    if exposed.is_empty() {
        return Published::default();
    }
    Published {
        exposed_ports: Some(exposed),
        port_bindings: Some(bindings),
        args: Vec::new(),
    }
}

/// An `open` job's own container: each port published as itself.
pub fn job_container(ports: &[PublishedPort]) -> Published {
    publish(ports.iter().map(|p| (p.port, *p)))
}

/// The sidecar of a job on a sealed network whose fixed address is `job`: a relay port per
/// job port, published, and the arguments that relay it. Nothing without an address (a
/// network made before addresses were fixed, which no job with ports has).
pub fn sidecar_relays(ports: &[PublishedPort], job: Option<Ipv4Addr>) -> Published {
    let Some(job) = job else {
        return Published::default();
    };
    let relays = || {
        ports
            .iter()
            .zip(RELAY_BASE..)
            .map(|(port, relay)| (relay, *port))
    };
    let mut published = publish(relays());
    for (relay, port) in relays() {
        published.args.extend([
            "--relay".to_string(),
            format!("{relay}={job}:{}", port.port),
        ]);
    }
    published
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(port: u16, host_port: u16) -> PublishedPort {
        PublishedPort {
            port,
            host_ip: Ipv4Addr::LOCALHOST,
            host_port,
        }
    }

    #[test]
    fn the_sidecar_relays_each_port_to_the_job_s_fixed_address() {
        let ports = [port(3000, 50001), port(8080, 50002)];
        let job = Ipv4Addr::new(198, 18, 0, 83);
        let published = sidecar_relays(&ports, Some(job));
        assert_eq!(
            published.args,
            [
                "--relay",
                "41000=198.18.0.83:3000",
                "--relay",
                "41001=198.18.0.83:8080"
            ]
        );
        let bindings = published.port_bindings.unwrap();
        let binding = bindings["41001/tcp"].as_ref().unwrap();
        assert_eq!(binding[0].host_ip.as_deref(), Some("127.0.0.1"));
        assert_eq!(binding[0].host_port.as_deref(), Some("50002"));
        assert!(sidecar_relays(&ports, None).args.is_empty());
        assert!(sidecar_relays(&[], Some(job)).port_bindings.is_none());
    }

    #[test]
    fn an_open_job_publishes_its_ports_itself() {
        let published = job_container(&[port(3000, 50001)]);
        assert_eq!(published.exposed_ports.unwrap(), ["3000/tcp"]);
        assert!(published.args.is_empty());
    }
}
