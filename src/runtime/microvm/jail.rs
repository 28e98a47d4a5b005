//! virtiofsd for a writable share without host root: the hidden `paddock vm-virtiofsd`,
//! which the share's mount namespace (`vm::spawn_virtiofsd`) runs in place of virtiofsd.
//!
//! QEMU's C virtiofsd does what the guest kernel asks with the credentials it has: run as
//! host root, root in the guest (the agent after a guest-kernel exploit) could chown files
//! to root, set setuid bits, make device nodes and write file capabilities on the host. So
//! a writable share's virtiofsd runs in a user namespace of its own whose only ids are the
//! agent's (mapped to itself) and root, mapped to [`GUEST_ROOT_ON_HOST`], an unprivileged
//! uid and gid that no account or other process has: whatever guest root creates or chowns
//! is that id's on the host, a chown to any other id fails, and device nodes cannot be
//! made in a user namespace at all. Its capabilities hold only over files of those ids;
//! root's files in the share (the protected ones) are read through their modes.
//! What ownership cannot stop, a seccomp filter does: no setuid or setgid bit through
//! chmod, open or mknod, no device node through mknod or a rename's whiteout, no extended
//! attribute at all (so no
//! `security.capability`; virtiofsd runs with `no_xattr` anyway).
//!
//! The host root part comes first, while paddock still can: the vhost-user socket is bound
//! in the VM's directory (passed as `--fd`; the unprivileged id could not reach it), and
//! the share is opened (its path under a 0700 state root could not be walked either), so
//! virtiofsd gets `source=/proc/self/fd/N/` and its `chroot` sandbox. Then the ids are
//! dropped, the namespaces (user, network) made, and a short-lived `sh` still root in the
//! host's namespace writes the maps, as `newuidmap` would. virtiofsd's `argv[0]` keeps the
//! socket's path, which names the VM's directory: the ownership mark `vm::owned` looks for.
//! Runs before the async runtime starts: `unshare(CLONE_NEWUSER)` needs a single thread.

use std::os::fd::AsRawFd as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;

/// QEMU's virtiofsd, each share's file server (in its jail when the share is writable).
pub const VIRTIOFSD: &str = "/usr/lib/qemu/virtiofsd";

/// The host uid and gid of root in the guest, as seen through a jailed virtiofsd.
pub const GUEST_ROOT_ON_HOST: u32 = 2_147_483_646;

/// What `vm-virtiofsd` needs (all on its command line).
#[derive(Debug, clap::Args)]
pub struct JailArgs {
    /// The vhost-user socket to listen on (in the VM's directory).
    #[arg(long)]
    pub socket: PathBuf,
    /// The shared directory (its protected paths already bound read-only by the caller).
    #[arg(long)]
    pub source: PathBuf,
    /// The agent's uid and gid, the ids mapped to themselves.
    #[arg(long)]
    pub uid: u32,
    #[arg(long)]
    pub gid: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum JailError {
    #[error("{step}: {source}")]
    Io {
        step: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("writing the user namespace's id maps failed ({0})")]
    Map(std::process::ExitStatus),
    #[error("the seccomp filter: {0}")]
    Seccomp(#[from] seccompiler::Error),
    #[error("the seccomp filter: {0}")]
    Filter(#[from] seccompiler::BackendError),
    #[error("the agent's uid or gid is 0 or the guest root's: nothing to map it apart")]
    Ids,
}

fn step(step: &'static str) -> impl FnOnce(std::io::Error) -> JailError {
    move |source| JailError::Io { step, source }
}

fn errno(step: &'static str) -> impl FnOnce(rustix::io::Errno) -> JailError {
    move |e| JailError::Io {
        step,
        source: e.into(),
    }
}

/// The last line of a share's mount-namespace script (`$sock`, `$src` and `$paddock` set):
/// a writable share's virtiofsd through the jail; a read-only share's as root (its files
/// may be readable by their owner only: the user's object store), where no write can
/// happen (the share is a read-only mount), with every capability that writes dropped.
pub fn exec_line(read_only: bool, (uid, gid): (u32, u32)) -> String {
    if read_only {
        format!(
            r#"exec {VIRTIOFSD} --socket-path="$sock" -o source="$src" -o cache=auto -o no_posix_lock -o no_xattr -o modcaps=-chown:-fowner:-fsetid:-mknod:-setfcap:-setuid:-setgid"#
        )
    } else {
        format!(
            r#"exec "$paddock" vm-virtiofsd --socket "$sock" --source "$src" --uid {uid} --gid {gid}"#
        )
    }
}

/// Runs the jail and execs virtiofsd; returns only on failure, with the exit code.
pub fn run(args: &JailArgs) -> i32 {
    let error = match jail(args) {
        Ok(never) => match never {},
        Err(error) => error,
    };
    // The caller's log file is this process's stderr (no `say!` here: no terminal, no CLI).
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("paddock vm-virtiofsd: {error}\n").as_bytes(),
    );
    1
}

fn jail(args: &JailArgs) -> Result<std::convert::Infallible, JailError> {
    if [0, GUEST_ROOT_ON_HOST].contains(&args.uid) || [0, GUEST_ROOT_ON_HOST].contains(&args.gid) {
        return Err(JailError::Ids);
    }
    let _ = std::fs::remove_file(&args.socket);
    let listener =
        std::os::unix::net::UnixListener::bind(&args.socket).map_err(step("binding the socket"))?;
    // Opened here, as root; virtiofsd reaches it as `/proc/self/fd/N/` (no path walk from
    // `/`, which the jailed ids could not make), chroots into it and serves it.
    let source = rustix::fs::open(
        &args.source,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY,
        rustix::fs::Mode::empty(),
    )
    .map_err(errno("opening the share"))?;
    let filter = seccomp_filter()?;
    let root = GUEST_ROOT_ON_HOST.to_string();
    let mut mapper = std::process::Command::new("/bin/sh")
        .args([
            "-c",
            r#"read -r _ || exit 1
printf '0 %s 1\n%s %s 1\n' "$2" "$3" "$3" > "/proc/$1/uid_map" &&
printf '0 %s 1\n%s %s 1\n' "$2" "$4" "$4" > "/proc/$1/gid_map""#,
            "sh",
        ])
        .arg(std::process::id().to_string())
        .args([&root, &args.uid.to_string(), &args.gid.to_string()])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .map_err(step("starting the id mapper"))?;
    let go = mapper.stdin.take().expect("the mapper's stdin is piped");
    // virtiofsd inherits the listening socket and the share across exec (the mapper, started
    // before, inherits neither).
    rustix::io::fcntl_setfd(&listener, rustix::io::FdFlags::empty())
        .map_err(errno("keeping the socket across exec"))?;
    rustix::io::fcntl_setfd(&source, rustix::io::FdFlags::empty())
        .map_err(errno("keeping the share across exec"))?;
    let id = GUEST_ROOT_ON_HOST;
    rustix::thread::set_thread_groups(&[]).map_err(errno("dropping groups"))?;
    rustix::thread::set_thread_res_gid(
        rustix::thread::Gid::from_raw(id),
        rustix::thread::Gid::from_raw(id),
        rustix::thread::Gid::from_raw(id),
    )
    .map_err(errno("setting the gid"))?;
    rustix::thread::set_thread_res_uid(
        rustix::thread::Uid::from_raw(id),
        rustix::thread::Uid::from_raw(id),
        rustix::thread::Uid::from_raw(id),
    )
    .map_err(errno("setting the uid"))?;
    crate::sys::unshare_user_and_net().map_err(step("making the user namespace"))?;
    std::io::Write::write_all(&mut &go, b"go\n").map_err(step("waking the id mapper"))?;
    drop(go);
    let status = mapper.wait().map_err(step("waiting for the id mapper"))?;
    if !status.success() {
        return Err(JailError::Map(status));
    }
    seccompiler::apply_filter(&filter)?;
    let error = std::process::Command::new(VIRTIOFSD)
        .arg0(format!("{VIRTIOFSD}@{}", args.socket.display()))
        .arg(format!("--fd={}", listener.as_raw_fd()))
        .arg("-o")
        .arg(format!("source=/proc/self/fd/{}/", source.as_raw_fd()))
        .args(["-o", "sandbox=chroot", "-o", "cache=auto"])
        .args(["-o", "no_posix_lock", "-o", "no_xattr"])
        .args(["-o", "modcaps=-mknod:-setfcap"])
        .exec();
    Err(JailError::Io {
        step: "starting virtiofsd",
        source: error,
    })
}

/// renameat2's flag that leaves a whiteout (a character device) behind.
const RENAME_WHITEOUT: u64 = 1 << 2;

/// The filter: EPERM for every call that could make a setuid or setgid file or a device
/// node (a whiteout too), and for every extended attribute write; everything else as before.
fn seccomp_filter() -> Result<seccompiler::BpfProgram, JailError> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    };
    let mode_is = |arg: u8, mask: u64, value: u64| -> Result<SeccompRule, JailError> {
        Ok(SeccompRule::new(vec![SeccompCondition::new(
            arg,
            SeccompCmpArgLen::Dword,
            SeccompCmpOp::MaskedEq(mask),
            value,
        )?])?)
    };
    // A mode argument with the setuid or setgid bit.
    let privileged = |arg: u8| -> Result<Vec<SeccompRule>, JailError> {
        Ok(vec![
            mode_is(arg, 0o4000, 0o4000)?,
            mode_is(arg, 0o2000, 0o2000)?,
        ])
    };
    // ... or, for mknod, a character or block device.
    let device = |arg: u8| -> Result<Vec<SeccompRule>, JailError> {
        let mut rules = privileged(arg)?;
        rules.push(mode_is(arg, 0o170_000, 0o020_000)?);
        rules.push(mode_is(arg, 0o170_000, 0o060_000)?);
        Ok(rules)
    };
    let mut rules: std::collections::BTreeMap<i64, Vec<SeccompRule>> = [
        (libc::SYS_fchmod, privileged(1)?),
        (libc::SYS_fchmodat, privileged(2)?),
        // fchmodat2 (Linux 6.6)
        (452, privileged(2)?),
        (libc::SYS_openat, privileged(3)?),
        (libc::SYS_mknodat, device(2)?),
        // A whiteout is a character device (0, 0), and needs no CAP_MKNOD.
        (
            libc::SYS_renameat2,
            vec![mode_is(4, RENAME_WHITEOUT, RENAME_WHITEOUT)?],
        ),
        // Whole calls: no mode to look at (openat2's is behind a pointer).
        (libc::SYS_openat2, vec![]),
        (libc::SYS_setxattr, vec![]),
        (libc::SYS_lsetxattr, vec![]),
        (libc::SYS_fsetxattr, vec![]),
        // setxattrat (Linux 6.13)
        (463, vec![]),
        (libc::SYS_io_uring_setup, vec![]),
    ]
    .into_iter()
    .collect();
    #[cfg(target_arch = "x86_64")]
    rules.extend([
        (libc::SYS_chmod, privileged(1)?),
        (libc::SYS_open, privileged(2)?),
        (libc::SYS_creat, privileged(1)?),
        (libc::SYS_mknod, device(1)?),
    ]);
    let arch = std::env::consts::ARCH.try_into()?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM.cast_unsigned()),
        arch,
    )?;
    Ok(filter.try_into()?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_filter_compiles_for_this_architecture() {
        let program = super::seccomp_filter().expect("the filter compiles");
        assert!(program.len() > 20, "{}", program.len());
    }
}
