//! `paddock push` over ssh with the host user's ssh agent: an `sshd` the test starts on a
//! loopback port (its own host key, its own authorized key, nothing of the machine's
//! config), an `ssh-agent` of the test's holding the only key that sshd accepts, and the
//! remote's URL and `core.sshCommand` in the user's repository config. The push works with
//! the agent and fails without it (so the key came from the agent, not a file), and the
//! job's container never sees the agent: no `SSH_AUTH_SOCK`, no socket.
//!
//! Needs `sshd` (Debian's openssh-server, which `.ci/run` installs); fails without it.

use crate::fixtures::ssh::SshRemote;
use crate::fixtures::{FixtureRepo, TestHome, docker_available, text};
use crate::push::{heads, push};

#[test]
fn push_over_ssh_uses_the_hosts_agent_which_the_job_never_sees() {
    if !docker_available("push_over_ssh_uses_the_hosts_agent_which_the_job_never_sees") {
        return;
    }
    let remote = SshRemote::start();
    let repo = FixtureRepo::new();
    repo.git(&["remote", "add", "origin", &remote.url()]);
    repo.git(&["config", "core.sshCommand", &remote.ssh_command()]);
    let socket = remote.agent_socket().display().to_string();
    let with_agent = TestHome::new().env("SSH_AUTH_SOCK", &socket);
    let job = with_agent.create_docker(&repo, &[]);
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    let inside = with_agent.sh(
        &id,
        &format!(
            "echo s > s.txt && git add s.txt && git commit -qm s; \
             echo \"sock=${{SSH_AUTH_SOCK:-none}}\"; test -e '{socket}' && echo socket-visible || echo no-socket"
        ),
    );
    assert!(inside.contains("sock=none"), "{inside}");
    assert!(inside.contains("no-socket"), "{inside}");

    // Without the agent the same push is refused by the server: no key anywhere else.
    let refused = with_agent
        .cmd(&["push", &id, "--json"])
        .env("SSH_AUTH_SOCK", "/nonexistent")
        .output()
        .expect("paddock runs");
    assert!(!refused.status.success(), "{refused:?}");
    assert!(
        heads(&remote.bare()).is_empty(),
        "{:?}",
        heads(&remote.bare())
    );

    let (code, report, stderr) = push(&with_agent, &id, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["updated"], true, "{report}");
    let tip = repo.git(&["rev-parse", &branch]);
    assert_eq!(report["new"], tip.trim(), "{report}");
    assert_eq!(
        heads(&remote.bare()),
        vec![format!("{branch}={}", tip.trim())]
    );
    with_agent.ok(&["rm", &id, "--force"]);
}
