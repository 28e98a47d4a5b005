//! Port relays of the sidecar: each accepts on one of the sidecar's ports (which Docker
//! publishes on the host's loopback) and forwards every connection to a port of the job
//! on its sealed network, moving bytes with the proxy's in-kernel tunnel. A relay makes
//! no decision: it only ever connects to the one address it was started with.

use std::net::SocketAddr;
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

/// Accepts connections until the listener fails, forwarding each to `target` on its own
/// task. A connection the job refuses (nothing listens yet) is closed at once.
pub async fn serve_relay(listener: TcpListener, target: SocketAddr) -> std::io::Result<()> {
    loop {
        let (client, _) = listener.accept().await?;
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
        tokio::spawn(serve_relay(relay, target));
        let mut client = TcpStream::connect(relay_address).await.unwrap();
        client.write_all(b"ping").await.unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).await.unwrap();
        assert_eq!(answer, "pong");
    }
}
