//! The job ranges' unreachable route: paddock's sealed job networks take /28s of
//! 198.18.0.0/15, and an address there with no live network must never leave the host.
//!
//! A sealed network gives the host no address and so no route to its /28 (see
//! `runtime/docker/egress.rs`); without more, a connection from the host or from an `open`
//! job (forwarded from Docker's bridge) to any address of the range, a removed job's
//! included, follows the default route out of the machine. One `unreachable` route for the
//! whole /15 in the main table stops that: the kernel answers such a connection at once
//! with "No route to host" (EHOSTUNREACH on the host, ICMP host-unreachable to a forwarding
//! container). The members of a live network are unaffected: they reach each other on
//! their own bridge, by their own namespace's connected route, never through the host's.
//!
//! Invariants: the route is only ever added or replaced, never removed (harmless, and a
//! reboot clears it; paddock adds it again before its next job network). Only IPv4: job
//! networks have no IPv6. [`is_guarded`] reads `/proc/net/route` (any user);
//! [`install`] speaks rtnetlink and needs `CAP_NET_ADMIN` in the host's network namespace
//! (root, or the short-lived `paddock guard-ranges` container Docker runs for a user).

use std::io;
use std::net::Ipv4Addr;

/// First address of the range job networks' subnets come from.
pub const JOB_RANGE_START: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 0);
/// Prefix length of that range (/15: 8,192 /28s).
pub const JOB_RANGE_BITS: u8 = 15;

/// The range as `198.18.0.0/15`.
pub fn job_range() -> String {
    format!("{JOB_RANGE_START}/{JOB_RANGE_BITS}")
}

/// `RTF_REJECT` in `/proc/net/route`'s flags: an `unreachable` (or `prohibit`) route.
const RTF_REJECT: u32 = 0x0200;

/// Whether the host's main table has a reject route covering the whole job range.
pub fn is_guarded() -> io::Result<bool> {
    let table = std::fs::read_to_string("/proc/net/route")?;
    Ok(covers_range(&table))
}

/// Whether `/proc/net/route` text holds a reject route whose prefix contains the job range.
fn covers_range(table: &str) -> bool {
    let range = u32::from(JOB_RANGE_START);
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_iface, destination, _gateway, flags, _, _, _, mask, ..] = fields.as_slice() else {
            return false;
        };
        // The kernel prints each address as the raw network-order word read as a host u32.
        let address = |hex: &str| {
            u32::from_str_radix(hex, 16)
                .ok()
                .map(|word| u32::from(Ipv4Addr::from(word.to_ne_bytes())))
        };
        let (Some(destination), Some(mask), Ok(flags)) = (
            address(destination),
            address(mask),
            u32::from_str_radix(flags, 16),
        ) else {
            return false;
        };
        flags & RTF_REJECT != 0 && mask.leading_ones() <= u32::from(JOB_RANGE_BITS) && {
            range & mask == destination
        }
    })
}

// rtnetlink constants (linux/netlink.h, linux/rtnetlink.h).
const RTM_NEWROUTE: u16 = 24;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_REPLACE: u16 = 0x100;
const NLM_F_CREATE: u16 = 0x400;
const AF_INET: u8 = 2;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_STATIC: u8 = 4;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RTN_UNREACHABLE: u8 = 7;
const RTA_DST: u16 = 1;

/// The `RTM_NEWROUTE` request of `ip route replace unreachable 198.18.0.0/15`.
fn new_route_message() -> Vec<u8> {
    let mut message = Vec::with_capacity(36);
    message.extend_from_slice(&36u32.to_ne_bytes()); // nlmsg_len
    message.extend_from_slice(&RTM_NEWROUTE.to_ne_bytes());
    message.extend_from_slice(
        &(NLM_F_REQUEST | NLM_F_ACK | NLM_F_REPLACE | NLM_F_CREATE).to_ne_bytes(),
    );
    message.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    message.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
    // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags.
    message.extend_from_slice(&[
        AF_INET,
        JOB_RANGE_BITS,
        0,
        0,
        RT_TABLE_MAIN,
        RTPROT_STATIC,
        RT_SCOPE_UNIVERSE,
        RTN_UNREACHABLE,
    ]);
    message.extend_from_slice(&0u32.to_ne_bytes());
    // RTA_DST: rta_len, rta_type, the address in network order.
    message.extend_from_slice(&8u16.to_ne_bytes());
    message.extend_from_slice(&RTA_DST.to_ne_bytes());
    message.extend_from_slice(&JOB_RANGE_START.octets());
    debug_assert_eq!(message.len(), 36);
    message
}

/// Adds (or replaces) the unreachable route for the job range in the main table, through
/// rtnetlink, and waits for the kernel's answer. Needs `CAP_NET_ADMIN` (EPERM otherwise).
/// A netlink socket answers at once; a receive deadline still bounds the wait.
pub fn install() -> io::Result<()> {
    use rustix::net::{
        AddressFamily, RecvFlags, SendFlags, SocketType, netlink::SocketAddrNetlink, recv, sendto,
        socket, sockopt,
    };
    let socket = socket(AddressFamily::NETLINK, SocketType::RAW, None)?;
    sockopt::set_socket_timeout(
        &socket,
        sockopt::Timeout::Recv,
        Some(std::time::Duration::from_secs(5)),
    )?;
    sendto(
        &socket,
        &new_route_message(),
        SendFlags::empty(),
        &SocketAddrNetlink::new(0, 0),
    )?;
    let mut answer = [0u8; 1024];
    let (read, _) = recv(&socket, &mut answer, RecvFlags::empty())?;
    ack_of(&answer[..read])
}

/// The result an rtnetlink acknowledgement carries (an `NLMSG_ERROR` with errno 0 is
/// success).
fn ack_of(answer: &[u8]) -> io::Result<()> {
    let malformed = || io::Error::new(io::ErrorKind::InvalidData, "malformed netlink answer");
    let kind = answer.get(4..6).ok_or_else(malformed)?;
    let code = answer.get(16..20).ok_or_else(malformed)?;
    if u16::from_ne_bytes([kind[0], kind[1]]) != NLMSG_ERROR {
        return Err(malformed());
    }
    match i32::from_ne_bytes([code[0], code[1], code[2], code[3]]) {
        0 => Ok(()),
        negative => Err(io::Error::from_raw_os_error(-negative)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n";

    #[test]
    fn a_reject_route_over_the_range_guards_it_and_nothing_else_does() {
        assert!(!covers_range(TABLE), "a default route is no guard");
        let guarded = format!("{TABLE}*\t000012C6\t00000000\t0201\t0\t0\t0\t0000FEFF\t0\t0\t0\n");
        assert!(covers_range(&guarded));
        let wider = format!("{TABLE}*\t000000C6\t00000000\t0201\t0\t0\t0\t000000FF\t0\t0\t0\n");
        assert!(covers_range(&wider), "198.0.0.0/8 unreachable covers it");
        let half = format!("{TABLE}*\t000012C6\t00000000\t0201\t0\t0\t0\t0000FFFF\t0\t0\t0\n");
        assert!(!covers_range(&half), "198.18.0.0/16 leaves 198.19 open");
        let forwarded =
            format!("{TABLE}eth0\t000012C6\t010200C0\t0003\t0\t0\t0\t0000FEFF\t0\t0\t0\n");
        assert!(!covers_range(&forwarded), "a route out is no guard");
    }

    #[test]
    fn the_request_is_the_one_ip_route_sends() {
        let message = new_route_message();
        assert_eq!(message.len(), 36);
        assert_eq!(&message[16..24], &[2, 15, 0, 0, 254, 4, 0, 7]);
        assert_eq!(&message[32..36], &[198, 18, 0, 0]);
        let mut ack = vec![0u8; 36];
        ack[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        assert!(ack_of(&ack).is_ok());
        ack[16..20].copy_from_slice(&(-1i32).to_ne_bytes());
        assert_eq!(ack_of(&ack).unwrap_err().raw_os_error(), Some(1));
    }
}
