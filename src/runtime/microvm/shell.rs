//! `paddock shell` in a microVM job: the same channel as exec, with the user's stdin fed to
//! the command and its output written straight to the terminal. On a terminal the guest
//! runs the shell under `script` (util-linux, in every Debian image), which gives it a
//! pseudo-terminal, and the local terminal is put in raw mode until the shell ends; without
//! one the shell reads commands from stdin. Run as the hidden `paddock vm-shell`, which
//! `shell_command` hands the engine, so the engine runs it as it runs `docker exec -it`.

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::exec::connect;
use super::protocol::{FromGuest, ToGuest, decode, encode, read_frame_async};
use super::vm::VmDir;

/// What `vm-shell` needs (all on its command line).
#[derive(Debug, clap::Args)]
pub struct ShellArgs {
    /// The VM's directory (its agent socket and exec lock).
    #[arg(long)]
    pub vm: PathBuf,
    #[arg(long)]
    pub uid: u32,
    #[arg(long)]
    pub gid: u32,
    #[arg(long)]
    pub workdir: String,
    /// KEY=VALUE for the shell's environment (repeatable).
    #[arg(long = "env")]
    pub env: Vec<String>,
}

/// Restores the terminal's settings when the shell ends, however it ends.
struct RawMode(Option<rustix::termios::Termios>);

impl RawMode {
    fn enter() -> RawMode {
        let stdin = std::io::stdin();
        let Ok(saved) = rustix::termios::tcgetattr(&stdin) else {
            return RawMode(None);
        };
        let mut raw = saved.clone();
        raw.make_raw();
        let _ = rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Now, &raw);
        RawMode(Some(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            let _ = rustix::termios::tcsetattr(
                std::io::stdin(),
                rustix::termios::OptionalActions::Now,
                saved,
            );
        }
    }
}

/// Says why the shell could not run (this is the shell's own process: stderr is the user's).
fn failed(why: &dyn std::fmt::Display) -> i32 {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "paddock: the VM's shell: {why}");
    1
}

/// Runs the shell; returns its exit code (1 when the VM could not be reached).
pub async fn attach(args: ShellArgs) -> i32 {
    let vm = VmDir { dir: args.vm };
    let lock_path = vm.exec_lock();
    let locked = tokio::task::spawn_blocking(move || {
        crate::store::FileLock::acquire(&lock_path, Duration::from_secs(600))
    })
    .await
    .expect("locking does not panic");
    let _lock = match locked {
        Ok(lock) => lock,
        Err(error) => return failed(&error),
    };
    let mut channel = match connect(&vm, Duration::from_secs(30)).await {
        Ok(channel) => channel,
        Err(error) => return failed(&error),
    };
    let tty = rustix::termios::isatty(std::io::stdin());
    let argv: Vec<String> = if tty {
        vec!["script", "-qfec", "exec bash -l", "/dev/null"]
    } else {
        vec!["bash", "-s"]
    }
    .into_iter()
    .map(str::to_string)
    .collect();
    let mut env: Vec<(String, String)> = args
        .env
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if let Ok(term) = std::env::var("TERM") {
        env.push(("TERM".into(), term));
    }
    let id = channel.next_id;
    let exec = ToGuest::Exec {
        id,
        argv,
        env,
        workdir: args.workdir,
        uid: args.uid,
        gid: args.gid,
        stdin: true,
        keep_caps: super::guest_root_for_tests(),
    };
    if channel.stream.write_all(&encode(&exec)).await.is_err() {
        return 1;
    }
    let _raw = tty.then(RawMode::enter);
    let (mut from_guest, mut to_guest) = channel.stream.into_split();
    let input = tokio::spawn(async move {
        let mut stdin = tokio::io::stdin();
        let mut buffer = vec![0u8; 4096];
        loop {
            let n = stdin.read(&mut buffer).await.unwrap_or(0);
            let frame = FromGuest::output(id, false, &buffer[..n]);
            let FromGuest::Stdout { data, .. } = frame else {
                unreachable!("output() of stdout is a Stdout frame")
            };
            let sent = to_guest
                .write_all(&encode(&ToGuest::Stdin { id, data }))
                .await;
            if sent.is_err() || n == 0 {
                break;
            }
        }
        // Dropping the write half would shut the socket's sending side, which QEMU takes
        // for the end of the connection: hold it until the shell ends.
        std::future::pending::<()>().await;
        drop(to_guest);
    });
    let mut stdout = tokio::io::stdout();
    let mut stderr = tokio::io::stderr();
    let code = loop {
        match read_frame_async::<FromGuest>(&mut from_guest).await {
            Ok(FromGuest::Stdout { id: got, data }) if got == id => {
                let _ = stdout.write_all(&decode(&data)).await;
                let _ = stdout.flush().await;
            }
            Ok(FromGuest::Stderr { id: got, data }) if got == id => {
                let _ = stderr.write_all(&decode(&data)).await;
                let _ = stderr.flush().await;
            }
            Ok(FromGuest::Exit { id: got, code, .. }) if got == id => {
                break i32::try_from(code).unwrap_or(1);
            }
            Ok(FromGuest::Failed { id: got, message }) if got == id => break failed(&message),
            Ok(_) => {}
            Err(error) => break failed(&error),
        }
    };
    input.abort();
    code
}
