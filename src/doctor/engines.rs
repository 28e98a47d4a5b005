//! `doctor`'s checks of the remote engines the user config names (`engines:`): each one
//! reachable over TLS with its certificates, the default profile's image present there, and
//! the OCI runtimes it has. An engine that fails is a warning: local jobs still work. The
//! proxy image of allowlist jobs there is named too (present, or the command that builds it),
//! without a warning: only allowlist jobs need it.

use std::time::Duration;

use super::{Check, Status, check};
use crate::config::Config;
use crate::engine::port_relay::{relay_process, relayed};
use crate::runtime::Runtimes;
use crate::store::PaddockHome;

/// How long doctor waits for one engine's answer.
const ENGINE_TIMEOUT: Duration = Duration::from_secs(10);

/// One check per engine of `engines:`.
pub(super) async fn engine_checks(runtimes: &Runtimes, config: &Config, image: &str) -> Vec<Check> {
    let mut checks = Vec::new();
    for name in config.engines.keys() {
        let runtime = runtimes.engine(Some(name));
        let facts = async {
            match runtime.capabilities().images {
                Some(images) => Some(images.engine_facts().await),
                None => None,
            }
        };
        let facts = match tokio::time::timeout(ENGINE_TIMEOUT, facts).await {
            Ok(Some(Ok(facts))) => facts,
            Ok(Some(Err(error))) => {
                checks.push(check(
                    "engine",
                    Status::Warn,
                    format!("{name}: {error}"),
                    Some(&format!(
                        "check `engines.{name}` (host, tls: ca, cert, key) and that its daemon runs"
                    )),
                ));
                continue;
            }
            _ => {
                checks.push(check(
                    "engine",
                    Status::Warn,
                    format!("{name}: no answer within {ENGINE_TIMEOUT:?}"),
                    Some("check that the engine's daemon runs and its address is reachable"),
                ));
                continue;
            }
        };
        let image_ok = runtime
            .check_ready(image, crate::config::NetworkMode::None)
            .await
            .is_ok();
        let proxy_ok = image_ok
            && runtime
                .check_ready(image, crate::config::NetworkMode::Allowlist)
                .await
                .is_ok();
        let detail = format!(
            "{name}: engine {} (API {}) over verified TLS; runtimes {}; image {image} {}; allowlist proxy image {}",
            facts.version,
            facts.api_version,
            facts.oci_runtimes.join(", "),
            if image_ok { "present" } else { "missing" },
            if proxy_ok {
                "present".to_string()
            } else {
                format!("missing (`paddock image build --engine {name}`)")
            },
        );
        let fix = format!("paddock image build --engine {name} --tag {image}");
        checks.push(if image_ok {
            check("engine", Status::Ok, detail, None)
        } else {
            check("engine", Status::Warn, detail, Some(&fix))
        });
    }
    checks
}

/// Whether every remote job with ports has its relay running here (`engine::port_relay`);
/// nothing to say without such jobs.
pub(super) fn port_relay_check(home: &PaddockHome, runtimes: &Runtimes) -> Option<Check> {
    let records = home
        .store()
        .list()
        .map(|(records, _)| records)
        .unwrap_or_default();
    let relayed: Vec<_> = records.iter().filter(|r| relayed(runtimes, r)).collect();
    if relayed.is_empty() {
        return None;
    }
    let stopped: Vec<String> = relayed
        .iter()
        .filter(|r| relay_process(home, &r.id).is_none())
        .map(|r| r.id.to_string())
        .collect();
    Some(if stopped.is_empty() {
        check(
            "port relays",
            Status::Ok,
            format!(
                "{} remote job(s) with ports: each relay runs",
                relayed.len()
            ),
            None,
        )
    } else {
        check(
            "port relays",
            Status::Warn,
            format!(
                "the relay of {} remote job(s) is not running, so their ports do not answer here: {}",
                stopped.len(),
                stopped.join(", ")
            ),
            Some(&format!(
                "paddock exec {} -- true   (starts the job and its relay)",
                stopped[0]
            )),
        )
    })
}
