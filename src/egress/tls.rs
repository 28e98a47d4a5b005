//! Just enough TLS to stop domain fronting: the server name (SNI) of a ClientHello, read
//! from the first record a client sends through a CONNECT tunnel, before anything of it
//! goes upstream. Nothing is decrypted; a ClientHello that cannot be read is refused.

use super::policy::normalize_name;

/// Refuses a TLS ClientHello whose server name is not the CONNECT host.
pub fn check_sni(first: &[u8], host: &str) -> Result<(), String> {
    if first.first() != Some(&0x16) {
        return Ok(());
    }
    match server_name(first) {
        Some(Ok(name)) if normalize_name(&name) == normalize_name(host) => Ok(()),
        Some(Ok(name)) => Err(format!(
            "TLS server name `{name}` differs from the CONNECT host `{host}`"
        )),
        Some(Err(())) => Err("unreadable TLS ClientHello".into()),
        None => Ok(()),
    }
}

/// The SNI of a TLS ClientHello record: `None` without one, `Some(Err)` when malformed.
pub fn server_name(record: &[u8]) -> Option<Result<String, ()>> {
    fn parse(record: &[u8]) -> Result<Option<String>, ()> {
        let mut at = Reader {
            data: record,
            at: 0,
        };
        at.skip(5)?; // record header
        if at.u8()? != 1 {
            return Err(()); // not a ClientHello
        }
        at.skip(3 + 2 + 32)?; // length, version, random
        let session = usize::from(at.u8()?);
        at.skip(session)?;
        let suites = usize::from(at.u16()?);
        at.skip(suites)?;
        let compression = usize::from(at.u8()?);
        at.skip(compression)?;
        if at.at == at.data.len() {
            return Ok(None);
        }
        let extensions_end = at.at + usize::from(at.u16()?);
        while at.at + 4 <= extensions_end {
            let kind = at.u16()?;
            let len = usize::from(at.u16()?);
            if kind != 0 {
                at.skip(len)?;
                continue;
            }
            let list_end = at.at + usize::from(at.u16()?);
            while at.at + 3 <= list_end {
                let name_type = at.u8()?;
                let name_len = usize::from(at.u16()?);
                let name = at.take(name_len)?;
                if name_type == 0 {
                    return String::from_utf8(name.to_vec()).map(Some).map_err(|_| ());
                }
            }
            return Err(());
        }
        Ok(None)
    }
    match parse(record) {
        Ok(Some(name)) => Some(Ok(name)),
        Ok(None) => None,
        Err(()) => Some(Err(())),
    }
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ()> {
        let end = self.at.checked_add(n).ok_or(())?;
        let slice = self.data.get(self.at..end).ok_or(())?;
        self.at = end;
        Ok(slice)
    }
    fn skip(&mut self, n: usize) -> Result<(), ()> {
        self.take(n).map(drop)
    }
    fn u8(&mut self) -> Result<u8, ()> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, ()> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
}

/// A ClientHello carrying `name` as its SNI (for tests of the SNI check).
pub fn client_hello(name: &str) -> Vec<u8> {
    let name = name.as_bytes();
    let name_len = u16::try_from(name.len()).expect("a short name");
    let mut sni = Vec::new();
    sni.extend_from_slice(&(name_len + 3).to_be_bytes());
    sni.push(0);
    sni.extend_from_slice(&name_len.to_be_bytes());
    sni.extend_from_slice(name);
    let mut extensions = vec![0, 0];
    extensions.extend_from_slice(&u16::try_from(sni.len()).expect("short").to_be_bytes());
    extensions.extend_from_slice(&sni);
    let mut hello = vec![3, 3];
    hello.extend_from_slice(&[0u8; 32]);
    hello.push(0); // session id
    hello.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
    hello.extend_from_slice(&[1, 0]); // no compression
    hello.extend_from_slice(
        &u16::try_from(extensions.len())
            .expect("short")
            .to_be_bytes(),
    );
    hello.extend_from_slice(&extensions);
    let mut handshake = vec![1];
    let len = u32::try_from(hello.len()).expect("short").to_be_bytes();
    handshake.extend_from_slice(&len[1..]);
    handshake.extend_from_slice(&hello);
    let mut record = vec![0x16, 3, 1];
    record.extend_from_slice(&u16::try_from(handshake.len()).expect("short").to_be_bytes());
    record.extend_from_slice(&handshake);
    record
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_name_is_read_from_a_client_hello() {
        assert_eq!(
            server_name(&client_hello("Registry.Example.org")),
            Some(Ok("Registry.Example.org".into()))
        );
        assert!(
            check_sni(
                &client_hello("registry.example.org."),
                "registry.example.org"
            )
            .is_ok()
        );
        let fronted = check_sni(&client_hello("evil.example"), "registry.example.org");
        assert!(fronted.unwrap_err().contains("evil.example"));
        let mut truncated = client_hello("a.example");
        truncated.truncate(truncated.len() - 3);
        assert_eq!(server_name(&truncated), Some(Err(())));
        assert!(check_sni(b"SSH-2.0-OpenSSH\r\n", "git.example").is_ok());
    }
}
