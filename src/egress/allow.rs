//! An egress allow-list's entries: which `host:port` destinations a job's proxy lets through.
//!
//! An entry is a host name (`registry.example.org`), a wildcard over subdomains
//! (`*.pkg.example.net`: any name ending in `.pkg.example.net`, not the bare name), an IP
//! address or a CIDR (`10.1.2.0/24`), each with an optional port (`github.com:443`,
//! `[::1]:8080`); without a port it allows 80 and 443. Names compare without case and
//! without a trailing dot.
//!
//! Two checks, both must pass: the *name* the client asked for (CONNECT host, or the Host of
//! a plain request) must match an entry; and each *address* the proxy connects to must be a
//! public one, or be named explicitly by an IP or CIDR entry (so an allowed name that
//! resolves to loopback, link-local, a private range or the host's own address is refused
//! unless the user listed that address too).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::units::UnitError;

/// The ports an entry without a port allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// What an entry matches before its port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// One host name, lowercase, without a trailing dot.
    Name(String),
    /// `*.suffix`: any name ending in `.suffix` (lowercase).
    Subdomains(String),
    /// An address range: network address and prefix length.
    Network(IpAddr, u8),
}

/// One allow-list entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowEntry {
    pub pattern: Pattern,
    /// `None`: the default ports.
    pub port: Option<u16>,
}

fn invalid(input: &str) -> UnitError {
    UnitError {
        what: "allow entry",
        input: input.to_string(),
        expected: "HOST, *.DOMAIN, IP or CIDR, with an optional :PORT (github.com:443, *.example.org, 10.0.0.0/8:5432)",
    }
}

/// A host name as the policy compares it.
pub fn normalize_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                && !label.starts_with('-')
        })
}

impl FromStr for AllowEntry {
    type Err = UnitError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let text = input.trim();
        // Split off a port: `[v6]:port`, `host:port`; a bare IPv6 address has several colons.
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (addr, after) = rest.split_once(']').ok_or_else(|| invalid(input))?;
            let port = match after.strip_prefix(':') {
                Some(port) => Some(port),
                None if after.is_empty() => None,
                None => return Err(invalid(input)),
            };
            (addr, port)
        } else if text.matches(':').count() == 1 {
            let (host, port) = text.split_once(':').expect("one colon");
            (host, Some(port))
        } else {
            (text, None)
        };
        let port = match port {
            Some(port) => Some(
                port.parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| invalid(input))?,
            ),
            None => None,
        };
        let pattern = if let Some((addr, prefix)) = host.split_once('/') {
            let addr: IpAddr = addr.parse().map_err(|_| invalid(input))?;
            let prefix: u8 = prefix.parse().map_err(|_| invalid(input))?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            if prefix > max {
                return Err(invalid(input));
            }
            Pattern::Network(addr, prefix)
        } else if let Ok(addr) = host.parse::<IpAddr>() {
            Pattern::Network(addr, if addr.is_ipv4() { 32 } else { 128 })
        } else if let Some(suffix) = host.strip_prefix("*.") {
            let suffix = normalize_name(suffix);
            if !valid_name(&suffix) || !suffix.contains('.') && suffix.len() < 2 {
                return Err(invalid(input));
            }
            Pattern::Subdomains(suffix)
        } else {
            let name = normalize_name(host);
            if !valid_name(&name) {
                return Err(invalid(input));
            }
            Pattern::Name(name)
        };
        Ok(AllowEntry { pattern, port })
    }
}

impl fmt::Display for AllowEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = match &self.pattern {
            Pattern::Name(name) => name.clone(),
            Pattern::Subdomains(suffix) => format!("*.{suffix}"),
            Pattern::Network(addr, prefix) if u32::from(*prefix) == max_prefix(*addr) => {
                match (addr, self.port) {
                    (IpAddr::V6(v6), Some(_)) => format!("[{v6}]"),
                    _ => addr.to_string(),
                }
            }
            Pattern::Network(addr, prefix) => format!("{addr}/{prefix}"),
        };
        match self.port {
            Some(port) => write!(f, "{host}:{port}"),
            None => f.write_str(&host),
        }
    }
}

impl Serialize for AllowEntry {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for AllowEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

fn max_prefix(addr: IpAddr) -> u32 {
    if addr.is_ipv4() { 32 } else { 128 }
}

fn in_network(addr: IpAddr, network: IpAddr, prefix: u8) -> bool {
    let addr = match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    match (addr, network) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

impl AllowEntry {
    fn allows_port(&self, port: u16) -> bool {
        match self.port {
            Some(allowed) => allowed == port,
            None => DEFAULT_PORTS.contains(&port),
        }
    }

    /// Whether this entry lets a client ask for `host:port` (a name or an address literal).
    pub fn allows_request(&self, host: &str, port: u16) -> bool {
        self.allows_port(port) && self.matches_host(host)
    }

    /// Whether this entry matches `host`, whatever the port.
    pub fn matches_host(&self, host: &str) -> bool {
        let literal = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>();
        match (&self.pattern, literal) {
            (Pattern::Network(network, prefix), Ok(addr)) => in_network(addr, *network, *prefix),
            (Pattern::Name(name), Err(_)) => normalize_name(host) == *name,
            (Pattern::Subdomains(suffix), Err(_)) => normalize_name(host)
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.ends_with('.') && head.len() > 1),
            _ => false,
        }
    }

    /// Whether this entry names `addr` explicitly (an IP or CIDR entry containing it).
    pub fn names_address(&self, addr: IpAddr, port: u16) -> bool {
        match &self.pattern {
            Pattern::Network(network, prefix) => {
                self.allows_port(port) && in_network(addr, *network, *prefix)
            }
            _ => false,
        }
    }
}

/// Addresses that are never a public destination: loopback, link-local, private and
/// shared ranges, unspecified, multicast, documentation and other reserved blocks.
pub fn is_special_address(addr: IpAddr) -> bool {
    const SPECIAL: [(&str, u8); 17] = [
        ("0.0.0.0", 8),
        ("10.0.0.0", 8),
        ("100.64.0.0", 10),
        ("127.0.0.0", 8),
        ("169.254.0.0", 16),
        ("172.16.0.0", 12),
        ("192.0.0.0", 24),
        ("192.168.0.0", 16),
        ("198.18.0.0", 15),
        ("224.0.0.0", 3),
        ("::", 128),
        ("::1", 128),
        ("fc00::", 7),
        ("fe80::", 10),
        ("ff00::", 8),
        ("64:ff9b::", 96),
        ("2001:db8::", 32),
    ];
    SPECIAL.iter().any(|(network, prefix)| {
        in_network(
            addr,
            network.parse().expect("the table holds addresses"),
            *prefix,
        )
    })
}
