//! Root's capabilities in a gVisor job with a writable root of its own: the container's
//! part (paddock's own files bound read-only, a label) and the exec's (a privileged exec
//! whose first program is `root-caps`, `helpers/root_caps.rs`, which keeps CHOWN,
//! DAC_OVERRIDE and FOWNER and execs the command). Docker gives an exec the capability
//! sets of the container's own process whatever the exec's user, so no container setting
//! could give root these and the agent none (docs/decisions.md). What root then leaves in
//! the job's host mounts is settled as any other user's (`users.rs`).

use bollard::models::ExecConfig;

use super::{API_TIMEOUT, call};
use crate::job::{JobRecord, RuntimeKind};

/// The label of a gVisor job container whose root's commands start through paddock's
/// `root-caps` helper (with CHOWN, DAC_OVERRIDE and FOWNER: `helpers/root_caps.rs`).
pub(super) const LABEL_ROOT_CAPS: &str = "paddock.root-caps";

/// Gives a local gVisor job with a writable root of its own what its root's commands need
/// to start with [`crate::helpers`]' `root-caps`: this host's paddock, bound read-only
/// (`resident::tool_mounts`; already there when the exec server runs, `server`), and the
/// label that says so. Other jobs (runc, a read-only root, a remote engine) are left as
/// they are, and their root, where it runs, has no capability.
pub(super) fn add_root_caps(
    home: &crate::store::PaddockHome,
    record: &JobRecord,
    body: &mut bollard::models::ContainerCreateBody,
    server: bool,
) {
    if record.runtime != RuntimeKind::Runsc || record.limits.rootfs.is_read_only() {
        return;
    }
    if !server {
        let Some(mounts) = super::resident::tool_mounts(home) else {
            tracing::warn!(job = %record.id, "paddock's own files cannot be told: root in this job will have no capabilities");
            return;
        };
        let host = body.host_config.get_or_insert_with(Default::default);
        host.mounts.get_or_insert_with(Vec::new).extend(mounts);
    }
    body.labels
        .get_or_insert_with(Default::default)
        .insert(LABEL_ROOT_CAPS.to_string(), "1".to_string());
}

/// Whether a command as `user` in `record`'s container `name` starts through `root-caps`:
/// root, in a gVisor job with its own root, whose container carries the label (one made
/// before it did not: its root keeps no capability, as before).
pub(super) async fn runs_with_root_caps(
    docker: &bollard::Docker,
    name: &str,
    record: &JobRecord,
    user: (u32, u32),
) -> bool {
    if user.0 != 0 || record.runtime != RuntimeKind::Runsc || record.limits.rootfs.is_read_only() {
        return false;
    }
    let inspected = call(
        "inspect container",
        name,
        API_TIMEOUT,
        docker.inspect_container(name, None),
    )
    .await;
    inspected
        .ok()
        .and_then(|info| info.config)
        .and_then(|config| config.labels)
        .is_some_and(|labels| labels.contains_key(LABEL_ROOT_CAPS))
}

/// Makes exec `config` (root's, where [`runs_with_root_caps`]) a privileged one whose first
/// program is `root-caps`, which keeps root's three capabilities and execs the command; the
/// loader's variables emptied, so nothing of the image's environment loads into it.
pub(super) fn wrap_root_exec(config: &mut ExecConfig) {
    let mut cmd = super::resident::tool_command("root-caps");
    cmd.push("--".into());
    cmd.extend(config.cmd.take().unwrap_or_default());
    config.cmd = Some(cmd);
    config.privileged = Some(true);
    config.env.get_or_insert_with(Vec::new).extend(
        super::resident::LOADER_VARS
            .iter()
            .map(|var| format!("{var}=")),
    );
}

/// Makes exec `config`, in a container whose main process is the exec server, start
/// through `no-caps` (`helpers/root_caps.rs`): Docker gives every exec that container's
/// capabilities (the server's four) whatever its user, and the command must hold none. The
/// loader's variables the exec names go to the helper as `PADDOCK_LOADER_<NAME>`, and the
/// names themselves are emptied: nothing of the exec's environment loads into the helper,
/// which gives them back to the command once it holds nothing. A privileged exec
/// ([`wrap_root_exec`]) is left as it is.
pub(super) fn wrap_no_caps(config: &mut ExecConfig) {
    if config.privileged == Some(true) {
        return;
    }
    let mut cmd = super::resident::tool_command("no-caps");
    cmd.push("--".into());
    cmd.extend(config.cmd.take().unwrap_or_default());
    config.cmd = Some(cmd);
    let env = config.env.get_or_insert_with(Vec::new);
    for entry in env.iter_mut() {
        let name = entry
            .split_once('=')
            .map_or(entry.as_str(), |(name, _)| name);
        if super::resident::LOADER_VARS.contains(&name) {
            *entry = format!("{}{entry}", super::resident::LOADER_PREFIX);
        }
    }
    env.extend(
        super::resident::LOADER_VARS
            .iter()
            .map(|var| format!("{var}=")),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exec_in_a_server_container_starts_through_no_caps_with_its_loader_vars_handed_over() {
        let mut config = ExecConfig {
            cmd: Some(vec!["sh".into(), "-c".into(), "true".into()]),
            env: Some(vec!["A=1".into(), "LD_PRELOAD=/w/x.so".into()]),
            ..Default::default()
        };
        wrap_no_caps(&mut config);
        let cmd = config.cmd.expect("a command");
        assert_eq!(cmd[0], "/.paddock-tools/exec/ld.so");
        assert_eq!(cmd[5..], ["no-caps", "--", "sh", "-c", "true"]);
        let env = config.env.expect("an environment");
        assert!(env.contains(&"PADDOCK_LOADER_LD_PRELOAD=/w/x.so".to_string()));
        // The last word on each loader variable empties it.
        let last = env.iter().rev().find(|e| e.starts_with("LD_PRELOAD="));
        assert_eq!(last.map(String::as_str), Some("LD_PRELOAD="));
        assert_eq!(config.privileged, None);

        let mut privileged = ExecConfig {
            cmd: Some(vec!["x".into()]),
            privileged: Some(true),
            ..Default::default()
        };
        wrap_no_caps(&mut privileged);
        assert_eq!(privileged.cmd, Some(vec!["x".to_string()]));
    }
}
