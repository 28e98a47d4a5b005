//! An engine reached over ssh (`host: ssh://root@127.0.0.1:PORT`), as the Docker CLI
//! reaches one: each connection is `ssh … docker system dial-stdio`. The test's own `sshd`
//! on a loopback port accepts one key, whose forced command allows only `docker system
//! dial-stdio` and points it at the test engine; the key and known host come from the
//! entry's `ssh_options`. A job there commits, `shell` works through the same relay, and
//! `rm` keeps the work.

use std::os::unix::fs::PermissionsExt as _;

use super::{available, engine};
use crate::fixtures::ssh::SshRemote;
use crate::fixtures::{FixtureRepo, TestHome, closed_dir, test_image, text};

#[test]
fn a_job_on_an_engine_reached_over_ssh_commits_and_shells() {
    if !available("a_job_on_an_engine_reached_over_ssh_commits_and_shells") {
        return;
    }
    let engine = engine();
    let scratch = closed_dir("paddock-ssh-engine-");
    let remote = dial_only_sshd(engine, scratch.path());
    let known = scratch.path().join("known_hosts");
    std::fs::write(&known, format!("{}\n", remote.known_host())).expect("write");

    let home = TestHome::new()
        .env("PADDOCK_TEST_FORBID_HOST_BINDS", "1")
        .env("SSH_AUTH_SOCK", "/nonexistent");
    std::fs::write(
        home.dir.path().join("config/paddock/config.yaml"),
        format!(
            "admission:\n  memory: 1024g\n  cpus: 1000\nengines:\n  viassh:\n    host: \"ssh://root@127.0.0.1:{}\"\n    ssh_options: [\"IdentityFile={}\", \"IdentitiesOnly=yes\", \"UserKnownHostsFile={}\"]\n",
            remote.port,
            remote.key().display(),
            known.display()
        ),
    )
    .expect("write the user config");
    let repo = FixtureRepo::new();
    let job = home.create(
        &repo,
        &[
            "--engine",
            "viassh",
            "--image",
            &test_image(),
            "--task",
            "ssh",
        ],
    );
    let id = text(&job, "id");
    assert_eq!(job["engine"], "viassh", "{job}");
    let container = text(&job, "container_name");
    // The container is on the engine behind the ssh host, not here.
    engine.docker_ok(&["inspect", &container]);
    home.sh(
        &id,
        "echo ssh > ssh.txt && git add ssh.txt && git commit -q -m 'over ssh'",
    );
    let branch = text(&job, "branch");
    assert_eq!(
        repo.git(&["log", "-1", "--format=%s", &branch]).trim(),
        "over ssh"
    );

    let mut shell = home
        .cmd(&["shell", &id])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("shell runs");
    {
        use std::io::Write as _;
        writeln!(shell.stdin.take().expect("stdin"), "cat ssh.txt; exit 5").expect("write");
    }
    let out = shell.wait_with_output().expect("shell ends");
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ssh"),
        "{out:?}"
    );

    home.ok(&["rm", &id, "--force"]);
    assert_eq!(
        repo.git(&["log", "-1", "--format=%s", &branch]).trim(),
        "over ssh"
    );
    assert!(!engine.docker(&["inspect", &container]).status.success());
}

/// The test's own `sshd` on loopback, accepting one key whose forced command allows only
/// `docker system dial-stdio`, pointed at the test engine `engine` (its script in `scratch`).
pub(super) fn dial_only_sshd(engine: &super::Engine, scratch: &std::path::Path) -> SshRemote {
    let forced = scratch.join("dial.sh");
    std::fs::write(
        &forced,
        format!(
            "#!/bin/sh\n[ \"$SSH_ORIGINAL_COMMAND\" = 'docker system dial-stdio' ] || {{ echo \"refused: $SSH_ORIGINAL_COMMAND\" >&2; exit 1; }}\n\
             DOCKER_HOST={} DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH={} exec docker system dial-stdio\n",
            engine.host,
            engine.dir.join("certs").display()
        ),
    )
    .expect("write");
    std::fs::set_permissions(&forced, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    SshRemote::start_with(
        &format!("command=\"{}\",no-pty,no-port-forwarding", forced.display()),
        true,
    )
}
