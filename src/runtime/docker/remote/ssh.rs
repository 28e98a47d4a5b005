//! Engines reached over ssh (`host: ssh://USER@HOST[:PORT]`), as the Docker CLI reaches
//! them: every connection to the engine is one `ssh … docker system dial-stdio` on the
//! remote machine, which speaks the engine's API on its stdin and stdout. The client talks
//! to a Unix socket of this process that relays each accepted connection through such an
//! `ssh` (the engine's socket on the remote machine is never exposed on the network).
//!
//! `ssh` runs with the user's own configuration and agent (`~/.ssh/config`, known hosts,
//! `SSH_AUTH_SOCK`), in batch mode (never a prompt: a missing key or an unknown host key
//! fails the connection with ssh's message), so paddock holds no key of its own. The relay
//! socket lives in a directory of mode 0700 made for this process, so no other user of this
//! machine can borrow the connection. It lasts as long as the process.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};

use tokio::net::UnixListener;

use crate::engines::ssh::{SshTarget, parse};
use crate::runtime::RuntimeError;

/// How long ssh may take to connect before the relay gives up on a connection.
const CONNECT_TIMEOUT_SECS: u32 = 10;

/// The `ssh` command that opens one connection to the engine on `target`, with the
/// entry's `ssh_options`.
fn ssh_command(target: &SshTarget, options: &[String]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new("ssh");
    command
        .args(["-o", "BatchMode=yes"])
        .arg("-o")
        .arg(format!("ConnectTimeout={CONNECT_TIMEOUT_SECS}"))
        // No terminal, no forwarded agent or display: the stream carries the API only.
        .args(["-T", "-a", "-x"]);
    for option in options {
        command.arg("-o").arg(option);
    }
    if let Some(port) = target.port {
        command.arg("-p").arg(port.to_string());
    }
    command
        .arg("--")
        .arg(&target.destination)
        .args(["docker", "system", "dial-stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// The relay socket for `host` (with `options` for ssh) in this process, started on first
/// use.
pub fn relay_socket(host: &str, options: &[String]) -> Result<PathBuf, RuntimeError> {
    static RELAYS: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let unavailable = |message: String| RuntimeError::DockerUnavailable { message };
    let target = parse(host).map_err(unavailable)?;
    let options = options.to_vec();
    let relays = RELAYS.get_or_init(Default::default);
    let mut relays = relays.lock().expect("the relay map is never poisoned");
    let key = format!("{host} {options:?}");
    if let Some(path) = relays.get(&key) {
        return Ok(path.clone());
    }
    let dir =
        private_dir().map_err(|e| unavailable(format!("a directory for the ssh relay: {e}")))?;
    let path = dir.join(format!("engine-{}.sock", relays.len()));
    let listener = std::os::unix::net::UnixListener::bind(&path)
        .map_err(|e| unavailable(format!("{}: {e}", path.display())))?;
    listener
        .set_nonblocking(true)
        .map_err(|e| unavailable(e.to_string()))?;
    // A thread and a runtime of the relay's own: it outlives whichever runtime asked first.
    std::thread::Builder::new()
        .name("paddock-ssh-relay".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the ssh relay");
            runtime.block_on(async move {
                if let Ok(listener) = UnixListener::from_std(listener) {
                    relay(listener, target, options).await;
                }
            });
        })
        .map_err(|e| unavailable(format!("the ssh relay: {e}")))?;
    relays.insert(key, path.clone());
    Ok(path)
}

/// A directory of mode 0700, this process's own, for relay sockets.
fn private_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt as _;
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    if let Some(dir) = DIR.get() {
        return Ok(dir.clone());
    }
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|dir| dir.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let dir = base.join(format!(
        "paddock-ssh-{}-{}",
        std::process::id(),
        crate::ids::random_hex(6)
    ));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(DIR.get_or_init(|| dir).clone())
}

/// Relays every connection to `listener` through its own `ssh … dial-stdio`.
async fn relay(listener: UnixListener, target: SshTarget, options: Vec<String>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors, say: try again shortly rather than spin.
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        };
        let (target, options) = (target.clone(), options.clone());
        tokio::spawn(async move {
            let Ok(mut child) = ssh_command(&target, &options).spawn() else {
                return;
            };
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                return;
            };
            // What ssh says (a refused key, an unknown host) is the only clue a user gets
            // when the engine does not answer: keep its first lines for the log.
            let said = child.stderr.take().map(|stderr| {
                tokio::spawn(async move {
                    use tokio::io::AsyncReadExt as _;
                    let mut text = Vec::new();
                    let _ = stderr.take(4096).read_to_end(&mut text).await;
                    String::from_utf8_lossy(&text).into_owned()
                })
            });
            let (mut from_client, mut to_client) = stream.into_split();
            let (mut to_ssh, mut from_ssh) = (stdin, stdout);
            let up = async {
                let _ = tokio::io::copy(&mut from_client, &mut to_ssh).await;
                // The client is done sending: the remote side sees the end, and its answer
                // may still come.
                drop(to_ssh);
                std::future::pending::<()>().await;
            };
            let down = tokio::io::copy(&mut from_ssh, &mut to_client);
            // Once ssh is gone (or stops sending), the client's connection closes too, so
            // it never waits on a dead link.
            tokio::select! {
                _ = down => {}
                () = up => {}
            }
            let failed = match child.try_wait() {
                Ok(Some(status)) => !status.success(),
                _ => false,
            };
            let _ = child.kill().await;
            if let (true, Some(said)) = (failed, said)
                && let Ok(said) = said.await
                && !said.trim().is_empty()
            {
                tracing::warn!(
                    "ssh to `{}` failed: {}",
                    target.destination,
                    crate::text::line(said.trim())
                );
            }
        });
    }
}
