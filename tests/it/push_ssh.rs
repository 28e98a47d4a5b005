//! `paddock push` over ssh with the host user's ssh agent: an `sshd` the test starts on a
//! loopback port (its own host key, its own authorized key, nothing of the machine's
//! config), an `ssh-agent` of the test's holding the only key that sshd accepts, and the
//! remote's URL and `core.sshCommand` in the user's repository config. The push works with
//! the agent and fails without it (so the key came from the agent, not a file), and the
//! job's container never sees the agent: no `SSH_AUTH_SOCK`, no socket.
//!
//! Needs `sshd` (Debian's openssh-server, which `.ci/run` installs); fails without it.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::fixtures::{FixtureRepo, TestHome, closed_dir, docker_available, git, text};
use crate::push::{heads, push};

const SSHD: &str = "/usr/sbin/sshd";

/// An sshd and an ssh-agent of the test's own, stopped on drop.
struct SshRemote {
    dir: tempfile::TempDir,
    port: u16,
    sshd: Child,
    agent: Child,
}

fn keygen(path: &Path) {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "paddock-test", "-f"])
        .arg(path)
        .status()
        .expect("ssh-keygen runs");
    assert!(status.success());
}

fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < deadline, "{what} did not come up in 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl SshRemote {
    fn start() -> SshRemote {
        assert!(
            Path::new(SSHD).exists(),
            "needs {SSHD} (Debian's openssh-server; .ci/run installs it)"
        );
        let dir = closed_dir("paddock-ssh-remote-");
        let d = dir.path();
        keygen(&d.join("host_key"));
        keygen(&d.join("user_key"));
        std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys")).unwrap();
        git(d, &["init", "-q", "--bare", "-b", "main", "r.git"]);
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // Privilege separation needs its empty directory (the package makes it at boot).
        std::fs::create_dir_all("/run/sshd").unwrap();
        std::fs::write(
            d.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {host}\nAuthorizedKeysFile {keys}\n\
                 PidFile {pid}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n\
                 AllowUsers root\n",
                host = d.join("host_key").display(),
                keys = d.join("authorized_keys").display(),
                pid = d.join("sshd.pid").display(),
            ),
        )
        .unwrap();
        let sshd = Command::new(SSHD)
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("sshd starts");
        wait_for("sshd", || TcpStream::connect(("127.0.0.1", port)).is_ok());
        let sock = d.join("agent.sock");
        let agent = Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&sock)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ssh-agent starts");
        wait_for("ssh-agent", || sock.exists());
        let added = Command::new("ssh-add")
            .arg(d.join("user_key"))
            .env("SSH_AUTH_SOCK", &sock)
            .output()
            .expect("ssh-add runs");
        assert!(added.status.success(), "{added:?}");
        // The key lives in the agent only from here on.
        std::fs::remove_file(d.join("user_key")).unwrap();
        SshRemote {
            dir,
            port,
            sshd,
            agent,
        }
    }

    fn url(&self) -> String {
        format!(
            "ssh://root@127.0.0.1:{}{}",
            self.port,
            self.bare().display()
        )
    }

    fn bare(&self) -> PathBuf {
        self.dir.path().join("r.git")
    }

    fn agent_socket(&self) -> PathBuf {
        self.dir.path().join("agent.sock")
    }

    /// The ssh command the user's repository config names: this test's known-hosts file,
    /// no prompt, no key but the agent's.
    fn ssh_command(&self) -> String {
        format!(
            "ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={} -o IdentityFile=/dev/null",
            self.dir.path().join("known_hosts").display()
        )
    }
}

impl Drop for SshRemote {
    fn drop(&mut self) {
        for child in [&mut self.sshd, &mut self.agent] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

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
