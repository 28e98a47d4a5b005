//! Ports: what a job serves to the host. Each port of `limits.ports` gets a loopback port on
//! the host that paddock chooses at create (a free one that no other job of this install
//! holds, chosen under `locks/ports.lock`) and keeps in the record, so a restarted job
//! serves on the same address. The Docker runtime makes it reachable whatever the job's
//! network (see `runtime/docker/egress.rs`); the process runtime cannot map ports, so a job
//! asking for one there is refused before anything is made.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener};
use std::time::Duration;

use super::{Error, Paddock, Result};
use crate::job::{JobRecord, PublishedPort};
use crate::store::FileLock;

/// How long a create waits for another one choosing ports.
const LOCK_WAIT: Duration = Duration::from_secs(30);
/// Tries to find a free port that no job holds before giving up.
const TRIES: usize = 64;

/// Refuses ports a job cannot have: 0, one asked twice, or any on the process runtime.
pub(super) fn check_ports(ports: &[u16], reachable: bool) -> Result<()> {
    let mut seen = BTreeSet::new();
    for &port in ports {
        let reason = if port == 0 {
            "0 is not a port"
        } else if !seen.insert(port) {
            "it is given twice"
        } else if !reachable {
            "the process runtime runs the job on the host's own network, where ports cannot be mapped: use `--runtime docker`"
        } else {
            continue;
        };
        return Err(Error::Port {
            port,
            reason: reason.to_string(),
        });
    }
    Ok(())
}

impl Paddock {
    /// Chooses the host side of each of the job's ports and saves it in the record.
    pub(super) fn publish_ports(&self, record: &mut JobRecord) -> Result<()> {
        if record.limits.ports.is_empty() || !record.ports.is_empty() {
            return Ok(());
        }
        let _lock = FileLock::acquire(&self.home.locks_dir().join("ports.lock"), LOCK_WAIT)?;
        let (records, _) = self.store.list()?;
        let mut taken: BTreeSet<u16> = records
            .iter()
            .flat_map(|r| r.ports.iter().map(|p| p.host_port))
            .collect();
        for &port in &record.limits.ports {
            let host_port = free_loopback_port(&taken).map_err(|reason| Error::Port {
                port,
                reason: format!("no free port on 127.0.0.1: {reason}"),
            })?;
            taken.insert(host_port);
            record.ports.push(PublishedPort {
                port,
                host_ip: Ipv4Addr::LOCALHOST,
                host_port,
            });
        }
        // Saved under the lock, so the next create sees these ports as taken.
        self.store.save(record)?;
        Ok(())
    }
}

/// A loopback port the kernel says is free now and no job holds.
fn free_loopback_port(taken: &BTreeSet<u16>) -> std::result::Result<u16, String> {
    for _ in 0..TRIES {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| e.to_string())?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        if !taken.contains(&port) {
            return Ok(port);
        }
    }
    Err(format!("{TRIES} ports tried were all held by other jobs"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_checked_before_anything_is_made() {
        assert!(check_ports(&[3000, 8080], true).is_ok());
        assert!(check_ports(&[], false).is_ok());
        for (ports, runtime, needle) in [
            (&[0][..], true, "0 is not a port"),
            (&[3000, 3000][..], true, "twice"),
            (&[3000][..], false, "process runtime"),
        ] {
            let error = check_ports(ports, runtime).unwrap_err().to_string();
            assert!(error.contains(needle), "{error}");
        }
    }

    #[test]
    fn a_free_port_is_never_one_a_job_holds() {
        let first = free_loopback_port(&BTreeSet::new()).unwrap();
        let taken = BTreeSet::from([first]);
        for _ in 0..20 {
            assert_ne!(free_loopback_port(&taken).unwrap(), first);
        }
    }
}
