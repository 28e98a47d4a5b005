//! The stdio bridge of a remote job's ports (`paddock port-bridge PORT`, hidden): run by an
//! exec in the job's relay container on its engine (which shares the job's network
//! namespace), it connects to `127.0.0.1:PORT` there and moves bytes between its stdin and
//! stdout and that connection, each way on its own, so a half-close passes through: the end
//! of stdin shuts the connection's write side (the server still answers), the server's end
//! of stream closes stdout (the host's relay then ends its client's write side).
//!
//! Invariant: the target is the argument the host gave the exec; nothing that comes through
//! the bridge chooses where it connects. It runs with std threads (blocking I/O, no
//! runtime), so a bridge costs a process and two threads for the length of one connection.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

/// How long the bridge waits for the job to accept its connection.
const CONNECT_DEADLINE: Duration = Duration::from_secs(10);

/// Connects to `127.0.0.1:port` and bridges stdin/stdout with it until both ways ended.
pub fn run(port: u16) -> std::io::Result<()> {
    let target = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let socket = TcpStream::connect_timeout(&target, CONNECT_DEADLINE)?;
    socket.set_nodelay(true)?;
    bridge(std::io::stdin(), std::io::stdout(), socket, close_output)
}

/// Moves `input` to `socket` (then shuts the socket's write side) and `socket` to `output`
/// (then drops `output` and calls `output_ended`, which closes it for good), each way on its
/// own thread; returns once both ended.
pub fn bridge(
    input: impl Read + Send + 'static,
    output: impl Write + Send + 'static,
    socket: TcpStream,
    output_ended: impl FnOnce(),
) -> std::io::Result<()> {
    let mut to_socket = socket.try_clone()?;
    let upstream = std::thread::spawn(move || {
        let mut input = input;
        let copied = std::io::copy(&mut input, &mut to_socket);
        // The client's end of stream, passed on: the server may still answer.
        let _ = to_socket.shutdown(Shutdown::Write);
        copied.map(drop)
    });
    let mut from_socket = socket;
    let mut output = output;
    let copied = copy_flushing(&mut from_socket, &mut output);
    // The server's end of stream: closing our output ends the host's read of it.
    drop(output);
    output_ended();
    let _ = from_socket.shutdown(Shutdown::Read);
    let up = upstream
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the upstream thread panicked")));
    copied.and(up)
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

/// Points the process's stdout and stderr at `/dev/null`, closing the exec's output pipes,
/// so the engine sees the end of its output while its stdin may still be read (std's
/// `Stdout` never closes fd 1).
fn close_output() {
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = rustix::stdio::dup2_stdout(&null);
        let _ = rustix::stdio::dup2_stderr(&null);
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
        let ended = std::sync::atomic::AtomicBool::new(false);
        bridge(input, Sink(sink), socket, || {
            ended.store(true, std::sync::atomic::Ordering::SeqCst);
        })
        .unwrap();
        assert!(ended.into_inner());
        server.join().unwrap();
        let answer: Vec<u8> = answer.into_iter().flatten().collect();
        assert_eq!(answer, b"got 100000 bytes");
    }
}
