//! The guest agent: paddock's own binary, run as PID 1 of a microVM after its init has
//! mounted the job's files (`paddock guest-agent`, hidden). It serves the host's commands
//! over the virtio-serial port named [`PORT_NAME`] with the frames of [`super::protocol`].
//!
//! Invariants: every command runs as the job's uid with no capabilities, in its own process
//! group, inside the cgroup `/sys/fs/cgroup/job` that the init gave the job's memory and
//! pids limits, so a memory overrun or a fork bomb stays inside that cgroup and the agent
//! (outside it) keeps answering. As PID 1 the agent reaps every orphan; the exit status of
//! an exec's own process is handed to the thread that waits for it. When the host side
//! disconnects, running commands are killed: nobody is left to read their output.
//! Blocking std code only: this runs in a VM with one small CPU and no reason for an
//! async runtime.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::protocol::{FromGuest, ToGuest, read_frame, write_frame};

/// The virtio-serial port's name (`-device virtserialport,name=...` on the host).
pub const PORT_NAME: &str = "paddock.agent";
/// The job's cgroup inside the guest (made by the init).
const JOB_CGROUP: &str = "/sys/fs/cgroup/job";

type Writer = Arc<Mutex<File>>;

/// Exit statuses the reaper collected, by pid, until the exec that owns the pid takes them.
#[derive(Default)]
struct Reaped {
    statuses: Mutex<HashMap<i32, i32>>,
    changed: Condvar,
}

/// Serves the port until the VM powers off; returns an exit code only when the port never
/// appears.
pub fn serve() -> i32 {
    let Some(port) = find_port(Duration::from_secs(30)) else {
        eprintln!("paddock guest agent: no virtio port named {PORT_NAME}");
        return 1;
    };
    let reaped = Arc::new(Reaped::default());
    let reaper = Arc::clone(&reaped);
    std::thread::spawn(move || reap(&reaper));
    let running: Arc<Mutex<HashMap<u64, i32>>> = Arc::default();
    // The port is opened once for the agent's life: a virtio port opens only once at a
    // time, and a thread still writing an earlier command's output would keep a second
    // open from ever succeeding. While no host is connected, reads return at once with
    // nothing; writes wait for the next host, which skips frames of other exec ids.
    let file = loop {
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&port)
        {
            Ok(file) => break file,
            Err(error) => {
                eprintln!("paddock guest agent: opening {}: {error}", port.display());
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    let writer: Writer = Arc::new(Mutex::new(
        file.try_clone()
            .expect("a port's descriptor can be duplicated"),
    ));
    let mut input = file;
    loop {
        serve_connection(&mut input, &writer, &running, &reaped);
        // The host went away (or never came): kill what it can no longer read, then wait
        // for the next host.
        for (_, pgid) in running.lock().expect("no panics hold the lock").drain() {
            signal_group(pgid, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The stdin of running execs that asked for one, by exec id: bytes (and whether it was
/// closed) that arrived before the command started, then the command's stdin.
type Inputs = Arc<Mutex<HashMap<u64, Input>>>;

enum Input {
    Pending(Vec<u8>, bool),
    /// The queue of the command's stdin writer thread: the connection's loop never blocks
    /// on a command that does not read (it must still take the exec's signals).
    Open(std::sync::mpsc::Sender<Vec<u8>>),
}

/// Writes what comes for a command's stdin, `first` first, until the queue closes (the
/// input's end) or the command stops reading; then closes its stdin.
fn start_stdin_writer(
    mut stdin: std::process::ChildStdin,
    first: Vec<u8>,
) -> std::sync::mpsc::Sender<Vec<u8>> {
    use std::io::Write as _;
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        if stdin.write_all(&first).is_err() {
            return;
        }
        for chunk in rx {
            if stdin.write_all(&chunk).is_err() {
                return;
            }
        }
    });
    tx
}

fn serve_connection(
    input: &mut File,
    writer: &Writer,
    running: &Arc<Mutex<HashMap<u64, i32>>>,
    reaped: &Arc<Reaped>,
) {
    let inputs: Inputs = Arc::default();
    loop {
        let message: ToGuest = match read_frame(input) {
            Ok(message) => message,
            Err(_) => return,
        };
        match message {
            ToGuest::Ping { id } => {
                let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
                    .unwrap_or_default()
                    .trim()
                    .to_string();
                send(writer, &FromGuest::Pong { id, kernel });
            }
            ToGuest::Exec {
                id,
                argv,
                env,
                workdir,
                uid,
                gid,
                stdin,
                keep_caps,
            } => {
                if stdin {
                    inputs
                        .lock()
                        .expect("no panics hold the lock")
                        .insert(id, Input::Pending(Vec::new(), false));
                }
                let (writer, running, reaped, inputs) = (
                    Arc::clone(writer),
                    Arc::clone(running),
                    Arc::clone(reaped),
                    Arc::clone(&inputs),
                );
                std::thread::spawn(move || {
                    let spec = Spec {
                        argv,
                        env,
                        workdir: workdir.into(),
                        uid,
                        gid,
                        stdin,
                        keep_caps,
                    };
                    run(id, &spec, &writer, &running, &reaped, &inputs);
                });
            }
            ToGuest::Stdin { id, data } => {
                let bytes = super::protocol::decode(&data);
                let mut inputs = inputs.lock().expect("no panics hold the lock");
                match inputs.get_mut(&id) {
                    Some(Input::Pending(buffered, closed)) => {
                        buffered.extend_from_slice(&bytes);
                        *closed |= bytes.is_empty();
                    }
                    Some(Input::Open(_)) if bytes.is_empty() => {
                        inputs.remove(&id);
                    }
                    Some(Input::Open(queue)) => {
                        // A command that stopped reading loses what it did not read.
                        let _ = queue.send(bytes);
                    }
                    None => {}
                }
            }
            ToGuest::Signal { id, signal } => {
                if let Some(pgid) = running.lock().expect("no panics hold the lock").get(&id) {
                    signal_group(*pgid, signal);
                }
            }
            ToGuest::KillAll => {
                let _ = std::fs::write(format!("{JOB_CGROUP}/cgroup.kill"), "1");
            }
            ToGuest::Mount { id, tag, mounts } => {
                let answer = match mount_claimed(&tag, &mounts) {
                    Ok(()) => FromGuest::Exit {
                        id,
                        code: 0,
                        oom_killed: false,
                    },
                    Err(message) => FromGuest::Failed { id, message },
                };
                send(writer, &answer);
            }
            // The container transport's pieces: frames carry whole messages.
            ToGuest::Part { .. } => {}
            ToGuest::Shutdown => {
                rustix::fs::sync();
                let _ = rustix::system::reboot(rustix::system::RebootCommand::PowerOff);
            }
        }
    }
}

/// Where a claimed pool slot's share is mounted for the moment its parts are bound.
const POOL_MOUNT: &str = "/.paddock-pool";

/// Mounts a claimed pool slot's share and binds its parts at their places (read-only ones
/// read-only here too; the host made them read-only already), then detaches the share
/// itself, so only the job's places show it. System calls, not `mount` processes: under the
/// emulator each process start costs tens of milliseconds of the claim.
fn mount_claimed(tag: &str, mounts: &[super::protocol::GuestMount]) -> Result<(), String> {
    use rustix::mount::{MountFlags, UnmountFlags, mount, mount_bind, mount_remount, unmount};
    let failed =
        |what: &str, path: &str, error: std::io::Error| format!("{what} `{path}`: {error}");
    std::fs::create_dir_all(POOL_MOUNT).map_err(|e| failed("making", POOL_MOUNT, e))?;
    std::fs::set_permissions(
        POOL_MOUNT,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .map_err(|e| failed("closing", POOL_MOUNT, e))?;
    mount(tag, POOL_MOUNT, "virtiofs", MountFlags::empty(), None)
        .map_err(|e| failed("mounting the pool share at", POOL_MOUNT, e.into()))?;
    for part in mounts {
        let source = format!("{POOL_MOUNT}/{}", part.source);
        std::fs::create_dir_all(&part.target).map_err(|e| failed("making", &part.target, e))?;
        mount_bind(&source, &part.target).map_err(|e| failed("binding", &part.target, e.into()))?;
        if part.read_only {
            mount_remount(&part.target, MountFlags::BIND | MountFlags::RDONLY, "")
                .map_err(|e| failed("making read-only", &part.target, e.into()))?;
        }
    }
    unmount(POOL_MOUNT, UnmountFlags::DETACH).map_err(|e| failed("detaching", POOL_MOUNT, e.into()))
}

fn send(writer: &Writer, message: &FromGuest) {
    let mut out = writer.lock().expect("no panics hold the lock");
    // A write fails only when the host is gone; the command's end is then nobody's news.
    let _ = write_frame(&mut *out, message);
}

struct Spec {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    workdir: PathBuf,
    uid: u32,
    gid: u32,
    stdin: bool,
    keep_caps: bool,
}

/// The `sh -c` line every command starts under. The command starts as root only to join
/// the job's cgroup; setpriv (util-linux, in every Debian image) then drops to the job's
/// uid with no supplementary groups, no capabilities (an empty bounding set: root too,
/// `exec --user root`) and no_new_privs before it runs anything of the job's.
fn wrapper(spec: &Spec) -> String {
    format!(
        r#"echo $$ > {JOB_CGROUP}/cgroup.procs && exec setpriv --reuid={uid} --regid={gid} --clear-groups {caps}--no-new-privs -- "$@""#,
        uid = spec.uid,
        gid = spec.gid,
        caps = if spec.keep_caps {
            ""
        } else {
            "--inh-caps=-all --bounding-set=-all "
        }
    )
}

fn run(
    id: u64,
    spec: &Spec,
    writer: &Writer,
    running: &Mutex<HashMap<u64, i32>>,
    reaped: &Reaped,
    inputs: &Inputs,
) {
    let failed = |message: String| send(writer, &FromGuest::Failed { id, message });
    let Some((program, args)) = spec.argv.split_first() else {
        return failed("empty command".into());
    };
    if !spec.workdir.is_dir() {
        return failed(format!("`{}` is not a directory", spec.workdir.display()));
    }
    let wrapper = wrapper(spec);
    let mut command = std::process::Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(wrapper)
        .arg("sh")
        .arg(program)
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
    let oom_before = oom_kills();
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            inputs.lock().expect("no panics hold the lock").remove(&id);
            return failed(format!("cannot start `{program}`: {error}"));
        }
    };
    let pid = child.id().cast_signed();
    if let Some(stdin) = child.stdin.take() {
        let mut inputs = inputs.lock().expect("no panics hold the lock");
        if let Some(Input::Pending(buffered, closed)) = inputs.remove(&id) {
            let queue = start_stdin_writer(stdin, buffered);
            if !closed {
                inputs.insert(id, Input::Open(queue));
            }
        }
    }
    running
        .lock()
        .expect("no panics hold the lock")
        .insert(id, pid);
    let pumps: Vec<_> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn std::io::Read + Send>),
    ]
    .into_iter()
    .enumerate()
    .filter_map(|(n, stream)| stream.map(|s| (n == 1, s)))
    .map(|(stderr, mut stream)| {
        let writer = Arc::clone(writer);
        std::thread::spawn(move || {
            let mut buffer = vec![0u8; 32 * 1024];
            loop {
                match stream.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => send(&writer, &FromGuest::output(id, stderr, &buffer[..n])),
                }
            }
        })
    })
    .collect();
    let status = wait_reaped(reaped, pid);
    for pump in pumps {
        let _ = pump.join();
    }
    running.lock().expect("no panics hold the lock").remove(&id);
    inputs.lock().expect("no panics hold the lock").remove(&id);
    let code = if libc::WIFEXITED(status) {
        i64::from(libc::WEXITSTATUS(status))
    } else {
        128 + i64::from(libc::WTERMSIG(status))
    };
    let oom_killed = oom_kills() > oom_before;
    send(
        writer,
        &FromGuest::Exit {
            id,
            code,
            oom_killed,
        },
    );
}

/// The job cgroup's OOM-kill counter (`memory.events`), 0 when unreadable.
fn oom_kills() -> u64 {
    std::fs::read_to_string(format!("{JOB_CGROUP}/memory.events"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("oom_kill "))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0)
}

/// Reaps every child of PID 1 for ever, keeping each status for the exec that may own it.
fn reap(reaped: &Reaped) {
    loop {
        let Ok(Some((pid, status))) = rustix::process::wait(rustix::process::WaitOptions::empty())
        else {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        };
        let (pid, status) = (pid.as_raw_pid(), status.as_raw());
        let mut statuses = reaped.statuses.lock().expect("no panics hold the lock");
        statuses.insert(pid, status);
        // Orphans' statuses are never claimed: keep the map small.
        if statuses.len() > 4096 {
            statuses.clear();
        }
        reaped.changed.notify_all();
    }
}

fn wait_reaped(reaped: &Reaped, pid: i32) -> i32 {
    let mut statuses = reaped.statuses.lock().expect("no panics hold the lock");
    loop {
        if let Some(status) = statuses.remove(&pid) {
            return status;
        }
        statuses = reaped
            .changed
            .wait(statuses)
            .expect("no panics hold the lock");
    }
}

fn signal_group(pgid: i32, signal: i32) {
    if let (Some(pgid), Some(signal)) = (
        rustix::process::Pid::from_raw(pgid).filter(|p| p.as_raw_pid() > 1),
        rustix::process::Signal::from_named_raw(signal),
    ) {
        let _ = rustix::process::kill_process_group(pgid, signal);
    }
}

/// The device of the port named [`PORT_NAME`] (`/dev/vportNpM`; there is no udev to make
/// the `/dev/virtio-ports` link).
fn find_port(within: Duration) -> Option<PathBuf> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Ok(entries) = std::fs::read_dir("/sys/class/virtio-ports") {
            for entry in entries.flatten() {
                let name = std::fs::read_to_string(entry.path().join("name")).unwrap_or_default();
                if name.trim() == PORT_NAME {
                    let dev = PathBuf::from("/dev").join(entry.file_name());
                    if dev.exists() {
                        return Some(dev);
                    }
                }
            }
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
