//! Port relays of the sidecar: each accepts on one of the sidecar's ports (which Docker
//! publishes on the host's loopback) and forwards every connection to a port of the job
//! on its sealed network, moving bytes with the proxy's in-kernel tunnel. A relay only ever
//! connects to the one address it was started with, and only for connections from the
//! host: the sidecar also sits on Docker's shared bridge, where any container could reach
//! its ports, so a connection whose peer is not the bridge's gateway (the host's address on
//! it, where Docker's port publishing comes from) is closed at once. Without a default
//! route (no gateway to name) every connection is closed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

use super::tunnel::pipe_one_way;

/// How long a relay waits for the job to accept a connection.
const CONNECT_DEADLINE: Duration = Duration::from_secs(10);

/// `LISTEN_PORT=ADDRESS:PORT`: accept on `LISTEN_PORT`, forward to `ADDRESS:PORT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelaySpec {
    pub listen_port: u16,
    pub target: SocketAddr,
}

impl FromStr for RelaySpec {
    type Err = String;

    fn from_str(text: &str) -> Result<RelaySpec, String> {
        let invalid = || format!("invalid relay `{text}`: use LISTEN_PORT=ADDRESS:PORT");
        let (listen, target) = text.split_once('=').ok_or_else(invalid)?;
        Ok(RelaySpec {
            listen_port: listen.parse().map_err(|_| invalid())?,
            target: target.parse().map_err(|_| invalid())?,
        })
    }
}

/// Accepts connections until the listener fails, forwarding each from `host` (the only peer
/// served) to `target` on its own task. A connection the job refuses (nothing listens yet)
/// is closed at once.
pub async fn serve_relay(
    listener: TcpListener,
    target: SocketAddr,
    host: Option<IpAddr>,
) -> std::io::Result<()> {
    loop {
        let (client, peer) = listener.accept().await?;
        if Some(peer.ip()) != host {
            tracing::warn!(%peer, "refused a relay connection that did not come from the host");
            continue;
        }
        tokio::spawn(async move {
            let Ok(Ok(upstream)) =
                tokio::time::timeout(CONNECT_DEADLINE, TcpStream::connect(target)).await
            else {
                return;
            };
            let _ = client.set_nodelay(true);
            let _ = upstream.set_nodelay(true);
            let _ = tokio::join!(
                pipe_one_way(&client, &upstream),
                pipe_one_way(&upstream, &client)
            );
        });
    }
}

/// The default route's gateway in `/proc/net/route` (the sidecar's: Docker's bridge
/// gateway, the host's address on the bridge).
pub fn default_gateway() -> Option<IpAddr> {
    gateway_in(&std::fs::read_to_string("/proc/net/route").ok()?)
}

/// The gateway of the default route (destination 0, mask 0) in the text of
/// `/proc/net/route`, whose addresses are hexadecimal in the host's byte order.
fn gateway_in(table: &str) -> Option<IpAddr> {
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (destination, gateway, mask) = (fields.get(1)?, fields.get(2)?, fields.get(7)?);
        if *destination != "00000000" || *mask != "00000000" {
            return None;
        }
        let raw = u32::from_str_radix(gateway, 16).ok()?;
        (raw != 0).then(|| IpAddr::V4(Ipv4Addr::from(raw.to_le_bytes())))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn specs_parse_and_refuse_nonsense() {
        let spec: RelaySpec = "41000=198.18.0.83:3000".parse().unwrap();
        assert_eq!(spec.listen_port, 41000);
        assert_eq!(spec.target, "198.18.0.83:3000".parse().unwrap());
        for bad in ["41000", "x=1.2.3.4:5", "41000=host:80", "41000=1.2.3.4"] {
            assert!(bad.parse::<RelaySpec>().is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_relay_carries_both_directions_to_its_target() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = server.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut conn, _) = server.accept().await.unwrap();
            let mut asked = [0u8; 4];
            conn.read_exact(&mut asked).await.unwrap();
            conn.write_all(b"pong").await.unwrap();
        });
        let relay = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay_address = relay.local_addr().unwrap();
        tokio::spawn(serve_relay(
            relay,
            target,
            Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        ));
        let mut client = TcpStream::connect(relay_address).await.unwrap();
        client.write_all(b"ping").await.unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.unwrap();
        assert_eq!(answer, "pong");
    }

    #[tokio::test]
    async fn a_relay_serves_no_peer_but_the_host() {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = server.local_addr().unwrap();
        let relay = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay_address = relay.local_addr().unwrap();
        // The host is some other address: the test's connection comes from 127.0.0.1.
        let host = Some(IpAddr::V4(Ipv4Addr::new(172, 17, 0, 1)));
        tokio::spawn(serve_relay(relay, target, host));
        let mut client = TcpStream::connect(relay_address).await.unwrap();
        let mut answer = Vec::new();
        let _ = client.read_to_end(&mut answer).await;
        assert!(answer.is_empty());
        let accepted = tokio::time::timeout(Duration::from_millis(300), server.accept()).await;
        assert!(accepted.is_err(), "the relay connected for a stranger");
    }

    #[test]
    fn the_default_gateway_is_read_from_the_route_table() {
        let table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
            eth0\t00000000\t010011AC\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
            eth0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n";
        assert_eq!(
            gateway_in(table),
            Some(IpAddr::V4(Ipv4Addr::new(172, 17, 0, 1)))
        );
        assert_eq!(gateway_in("Iface\tDestination\n"), None);
    }
}
