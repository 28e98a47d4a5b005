//! Secrets a job uses without holding them: the user config's `secrets:` ([`SecretSpec`]),
//! what a job's record keeps of the ones it was given ([`JobSecret`]: the source, hosts and
//! placeholder, never the value), and reading a value when the job's proxy starts.
//!
//! Invariants: a secret is defined in the user config only (a repository's file naming hosts
//! could send the user's token anywhere); the job's environment carries only
//! `VARIABLE=paddock-secret-<random per job>`; the value is read from its source (`env`,
//! `file`, `command`) each time the job's proxy starts and goes from this process's memory to
//! the proxy's over its control socket (`runtime/docker/secrets.rs`), never into a file,
//! record, log, event, container setting or error message. Error messages name the secret,
//! never its value.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{ConfigError, NetworkMode, Profile, SecretSpec, Sourced, value_error};
use crate::egress::AllowEntry;

/// Deadline of a `command:` source.
const COMMAND_DEADLINE: Duration = Duration::from_secs(30);
/// Largest value read from a source.
const MAX_VALUE: usize = 64 * 1024;
/// What every placeholder starts with.
pub const PLACEHOLDER_PREFIX: &str = "paddock-secret-";

/// Where a value is read from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretSource {
    Env(String),
    File(PathBuf),
    Command(Vec<String>),
}

/// What a job's record keeps of one secret: everything but the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSecret {
    pub name: String,
    pub variable: String,
    pub placeholder: String,
    pub hosts: Vec<AllowEntry>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    pub source: SecretSource,
}

/// A job's secrets, and the extra roots its proxy trusts upstream (`egress.upstream_ca`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSecrets {
    pub secrets: Vec<JobSecret>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_ca: Option<PathBuf>,
}

/// The secrets a job gets: the profile's and the request's (`--secret`), looked up in the
/// user config. Their hosts join the profile's allow-list, and the job's network becomes
/// `allowlist` (a secret needs the proxy: `open` is refused).
pub fn for_job(
    defined: &BTreeMap<String, SecretSpec>,
    upstream_ca: Option<&PathBuf>,
    profile: &mut Profile,
    requested: &[String],
) -> Result<Option<JobSecrets>, ConfigError> {
    let mut names: Vec<String> = profile.secrets.value.clone();
    for name in requested {
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    if names.is_empty() {
        return Ok(None);
    }
    if profile.network.value == NetworkMode::Open {
        return Err(value_error(
            "network".into(),
            "a job with secrets needs `network: allowlist` (its proxy holds them); `open` would let it skip the proxy",
        ));
    }
    let mut secrets = Vec::new();
    for name in names {
        let spec = defined.get(&name).ok_or_else(|| {
            value_error(
                format!("secrets.{name}"),
                format!(
                    "no secret `{name}` in the user config (known: {})",
                    defined.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            )
        })?;
        let source = match (&spec.env, &spec.file, &spec.command) {
            (Some(var), _, _) => SecretSource::Env(var.clone()),
            (_, Some(path), _) => SecretSource::File(path.clone()),
            (_, _, Some(command)) => SecretSource::Command(command.clone()),
            _ => return Err(value_error(format!("secrets.{name}"), "no source")),
        };
        for host in &spec.hosts {
            if !profile.allow.value.contains(host) {
                profile.allow.value.push(host.clone());
            }
        }
        secrets.push(JobSecret {
            variable: spec
                .variable
                .clone()
                .unwrap_or_else(|| name.to_ascii_uppercase().replace('-', "_")),
            placeholder: format!("{PLACEHOLDER_PREFIX}{}", crate::ids::random_hex(32)),
            hosts: spec.hosts.clone(),
            header: spec.header.clone(),
            name,
            source,
        });
    }
    profile.network = Sourced {
        value: NetworkMode::Allowlist,
        source: profile.network.source.clone(),
    };
    Ok(Some(JobSecrets {
        secrets,
        upstream_ca: upstream_ca.cloned(),
    }))
}

/// Reads a secret's value from its source (blocking: a file read or a command with a
/// deadline). The error names the secret and the source, never a value.
pub fn read_value(secret: &JobSecret) -> Result<String, String> {
    let raw = match &secret.source {
        SecretSource::Env(var) => std::env::var(var)
            .map_err(|_| format!("the variable `{var}` is not set in paddock's environment"))?
            .into_bytes(),
        SecretSource::File(path) => {
            use std::io::Read;
            // `~/` is the user's home, as a shell would read it.
            let path = &match (path.strip_prefix("~"), std::env::var_os("HOME")) {
                (Ok(rest), Some(home)) => PathBuf::from(home).join(rest),
                _ => path.clone(),
            };
            let mut raw = Vec::new();
            std::fs::File::open(path)
                .and_then(|file| file.take(MAX_VALUE as u64 + 1).read_to_end(&mut raw))
                .map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
            raw
        }
        SecretSource::Command(command) => run_command(command)?,
    };
    let text = String::from_utf8(raw).map_err(|_| "the value is not text".to_string())?;
    let value = text.trim_end_matches(['\n', '\r']).to_string();
    if value.is_empty() || value.len() > MAX_VALUE {
        return Err("the value is empty or too long".into());
    }
    if value.chars().any(char::is_control) {
        return Err("the value holds control characters (it goes into a header)".into());
    }
    Ok(value)
}

fn run_command(command: &[String]) -> Result<Vec<u8>, String> {
    let (program, args) = command.split_first().ok_or("an empty command")?;
    let mut child = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run `{program}`: {e}"))?;
    let mut stdout = child.stdout.take().expect("stdout is piped");
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut out = Vec::new();
        let _ = (&mut stdout)
            .take(MAX_VALUE as u64 + 1)
            .read_to_end(&mut out);
        out
    });
    let deadline = std::time::Instant::now() + COMMAND_DEADLINE;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "`{program}` did not finish in {COMMAND_DEADLINE:?}"
                ));
            }
        }
    };
    let out = reader
        .join()
        .map_err(|_| "reading the command's output failed")?;
    if !status.success() {
        return Err(format!("`{program}` failed ({status})"));
    }
    Ok(out)
}

/// The variables a job with secrets gets: each placeholder, and the CA bundle (at
/// `bundle`, inside the job) in every variable common tools read.
pub fn job_env(secrets: &JobSecrets, bundle: &str) -> Vec<String> {
    let mut env: Vec<String> = secrets
        .secrets
        .iter()
        .map(|s| format!("{}={}", s.variable, s.placeholder))
        .collect();
    for var in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "GIT_SSL_CAINFO",
        "CURL_CA_BUNDLE",
    ] {
        env.push(format!("{var}={bundle}"));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::check_spec;

    #[test]
    fn specs_are_checked_and_jobs_get_placeholders_and_hosts() {
        let spec: SecretSpec = serde_yaml::from_str(
            "env: TOKEN_VAR\nhosts: [api.example.org, '*.example.net']\nheader: 'Authorization: Bearer {}'\n",
        )
        .unwrap();
        check_spec("gh", &spec).unwrap();
        let both: SecretSpec = serde_yaml::from_str("env: A\nfile: /x\nhosts: [a.org]\n").unwrap();
        assert!(check_spec("gh", &both).is_err());
        let range: SecretSpec = serde_yaml::from_str("env: A\nhosts: [10.0.0.0/8]\n").unwrap();
        assert!(check_spec("gh", &range).is_err());
        let defined = BTreeMap::from([("gh".to_string(), spec)]);
        let mut profile = Profile::default();
        let job = for_job(&defined, None, &mut profile, &["gh".into()])
            .unwrap()
            .unwrap();
        assert_eq!(profile.network.value, NetworkMode::Allowlist);
        assert_eq!(profile.allow.value.len(), 2);
        let secret = &job.secrets[0];
        assert_eq!(secret.variable, "GH");
        assert!(secret.placeholder.starts_with(PLACEHOLDER_PREFIX));
        assert_eq!(secret.placeholder.len(), PLACEHOLDER_PREFIX.len() + 32);
        assert!(for_job(&defined, None, &mut Profile::default(), &["nope".into()]).is_err());
    }
}
