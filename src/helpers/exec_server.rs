//! `exec-server`: the resident exec server of a Docker or gVisor job (issue 46), run as the
//! job container's main process under Docker's init. It reads the host's orders as lines of
//! JSON ([`ToGuest`], one per line) on stdin, which only Docker's attach stream (the
//! engine's API: the host side) writes, and answers with [`FromGuest`] lines on stdout.
//!
//! Invariants:
//! - It starts as root with only `SETUID`, `SETGID`, `SETPCAP` and `KILL` (the container's
//!   capability set) and at once becomes a uid and gid of its own
//!   ([`EXEC_SERVER_ID`], which no exec may name), keeping those four and not dumpable, so
//!   no process of the job, root's under gVisor included, can signal, trace or write to
//!   it; everything it starts drops every capability and supplementary group and becomes
//!   the exec's `uid:gid` before it execs ([`crate::sys::become_user_on_exec`]).
//! - Its binary, loader and libraries are the host's, mounted read-only; it checks at start
//!   that nothing else was mapped into it (an image's `/etc/ld.so.preload`, a library found
//!   in the image). If something was, it answers every exec with `Failed`, and the host
//!   uses Docker's exec instead: the image's code never runs with a capability.
//! - Output lines are written whole by one writer at a time; every message names its exec,
//!   so several hosts attached at once skip each other's. A host that joins mid-line skips
//!   to the next line. Input lines are at most [`MAX_LINE`] bytes.
//! - Blocking std code with a thread per exec: an exec's life is a handful of threads.

use std::collections::HashMap;
use std::io::{BufRead as _, Read as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use crate::runtime::docker::resident::TOOLS_DIR;
use crate::runtime::microvm::protocol::{FromGuest, MAX_LINE, Parts, ToGuest, decode, encode_line};
use crate::wire::EXEC_SERVER_ID;

type Out = Arc<Mutex<std::io::Stdout>>;
/// Running execs: their process group, and their stdin's queue when they take input.
type Running = Arc<Mutex<HashMap<u64, Exec>>>;

struct Exec {
    pgid: i32,
    stdin: Option<std::sync::mpsc::Sender<Vec<u8>>>,
}

/// Serves stdin until it closes (the container is being removed); the exit code.
pub fn serve() -> i32 {
    let mut foreign = foreign_mappings()
        .map(|path| format!("the exec server loaded `{path}`, which is not paddock's"));
    // Before any thread: the ids change for the whole process.
    if foreign.is_none()
        && let Err(error) = become_server()
    {
        foreign = Some(format!("the exec server could not leave root: {error}"));
    }
    if let Some(why) = &foreign {
        eprintln!("paddock exec server: {why}: serving no exec");
    }
    let out: Out = Arc::new(Mutex::new(std::io::stdout()));
    let running: Running = Arc::default();
    // The commands' environment: the container's, as Docker's exec gives it.
    let base: Vec<(String, String)> = std::env::vars().collect();
    let mut input = std::io::stdin().lock();
    let mut line = Vec::with_capacity(MAX_LINE);
    let mut parts = Parts::default();
    loop {
        line.clear();
        match (&mut input)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return 0,
            Ok(_) => {}
        }
        if line.last() != Some(&b'\n') {
            // Over the cap: skip to the end of that line, holding none of it.
            let _ = input.skip_until(b'\n');
            continue;
        }
        let message = match serde_json::from_slice::<ToGuest>(&line[..line.len() - 1]) {
            Ok(ToGuest::Part { id, data, last }) => parts.push(id, &data, last),
            Ok(message) => Some(message),
            Err(_) => None,
        };
        if let Some(message) = message {
            handle(message, &out, &running, &base, foreign.as_deref());
        }
    }
}

fn handle(
    message: ToGuest,
    out: &Out,
    running: &Running,
    base: &[(String, String)],
    foreign: Option<&str>,
) {
    match message {
        ToGuest::Ping { id } => send(
            out,
            &FromGuest::Pong {
                id,
                kernel: String::new(),
            },
        ),
        ToGuest::Exec {
            id,
            argv,
            env,
            workdir,
            uid,
            gid,
            stdin,
            keep_caps: _,
        } => {
            if let Some(why) = foreign {
                let message = why.to_string();
                return send(out, &FromGuest::Failed { id, message });
            }
            if uid == EXEC_SERVER_ID || gid == EXEC_SERVER_ID {
                let message = format!("uid/gid {EXEC_SERVER_ID} is the exec server's own");
                return send(out, &FromGuest::Failed { id, message });
            }
            let mut env_all = base.to_vec();
            env_all.extend(env);
            let spec = Spec {
                argv,
                env: env_all,
                workdir,
                uid,
                gid,
                stdin,
            };
            let (out2, running) = (Arc::clone(out), Arc::clone(running));
            // At the job's pids limit (a fork bomb) there may be no thread to be had: the
            // exec fails, the server goes on.
            let spawned =
                std::thread::Builder::new().spawn(move || run(id, &spec, &out2, &running));
            if let Err(error) = spawned {
                let message = format!("the exec server cannot start a thread: {error}");
                send(out, &FromGuest::Failed { id, message });
            }
        }
        ToGuest::Stdin { id, data } => {
            let bytes = decode(&data);
            let mut running = running.lock().expect("no panics hold the lock");
            if let Some(exec) = running.get_mut(&id) {
                if bytes.is_empty() {
                    exec.stdin = None;
                } else if let Some(queue) = &exec.stdin {
                    let _ = queue.send(bytes);
                }
            }
        }
        ToGuest::Signal { id, signal } => {
            if let Some(exec) = running.lock().expect("no panics hold the lock").get(&id) {
                signal_group(exec.pgid, signal);
            }
        }
        ToGuest::KillAll => {
            for exec in running.lock().expect("no panics hold the lock").values() {
                signal_group(exec.pgid, libc::SIGKILL);
            }
        }
        // A microVM's orders, and a part (joined before this): nothing to do here.
        ToGuest::Shutdown | ToGuest::Mount { .. } | ToGuest::Part { .. } => {}
    }
}

struct Spec {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    workdir: String,
    uid: u32,
    gid: u32,
    stdin: bool,
}

fn run(id: u64, spec: &Spec, out: &Out, running: &Running) {
    let failed = |message: String| send(out, &FromGuest::Failed { id, message });
    let Some((program, args)) = spec.argv.split_first() else {
        return failed("empty command".into());
    };
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&spec.workdir)
        .stdin(if spec.stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    crate::sys::become_user_on_exec(&mut command, spec.uid, spec.gid);
    // From the server's uid (not root's) the change of uid keeps the sets: empty them, so
    // nothing is held even before the exec (which would clear them too).
    crate::sys::hold_no_capabilities_on_exec(&mut command);
    let oom_before = oom_kills();
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => return failed(format!("cannot start `{program}`: {error}")),
    };
    let pgid = child.id().cast_signed();
    let stdin = child.stdin.take().map(stdin_writer);
    running
        .lock()
        .expect("no panics hold the lock")
        .insert(id, Exec { pgid, stdin });
    send(out, &FromGuest::Started { id });
    let pumps: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| (false, Box::new(s) as Box<dyn std::io::Read + Send>)),
        child
            .stderr
            .take()
            .map(|s| (true, Box::new(s) as Box<dyn std::io::Read + Send>)),
    ]
    .into_iter()
    .flatten()
    .map(|(stderr, mut stream)| {
        let out = Arc::clone(out);
        std::thread::Builder::new().spawn(move || {
            // Small chunks: each line stays far below any reader's cap.
            let mut buffer = vec![0u8; 16 * 1024];
            loop {
                match stream.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => send(&out, &FromGuest::output(id, stderr, &buffer[..n])),
                }
            }
        })
    })
    .collect();
    let status = child.wait();
    for pump in pumps.into_iter().flatten() {
        let _ = pump.join();
    }
    running.lock().expect("no panics hold the lock").remove(&id);
    let code = match status {
        Ok(status) => {
            use std::os::unix::process::ExitStatusExt as _;
            status
                .code()
                .map_or_else(|| 128 + i64::from(status.signal().unwrap_or(9)), i64::from)
        }
        Err(_) => 137,
    };
    let oom_killed = oom_kills() > oom_before;
    send(
        out,
        &FromGuest::Exit {
            id,
            code,
            oom_killed,
        },
    );
}

/// Leaves root for [`EXEC_SERVER_ID`], keeping the capabilities the container gave (the
/// four the server needs to become an exec's user and to signal its commands), and makes
/// the process not dumpable: no other uid may trace it or open its `/proc` files.
fn become_server() -> std::io::Result<()> {
    use rustix::thread::{CapabilitySets, capabilities, set_capabilities, set_keep_capabilities};
    let held = capabilities(None)?.permitted;
    set_keep_capabilities(true)?;
    crate::sys::set_all_ids(EXEC_SERVER_ID)?;
    set_capabilities(
        None,
        CapabilitySets {
            effective: held,
            permitted: held,
            inheritable: rustix::thread::CapabilitySet::empty(),
        },
    )?;
    set_keep_capabilities(false)?;
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)?;
    Ok(())
}

/// Writes what comes for a command's stdin until the queue closes (the input's end) or the
/// command stops reading; then closes its stdin.
fn stdin_writer(mut stdin: std::process::ChildStdin) -> std::sync::mpsc::Sender<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    // Without a thread the command's stdin closes at once (the queue's sends fail).
    let _ = std::thread::Builder::new().spawn(move || {
        for chunk in rx {
            if stdin.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    tx
}

/// The container cgroup's OOM-kill counter (cgroup v1 `memory.oom_control`, v2
/// `memory.events`), 0 when unreadable.
fn oom_kills() -> u64 {
    [
        "/sys/fs/cgroup/memory/memory.oom_control",
        "/sys/fs/cgroup/memory.events",
    ]
    .iter()
    .find_map(|path| std::fs::read_to_string(path).ok())
    .unwrap_or_default()
    .lines()
    .find_map(|line| line.strip_prefix("oom_kill "))
    .and_then(|count| count.trim().parse().ok())
    .unwrap_or(0)
}

fn send(out: &Out, message: &FromGuest) {
    let line = encode_line(message);
    let mut out = out.lock().expect("no panics hold the lock");
    // A write fails only when nobody reads (the container is going); nothing to tell.
    let _ = out.write_all(&line);
    let _ = out.flush();
}

fn signal_group(pgid: i32, signal: i32) {
    if let (Some(pgid), Some(signal)) = (
        rustix::process::Pid::from_raw(pgid).filter(|p| p.as_raw_pid() > 1),
        rustix::process::Signal::from_named_raw(signal),
    ) {
        let _ = rustix::process::kill_process_group(pgid, signal);
    }
}

/// A file mapped into this process from outside [`TOOLS_DIR`] (a library of the image), if
/// any; `None` also where the map cannot be read while the server runs from elsewhere (a
/// test of the server itself on the host).
fn foreign_mappings() -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    foreign_in(&maps, TOOLS_DIR)
}

/// The first file of `maps` (a `/proc/PID/maps` text) that is not under `dir`.
pub(super) fn foreign_in(maps: &str, dir: &str) -> Option<String> {
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        // Anonymous memory the kernel names as files (`/dev/zero`, `/memfd:...`).
        .filter(|path| {
            path.starts_with('/') && !path.starts_with("/dev/") && !path.starts_with("/memfd:")
        })
        .find(|path| !path.starts_with(&format!("{dir}/")))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_outside_the_tools_is_foreign() {
        let ours = "7f00-7f01 r-xp 00000000 00:10 5 /.paddock-tools/exec/lib/libc.so.6\n\
                    7f01-7f02 rw-p 00000000 00:00 0 [heap]\n\
                    7f02-7f03 r--p 00000000 00:00 0\n";
        assert_eq!(foreign_in(ours, TOOLS_DIR), None);
        let planted = format!("{ours}7f04-7f05 r-xp 00000000 00:10 6 /usr/lib/evil.so\n");
        assert_eq!(
            foreign_in(&planted, TOOLS_DIR).as_deref(),
            Some("/usr/lib/evil.so")
        );
    }
}
