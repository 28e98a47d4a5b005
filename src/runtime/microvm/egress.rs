//! The way out of an `allowlist` microVM job: QEMU's user-mode network with `restrict=on`
//! (the guest reaches nothing on the host or beyond) and one `guestfwd`: connections to
//! [`PROXY_ADDRESS`]:3128 in the guest are handed, one helper process each (`busybox nc`),
//! to the job's egress proxy on the host's loopback: paddock's own proxy with the job's
//! policy file, as a container job's sidecar runs it. The guest has no DNS; the proxy
//! resolves allowed names itself. The proxy's command line names the VM's directory (its
//! control socket lives there), so stop, destroy and the sweep end it with the VM.
//!
//! The proxy reads what the guest sends, so it does not run as root: `setpriv` starts it as
//! `nobody` with one capability, `CAP_DAC_READ_SEARCH` (to reach the policy file and its log
//! in paddock's 0700 state root); the only files it can write are its log and its control
//! directory, both given to `nobody`.

use std::path::Path;
use std::time::Duration;

use super::MicrovmError;
use super::vm::VmDir;
use crate::job::JobRecord;
use crate::store::PaddockHome;

/// The proxy's address as the guest sees it (QEMU's user-mode network forwards it).
pub const PROXY_ADDRESS: &str = "10.0.2.100";
pub const PROXY_PORT: u16 = 3128;
/// The uid and gid the proxy runs as.
const NOBODY: u32 = 65534;

/// The proxy environment of an allowlist job's commands.
pub fn proxy_env() -> Vec<(String, String)> {
    let url = format!("http://{PROXY_ADDRESS}:{PROXY_PORT}");
    let mut env: Vec<(String, String)> = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"]
        .iter()
        .map(|key| (key.to_string(), url.clone()))
        .collect();
    for key in ["NO_PROXY", "no_proxy"] {
        env.push((key.to_string(), "localhost,127.0.0.1,::1".into()));
    }
    env
}

/// Writes the job's policy, starts its proxy on a free loopback port and returns the
/// `-netdev user` options that make that proxy the guest's only way out.
pub async fn start_proxy(
    home: &PaddockHome,
    vm: &VmDir,
    record: &JobRecord,
) -> Result<String, MicrovmError> {
    crate::runtime::egress_files::write_policy(home, record, crate::sys::host_addresses())?;
    let policy = home.job_dir(&record.id).join("egress/policy.json");
    let log = crate::runtime::egress_files::log_path(home, &record.id);
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
    }
    // A free port now; the proxy binds it a moment later (nothing else of ours binds
    // loopback ports in between, and a lost race fails the start, never misroutes).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(io(Path::new("127.0.0.1:0")))?
        .port();
    let exe = std::env::current_exe().map_err(io(Path::new("/proc/self/exe")))?;
    let out = std::fs::File::create(vm.dir.join("egress.log")).map_err(io(&vm.dir))?;
    let control = vm.dir.join("egress");
    std::fs::create_dir_all(&control).map_err(io(&control))?;
    if !log.exists() {
        std::fs::write(&log, b"").map_err(io(&log))?;
    }
    for path in [&control, &log] {
        std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).map_err(io(path))?;
    }
    let child = tokio::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all,+dac_read_search",
            "--ambient-caps=-all,+dac_read_search",
            "--bounding-set=-all,+dac_read_search",
            "--",
        ])
        .arg(&exe)
        .arg("egress-proxy")
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--policy")
        .arg(&policy)
        .arg("--log")
        .arg(&log)
        .arg("--control")
        .arg(control.join("control.sock"))
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone().map_err(io(&vm.dir))?)
        .stderr(out)
        .process_group(0)
        .spawn()
        .map_err(io(&exe))?;
    if let Some(pid) = child.id() {
        let pidfile = vm.dir.join("egress.pid");
        std::fs::write(&pidfile, pid.to_string()).map_err(io(&pidfile))?;
    }
    drop(child);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if tokio::time::Instant::now() > deadline {
            return Err(MicrovmError::Start {
                message: format!(
                    "the egress proxy did not listen within 10s: {}",
                    std::fs::read_to_string(vm.dir.join("egress.log")).unwrap_or_default()
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(format!(
        "restrict=on,ipv6=off,guestfwd=tcp:{PROXY_ADDRESS}:{PROXY_PORT}-cmd:{} nc 127.0.0.1 {port}",
        super::assets::BUSYBOX
    ))
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> MicrovmError + '_ {
    move |source| MicrovmError::Io {
        path: path.to_path_buf(),
        source,
    }
}
