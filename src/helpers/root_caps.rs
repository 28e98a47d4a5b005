//! `root-caps`: how a command as root starts in a gVisor job with a writable root of its
//! own (`exec --user root`, the file API as root): with exactly the capabilities adding a
//! user and installing packages need ([`ROOT_CAPS`]), no more and no fewer.
//!
//! Docker gives an exec the capability sets of the container's own process, whatever the
//! exec's user (measured: docs/decisions.md), so no container setting gives root these and
//! the agent none. So root's exec is a privileged one (every capability, inside gVisor's
//! kernel) whose first program is this helper: the host's binary, loader and libraries,
//! bound read-only under `/.paddock-tools/exec` with an empty `/etc/ld.so.preload` over the
//! image's (`runtime/docker/resident.rs`, as for the exec server). It refuses to go on if
//! anything else was mapped into it, leaves only those three in the bounding, permitted and
//! effective sets (none inheritable or ambient), sets no_new_privs and execs the command,
//! which as uid 0 then holds them and nothing of the image ever ran with more.
//!
//! `no-caps` is the same start with nothing kept: every exec Docker starts in a container
//! whose main process is the exec server (which has SETUID, SETGID, SETPCAP and KILL, and
//! Docker gives each exec those whatever its user) starts through it, so the agent's
//! commands on Docker's exec path (a fallback, `paddock shell`, paddock's own helpers)
//! hold no capability. The loader's variables the exec asked for come in as
//! `PADDOCK_LOADER_<NAME>` (the exec's own `<NAME>` is emptied, so nothing loads into this
//! process) and are given back to the command under their names once nothing is kept.
//!
//! Invariants: nothing but paddock's own code (its start-up, then this file) runs between
//! the privileged start and the drop; a failed drop runs nothing (exit 126); the command's pid is this process's, so
//! the exec's signals and process group are the command's.

use std::os::unix::process::CommandExt as _;

use rustix::thread::CapabilitySet;

use crate::runtime::docker::resident::{LOADER_PREFIX, TOOLS_DIR};

/// The capabilities root keeps: CHOWN, DAC_OVERRIDE and FOWNER (`adduser` gives a new
/// home to its user and then writes into it; `dpkg` gives files to their owners).
pub const ROOT_CAPS: CapabilitySet = CapabilitySet::CHOWN
    .union(CapabilitySet::DAC_OVERRIDE)
    .union(CapabilitySet::FOWNER);

/// Keeps only [`ROOT_CAPS`], then execs `argv`; the exit code when it could not (126:
/// nothing ran).
pub fn run(argv: &[std::ffi::OsString]) -> i32 {
    start(argv, ROOT_CAPS, "root-caps")
}

/// Keeps no capability, gives the exec's loader variables back, then execs `argv`.
pub fn run_without(argv: &[std::ffi::OsString]) -> i32 {
    start(argv, CapabilitySet::empty(), "no-caps")
}

fn start(argv: &[std::ffi::OsString], keep: CapabilitySet, name: &str) -> i32 {
    let fail = |what: &str| {
        eprintln!("paddock {name}: {what}: nothing ran");
        126
    };
    if let Some(path) = std::fs::read_to_string("/proc/self/maps")
        .ok()
        .and_then(|maps| super::exec_server::foreign_in(&maps, TOOLS_DIR))
    {
        return fail(&format!("`{path}` is mapped and is not paddock's"));
    }
    let Some((program, args)) = argv.split_first() else {
        return fail("no command");
    };
    if let Err(error) = keep_only(keep) {
        return fail(&format!("dropping capabilities: {error}"));
    }
    let mut command = std::process::Command::new(program);
    command.args(args);
    if keep.is_empty() {
        for (key, value) in std::env::vars_os() {
            if let Some(name) = key.to_str().and_then(|k| k.strip_prefix(LOADER_PREFIX)) {
                command.env_remove(&key).env(name, value);
            }
        }
    }
    // exec only returns on failure.
    let error = command.exec();
    eprintln!(
        "paddock {name}: cannot run `{}`: {error}",
        program.to_string_lossy()
    );
    if error.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

/// Leaves `keep` alone in the bounding, permitted and effective sets, none inheritable or
/// ambient, and sets no_new_privs: root's command then holds `keep` across its exec (the
/// kernel gives root the bounding set) and can never gain another. The bounding set goes
/// first, while SETPCAP is still held; any failure is an error (not a privileged start).
fn keep_only(keep: CapabilitySet) -> std::io::Result<()> {
    use rustix::thread::{
        CapabilitySets, clear_ambient_capability_set, remove_capability_from_bounding_set,
        set_capabilities, set_no_new_privs,
    };
    // A command that is not root and holds nothing (an exec whose runtime gave it no
    // capability) cannot shrink its bounding set, and needs not: with no_new_privs it can
    // never gain what the set still names.
    let holds_nothing = keep.is_empty()
        && !rustix::process::getuid().is_root()
        && rustix::thread::capabilities(None).is_ok_and(|sets| sets.permitted.is_empty());
    for cap in CapabilitySet::all().difference(keep).iter() {
        match remove_capability_from_bounding_set(cap) {
            // A capability this kernel does not know: nothing to drop.
            Err(rustix::io::Errno::INVAL) | Ok(()) => {}
            Err(rustix::io::Errno::PERM) if holds_nothing => break,
            Err(error) => return Err(error.into()),
        }
    }
    let step = |what: &'static str| {
        move |error: rustix::io::Errno| {
            std::io::Error::new(
                std::io::Error::from(error).kind(),
                format!("{what}: {error}"),
            )
        }
    };
    match clear_ambient_capability_set() {
        // A kernel without ambient capabilities (gVisor 2022) has none to clear.
        Err(rustix::io::Errno::INVAL) | Ok(()) => {}
        Err(error) => return Err(step("clearing the ambient set")(error)),
    }
    set_capabilities(
        None,
        CapabilitySets {
            effective: keep,
            permitted: keep,
            inheritable: CapabilitySet::empty(),
        },
    )
    .map_err(step("setting the capability sets"))?;
    set_no_new_privs(true).map_err(step("setting no_new_privs"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The three capabilities are the bits `/proc/PID/status` shows as `000000000000000b`
    /// (what the integration test reads inside gVisor).
    #[test]
    fn root_keeps_chown_dac_override_and_fowner() {
        assert_eq!(ROOT_CAPS.bits(), 0xb);
    }

    /// Started from anywhere but paddock's own bound files (here: the test binary, with the
    /// host's libraries), it runs nothing: no privileged start ever execs a command with
    /// foreign code mapped into it.
    #[test]
    fn outside_the_tools_it_runs_nothing() {
        let marker = tempfile::tempdir().expect("a temp dir");
        let made = marker.path().join("ran");
        let argv: Vec<std::ffi::OsString> = vec!["touch".into(), made.clone().into_os_string()];
        assert_eq!(run(&argv), 126);
        assert_eq!(run_without(&argv), 126);
        assert!(!made.exists(), "the command ran");
    }
}
