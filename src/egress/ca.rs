//! The install's CA for the hosts whose TLS the egress proxy terminates (hosts that carry a
//! secret), and the certificates it signs for a job.
//!
//! The CA's key is `$PADDOCK_HOME/egress-ca/ca-key.pem` (mode 0600, in a 0700 directory:
//! paddock's user only), made once per install and never mounted anywhere: paddock signs a
//! job's certificate (its secret hosts as names) on the host at each start of the job's proxy
//! and sends it, with a fresh key, over the proxy's control socket. Jobs trust the CA
//! through a bundle of the host's roots plus it (`bundle`).

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};

use super::AllowEntry;
use super::policy::Pattern;

/// The CA's directory in an install.
pub fn dir(root: &Path) -> PathBuf {
    root.join("egress-ca")
}

/// The CA's fixed parameters: the same each time, so a certificate signed with them (and
/// the stored key) chains to the stored CA certificate.
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "paddock egress CA (this install)");
    params
        .distinguished_name
        .push(DnType::OrganizationName, "paddock");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.serial_number = Some(SerialNumber::from_slice(&[0x50, 0x41, 0x44, 0x01]));
    params.not_before = rcgen::date_time_ymd(2024, 1, 1);
    params.not_after = rcgen::date_time_ymd(2100, 1, 1);
    params
}

/// The install's CA: its key (made when missing) and its certificate (PEM).
pub struct InstallCa {
    key: KeyPair,
    pub cert_pem: String,
}

fn io(path: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", path.display())
}

impl InstallCa {
    /// Loads the CA of the install at `root`, making it the first time.
    pub fn load_or_create(root: &Path) -> Result<InstallCa, String> {
        let dir = dir(root);
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io(&dir, e))?;
        let key_path = dir.join("ca-key.pem");
        if !key_path.exists() {
            let key = KeyPair::generate().map_err(|e| e.to_string())?;
            let temp = dir.join(format!(".ca-key.{}", crate::ids::random_hex(8)));
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&temp)
                .map_err(|e| io(&temp, e))?;
            file.write_all(key.serialize_pem().as_bytes())
                .and_then(|()| file.sync_all())
                .map_err(|e| io(&temp, e))?;
            // Two processes making it at once: the first link wins, both use its key.
            let _ = std::fs::hard_link(&temp, &key_path);
            let _ = std::fs::remove_file(&temp);
        }
        let text = std::fs::read_to_string(&key_path).map_err(|e| io(&key_path, e))?;
        let key = KeyPair::from_pem(&text).map_err(|e| io(&key_path, e))?;
        let cert_pem = ca_params()
            .self_signed(&key)
            .map_err(|e| e.to_string())?
            .pem();
        let cert_path = dir.join("ca.pem");
        if !cert_path.exists() {
            crate::atomic::write_atomic(&cert_path, cert_pem.as_bytes(), false)
                .map_err(|e| io(&cert_path, e))?;
        }
        let cert_pem = std::fs::read_to_string(&cert_path).map_err(|e| io(&cert_path, e))?;
        Ok(InstallCa { key, cert_pem })
    }

    /// A certificate for `hosts` (names, `*.domain`s, single addresses) with a new key:
    /// (certificate PEM, key PEM).
    pub fn sign(&self, hosts: &[AllowEntry]) -> Result<(String, String), String> {
        let mut names: Vec<String> = Vec::new();
        for host in hosts {
            let name = match &host.pattern {
                Pattern::Name(name) => name.clone(),
                Pattern::Subdomains(suffix) => format!("*.{suffix}"),
                Pattern::Network(addr, _) => addr.to_string(),
            };
            if !names.contains(&name) {
                names.push(name);
            }
        }
        let mut params = CertificateParams::new(names).map_err(|e| e.to_string())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "paddock egress (a job's secret hosts)");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let now = chrono::Utc::now();
        let day = |t: chrono::DateTime<chrono::Utc>| {
            use chrono::Datelike;
            rcgen::date_time_ymd(
                t.year(),
                u8::try_from(t.month()).unwrap_or(1),
                u8::try_from(t.day()).unwrap_or(1),
            )
        };
        params.not_before = day(now - chrono::Duration::days(2));
        params.not_after = day(now + chrono::Duration::days(365));
        let key = KeyPair::generate().map_err(|e| e.to_string())?;
        let issuer = Issuer::new(ca_params(), &self.key);
        let cert = params.signed_by(&key, &issuer).map_err(|e| e.to_string())?;
        Ok((cert.pem(), key.serialize_pem()))
    }
}

/// The host's roots as PEM (what the proxy verifies upstream servers with, and the base of
/// the jobs' bundle).
pub fn host_roots_pem() -> String {
    use base64::Engine as _;
    let found = rustls_native_certs::load_native_certs();
    let mut pem = String::new();
    for cert in found.certs {
        let text = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in text.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    pem
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_is_made_once_and_signs_for_the_hosts() {
        let dir = tempfile::tempdir().unwrap();
        let ca = InstallCa::load_or_create(dir.path()).unwrap();
        let again = InstallCa::load_or_create(dir.path()).unwrap();
        assert_eq!(ca.cert_pem, again.cert_pem);
        let key = super::dir(dir.path()).join("ca-key.pem");
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let hosts: Vec<AllowEntry> = ["api.example.org", "*.example.net", "10.1.2.3:8443"]
            .iter()
            .map(|h| h.parse().unwrap())
            .collect();
        let (cert, key) = again.sign(&hosts).unwrap();
        assert!(cert.contains("BEGIN CERTIFICATE") && key.contains("PRIVATE KEY"));
    }
}
