//! `shell` of a microVM job on a real terminal: `script` gives paddock a pseudo-terminal,
//! and the guest runs the shell on one of its own (the guest's init mounts a devpts), so
//! the shell sees a terminal, its line discipline works, and its exit code comes back. And
//! caches, which a VM can hold only as copies for now.

use std::io::{Read as _, Write as _};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::fixtures::{FixtureRepo, TestHome, microvm_available, text};
use crate::microvm::KillVms;

#[test]
fn a_microvm_shell_on_a_terminal_gets_a_terminal_inside() {
    if !microvm_available("a_microvm_shell_on_a_terminal_gets_a_terminal_inside") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let _vms = KillVms(home.root());
    let job = home.create(&repo, &["--runtime", "microvm", "--task", "pty"]);
    let id = text(&job, "id");
    let line = format!("'{}' shell '{id}'", env!("CARGO_BIN_EXE_paddock"));
    let mut child = Command::new("script")
        .args(["-qfec", &line, "/dev/null"])
        .env_remove("PADDOCK_NO_DAEMON")
        .envs(home.envs.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("`script` (util-linux) runs paddock on a pseudo-terminal");
    let mut stdin = child.stdin.take().expect("stdin");
    // The shell starts in the guest within seconds; what is typed before waits in the pty.
    std::thread::sleep(Duration::from_secs(3));
    stdin
        .write_all(b"echo tty=$(tty) term=$TERM; test -t 0 && echo on-a-terminal; exit 3\n")
        .expect("type");
    let mut out = String::new();
    let mut stdout = child.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the shell never ended"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    drop(stdin);
    let out = reader.join().expect("reader");
    assert!(out.contains("tty=/dev/pts/"), "{out}");
    assert!(out.contains("on-a-terminal"), "{out}");
    assert_eq!(status.code(), Some(3), "{out}");
    home.ok(&["rm", &id, "--force"]);
}

/// A cache that needs a host directory inside the job (`mount`, `symlink`, `env`) would
/// point nowhere in a VM: the create is refused before anything is reserved, naming the way
/// that works; a `copy` cache is taken (its entry copied into the checkout).
#[test]
fn a_microvm_job_refuses_host_directory_caches_and_takes_copy_caches() {
    if !microvm_available("a_microvm_job_refuses_host_directory_caches_and_takes_copy_caches") {
        return;
    }
    let repo = FixtureRepo::new();
    repo.write(
        ".paddock.yaml",
        "caches:\n  - path: vendor/bundle\n    strategy: mount\n",
    );
    repo.commit_all("caches");
    let home = TestHome::new();
    let _vms = KillVms(home.root());
    let repo_path = repo.path().display().to_string();
    let refused = home.run(&[
        "create",
        "--repo",
        &repo_path,
        "--runtime",
        "microvm",
        "--task",
        "cache",
        "--json",
    ]);
    assert!(!refused.status.success(), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("strategy: copy"), "{said}");
    assert_eq!(repo.git(&["branch", "--list", "agent/*"]).trim(), "");
    let jobs = home.root().join("jobs");
    assert_eq!(std::fs::read_dir(&jobs).map_or(0, Iterator::count), 0);

    repo.write(
        ".paddock.yaml",
        "caches:\n  - path: vendor/bundle\n    strategy: copy\n",
    );
    repo.commit_all("copy cache");
    let job = home.create(&repo, &["--runtime", "microvm", "--task", "copied"]);
    let id = text(&job, "id");
    let seen = home.sh(&id, "test -d vendor/bundle && echo there");
    assert_eq!(seen.trim(), "there");
    home.ok(&["rm", &id, "--force"]);
}
