//! The way people run paddock: no `PADDOCK_HOME`, so the state root is the default one
//! (`/var/lib/paddock` as root, `~/.local/share/paddock` for a user), with the repository
//! under a closed (0700) directory, as root and as an unprivileged user in the docker group,
//! for every runtime (runc, runsc, process) and both checkouts (worktree, overlay). Each case
//! runs the real binary: create, a committing exec, the commit on the branch in the user's
//! repository, `rm`, and nothing of the repository changed owner or mode.
//!
//! The unprivileged cases need what `.ci/run` sets up: a setuid `fusermount3` and
//! `user_allow_other` in `/etc/fuse.conf` for their overlay checkouts (Debian's defaults but
//! for the last line), a user of uid 4243 (fusermount3 asks for a name), and `setpriv`. Docker cases skip with PADDOCK_SKIP_DOCKER_TESTS=1,
//! overlay cases with PADDOCK_SKIP_OVERLAY_TESTS=1; otherwise a missing piece fails them.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::fixtures::{closed_dir, docker_available, git, overlay_available, test_image, text};

/// The unprivileged user of these tests (no passwd entry needed: paddock asks for none).
pub(crate) const USER_UID: u32 = 4243;
/// Where root's state lives with no `PADDOCK_HOME` (see the README).
const ROOT_STATE: &str = "/var/lib/paddock";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Who {
    Root,
    User,
}

/// One person's machine: a closed directory holding their home (0700), their repository
/// inside it, and their user config; paddock run with no `PADDOCK_HOME`.
pub(crate) struct Machine {
    who: Who,
    _top: tempfile::TempDir,
    pub(crate) home: PathBuf,
    pub(crate) repo: PathBuf,
}

impl Machine {
    pub(crate) fn new(who: Who) -> Machine {
        Self::new_in(who, closed_dir("paddock-default-"))
    }

    fn new_in(who: Who, top: tempfile::TempDir) -> Machine {
        let home = top.path().join("home");
        std::fs::create_dir(&home).expect("mkdir");
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let repo = home.join("work/app");
        std::fs::create_dir_all(&repo).expect("mkdir");
        git(&repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("README.md"), "# app\n").expect("write");
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "initial commit"]);
        // Tests must not depend on this machine's size (see `TestHome`).
        let config = home.join(".config/paddock");
        std::fs::create_dir_all(&config).expect("mkdir");
        std::fs::write(
            config.join("config.yaml"),
            "admission:\n  memory: 1024g\n  cpus: 1000\nprofiles:\n  writable:\n    rootfs: writable\n",
        )
        .expect("write the user config");
        if who == Who::User {
            crate::fixtures::chown_trees(&[top.path()], USER_UID);
        }
        Machine {
            who,
            _top: top,
            home,
            repo,
        }
    }

    /// Trusts the repository with `paddock trust` (its `.paddock.yaml` may then widen a job),
    /// as this person would, and checks it landed in their config file.
    pub(crate) fn trust_repo(&self) {
        let output = self.run(&["trust", "--json"]);
        assert!(
            output.status.success(),
            "paddock trust: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let answer: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
        assert_eq!(answer["added"], true, "{answer}");
        let config = std::fs::read_to_string(self.home.join(".config/paddock/config.yaml"))
            .expect("the user config");
        assert!(
            config.contains(&format!("{:?}", self.repo.display().to_string())),
            "{config}"
        );
    }

    /// Where paddock keeps this person's state with no `PADDOCK_HOME`.
    pub(crate) fn state_root(&self) -> PathBuf {
        match self.who {
            Who::Root => PathBuf::from(ROOT_STATE),
            Who::User => self.home.join(".local/share/paddock"),
        }
    }

    pub(crate) fn run(&self, args: &[&str]) -> Output {
        self.run_with(args, &[])
    }

    /// `run` with `envs` set as well (test switches such as `PADDOCK_TEST_FORBID_HOST_BINDS`).
    pub(crate) fn run_with(&self, args: &[&str], envs: &[(&str, &str)]) -> Output {
        self.command(args, envs)
            .stdin(Stdio::null())
            .output()
            .expect("paddock runs")
    }

    /// `run` with `input` on paddock's stdin.
    fn run_fed(&self, args: &[&str], input: &[u8]) -> Output {
        use std::io::Write as _;
        let mut child = self
            .command(args, &[])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("paddock runs");
        let mut stdin = child.stdin.take().expect("piped");
        let input = input.to_vec();
        let feeder = std::thread::spawn(move || stdin.write_all(&input));
        let output = child.wait_with_output().expect("paddock ends");
        feeder
            .join()
            .expect("the feeder ends")
            .expect("paddock read its stdin");
        output
    }

    /// paddock as this machine's person runs it: no PADDOCK_HOME, their home and config.
    fn command(&self, args: &[&str], envs: &[(&str, &str)]) -> Command {
        let mut command = match self.who {
            Who::Root => Command::new(env!("CARGO_BIN_EXE_paddock")),
            Who::User => {
                let socket_group =
                    std::fs::metadata("/var/run/docker.sock").map_or(USER_UID, |m| m.gid());
                let mut command = Command::new("setpriv");
                command
                    .arg(format!("--reuid={USER_UID}"))
                    .arg(format!("--regid={USER_UID}"))
                    .arg(format!("--groups={socket_group}"))
                    .arg("--")
                    .arg(env!("CARGO_BIN_EXE_paddock"));
                command
            }
        };
        command
            .args(args)
            .current_dir(&self.repo)
            .env_remove("PADDOCK_HOME")
            .env_remove("XDG_DATA_HOME")
            .env_remove("PADDOCK_CONFIG")
            .env_remove("PADDOCK_PROFILE")
            .env_remove("PADDOCK_RUNTIME")
            .env_remove("PADDOCK_CHECKOUT")
            .env_remove("PADDOCK_NO_DAEMON")
            .env("HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.home.join(".config"))
            .envs(envs.iter().copied());
        command
    }

    pub(crate) fn json(&self, args: &[&str]) -> Value {
        self.json_with(args, &[])
    }

    /// `json` with `envs` added to paddock's environment.
    pub(crate) fn json_with(&self, args: &[&str], envs: &[(&str, &str)]) -> Value {
        let output = self.run_with(args, envs);
        assert!(
            output.status.success(),
            "paddock {args:?} as {:?} failed ({:?}):\nstdout: {}\nstderr: {}",
            self.who,
            output.status.code(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice(&output.stdout).expect("JSON")
    }

    /// git in the repository as root (which may not own it: `safe.directory`); its stdout.
    pub(crate) fn repo_git(&self, args: &[&str]) -> String {
        let output = Command::new("git")
            .args(["-c", "safe.directory=*"])
            .args(args)
            .current_dir(&self.repo)
            .output()
            .expect("git runs");
        String::from_utf8_lossy(&output.stdout).trim().to_string()
    }

    /// Owner, group and mode of every file of the repository but what a job may change
    /// (its branch's ref and reflog, fetched objects, paddock's refs).
    pub(crate) fn repo_modes(&self) -> BTreeMap<PathBuf, (u32, u32, u32)> {
        let mut modes = BTreeMap::new();
        let mut pending = vec![self.repo.clone()];
        while let Some(path) = pending.pop() {
            let meta = std::fs::symlink_metadata(&path).expect("stat");
            let relative = path.strip_prefix(&self.repo).expect("below").to_path_buf();
            let text = relative.to_string_lossy();
            if text.starts_with(".git/objects/")
                || text.starts_with(".git/refs/")
                || text.starts_with(".git/logs/")
                || text == ".git/packed-refs"
                || text == ".git/FETCH_HEAD"
            {
                continue;
            }
            if meta.is_dir() {
                for entry in std::fs::read_dir(&path).expect("readdir") {
                    pending.push(entry.expect("entry").path());
                }
            }
            modes.insert(relative, (meta.uid(), meta.gid(), meta.mode()));
        }
        modes
    }
}

/// Whether this case can run here; says why when it skips.
fn runnable(test: &str, who: Who, runtime: &str, checkout: &str) -> bool {
    if runtime != "process" && !docker_available(test) {
        return false;
    }
    if checkout == "overlay" && !overlay_available(test) {
        return false;
    }
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root {
        // Already unprivileged: the root cases and the switch to another uid need root.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: these cases switch users and use /var/lib/paddock, which needs root"
        );
        return false;
    }
    if who == Who::User && checkout == "overlay" {
        let setuid =
            std::fs::metadata("/usr/bin/fusermount3").is_ok_and(|m| m.mode() & 0o4000 != 0);
        let shares = std::fs::read_to_string("/etc/fuse.conf")
            .is_ok_and(|t| t.lines().any(|l| l.trim() == "user_allow_other"));
        // fusermount3 asks for the user's name.
        let named = Command::new("getent")
            .args(["passwd", &USER_UID.to_string()])
            .output()
            .is_ok_and(|o| o.status.success());
        assert!(
            setuid && named && (shares || runtime == "process"),
            "{test} needs a setuid /usr/bin/fusermount3, `user_allow_other` in /etc/fuse.conf and a user of uid {USER_UID} (.ci/run sets all three up: `useradd --uid {USER_UID} paddock-ci`), or PADDOCK_SKIP_OVERLAY_TESTS=1"
        );
    }
    true
}

fn case(test: &str, who: Who, runtime: &str, checkout: &str) {
    if !runnable(test, who, runtime, checkout) {
        return;
    }
    run_case(&Machine::new(who), runtime, checkout);
}

/// The README's first command as root from a repository in root's own home (`/root`, mode
/// 0700 on the host and in Debian images alike).
#[test]
fn root_with_the_repository_in_roots_home() {
    let test = "root_with_the_repository_in_roots_home";
    if !runnable(test, Who::Root, "runc", "worktree") {
        return;
    }
    let top = tempfile::Builder::new()
        .prefix(".paddock-test-")
        .tempdir_in("/root")
        .expect("a directory in /root");
    run_case(&Machine::new_in(Who::Root, top), "runc", "worktree");
}

fn run_case(machine: &Machine, runtime: &str, checkout: &str) {
    let who = machine.who;
    let before = machine.repo_modes();
    let task = format!("{runtime}-{checkout}");
    let repo = machine.repo.display().to_string();
    let image = test_image();
    let mut args = vec![
        "create",
        "--json",
        "--repo",
        &repo,
        "--task",
        &task,
        "--runtime",
        runtime,
        "--checkout",
        checkout,
    ];
    if runtime != "process" {
        args.extend(["--image", &image]);
    }
    if who == Who::User && runtime == "runsc" && checkout == "overlay" {
        // Without root the overlay is fuse-overlayfs, which gVisor's gofer cannot open: the
        // create is refused before anything is made, naming the way out.
        let output = machine.run(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(
            stderr.contains("gVisor (runsc) cannot open a fuse-overlayfs checkout")
                && stderr.contains("--checkout worktree"),
            "{stderr}"
        );
        assert_eq!(
            machine.repo_git(&["branch", "--format=%(refname:short)"]),
            "main",
            "no branch was made"
        );
        assert_eq!(machine.repo_modes(), before);
        return;
    }
    let job = machine.json(&args);
    let id = text(&job, "id");
    assert_eq!(job["runtime"], runtime_word(runtime), "{job}");
    let record = machine.state_root().join(format!("jobs/{id}.json"));
    assert!(
        record.is_file(),
        "the record is in the default state root: {job}"
    );
    let root_meta = std::fs::metadata(machine.state_root()).expect("the state root exists");
    assert_eq!(
        root_meta.mode() & 0o777,
        0o700,
        "the state root is its user's alone"
    );

    let result = machine.json(&[
        "exec",
        "--json",
        &id,
        "--",
        "sh",
        "-c",
        "echo hi > hello.txt && git add hello.txt && git commit -q -m 'hello from paddock' && git status --porcelain && git log --oneline | wc -l",
    ]);
    assert_eq!(result["exit_code"], 0, "{result}");
    assert!(result["sync_error"].is_null(), "{result}");
    let branch = text(&job, "branch");
    assert_eq!(
        machine.repo_git(&["log", "-1", "--format=%s", &branch]),
        "hello from paddock",
        "the commit is on the branch in the user's repository"
    );

    checkpoint_case(machine, &id, runtime);
    files_case(machine, &id, runtime);
    if runtime != "process" && checkout == "worktree" {
        exec_server_case(machine, runtime);
    }

    let removed = machine.json(&["rm", "--json", &id]);
    assert_eq!(removed["branch_kept"], true, "{removed}");
    assert!(!record.exists(), "rm removed the record");
    assert!(
        !machine.state_root().join("work").join(&id).exists(),
        "rm removed the job's dir"
    );
    assert_eq!(
        machine.repo_modes(),
        before,
        "no file of the repository changed owner or mode"
    );
}

/// Issue 43 on the default state root: a checkpoint of an untracked file, its restore after
/// the file is gone, a fork that has it, and (where the runtime freezes) pause and resume.
fn checkpoint_case(machine: &Machine, id: &str, runtime: &str) {
    let sh = |job: &str, script: &str| -> String {
        let result = machine.json(&["exec", "--json", job, "--", "sh", "-c", script]);
        assert_eq!(result["exit_code"], 0, "{result}");
        text(&result, "stdout")
    };
    sh(id, "echo draft > draft.txt");
    let cp = machine.json(&["checkpoint", id, "--name", "here", "--json"]);
    assert!(
        PathBuf::from(text(&cp, "wip_store")).starts_with(machine.state_root()),
        "{cp}"
    );
    sh(id, "rm draft.txt");
    machine.json(&["restore", id, "here", "--json"]);
    assert_eq!(sh(id, "cat draft.txt"), "draft\n");
    let forked = machine.json(&["fork", id, "--from", "here", "--json"]);
    let fork = text(&forked["jobs"][0], "id");
    assert_eq!(sh(&fork, "cat draft.txt"), "draft\n");
    machine.json(&["rm", "--json", "--force", &fork]);
    if runtime != "process" {
        machine.json(&["pause", id, "--json"]);
        machine.json(&["resume", id, "--json"]);
    }
    sh(id, "rm draft.txt");
}

/// Issue 44 on the default state root: `exec -i`, and the file API answers as the job's
/// user would be answered (root's paddock checks the agent's permission bits, a user's paddock is the
/// agent's uid and its kernel says), and a path outside the workspace of a sandboxed job is
/// the sandbox's own.
fn files_case(machine: &Machine, id: &str, runtime: &str) {
    let result = machine.json(&[
        "exec",
        "--json",
        id,
        "--",
        "sh",
        "-c",
        "echo x > wo.txt && chmod 0200 wo.txt && hostname > /tmp/h 2>/dev/null; true",
    ]);
    assert_eq!(result["exit_code"], 0, "{result}");
    let read = machine.run(&["cat", id, "wo.txt"]);
    if runtime == "process" && machine.who == Who::Root {
        // A root paddock's process job runs its commands as root, who may read it.
        assert!(read.status.success(), "{read:?}");
    } else {
        assert_eq!(read.status.code(), Some(13), "{read:?}");
    }
    if runtime != "process" {
        let inside = machine.run(&["cat", id, "/etc/hostname"]);
        assert!(inside.status.success(), "{inside:?}");
        let host = std::fs::read("/etc/hostname").unwrap_or_default();
        assert_ne!(inside.stdout, host, "the sandbox's file, not the host's");
    }
    let result = machine.json(&["exec", "--json", id, "--", "rm", "-f", "wo.txt"]);
    assert_eq!(result["exit_code"], 0, "{result}");
    // `exec -i`: a MiB of stdin reaches the command whole.
    let fed = machine.run_fed(&["exec", "-i", id, "--", "wc", "-c"], &[7u8; 1 << 20]);
    assert!(fed.status.success(), "{fed:?}");
    assert_eq!(String::from_utf8_lossy(&fed.stdout).trim(), "1048576");
    users_case(machine, id, runtime);
}

/// `exec --user root`: gVisor runs it (no capabilities with a read-only root), and what root leaves in a
/// directory the agent opened is the agent's on the host again, setuid bit gone; runc and
/// the process runtime refuse it (exit 125), running nothing.
fn users_case(machine: &Machine, id: &str, runtime: &str) {
    let worktree = PathBuf::from(
        machine.json(&["show", "--json", id])["job"]["worktree"]
            .as_str()
            .expect("a worktree"),
    );
    let result = machine.json(&[
        "exec",
        "--json",
        id,
        "--",
        "sh",
        "-c",
        "mkdir -p open && chmod 0777 open",
    ]);
    assert_eq!(result["exit_code"], 0, "{result}");
    let script = "id -u && cp /bin/true open/suid && chmod 4755 open/suid && mkdir open/d";
    let as_root = machine.run(&["exec", "--user", "root", id, "--", "sh", "-c", script]);
    if runtime == "runsc" {
        assert!(as_root.status.success(), "{as_root:?}");
        assert_eq!(String::from_utf8_lossy(&as_root.stdout), "0\n");
        let agent = std::fs::metadata(&worktree).expect("the worktree").uid();
        for name in ["open/suid", "open/d"] {
            let meta = std::fs::symlink_metadata(worktree.join(name)).expect("root's file");
            assert_eq!(meta.uid(), agent, "{name} is the agent's on the host");
            assert_eq!(meta.mode() & 0o6000, 0, "{name}: no setuid or setgid bit");
        }
    } else {
        assert_eq!(as_root.status.code(), Some(125), "{as_root:?}");
        assert!(!worktree.join("open/suid").exists(), "nothing ran");
    }
    let result = machine.json(&["exec", "--json", id, "--", "rm", "-rf", "open"]);
    assert_eq!(result["exit_code"], 0, "{result}");
    if runtime == "runsc" {
        root_caps_case(machine);
    }
}

/// A runsc job with a writable root of its own: root has CHOWN, DAC_OVERRIDE and FOWNER
/// (paddock's `root-caps`, bound from this install's binary and state root), and adds a
/// user; the agent has none.
fn root_caps_case(machine: &Machine) {
    let repo = machine.repo.display().to_string();
    let image = test_image();
    let job = machine.json(&[
        "create",
        "--json",
        "--repo",
        &repo,
        "--task",
        "root-caps",
        "--runtime",
        "runsc",
        "--checkout",
        "worktree",
        "--image",
        &image,
        "--profile",
        "writable",
    ]);
    let id = text(&job, "id");
    let caps = "grep CapEff /proc/self/status";
    let as_root = machine.json(&[
        "exec", "--json", "--user", "root", &id, "--", "sh", "-c", caps,
    ]);
    assert!(
        text(&as_root, "stdout").contains("000000000000000b"),
        "{as_root}"
    );
    let added = machine.json(&[
        "exec",
        "--json",
        "--user",
        "root",
        &id,
        "--",
        "adduser",
        "--disabled-password",
        "--comment",
        "x",
        "added",
    ]);
    assert_eq!(added["exit_code"], 0, "{added}");
    let as_agent = machine.json(&["exec", "--json", &id, "--", "sh", "-c", caps]);
    assert!(
        text(&as_agent, "stdout").contains("0000000000000000"),
        "{as_agent}"
    );
    machine.json(&["rm", "--json", "--force", &id]);
}

/// Issue 46 on the default state root: a job made with the opt-in resident exec server
/// (its binary and empty preload file bound from this install and state root) runs a
/// committing exec through it, the commit reaches the user's repository, the agent holds no
/// capability on that path nor on Docker's exec in the same container (forced).
fn exec_server_case(machine: &Machine, runtime: &str) {
    let repo = machine.repo.display().to_string();
    let image = test_image();
    let server = [("PADDOCK_EXEC_PATH", "exec-server")];
    let job = machine.json_with(
        &[
            "create",
            "--json",
            "--repo",
            &repo,
            "--task",
            "served",
            "--runtime",
            runtime,
            "--checkout",
            "worktree",
            "--image",
            &image,
        ],
        &server,
    );
    let id = text(&job, "id");
    let script = "echo s > served.txt && git add served.txt && git commit -q -m served && grep CapEff /proc/self/status";
    let ran = machine.json_with(&["exec", "--json", &id, "--", "sh", "-c", script], &server);
    assert_eq!(ran["exit_code"], 0, "{ran}");
    assert_eq!(ran["meta"]["exec_path"], "exec-server", "{ran}");
    assert!(text(&ran, "stdout").contains("0000000000000000"), "{ran}");
    assert_eq!(
        machine.repo_git(&["log", "-1", "--format=%s", &text(&job, "branch")]),
        "served"
    );
    let fallback = machine.json_with(
        &[
            "exec",
            "--json",
            &id,
            "--",
            "grep",
            "CapEff",
            "/proc/self/status",
        ],
        &[("PADDOCK_EXEC_PATH", "docker-exec")],
    );
    assert_eq!(fallback["meta"]["exec_path"], "docker-exec", "{fallback}");
    assert!(
        text(&fallback, "stdout").contains("0000000000000000"),
        "{fallback}"
    );
    machine.json(&["rm", "--json", "--force", &id]);
}

/// The runtime word a create answers with for a `--runtime` flag.
fn runtime_word(flag: &str) -> &str {
    match flag {
        "runc" => "docker",
        other => other,
    }
}

macro_rules! cases {
    ($($name:ident: $who:expr, $runtime:literal, $checkout:literal;)*) => {
        $(
            #[test]
            fn $name() {
                case(stringify!($name), $who, $runtime, $checkout);
            }
        )*
    };
}

cases! {
    root_runc_worktree: Who::Root, "runc", "worktree";
    root_runc_overlay: Who::Root, "runc", "overlay";
    root_runsc_worktree: Who::Root, "runsc", "worktree";
    root_runsc_overlay: Who::Root, "runsc", "overlay";
    root_process_worktree: Who::Root, "process", "worktree";
    root_process_overlay: Who::Root, "process", "overlay";
    user_runc_worktree: Who::User, "runc", "worktree";
    user_runc_overlay: Who::User, "runc", "overlay";
    user_runsc_worktree: Who::User, "runsc", "worktree";
    user_runsc_overlay: Who::User, "runsc", "overlay";
    user_process_worktree: Who::User, "process", "worktree";
    user_process_overlay: Who::User, "process", "overlay";
}

/// `doctor` as root names the default state root and checks that the agent's uid can read
/// the repository's objects; a repository made with umask 077 fails that check, with a fix.
#[test]
fn doctor_names_the_state_root_and_the_agent_access() {
    if !runnable(
        "doctor_names_the_state_root_and_the_agent_access",
        Who::Root,
        "process",
        "worktree",
    ) {
        return;
    }
    let machine = Machine::new(Who::Root);
    let checks = machine.json(&["doctor", "--json"]);
    let find = |name: &str| -> Value {
        checks
            .as_array()
            .expect("a list")
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no `{name}` check: {checks}"))
    };
    let state = find("state root");
    assert!(text(&state, "detail").starts_with(ROOT_STATE), "{state}");
    assert_eq!(find("agent access")["status"], "ok", "{checks}");
    // A private repository: the agent's uid cannot read its objects.
    let objects = machine.repo.join(".git/objects");
    std::fs::set_permissions(&objects, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let output = machine.run(&["doctor", "--json"]);
    assert!(!output.status.success(), "a failed check fails doctor");
    let checks: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let access = checks
        .as_array()
        .expect("a list")
        .iter()
        .find(|c| c["name"] == "agent access")
        .cloned()
        .expect("the check");
    assert_eq!(access["status"], "fail", "{access}");
    assert!(text(&access, "fix").contains("chmod -R o+rX"), "{access}");
}

/// A devcontainer job as an unprivileged user in the docker group, on the default state
/// root, with the repository in a 0700 home: the image is built from the repository (the
/// build context read from git objects the user owns), its setup runs, the agent commits.
#[test]
fn user_runc_devcontainer() {
    let test = "user_runc_devcontainer";
    if !runnable(test, Who::User, "runc", "worktree") {
        return;
    }
    let machine = Machine::new(Who::User);
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/devcontainer");
    let dockerfile =
        std::fs::read_to_string(example.join(".devcontainer/Dockerfile")).expect("the example");
    std::fs::create_dir_all(machine.repo.join(".devcontainer")).expect("mkdir");
    std::fs::write(machine.repo.join(".devcontainer/Dockerfile"), dockerfile).expect("write");
    // The build of tests/it/devcontainer.rs's jobs: the same image serves both.
    std::fs::write(
        machine.repo.join(".devcontainer.json"),
        r#"{"build": {"dockerfile": ".devcontainer/Dockerfile", "context": ".devcontainer",
                      "args": {"TOOL_VERSION": "1.2.3"}},
            "containerEnv": {"GREETING": "hi from a user's devcontainer"},
            "postCreateCommand": "greet > .greeting"}"#,
    )
    .expect("write");
    git(&machine.repo, &["-c", "safe.directory=*", "add", "-A"]);
    git(
        &machine.repo,
        &[
            "-c",
            "safe.directory=*",
            "commit",
            "-q",
            "-m",
            "devcontainer",
        ],
    );
    crate::fixtures::chown_trees(&[machine.home.as_path()], USER_UID);
    // The user's own repository: they trust it, so its Dockerfile may build from any image.
    machine.trust_repo();
    let before = machine.repo_modes();
    let repo = machine.repo.display().to_string();
    let job = machine.json(&[
        "create",
        "--json",
        "--repo",
        &repo,
        "--task",
        "devc",
        "--runtime",
        "runc",
    ]);
    let id = text(&job, "id");
    assert!(
        text(&job["devcontainer"], "image").starts_with("paddock-devc:"),
        "{job}"
    );
    let result = machine.json(&[
        "exec",
        "--json",
        &id,
        "--",
        "sh",
        "-c",
        "cat .greeting && git add .greeting && git commit -q -m greeting && id -u",
    ]);
    assert_eq!(result["exit_code"], 0, "{result}");
    let stdout = text(&result, "stdout");
    assert!(
        stdout.starts_with("greet 1.2.3: hi from a user's devcontainer\n"),
        "{result}"
    );
    assert_ne!(stdout.lines().last(), Some("0"), "{result}");
    let branch = text(&job, "branch");
    assert_eq!(
        machine.repo_git(&["log", "-1", "--format=%s", &branch]),
        "greeting"
    );
    machine.json(&["rm", "--json", &id]);
    assert_eq!(
        machine.repo_modes(),
        before,
        "no file of the repository changed owner or mode"
    );
}

/// Issue 40 the way people run it: no `PADDOCK_HOME`, the repository in a 0700 home, as root
/// and as a user. The repository's hostile `.paddock.yaml` is refused line by line in the
/// user's `config show`; `paddock trust` writes the user's own config file (in that home)
/// and the file then applies.
#[test]
fn trust_works_with_no_paddock_home_as_root_and_as_a_user() {
    if !runnable(
        "trust_works_with_no_paddock_home_as_root_and_as_a_user",
        Who::User,
        "process",
        "worktree",
    ) {
        return;
    }
    for who in [Who::Root, Who::User] {
        let machine = Machine::new(who);
        std::fs::write(
            machine.repo.join(".paddock.yaml"),
            "profiles:\n  default:\n    runtime: process\n    uid: 0\n",
        )
        .expect("write");
        machine.repo_git(&["add", ".paddock.yaml"]);
        machine.repo_git(&["commit", "-q", "-m", "a repository that wants out"]);
        if who == Who::User {
            crate::fixtures::chown_trees(&[&machine.home], USER_UID);
        }
        let shown = |machine: &Machine| -> Vec<(String, String)> {
            let output = machine.run(&["config", "show", "--json"]);
            assert!(
                output.status.success(),
                "{}",
                String::from_utf8_lossy(&output.stderr)
            );
            let shown: serde_json::Value = serde_json::from_slice(&output.stdout).expect("json");
            shown["values"]
                .as_array()
                .expect("rows")
                .iter()
                .map(|r| {
                    (
                        r["key"].as_str().unwrap().to_string(),
                        r["value"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        };
        let rows = shown(&machine);
        let value = |rows: &[(String, String)], key: &str| -> Vec<String> {
            rows.iter()
                .filter(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .collect()
        };
        assert!(
            value(&rows, "repo_trust")[0].starts_with("untrusted"),
            "{who:?}: {rows:?}"
        );
        let uid = value(&rows, "profiles.default.uid");
        assert_eq!(uid[0], "1000", "{who:?}: {rows:?}");
        assert!(
            uid[1].starts_with("REFUSED 0 (line 4)"),
            "{who:?}: {rows:?}"
        );
        machine.trust_repo();
        let rows = shown(&machine);
        assert!(
            value(&rows, "repo_trust")[0].starts_with("trusted"),
            "{who:?}: {rows:?}"
        );
        assert_eq!(
            value(&rows, "profiles.default.uid"),
            ["0"],
            "{who:?}: {rows:?}"
        );
        assert_eq!(
            value(&rows, "profiles.default.runtime"),
            ["process"],
            "{who:?}: {rows:?}"
        );
    }
}
