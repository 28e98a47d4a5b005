//! The host side of a remote job's ports: a detached relay process per job,
//! `paddock port-relay JOB` (hidden), listening on the job's recorded loopback ports
//! (`ports`: chosen at create, kept in the record, so `port`, `show`, the API and MCP say the
//! same as for a local job). Each connection it accepts goes through the engine's API into
//! the job's network namespace (`Runtime::relay_port`; `runtime/docker/port_relay.rs`).
//!
//! Invariants: it listens on 127.0.0.1 only, never on another address. One relay per job:
//! it holds `work/<job>/port-relay.lock` for its whole life (a second one exits at once),
//! and writes `port-relay.pid` (pid and start time) once it listens. It is started when the
//! job's container is (create, and each exec or shell, which start a stopped job: a no-op
//! when it runs), stopped at `stop` and `rm` (its pid checked against its start time and its
//! command line first), and it ends by itself within [`CHECK_EVERY`] once the job's record is
//! gone, so a job the sweep removed, or a crashed `rm`, leaves no relay behind.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use super::{Error, Paddock, Result};
use crate::job::{JobId, JobRecord, ProcessId};
use crate::store::{FileLock, PaddockHome};

/// How often a relay looks whether its job still exists.
const CHECK_EVERY: Duration = Duration::from_secs(2);
/// How many failed connections a relay logs in full before it logs one in a thousand.
const LOGGED_FAILURES: u64 = 20;
/// How long a start waits for a new relay to listen, and a stop for one to end.
const READY_WAIT: Duration = Duration::from_secs(15);

/// Whether the job's ports are served by a relay process here: it has ports, and its
/// runtime reaches them through its engine (a remote job's) instead of publishing them.
pub(crate) fn relayed(runtimes: &crate::runtime::Runtimes, record: &JobRecord) -> bool {
    !record.ports.is_empty() && runtimes.of_job(record).capabilities().ports.is_some()
}

/// Job `id`'s relay process, when one runs now: the pid its file names, alive with the
/// recorded start time and running `port-relay` for this job (`doctor` asks too).
pub(crate) fn relay_process(home: &PaddockHome, id: &JobId) -> Option<ProcessId> {
    let text = std::fs::read(home.job_dir(id).join("port-relay.pid")).ok()?;
    let process: ProcessId = serde_json::from_slice(&text).ok()?;
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", process.pid)).ok()?;
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let ours = args.iter().any(|a| *a == b"port-relay")
        && args.iter().any(|a| *a == id.as_str().as_bytes());
    (ours && process.is_alive()).then_some(process)
}

impl Paddock {
    fn relay_file(&self, record: &JobRecord, name: &str) -> PathBuf {
        self.home.job_dir(&record.id).join(name)
    }

    /// The job's relay process, when one runs now.
    pub(super) fn port_relay_process(&self, id: &JobId) -> Option<ProcessId> {
        relay_process(&self.home, id)
    }

    /// Starts the job's relay process unless it runs, and waits until it listens. Nothing
    /// for a job whose ports Docker publishes here.
    pub(super) async fn ensure_port_relay(&self, record: &JobRecord) -> Result<()> {
        if !relayed(&self.runtimes, record) || self.port_relay_process(&record.id).is_some() {
            return Ok(());
        }
        let failed = |reason: String| Error::Port {
            port: record.ports[0].port,
            reason,
        };
        let exe = std::env::current_exe().map_err(|e| failed(format!("no paddock binary: {e}")))?;
        let logs = self.home.logs_dir(&record.id);
        let _ = std::fs::create_dir_all(&logs);
        // Nobody reads a detached relay's terminal: what it says goes to the job's logs.
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(logs.join("port-relay.log"))
            .map_or_else(|_| std::process::Stdio::null(), std::process::Stdio::from);
        let mut command = std::process::Command::new(exe);
        command
            .args(["port-relay", record.id.as_str()])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(stderr);
        // Its own process group: a terminal's Ctrl-C for the command that started it is
        // not for the relay.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command
            .spawn()
            .map_err(|e| failed(format!("cannot start its relay: {e}")))?;
        let deadline = tokio::time::Instant::now() + READY_WAIT;
        let outcome = loop {
            if let Some(process) = self.port_relay_process(&record.id) {
                break Ok(process);
            }
            if let Ok(Some(status)) = child.try_wait() {
                break Err(failed(format!(
                    "its relay ended at once ({status}): see {}",
                    logs.join("port-relay.log").display()
                )));
            }
            if tokio::time::Instant::now() > deadline {
                break Err(failed(format!(
                    "its relay did not listen within {READY_WAIT:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        // Reaped when it ends, so a long-lived daemon that started it keeps no zombie.
        std::thread::spawn(move || child.wait());
        outcome.map(drop)
    }

    /// Stops the job's relay process, if one runs (SIGTERM, checked to be the job's relay
    /// first), and waits for it to end.
    pub(super) async fn stop_port_relay(&self, record: &JobRecord) {
        let Some(process) = self.port_relay_process(&record.id) else {
            return;
        };
        if let (Some(pid), Some(signal)) = (
            rustix::process::Pid::from_raw(i32::try_from(process.pid).unwrap_or(0)),
            rustix::process::Signal::from_named_raw(libc::SIGTERM),
        ) {
            let _ = rustix::process::kill_process(pid, signal);
        }
        let deadline = tokio::time::Instant::now() + READY_WAIT;
        while process.is_alive() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = std::fs::remove_file(self.relay_file(record, "port-relay.pid"));
    }

    /// `paddock port-relay JOB`: the relay process itself (see the module docs). Returns
    /// when the job is gone or on SIGTERM; at once when another relay of the job runs.
    pub async fn serve_port_relay(&self, id: &str) -> Result<()> {
        let mut record = self.load(id)?;
        if !relayed(&self.runtimes, &record) {
            return Ok(());
        }
        let Ok(_lock) =
            FileLock::acquire(&self.relay_file(&record, "port-relay.lock"), CHECK_EVERY)
        else {
            tracing::info!(job = %record.id, "another relay serves the job's ports");
            return Ok(());
        };
        let mut accepts = tokio::task::JoinSet::new();
        let (sender, mut accepted) = tokio::sync::mpsc::channel(64);
        for port in &record.ports {
            let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, port.host_port))
                .await
                .map_err(|e| Error::Port {
                    port: port.port,
                    reason: format!(
                        "its relay cannot listen on 127.0.0.1:{}: {e}",
                        port.host_port
                    ),
                })?;
            let (sender, inside) = (sender.clone(), port.port);
            accepts.spawn(async move {
                loop {
                    match listener.accept().await {
                        Ok((client, _)) => {
                            if sender.send((inside, client)).await.is_err() {
                                return;
                            }
                        }
                        // Out of descriptors, say: wait before the next accept.
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
            });
        }
        let pid = self.relay_file(&record, "port-relay.pid");
        let me = ProcessId::current().expect("this process has a /proc entry");
        let text = serde_json::to_vec(&me).expect("a pid serializes");
        crate::atomic::write_atomic(&pid, &text, false).map_err(|source| {
            crate::store::StoreError::Io {
                path: pid.clone(),
                source,
            }
        })?;
        let mut terminate = tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::terminate(),
        )
        .map_err(|e| Error::Port {
            port: record.ports[0].port,
            reason: format!("its relay cannot wait for SIGTERM: {e}"),
        })?;
        let mut check = tokio::time::interval(CHECK_EVERY);
        let runtime = self.runtime_of(&record);
        // The log of a relay that lives as long as its job stays small however many
        // connections fail: the first few failures, then one line in a thousand.
        let failures = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        loop {
            tokio::select! {
                Some((port, client)) = accepted.recv() => {
                    let (runtime, job, failures) = (runtime.clone(), record.clone(), failures.clone());
                    tokio::spawn(async move {
                        let relayed = match runtime.capabilities().ports {
                            Some(ports) => ports.relay_port(&job, port, client).await,
                            None => Err(crate::runtime::lacks(runtime.as_ref(), "relay a port through an engine")),
                        };
                        if let Err(error) = relayed {
                            let count = failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                            if count <= LOGGED_FAILURES || count % 1000 == 0 {
                                tracing::warn!(job = %job.id, port, %error, failures = count, "cannot relay a connection");
                            }
                        }
                    });
                }
                _ = check.tick() => match self.store.load(record.id.as_str()) {
                    Ok(now) if relayed(&self.runtimes, &now) => record = now,
                    _ => break,
                },
                _ = terminate.recv() => break,
            }
        }
        let _ = std::fs::remove_file(&pid);
        Ok(())
    }
}
