//! The stdio bridge of a remote job's ports (`paddock port-bridge PORT`, hidden): run by an
//! exec in the job's relay container on its engine (which shares the job's network
//! namespace), it connects to `127.0.0.1:PORT` there and moves bytes between its stdin and
//! stdout and that connection, each way on its own, so the client's half-close passes
//! through: the end of stdin shuts the connection's write side and the server still answers.
//! The server's end of stream ends the bridge (the process exits): the engine ends an
//! attached exec's stream only once its stdin ended too or its process exited, so a client
//! waiting for the server's end of stream would otherwise wait forever. A server that
//! half-closes and then still reads is the one case this does not carry.
//!
//! Invariant: the target is the argument the host gave the exec; nothing that comes through
//! the bridge chooses where it connects. It runs with std threads (blocking I/O, no
//! runtime), so a bridge costs a process and two threads for the length of one connection.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

/// How long the bridge waits for the job to accept its connection.
const CONNECT_DEADLINE: Duration = Duration::from_secs(10);

/// Connects to `127.0.0.1:port` and bridges stdin/stdout with it until the server's end of
/// stream (the caller then exits, which ends the exec).
pub fn run(port: u16) -> std::io::Result<()> {
    let target = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let socket = TcpStream::connect_timeout(&target, CONNECT_DEADLINE)?;
    socket.set_nodelay(true)?;
    bridge(std::io::stdin(), std::io::stdout(), socket)
}

/// Moves `input` to `socket` (then shuts the socket's write side) on a thread of its own,
/// and `socket` to `output` until the server's end of stream, when it returns.
pub fn bridge(
    input: impl Read + Send + 'static,
    mut output: impl Write,
    socket: TcpStream,
) -> std::io::Result<()> {
    let mut to_socket = socket.try_clone()?;
    std::thread::spawn(move || {
        let mut input = input;
        let _ = std::io::copy(&mut input, &mut to_socket);
        // The client's end of stream, passed on: the server may still answer.
        let _ = to_socket.shutdown(Shutdown::Write);
    });
    let mut from_socket = socket;
    copy_flushing(&mut from_socket, &mut output)
}

/// Copies `from` to `to`, flushing after each read (a bridge must not sit on bytes).
fn copy_flushing(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<()> {
    let mut buffer = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buffer) {
            Ok(0) => return to.flush(),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buffer[..n])?;
        to.flush()?;
    }
}

/// `paddock port-bridge --hold`: the relay container's own process, which only keeps the
/// container (and so its place in the job's network namespace) alive until it is stopped.
pub fn hold() -> ! {
    loop {
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A server that reads its request to the end (it needs the client's half-close to
    /// know it) before it answers: the bridge must pass the end of input on and still
    /// carry the answer back.
    #[test]
    fn the_bridge_passes_a_half_close_on_and_carries_the_answer_back() {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            conn.read_to_end(&mut request).unwrap();
            conn.write_all(format!("got {} bytes", request.len()).as_bytes())
                .unwrap();
        });
        let socket = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        let (sink, answer) = std::sync::mpsc::channel::<Vec<u8>>();
        struct Sink(std::sync::mpsc::Sender<Vec<u8>>);
        impl Write for Sink {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                let _ = self.0.send(bytes.to_vec());
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let input = std::io::Cursor::new(vec![7u8; 100_000]);
        bridge(input, Sink(sink), socket).unwrap();
        server.join().unwrap();
        let answer: Vec<u8> = answer.into_iter().flatten().collect();
        assert_eq!(answer, b"got 100000 bytes");
    }
}
