//! The microVM half of the warm pool (slots, their records and mounts are `crate::pool`;
//! fill, claim and drain `engine::pool`): a slot is a VM booted ahead of creates with the
//! profile's image, vCPUs, memory, pids and network (`none` or `open`), its guest agent
//! answering, and none of a job's files.
//!
//! The slot's VM has one virtiofsd whose source is the slot's shared `mnt/` and whose mount
//! namespace is a slave of the host's, so the trees a claim moves into `mnt/` (`workspace`,
//! `paddock/git`, `paddock/outbox`, `objects`, each assembled in the slot's `stage/` with
//! its read-only parts made read-only there, as for a container) appear under virtiofsd's
//! root; they appear below it, never on it, because virtiofsd holds its root directory
//! open and would keep serving what was there before. The guest's init does not mount
//! that share: at the claim the agent mounts it, binds each part at its place (read-only
//! ones read-only) and detaches the share ([`ToGuest::Mount`]), so the guest never caches
//! the empty slot. The borrowed object stores are shared at boot, read-only at their own
//! paths, as in every job's VM: a slot is of one repository.
//!
//! A claimed slot's VM stays in the slot's `vm/` directory, which its QEMU and virtiofsd
//! name in their command lines: the job's record names the slot, so the job's
//! [`VmDir`] is that directory (stop, destroy and the next exec's boot go there), and the
//! sweep keeps a VM whose slot a recorded job claimed. vCPUs and memory are fixed at boot:
//! a job claims a slot only when its CPU, memory and pids limits are the slot's.
//!
//! Hardened as a cold VM: QEMU and virtiofsd run in the slot's host cgroup
//! (`slot-<slot>`, [`super::cgroup::VmCgroup::of_slot`]), which the claiming job keeps
//! ([`vm::cgroup`]) and whose stop, rm and the sweep remove, as [`remove_slot`] does; the
//! writable share's virtiofsd is the jailed one ([`super::jail`]), which makes no mount
//! namespace of its own, so the slave one still brings it the claim's mounts.

use std::time::Duration;

use tokio::io::AsyncWriteExt as _;

use super::protocol::{FromGuest, GuestMount, ToGuest, encode, read_frame_async};
use super::vm::{self, Share, VmDir};
use super::{BOOT_DEADLINE, MicrovmError, MicrovmRuntime, exec};
use crate::config::NetworkMode;
use crate::job::JobRecord;
use crate::pool::{HostBind, PoolSlot, PoolSlots};
use crate::runtime::RuntimeError;
use crate::store::PaddockHome;

/// The virtiofs tag of a slot's share.
pub const POOL_TAG: &str = "pool";
/// How long the guest may take to mount a claimed slot's share.
const MOUNT_DEADLINE: Duration = Duration::from_secs(30);

/// Boots a slot's VM and waits for its guest agent; returns `qemu:<pid>`.
pub async fn start_slot(runtime: &MicrovmRuntime, slot: &PoolSlot) -> Result<String, MicrovmError> {
    let limits = &slot.limits;
    let netdev = match limits.network {
        NetworkMode::None => None,
        NetworkMode::Open => Some("ipv6=off".to_string()),
        NetworkMode::Allowlist => {
            return Err(MicrovmError::Config {
                message: "an allowlist VM's egress proxy is made with its job: it starts cold"
                    .into(),
            });
        }
    };
    let vm = VmDir::of_slot(&runtime.home, &slot.id);
    let mut shares = vec![Share {
        tag: POOL_TAG.into(),
        host: PoolSlots::of(&runtime.home).mnt(&slot.id),
        guest: "/".into(),
        read_only: false,
        protected: vec![],
        later: true,
    }];
    shares.extend(vm::nested_object_shares(&slot.git_common_dir));
    let cgroup = super::cgroup::VmCgroup::of_slot(runtime.home.id(), &slot.id)?;
    let pid = runtime
        .boot_vm(&vm, &slot.id, &cgroup, limits, &shares, netdev)
        .await?;
    if let Err(error) = exec::connect(&vm, BOOT_DEADLINE).await {
        vm::kill_all(&vm, Duration::from_secs(1)).await;
        return Err(error);
    }
    Ok(format!("qemu:{pid}"))
}

/// The host binds that put `record`'s files into a slot's `mnt/`, and the guest's binds of
/// them, or why the job cannot start in a slot. Both come from the cold VM's shares, so a
/// warm job sees what a cold one does, with the same parts read-only on the host.
pub fn layout(record: &JobRecord) -> Result<(Vec<HostBind>, Vec<GuestMount>), String> {
    if record.limits.network == NetworkMode::Allowlist {
        return Err(
            "an allowlist job's egress proxy and restricted NIC are made with its VM".into(),
        );
    }
    let mut binds = Vec::new();
    let mut mounts = Vec::new();
    for share in vm::shares(record).map_err(|e| e.to_string())? {
        let top = match share.tag.as_str() {
            "ws" => "workspace",
            "git" => "paddock/git",
            "outbox" => "paddock/outbox",
            "objects" => "objects",
            // Shared at the slot's boot, at their own paths.
            tag if tag.starts_with("alt") => continue,
            tag => return Err(format!("the share `{tag}` has no place in a pool slot")),
        };
        binds.push(HostBind {
            source: share.host.clone(),
            target: top.into(),
            read_only: share.read_only,
        });
        for path in &share.protected {
            let inside = path
                .strip_prefix(&share.host)
                .map_err(|_| format!("`{}` is outside its share", path.display()))?;
            binds.push(HostBind {
                source: path.clone(),
                target: std::path::Path::new(top).join(inside),
                read_only: true,
            });
        }
        mounts.push(GuestMount {
            source: top.into(),
            target: share.guest.display().to_string(),
            read_only: share.read_only,
        });
    }
    Ok((binds, mounts))
}

/// Hands a claimed slot's VM to `record` before its files are mounted: the VM must still
/// run with the job's limits, and the job's files go to the agent's uid. Returns
/// `qemu:<pid>`.
pub async fn adopt(
    runtime: &MicrovmRuntime,
    record: &JobRecord,
    slot: &PoolSlot,
) -> Result<String, MicrovmError> {
    let (wanted, had) = (&record.limits, &slot.limits);
    if (wanted.memory, wanted.cpus, wanted.pids) != (had.memory, had.cpus, had.pids) {
        return Err(MicrovmError::Config {
            message: "the slot's VM was booted with other CPU, memory or pids limits".into(),
        });
    }
    let vm = VmDir::of_slot(&runtime.home, &slot.id);
    let pid = vm
        .qemu_pid()
        .ok_or_else(|| MicrovmError::not_running(&vm))?;
    if let Some((uid, _)) = runtime.layout.files_owner(record) {
        let granted = record.clone();
        tokio::task::spawn_blocking(move || {
            crate::runtime::access::grant_agent_access(&granted, uid)
        })
        .await
        .expect("granting access does not panic")?;
    }
    Ok(format!("qemu:{pid}"))
}

/// Once the job's files are in the slot's `mnt/`: the guest mounts them at their places.
pub async fn mount_claimed(
    home: &PaddockHome,
    record: &JobRecord,
    slot: &PoolSlot,
) -> Result<(), MicrovmError> {
    let (_, mounts) = layout(record).map_err(|message| MicrovmError::Config { message })?;
    let vm = VmDir::of_slot(home, &slot.id);
    let mut channel = exec::connect(&vm, MOUNT_DEADLINE).await?;
    let id = channel.next_id;
    let order = ToGuest::Mount {
        id,
        tag: POOL_TAG.into(),
        mounts,
    };
    channel.stream.write_all(&encode(&order)).await?;
    let answer = tokio::time::timeout(MOUNT_DEADLINE, async {
        loop {
            match read_frame_async::<FromGuest>(&mut channel.stream).await? {
                FromGuest::Exit { id: got, code, .. } if got == id => {
                    return if code == 0 {
                        Ok(())
                    } else {
                        Err(MicrovmError::Exec {
                            message: format!("mounting the pool share exited {code}"),
                        })
                    };
                }
                FromGuest::Failed { id: got, message } if got == id => {
                    return Err(MicrovmError::Exec { message });
                }
                // The tail of an earlier client's frames.
                _ => {}
            }
        }
    })
    .await;
    answer.unwrap_or_else(|_| {
        Err(MicrovmError::NoAnswer {
            after: MOUNT_DEADLINE,
            message: "the guest did not report mounting the pool share".into(),
            console: exec::tail(&vm.console()),
        })
    })
}

/// Ends a slot's VM (waiting or claimed) and removes its `vm/` directory, so the slot's
/// skeleton can go.
pub async fn remove_slot(home: &PaddockHome, slot: &PoolSlot) -> Result<(), RuntimeError> {
    if !slot.id.starts_with("pool-") || slot.id.contains('/') {
        return Err(RuntimeError::NotOurContainer {
            name: slot.id.clone(),
        });
    }
    let vm = VmDir::of_slot(home, &slot.id);
    vm::kill_all(&vm, Duration::from_secs(2)).await;
    let cgroup = super::cgroup::VmCgroup::of_slot(home.id(), &slot.id);
    super::error::end_cgroup(cgroup, &slot.id).await?;
    match std::fs::remove_dir_all(&vm.dir) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(RuntimeError::Io {
            path: vm.dir,
            source: error,
        }),
        _ => Ok(()),
    }
}
