//! Another user's commands in a gVisor job (`exec --user root|UID[:GID]`).
//!
//! gVisor's kernel is not the host's, so root inside is not root of the host, and paddock
//! runs it as every job command runs: no capabilities (the container drops them all) and
//! no_new_privs. It owns the image's system files, so with `rootfs: writable` it can
//! install packages, and it has no power over the agent's files. What gVisor cannot keep
//! apart is ownership on the host: a file that uid creates in one of the job's host mounts
//! (a directory the agent made writable by everyone) is that uid's on the host, setuid bits
//! included (gVisor 2022 can neither remount a bind read-only in a mount namespace nor
//! squash ids). So after every such command [`settle`] ends that user's leftover processes
//! and gives every file of those mounts that is not the agent's back to the agent, setuid
//! and setgid bits cleared, before paddock's sync or anything host-side reads them. Between
//! the two the files sit below the state root, which is closed (0700) to everyone but its
//! owner, who already has the Docker daemon.
//!
//! The settle needs capabilities (chown) inside the sandbox: a privileged exec there, whose
//! programs must not be the job's own (root may have replaced `/bin/sh` in a writable
//! root). So it runs a static busybox of the host's (Debian's busybox-static), bind-mounted
//! read-only into every local runsc container at [`TOOLS_BUSYBOX`]; no library of the
//! image is loaded. A container without it (made before, or on a host without the
//! package) refuses another user's commands (`check`).

use std::path::Path;
use std::time::Duration;

use bollard::models::{ExecConfig, Mount};

use super::{API_TIMEOUT, CONTAINER_GIT_DIR, CONTAINER_OUTBOX, call, job_container};
use crate::cache::Strategy;
use crate::job::{JobRecord, RuntimeKind};
use crate::runtime::RuntimeError;

/// The host's static busybox (Debian's busybox-static installs it here).
const HOST_BUSYBOX: &str = "/bin/busybox";
/// Where a runsc container sees it, read-only.
pub(super) const TOOLS_BUSYBOX: &str = "/.paddock-tools/busybox";
/// The most the settle's walk may take (a job's workspace of tens of thousands of files
/// takes a second or two under gVisor).
const SETTLE_WITHIN: Duration = Duration::from_secs(120);

/// The read-only mount of the host's busybox for a local runsc container, when the host
/// has a static one.
pub(super) fn tools_mount(record: &JobRecord) -> Option<Mount> {
    (record.runtime == RuntimeKind::Runsc && is_static_elf(Path::new(HOST_BUSYBOX)))
        .then(|| super::mounts::bind(Path::new(HOST_BUSYBOX), Path::new(TOOLS_BUSYBOX), true))
}

/// Whether this host has the static busybox a runsc job's other users need.
pub fn helper_present() -> bool {
    is_static_elf(Path::new(HOST_BUSYBOX))
}

/// Whether `path` is an ELF executable without a program interpreter (statically linked):
/// a dynamic one would load the image's libraries in a privileged exec.
fn is_static_elf(path: &Path) -> bool {
    use std::io::Read as _;
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    let mut bytes = Vec::new();
    if file.take(64 << 10).read_to_end(&mut bytes).is_err() || !bytes.starts_with(b"\x7fELF") {
        return false;
    }
    // 64-bit little-endian only (the hosts paddock runs on).
    if bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        return false;
    }
    let u16_at = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("eight bytes")))
    };
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    let Ok(phoff) = usize::try_from(phoff) else {
        return false;
    };
    const PT_INTERP: u32 = 3;
    (0..usize::from(phnum)).all(|i| {
        let at = phoff + i * usize::from(phentsize);
        bytes
            .get(at..at + 4)
            .is_some_and(|b| u32::from_le_bytes(b.try_into().expect("four bytes")) != PT_INTERP)
    })
}

/// Whether the job's container has the helper (its mounts name it).
pub(super) async fn check(daemon: &super::Daemon, record: &JobRecord) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    let name = job_container(record);
    let inspect = call(
        "inspect container",
        &name,
        API_TIMEOUT,
        docker.inspect_container(
            &name,
            None::<bollard::query_parameters::InspectContainerOptions>,
        ),
    )
    .await?;
    let has = inspect
        .mounts
        .unwrap_or_default()
        .iter()
        .any(|m| m.destination.as_deref() == Some(TOOLS_BUSYBOX) && m.rw == Some(false));
    if has {
        Ok(())
    } else {
        Err(RuntimeError::Unsupported {
            runtime: "runsc",
            what: "run another user in this job: its container has no static busybox to settle that user's files with (install Debian's busybox-static on this host, then create the job again)",
        })
    }
}

/// The job's writable mounts inside its container: what another user could have left
/// files in.
fn writable_roots(record: &JobRecord) -> Vec<String> {
    let workspace = Path::new(&record.limits.workspace_dir);
    let mut roots = vec![
        record.limits.workspace_dir.clone(),
        CONTAINER_GIT_DIR.to_string(),
    ];
    if crate::runtime::access::outbox_of(record).is_some() {
        roots.push(CONTAINER_OUTBOX.to_string());
    }
    for cache in record.caches.iter().filter(|c| !c.readonly) {
        match (cache.strategy, &cache.path) {
            (Strategy::Symlink | Strategy::Env, _) => {
                roots.push(cache.entry.display().to_string());
            }
            (Strategy::Mount, Some(path)) => roots.push(workspace.join(path).display().to_string()),
            _ => {}
        }
    }
    roots
}

/// The settle's script: `$1` the agent's uid, `$2` its gid, then the roots. Every program
/// is the host's busybox (`$0`). Read-only mounts below a root (the git dir's protected
/// files, `.git`) are pruned, from the sandbox's own mount table: their files are not the
/// job's to give, and could not be changed. A mount point there has no blank in it (the
/// table escapes blanks), and globbing is off, so the prune words split only where meant.
/// `kill -9 -1` ran first, as that user (a separate exec), so nothing of it makes files
/// while this walks.
const SETTLE_SCRIPT: &str = r#"bb=$0; u=$1; g=$2; shift 2
set -f
prune=""
for m in $("$bb" awk '{ n = split($6, o, ","); for (i = 1; i <= n; i++) if (o[i] == "ro") print $5 }' /proc/self/mountinfo); do
  prune="$prune -path $m -o"
done
status=0
for root in "$@"; do
  [ -d "$root" ] || continue
  "$bb" find "$root" -xdev \( $prune -path /nonexistent-paddock \) -prune -o ! -user "$u" -exec "$bb" chown -h "$u:$g" {} + || status=1
  "$bb" find "$root" -xdev \( $prune -path /nonexistent-paddock \) -prune -o ! -type l -perm /6000 -exec "$bb" chmod ug-s {} + || status=1
done
exit $status"#;

/// Ends `user`'s processes in the job's container, then gives the job's writable mounts
/// back to the agent (see the module docs).
pub(super) async fn settle(
    daemon: &super::Daemon,
    record: &JobRecord,
    user: (u32, u32),
) -> Result<(), RuntimeError> {
    let docker = daemon.connect()?;
    let name = job_container(record);
    // Twice: a process forking as the first signal goes out may leave a child. Where the
    // exec server runs, the kill starts through `no-caps` (Docker would give it the
    // server's KILL): it ends that user's processes and cannot reach the server's uid.
    let kill = "kill -9 -1; kill -9 -1; true".to_string();
    let mut config = exec_config(
        vec![TOOLS_BUSYBOX.into(), "sh".into(), "-c".into(), kill],
        &format!("{}:{}", user.0, user.1),
        false,
    );
    if runs_server(&docker, &name).await? {
        super::root_caps::wrap_no_caps(&mut config);
    }
    run(&docker, &name, config).await?;
    let (uid, gid) = super::agent_user(record.limits.uid);
    let mut cmd = vec![
        TOOLS_BUSYBOX.to_string(),
        "sh".into(),
        "-c".into(),
        SETTLE_SCRIPT.into(),
        TOOLS_BUSYBOX.into(),
        uid.to_string(),
        gid.to_string(),
    ];
    cmd.extend(writable_roots(record));
    let code = run(&docker, &name, exec_config(cmd, "0:0", true)).await?;
    if code == Some(0) {
        Ok(())
    } else {
        Err(RuntimeError::Docker {
            action: "settle another user's files",
            target: name,
            message: format!(
                "the walk of the job's writable mounts ended with {code:?}: some file there may still be another user's"
            ),
        })
    }
}

/// An exec of `cmd` as `user` (privileged: with every capability inside the sandbox).
fn exec_config(cmd: Vec<String>, user: &str, privileged: bool) -> ExecConfig {
    ExecConfig {
        user: Some(user.to_string()),
        privileged: Some(privileged),
        // No variable of the container's: nothing of the job's steers busybox.
        env: Some(vec!["PATH=/nonexistent".into()]),
        working_dir: Some("/".into()),
        cmd: Some(cmd),
        ..Default::default()
    }
}

/// Whether container `name`'s main process is the exec server.
async fn runs_server(docker: &bollard::Docker, name: &str) -> Result<bool, RuntimeError> {
    let inspect = call(
        "inspect container",
        name,
        API_TIMEOUT,
        docker.inspect_container(name, None),
    )
    .await?;
    Ok(inspect
        .config
        .and_then(|c| c.labels)
        .is_some_and(|labels| labels.contains_key(super::resident::LABEL_SERVER)))
}

/// Runs exec `config` in container `name`, output discarded, until it ends or
/// [`SETTLE_WITHIN`]; its exit code.
async fn run(
    docker: &bollard::Docker,
    name: &str,
    config: ExecConfig,
) -> Result<Option<i64>, RuntimeError> {
    let (ended, id, _) =
        super::exec::exec_collect_config(docker, name, config, SETTLE_WITHIN, 0).await?;
    if !ended {
        return Err(RuntimeError::Docker {
            action: "settle another user's files",
            target: name.to_string(),
            message: format!("not done within {SETTLE_WITHIN:?}"),
        });
    }
    let inspect = call("inspect exec", name, API_TIMEOUT, docker.inspect_exec(&id)).await?;
    Ok(inspect.exit_code)
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_static_elf_is_taken() {
        // The test binary is dynamic (it links glibc); a text file is no ELF at all.
        let exe = std::env::current_exe().expect("the test binary");
        assert!(!super::is_static_elf(&exe));
        assert!(!super::is_static_elf(std::path::Path::new("/etc/hostname")));
        assert!(!super::is_static_elf(std::path::Path::new("/nonexistent")));
        if std::path::Path::new("/bin/busybox").exists() {
            // Debian's busybox-static (CI installs it for the microVM).
            assert!(super::is_static_elf(std::path::Path::new("/bin/busybox")));
        }
    }
}
