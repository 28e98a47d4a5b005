//! What the proxy enforces for one job ([`EgressPolicy`]): its allow-list (entries in
//! [`super::allow`]), the host's own addresses and its secrets' rules.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

pub use super::allow::{AllowEntry, DEFAULT_PORTS, Pattern, is_special_address, normalize_name};

/// What the proxy enforces for one job: the allow-list, and the host's own addresses (never
/// a destination unless named). Written by paddock as `policy.json` in the job's egress
/// directory, read by the proxy at each new connection, so a change applies to the next
/// connection without a restart.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressPolicy {
    pub allow: Vec<AllowEntry>,
    #[serde(default)]
    pub host_addresses: Vec<IpAddr>,
    /// The job's secrets as the proxy matches them (no values: those come over the
    /// proxy's control socket, see `egress::secrets`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<super::secrets::SecretRule>,
}

/// Why a destination was allowed or refused, in the words of `egress.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    pub reason: String,
}

impl Verdict {
    fn deny(reason: impl Into<String>) -> Verdict {
        Verdict {
            allowed: false,
            reason: reason.into(),
        }
    }
}

impl EgressPolicy {
    /// The name check: may a client ask for `host:port` at all?
    pub fn check_request(&self, host: &str, port: u16) -> Verdict {
        match self.allow.iter().find(|e| e.allows_request(host, port)) {
            Some(entry) => Verdict {
                allowed: true,
                reason: format!("allowed by {entry}"),
            },
            None if self.allow.iter().any(|e| e.matches_host(host)) => {
                Verdict::deny(format!("port {port} is not allowed for {host}"))
            }
            None => Verdict::deny(format!("{host} is not in the allow-list")),
        }
    }

    /// The address check, for each address a name resolved to.
    pub fn check_address(&self, addr: IpAddr, port: u16) -> Verdict {
        let named = self.allow.iter().any(|e| e.names_address(addr, port));
        if named {
            return Verdict {
                allowed: true,
                reason: format!("{addr} is listed"),
            };
        }
        if self.host_addresses.contains(&addr) {
            return Verdict::deny(format!("{addr} is this host's own address"));
        }
        if is_special_address(addr) {
            return Verdict::deny(format!(
                "{addr} is a loopback, link-local or private address not listed by IP"
            ));
        }
        Verdict {
            allowed: true,
            reason: format!("{addr} is public"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(text: &str) -> AllowEntry {
        text.parse().unwrap()
    }

    #[test]
    fn entries_parse_and_print_back() {
        for text in [
            "registry.example.org",
            "*.pkg.example.net",
            "github.com:443",
            "10.1.2.3:5432",
            "10.0.0.0/8",
            "192.168.1.0/24:8080",
            "::1",
            "[::1]:8080",
            "fd00::/8",
        ] {
            assert_eq!(entry(text).to_string(), text, "{text}");
        }
        assert_eq!(entry("GitHub.COM.").to_string(), "github.com");
        for bad in [
            "",
            "*.",
            "a..b",
            "host:0",
            "host:99999",
            "10.0.0.0/33",
            "-x.org",
            "a b",
            "[::1",
        ] {
            assert!(bad.parse::<AllowEntry>().is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn names_ports_and_wildcards() {
        let policy = EgressPolicy {
            allow: vec![
                entry("registry.example.org"),
                entry("*.pkg.example.net"),
                entry("git.example.com:22"),
            ],
            host_addresses: vec![],
            secrets: vec![],
        };
        assert!(policy.check_request("registry.example.org", 443).allowed);
        assert!(policy.check_request("REGISTRY.example.org.", 80).allowed);
        assert!(!policy.check_request("registry.example.org", 8443).allowed);
        assert!(
            policy
                .check_request("registry.example.org", 8443)
                .reason
                .contains("port 8443")
        );
        assert!(policy.check_request("a.pkg.example.net", 443).allowed);
        assert!(policy.check_request("a.b.pkg.example.net", 443).allowed);
        assert!(!policy.check_request("pkg.example.net", 443).allowed);
        assert!(!policy.check_request("evilpkg.example.net", 443).allowed);
        assert!(policy.check_request("git.example.com", 22).allowed);
        assert!(!policy.check_request("git.example.com", 443).allowed);
        assert!(!policy.check_request("example.org", 443).allowed);
        assert!(!policy.check_request("10.1.2.3", 443).allowed);
    }

    #[test]
    fn private_and_own_addresses_need_an_explicit_entry() {
        let mut policy = EgressPolicy {
            allow: vec![entry("internal.example"), entry("10.1.2.0/24:5432")],
            host_addresses: vec!["203.0.113.7".parse().unwrap()],
            secrets: vec![],
        };
        let addr = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(policy.check_address(addr("93.184.216.34"), 443).allowed);
        for special in [
            "127.0.0.1",
            "10.9.9.9",
            "172.17.0.1",
            "192.168.0.1",
            "169.254.169.254",
            "::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
        ] {
            assert!(
                !policy.check_address(addr(special), 443).allowed,
                "{special}"
            );
        }
        assert!(!policy.check_address(addr("203.0.113.7"), 443).allowed);
        assert!(policy.check_address(addr("10.1.2.3"), 5432).allowed);
        assert!(!policy.check_address(addr("10.1.2.3"), 443).allowed);
        policy.allow.push(entry("172.17.0.1:8443"));
        assert!(policy.check_address(addr("172.17.0.1"), 8443).allowed);
    }
}
