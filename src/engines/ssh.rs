//! `ssh://[USER@]HOST[:PORT]` engine addresses: parsed strictly, so nothing in one can
//! reach `ssh` as an option (`runtime::docker::ssh` runs it).

/// The parts of an `ssh://[USER@]HOST[:PORT]` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    /// `USER@HOST` or `HOST`.
    pub destination: String,
    pub port: Option<u16>,
}

/// Parses `ssh://[USER@]HOST[:PORT]` (no path, no options smuggled in as arguments).
pub fn parse(host: &str) -> Result<SshTarget, String> {
    let rest = host
        .strip_prefix("ssh://")
        .ok_or_else(|| format!("`{host}` is not an ssh:// address"))?;
    let rest = rest.trim_end_matches('/');
    let (destination, port) = match rest.rsplit_once(':') {
        Some((destination, port)) if !destination.contains(']') || destination.ends_with(']') => {
            let port: u16 = port
                .parse()
                .map_err(|_| format!("`{host}`: `{port}` is not a port"))?;
            (destination, Some(port))
        }
        _ => (rest, None),
    };
    let ok = !destination.is_empty()
        && !destination.starts_with('-')
        && destination
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "@.-_[]:".contains(c));
    if !ok {
        return Err(format!(
            "`{host}`: use ssh://USER@HOST or ssh://USER@HOST:PORT"
        ));
    }
    Ok(SshTarget {
        destination: destination.to_string(),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_addresses_parse_and_options_cannot_be_smuggled() {
        assert_eq!(
            parse("ssh://me@build1").unwrap(),
            SshTarget {
                destination: "me@build1".into(),
                port: None
            }
        );
        assert_eq!(
            parse("ssh://me@10.0.0.2:2222").unwrap(),
            SshTarget {
                destination: "me@10.0.0.2".into(),
                port: Some(2222)
            }
        );
        for bad in [
            "ssh://-oProxyCommand=x",
            "ssh://me@h:notaport",
            "ssh://",
            "ssh://me@h/path with space",
            "tcp://h:2376",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
