//! The one place paddock calls the C library: process ids, signals, resource limits, the
//! setup of a child between fork and exec, reflink copies, free disk space, mounts and loop
//! devices. Every other module is safe Rust (`unsafe_code` is denied for the crate in
//! Cargo.toml); each call here says why it is sound.
#![expect(
    unsafe_code,
    reason = "the safe wrappers of the libc calls paddock needs"
)]

use std::os::fd::AsRawFd;
use std::path::Path;

mod loopdev;
pub use loopdev::{LoopDevice, loop_attach, loop_backed_by};

/// The effective uid and gid of this process.
pub fn effective_ids() -> (u32, u32) {
    // SAFETY: geteuid/getegid cannot fail and touch no memory.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// Whether paddock runs as root.
pub fn is_root() -> bool {
    effective_ids().0 == 0
}

/// Kills this process at once (the test-only failpoints of `create`).
pub fn kill_self() {
    // SAFETY: sending a signal to ourselves has no memory effects.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}

/// Sends `signal` to a process group.
pub fn signal_group(pgid: i32, signal: i32) {
    if pgid > 0 {
        // SAFETY: killpg only sends a signal.
        unsafe {
            libc::killpg(pgid, signal);
        }
    }
}

/// A resource limit of a child process.
#[derive(Debug, Clone, Copy)]
pub enum Limit {
    AddressSpace(u64),
    Processes(u64),
    CpuSeconds(u64),
}

/// What a child process sets up for itself between fork and exec.
#[derive(Debug, Clone, Default)]
pub struct ChildSetup {
    /// Die when paddock dies (a git child must not finish unsupervised after a sweep).
    pub die_with_parent: bool,
    /// Lead a new session and process group (so a timeout can signal all of it).
    pub new_session: bool,
    pub limits: Vec<Limit>,
    /// Drop to this uid and gid (root making files for the agent's uid).
    pub user: Option<(u32, u32)>,
}

/// Arranges for `command`'s child, before it execs, to give up every capability for good
/// (an empty bounding set, so root's execs have none either), to leave every supplementary
/// group and to become `uid:gid`, under `no_new_privs`. The resident exec server's spawn:
/// the server is root with only `SETUID`, `SETGID`, `SETPCAP` and `KILL`, and nothing it
/// starts keeps any of them.
pub fn become_user_on_exec(command: &mut std::process::Command, uid: u32, gid: u32) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the closure runs in the forked child before exec and only calls
    // async-signal-safe functions (prctl, setgroups, setgid, setuid) and reads errno.
    unsafe {
        command.pre_exec(move || {
            for cap in 0..64 {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                    let error = std::io::Error::last_os_error();
                    // Past the kernel's last capability: done.
                    if error.raw_os_error() == Some(libc::EINVAL) {
                        break;
                    }
                    // Without SETPCAP only a root command would keep something.
                    if uid == 0 {
                        return Err(error);
                    }
                    break;
                }
            }
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Arranges for `command`'s child to empty its capability sets before it execs (after a
/// change of uid that kept them: one from a uid other than root's).
pub fn hold_no_capabilities_on_exec(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt as _;
    let none = rustix::thread::CapabilitySets {
        effective: rustix::thread::CapabilitySet::empty(),
        permitted: rustix::thread::CapabilitySet::empty(),
        inheritable: rustix::thread::CapabilitySet::empty(),
    };
    // SAFETY: the closure runs in the forked child before exec and makes one raw capset
    // call on data it owns (async-signal-safe, nothing allocated).
    unsafe {
        command.pre_exec(move || {
            rustix::thread::set_capabilities(None, none).map_err(std::io::Error::from)
        });
    }
}

/// Sets this process's real, effective and saved uid and gid to `id` and drops its
/// supplementary groups (glibc applies it to every thread).
pub fn set_all_ids(id: u32) -> std::io::Result<()> {
    // SAFETY: plain system calls; the only pointer is a null list of no groups.
    let changed = unsafe {
        libc::setgroups(0, std::ptr::null()) == 0
            && libc::setresgid(id, id, id) == 0
            && libc::setresuid(id, id, id) == 0
    };
    if changed {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl ChildSetup {
    /// Arranges for `command`'s child to apply this setup before it execs.
    pub fn apply(self, command: &mut tokio::process::Command) {
        // SAFETY: the closure runs in the forked child before exec and only calls
        // async-signal-safe functions (prctl, setsid, setrlimit, setgroups, setgid, setuid)
        // on data it owns.
        unsafe {
            command.pre_exec(move || {
                if self.die_with_parent {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                }
                if self.new_session && libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                for limit in &self.limits {
                    let (resource, value) = match *limit {
                        Limit::AddressSpace(v) => (libc::RLIMIT_AS, v),
                        Limit::Processes(v) => (libc::RLIMIT_NPROC, v),
                        Limit::CpuSeconds(v) => (libc::RLIMIT_CPU, v),
                    };
                    let limit = libc::rlimit {
                        rlim_cur: value,
                        rlim_max: value,
                    };
                    // A failure leaves the old limit in place.
                    libc::setrlimit(resource, &raw const limit);
                }
                if let Some((uid, gid)) = self.user
                    && (libc::setgroups(0, std::ptr::null()) != 0
                        || libc::setgid(gid) != 0
                        || libc::setuid(uid) != 0)
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

/// Shares `source`'s blocks with `target` (FICLONE: btrfs, xfs); false where the filesystem
/// cannot, and the caller copies.
pub fn reflink(source: &std::fs::File, target: &std::fs::File) -> bool {
    const FICLONE: libc::c_ulong = 0x4004_9409;
    // SAFETY: both descriptors are open for the duration of the call.
    unsafe { libc::ioctl(target.as_raw_fd(), FICLONE, source.as_raw_fd()) == 0 }
}

/// Bytes free for unprivileged users on the filesystem holding `path`.
pub fn free_space(path: &Path) -> Option<u64> {
    fs_usage(path).map(|usage| usage.available)
}

/// The sizes of a filesystem, in bytes, as `df` shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsUsage {
    /// Blocks for data (the filesystem's own metadata not counted, as `df` does).
    pub size: u64,
    pub used: u64,
    /// Free for unprivileged users.
    pub available: u64,
}

/// The sizes of the filesystem holding `path` (statvfs).
pub fn fs_usage(path: &Path) -> Option<FsUsage> {
    let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we own; the path is NUL-terminated.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &raw mut stats) } != 0 {
        return None;
    }
    let block = stats.f_frsize as u64;
    Some(FsUsage {
        size: stats.f_blocks as u64 * block,
        used: stats.f_blocks.saturating_sub(stats.f_bfree) as u64 * block,
        available: stats.f_bavail as u64 * block,
    })
}

/// Every address of this machine's interfaces (the egress proxy refuses them as
/// destinations unless an allow entry names them). Empty when they cannot be read.
pub fn host_addresses() -> Vec<std::net::IpAddr> {
    let mut first: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head into `first`, freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&raw mut first) } != 0 {
        return Vec::new();
    }
    let mut addresses = Vec::new();
    let mut node = first;
    while !node.is_null() {
        // SAFETY: `node` is an element of the list getifaddrs returned, not yet freed.
        let entry = unsafe { &*node };
        if !entry.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr whose family says which struct it is.
            let family = i32::from(unsafe { (*entry.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let v4 = unsafe { &*entry.ifa_addr.cast::<libc::sockaddr_in>() };
                addresses.push(std::net::IpAddr::V4(std::net::Ipv4Addr::from(
                    u32::from_be(v4.sin_addr.s_addr),
                )));
            } else if family == libc::AF_INET6 {
                // SAFETY: an AF_INET6 address is a sockaddr_in6.
                let v6 = unsafe { &*entry.ifa_addr.cast::<libc::sockaddr_in6>() };
                addresses.push(std::net::IpAddr::V6(std::net::Ipv6Addr::from(
                    v6.sin6_addr.s6_addr,
                )));
            }
        }
        node = entry.ifa_next;
    }
    // SAFETY: `first` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(first) };
    addresses.sort();
    addresses.dedup();
    addresses
}

/// A pipe for [`splice`], both ends closed on drop.
pub fn pipe() -> std::io::Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)> {
    use std::os::fd::FromRawFd;
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`, which has room for them.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened by pipe2 and are owned by nobody else.
    Ok(unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(fds[0]),
            std::os::fd::OwnedFd::from_raw_fd(fds[1]),
        )
    })
}

/// Asks the kernel for a pipe buffer of `bytes` (rounded up to pages; unprivileged processes
/// get up to `/proc/sys/fs/pipe-max-size`, 1 MiB by default). Returns the capacity granted,
/// or the error when the kernel refused, in which case the pipe keeps its 64 KiB.
pub fn set_pipe_capacity(
    pipe: std::os::fd::BorrowedFd<'_>,
    bytes: usize,
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    let wanted = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: F_SETPIPE_SZ only resizes the kernel buffer of the pipe behind the borrowed
    // descriptor; it reads no memory of ours.
    let granted = unsafe { libc::fcntl(pipe.as_raw_fd(), libc::F_SETPIPE_SZ, wanted) };
    usize::try_from(granted).map_err(|_| std::io::Error::last_os_error())
}

/// Moves up to `len` bytes from `from` to `to` inside the kernel (one side must be a pipe),
/// without blocking: `WouldBlock` when nothing can move now, `Ok(0)` at end of input.
pub fn splice(
    from: std::os::fd::BorrowedFd<'_>,
    to: std::os::fd::BorrowedFd<'_>,
    len: usize,
) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: splice reads and writes only the kernel buffers behind the two descriptors,
    // which the borrows keep open for the call; null offsets mean "the current position".
    let moved = unsafe {
        libc::splice(
            from.as_raw_fd(),
            std::ptr::null_mut(),
            to.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    usize::try_from(moved).map_err(|_| std::io::Error::last_os_error())
}

/// Ends both directions of a socket (a splice on it then sees the end).
pub fn shutdown_both(socket: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    // SAFETY: shutdown only changes the state of the socket behind the borrowed descriptor.
    unsafe {
        libc::shutdown(socket.as_raw_fd(), libc::SHUT_RDWR);
    }
}

/// Ends the sending side of a socket (the peer reads end of input).
pub fn shutdown_write(socket: std::os::fd::BorrowedFd<'_>) {
    use std::os::fd::AsRawFd;
    // SAFETY: shutdown only changes the state of the socket behind the borrowed descriptor.
    unsafe {
        libc::shutdown(socket.as_raw_fd(), libc::SHUT_WR);
    }
}

/// `openat2(2)` with `resolve` flags (`RESOLVE_BENEATH`, ...): opens `path` relative to `dir`
/// with the kernel checking every step of the resolution, so a path cannot leave `dir` however
/// the tree changes under it. `Unsupported` on kernels before 5.6 (ENOSYS), where the caller
/// walks component by component with [`openat`] instead.
pub fn openat2(
    dir: std::os::fd::BorrowedFd<'_>,
    path: &Path,
    flags: i32,
    mode: u32,
    resolve: u64,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `open_how` is plain data; zeroed is its valid "no options" value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = u64::from(flags.cast_unsigned() | libc::O_CLOEXEC.cast_unsigned());
    how.mode = u64::from(mode);
    how.resolve = resolve;
    // SAFETY: the path is NUL-terminated and outlives the call; `how` is a valid open_how
    // whose size we pass; the borrowed descriptor stays open for the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            path.as_ptr(),
            &raw const how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        let error = std::io::Error::last_os_error();
        return Err(if error.raw_os_error() == Some(libc::ENOSYS) {
            std::io::Error::from(std::io::ErrorKind::Unsupported)
        } else {
            error
        });
    }
    let fd = i32::try_from(fd).map_err(|_| std::io::Error::other("descriptor out of range"))?;
    // SAFETY: the kernel just opened this descriptor for us; nobody else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// `openat(2)`: opens one `name` (a single component) relative to `dir`.
pub fn openat(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    flags: i32,
    mode: u32,
) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let name = std::ffi::CString::new(name.as_encoded_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: the name is NUL-terminated and outlives the call; the borrowed descriptor
    // stays open for the call.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_CLOEXEC,
            libc::c_uint::from(mode),
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just opened this descriptor for us; nobody else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// `mkdirat(2)`: makes the directory `name` (a single component) in `dir`; a link already
/// there is never followed (EEXIST).
pub fn mkdirat(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::OsStr,
    mode: u32,
) -> std::io::Result<()> {
    let name = std::ffi::CString::new(name.as_encoded_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: the name is NUL-terminated and outlives the call; the borrowed descriptor
    // stays open for the call.
    if unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Mounts a kernel overlayfs at `target` (`options`: `lowerdir=…,upperdir=…,workdir=…`),
/// naming it `source` in the mount table (paddock's marker). Needs CAP_SYS_ADMIN.
pub fn mount_overlay(source: &str, target: &Path, options: &str) -> std::io::Result<()> {
    mount(source.as_bytes(), target, "overlay", options)
}

/// Mounts the filesystem of type `fstype` on the block device `device` at `target`, without
/// devices or setuid programs. Needs CAP_SYS_ADMIN.
pub fn mount_device(
    device: &Path,
    target: &Path,
    fstype: &str,
    options: &str,
) -> std::io::Result<()> {
    mount(
        device.as_os_str().as_encoded_bytes(),
        target,
        fstype,
        options,
    )
}

fn mount(source: &[u8], target: &Path, fstype: &str, options: &str) -> std::io::Result<()> {
    let source = c_string(source)?;
    let target = c_string(target.as_os_str().as_encoded_bytes())?;
    let fstype = c_string(fstype.as_bytes())?;
    let options = c_string(options.as_bytes())?;
    // SAFETY: every pointer is a NUL-terminated string we own for the duration of the call;
    // mount(2) copies them.
    let done = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NODEV | libc::MS_NOSUID,
            options.as_ptr().cast(),
        )
    };
    if done != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Bind-mounts `source` at `target` (not recursively). Needs CAP_SYS_ADMIN.
pub fn bind_mount(source: &Path, target: &Path) -> std::io::Result<()> {
    raw_mount(Some(source), target, libc::MS_BIND)
}

/// Makes the mount at `target` and every mount under it shared, so mounts made under it
/// later reach its slaves (a container's bind mount of it with `rslave` propagation).
pub fn make_rshared(target: &Path) -> std::io::Result<()> {
    raw_mount(None, target, libc::MS_SHARED | libc::MS_REC)
}

/// Makes the mount at `target` and every mount under it private: nothing mounted there
/// later propagates anywhere, and it leaves any peer group (a bind of a shared mount joins
/// the source's group).
pub fn make_rprivate(target: &Path) -> std::io::Result<()> {
    raw_mount(None, target, libc::MS_PRIVATE | libc::MS_REC)
}

/// Makes the bind mount at `target` read-only. The flag is the mount's own: it does not
/// reach copies of it that propagation already made (see `move_mount`).
pub fn remount_read_only(target: &Path) -> std::io::Result<()> {
    raw_mount(
        None,
        target,
        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
    )
}

/// Moves the mount at `from` to `to`; moved into a shared mount, it propagates with the
/// flags it has (a read-only bind stays read-only in every copy).
pub fn move_mount(from: &Path, to: &Path) -> std::io::Result<()> {
    raw_mount(Some(from), to, libc::MS_MOVE)
}

fn raw_mount(source: Option<&Path>, target: &Path, flags: libc::c_ulong) -> std::io::Result<()> {
    let source = source
        .map(|s| c_string(s.as_os_str().as_encoded_bytes()))
        .transpose()?;
    let target = c_string(target.as_os_str().as_encoded_bytes())?;
    let source_ptr = source.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    // SAFETY: every pointer is null or a NUL-terminated string we own for the duration of
    // the call; bind, move and propagation changes read no fstype or data.
    let done = unsafe {
        libc::mount(
            source_ptr,
            target.as_ptr(),
            std::ptr::null(),
            flags,
            std::ptr::null(),
        )
    };
    if done != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Unmounts the mount at `target`; with `detach`, lazily (it goes once nothing uses it).
pub fn unmount(target: &Path, detach: bool) -> std::io::Result<()> {
    let target = c_string(target.as_os_str().as_encoded_bytes())?;
    let flags = if detach { libc::MNT_DETACH } else { 0 } | libc::UMOUNT_NOFOLLOW;
    // SAFETY: the path is a NUL-terminated string we own for the duration of the call.
    if unsafe { libc::umount2(target.as_ptr(), flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn c_string(bytes: &[u8]) -> std::io::Result<std::ffi::CString> {
    std::ffi::CString::new(bytes)
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
}

/// Moves this process (single-threaded: the kernel refuses otherwise) into a new user and
/// network namespace (`runtime::microvm::jail`).
pub fn unshare_user_and_net() -> std::io::Result<()> {
    use rustix::thread::UnshareFlags as F;
    // SAFETY: FILES is not among the flags, so no thread loses the descriptors it uses.
    unsafe { rustix::thread::unshare_unsafe(F::NEWUSER | F::NEWNET) }.map_err(Into::into)
}
