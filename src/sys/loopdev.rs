//! Loop devices for the jobs' disks: attaching an image file to a free device with autoclear,
//! and finding the device a file is already attached to. A disk image must never be behind
//! two loop devices at once: two ext4 instances of one image overwrite each other's writes.

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// `struct loop_info64` of `<linux/loop.h>`.
#[repr(C)]
#[derive(Clone, Copy)]
struct LoopInfo64 {
    device: u64,
    inode: u64,
    rdevice: u64,
    offset: u64,
    size_limit: u64,
    number: u32,
    encrypt_type: u32,
    encrypt_key_size: u32,
    flags: u32,
    file_name: [u8; 64],
    crypt_name: [u8; 64],
    encrypt_key: [u8; 32],
    init: [u64; 2],
}

/// `struct loop_config` of `<linux/loop.h>` (LOOP_CONFIGURE, Linux 5.8).
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const LOOP_SET_FD: libc::c_ulong = 0x4C00;
const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
const LOOP_SET_STATUS64: libc::c_ulong = 0x4C04;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// A loop device attached to a file. It is set to clear itself when its last user goes: once
/// this value is dropped, a filesystem mounted from it keeps it, and unmounting that frees
/// the device (nothing to detach by hand, even after a crash).
#[derive(Debug)]
pub struct LoopDevice {
    pub path: std::path::PathBuf,
    _device: std::fs::File,
}

/// Attaches `file` (opened read-write) to a free loop device (`/dev/loop-control`), with
/// autoclear. Retries when another process takes the free device first.
pub fn loop_attach(file: &std::fs::File, name: &Path) -> std::io::Result<LoopDevice> {
    let control = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/loop-control")?;
    let mut info = LoopInfo64 {
        device: 0,
        inode: 0,
        rdevice: 0,
        offset: 0,
        size_limit: 0,
        number: 0,
        encrypt_type: 0,
        encrypt_key_size: 0,
        flags: LO_FLAGS_AUTOCLEAR,
        file_name: [0; 64],
        crypt_name: [0; 64],
        encrypt_key: [0; 32],
        init: [0; 2],
    };
    // Shown by `losetup -a` (truncated to the kernel's 63 bytes).
    let bytes = name.as_os_str().as_encoded_bytes();
    let len = bytes.len().min(63);
    info.file_name[..len].copy_from_slice(&bytes[..len]);
    let mut last = std::io::Error::from(std::io::ErrorKind::ResourceBusy);
    for _ in 0..16 {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a device number.
        let number = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if number < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let path = std::path::PathBuf::from(format!("/dev/loop{number}"));
        let device = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)?;
        let config = LoopConfig {
            fd: u32::try_from(file.as_raw_fd()).map_err(|_| std::io::ErrorKind::InvalidInput)?,
            block_size: 0,
            info,
            reserved: [0; 8],
        };
        // SAFETY: LOOP_CONFIGURE reads the loop_config we own for the duration of the call;
        // both descriptors are open.
        let done = unsafe { libc::ioctl(device.as_raw_fd(), LOOP_CONFIGURE, &raw const config) };
        if done == 0 {
            return Ok(LoopDevice {
                path,
                _device: device,
            });
        }
        let error = std::io::Error::last_os_error();
        match error.raw_os_error() {
            // Taken by another process between the two calls: ask for another.
            Some(libc::EBUSY) => last = error,
            // Before Linux 5.8: attach, then set the flags.
            Some(libc::EINVAL | libc::ENOTTY) => {
                // SAFETY: LOOP_SET_FD takes the backing file's descriptor, open for the call.
                if unsafe { libc::ioctl(device.as_raw_fd(), LOOP_SET_FD, file.as_raw_fd()) } != 0 {
                    let error = std::io::Error::last_os_error();
                    if error.raw_os_error() == Some(libc::EBUSY) {
                        last = error;
                        continue;
                    }
                    return Err(error);
                }
                // SAFETY: LOOP_SET_STATUS64 reads the loop_info64 we own for the call.
                if unsafe { libc::ioctl(device.as_raw_fd(), LOOP_SET_STATUS64, &raw const info) }
                    != 0
                {
                    let error = std::io::Error::last_os_error();
                    // SAFETY: LOOP_CLR_FD takes no argument; it detaches what we attached.
                    unsafe { libc::ioctl(device.as_raw_fd(), LOOP_CLR_FD, 0) };
                    return Err(error);
                }
                return Ok(LoopDevice {
                    path,
                    _device: device,
                });
            }
            _ => return Err(error),
        }
    }
    Err(last)
}

const LOOP_GET_STATUS64: libc::c_ulong = 0x4C05;

/// The loop device `file` (the image at `image`) is already attached to, opened so that it
/// stays while the caller mounts it; `None` when it is attached to none.
///
/// An unmount only detaches the filesystem from one mount namespace: a process that copied
/// the mount table a moment before (any container being made) keeps the filesystem, and its
/// device, alive. Mounting the image again from a second device would make a second ext4 of
/// the same bytes, blind to what the first has not written back yet; mounting the first
/// device again gives the one live filesystem. Devices are picked by their backing file's
/// path in `/sys/block` (so no device of anyone else is opened) and confirmed by its device
/// and inode.
pub fn loop_backed_by(file: &std::fs::File, image: &Path) -> std::io::Result<Option<LoopDevice>> {
    let meta = file.metadata()?;
    let image = std::fs::canonicalize(image)?;
    for entry in std::fs::read_dir("/sys/block")?.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str().filter(|name| name.starts_with("loop")) else {
            continue;
        };
        // Only an attached device has a backing file.
        let Ok(backing) = std::fs::read_to_string(entry.path().join("loop/backing_file")) else {
            continue;
        };
        if Path::new(backing.trim_end_matches('\n')) != image {
            continue;
        }
        let path = PathBuf::from("/dev").join(name);
        let Ok(device) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
        else {
            continue;
        };
        // SAFETY: all-zero bytes are a valid loop_info64 (integers and byte arrays).
        let mut info: LoopInfo64 = unsafe { std::mem::zeroed() };
        // SAFETY: LOOP_GET_STATUS64 writes a loop_info64 into the one we own; the descriptor
        // is open. It fails (ENXIO) when the device was detached since sysfs was read.
        if unsafe { libc::ioctl(device.as_raw_fd(), LOOP_GET_STATUS64, &raw mut info) } != 0 {
            continue;
        }
        if info.inode == meta.ino() && info.device == meta.dev() {
            return Ok(Some(LoopDevice {
                path,
                _device: device,
            }));
        }
    }
    Ok(None)
}
