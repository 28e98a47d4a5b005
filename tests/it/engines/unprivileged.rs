//! The way people run it, on a remote engine: an unprivileged user (uid 4243, in the docker
//! group) with no `PADDOCK_HOME` (state in `~/.local/share/paddock` of a 0700 home), the
//! repository in that home, the engine's client certificates in a 0700 directory of theirs.
//! A job on the engine (its profile's `engine:`) commits; the commit is on the user's branch, `rm` keeps it, the user's
//! repository and state root hold nothing owned by anyone else, and no host path reached
//! the engine.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use super::{available, engine};
use crate::default_paths::{Machine, USER_UID, Who};
use crate::fixtures::{test_image, text};

/// Every path under `root` not owned by `uid`.
fn foreign(root: &Path, uid: u32) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.uid() != uid {
            found.push(format!("{} (uid {})", path.display(), meta.uid()));
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).expect("read_dir").flatten() {
                stack.push(entry.path());
            }
        }
    }
    found
}

#[test]
fn an_unprivileged_user_s_job_on_a_remote_engine_commits_and_rm_keeps_it() {
    if !available("an_unprivileged_user_s_job_on_a_remote_engine_commits_and_rm_keeps_it") {
        return;
    }
    let engine = engine();
    let machine = Machine::new(Who::User);
    let certs = machine.home.join(".config/paddock/eng1");
    std::fs::create_dir_all(&certs).expect("mkdir");
    for name in ["ca.pem", "cert.pem", "key.pem"] {
        std::fs::copy(engine.dir.join("certs").join(name), certs.join(name)).expect("copy");
    }
    let entry = engine.config_entry().replace(
        &engine.dir.join("certs").display().to_string(),
        &certs.display().to_string(),
    );
    std::fs::write(
        machine.home.join(".config/paddock/config.yaml"),
        // The profile picks the engine: no `--engine` on the command line.
        format!(
            "admission:\n  memory: 1024g\n  cpus: 1000\nprofiles:\n  default:\n    engine: eng1\nengines:\n{entry}"
        ),
    )
    .expect("write the user config");
    crate::fixtures::chown_trees(&[&machine.home.join(".config")], USER_UID);
    let forbid = [("PADDOCK_TEST_FORBID_HOST_BINDS", "1")];
    let run = |args: &[&str]| {
        let output = machine.run_with(args, &forbid);
        assert!(
            output.status.success(),
            "paddock {args:?} as uid {USER_UID}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    };
    let image = test_image();
    let job: serde_json::Value = serde_json::from_slice(&run(&[
        "create", "--image", &image, "--task", "user", "--json",
    ]))
    .expect("json");
    let id = text(&job, "id");
    assert_eq!(job["engine"], "eng1", "{job}");
    let branch = text(&job, "branch");
    run(&[
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "echo user > user.txt && git add user.txt && git commit -q -m 'from the user s engine job'",
    ]);
    assert_eq!(
        machine.repo_git(&["log", "-1", "--format=%s", &branch]),
        "from the user s engine job"
    );
    let tip = machine.repo_git(&["rev-parse", &branch]);
    let state = machine.state_root();
    assert_eq!(
        std::fs::metadata(&state).expect("state root").uid(),
        USER_UID
    );
    run(&["rm", &id]);
    assert_eq!(machine.repo_git(&["rev-parse", &branch]), tip);
    // root's `git status` would refresh the index: read it without writing.
    assert_eq!(
        machine.repo_git(&["--no-optional-locks", "status", "--porcelain"]),
        ""
    );
    let strangers: Vec<String> = foreign(&machine.repo, USER_UID)
        .into_iter()
        .chain(foreign(&state, USER_UID))
        .collect();
    assert!(strangers.is_empty(), "not the user's: {strangers:?}");
}

/// The same user with the two other ways to name an engine: an `ssh://` host (their own key
/// and known-hosts file, in their 0700 home) and a Docker CLI context in their own
/// `~/.docker`. A job on each commits, `rm` keeps it, and nothing of theirs changes owner.
#[test]
fn an_unprivileged_user_s_jobs_over_ssh_and_through_a_docker_context_commit() {
    if !available("an_unprivileged_user_s_jobs_over_ssh_and_through_a_docker_context_commit") {
        return;
    }
    let engine = engine();
    let scratch = crate::fixtures::closed_dir("paddock-ssh-user-");
    let remote = super::ssh::dial_only_sshd(engine, scratch.path());
    let machine = Machine::new(Who::User);
    let ssh_dir = machine.home.join(".ssh");
    std::fs::create_dir_all(&ssh_dir).expect("mkdir");
    let key = ssh_dir.join("engine_key");
    std::fs::copy(remote.key(), &key).expect("copy the key");
    let known = ssh_dir.join("known_hosts");
    std::fs::write(&known, format!("{}\n", remote.known_host())).expect("write");
    // The user's context, in their own Docker CLI store (`~/.docker`), with their copy of
    // the engine's client certificates.
    let certs = machine.home.join(".config/paddock/eng1");
    std::fs::create_dir_all(&certs).expect("mkdir");
    for name in ["ca.pem", "cert.pem", "key.pem"] {
        std::fs::copy(engine.dir.join("certs").join(name), certs.join(name)).expect("copy");
    }
    let endpoint = format!(
        "host={},ca={},cert={},key={}",
        engine.host,
        certs.join("ca.pem").display(),
        certs.join("cert.pem").display(),
        certs.join("key.pem").display()
    );
    let made = std::process::Command::new("docker")
        .args(["context", "create", "the-build-box", "--docker", &endpoint])
        .env("DOCKER_CONFIG", machine.home.join(".docker"))
        .output()
        .expect("docker context create runs");
    assert!(made.status.success(), "{made:?}");
    std::fs::write(
        machine.home.join(".config/paddock/config.yaml"),
        format!(
            "admission:\n  memory: 1024g\n  cpus: 1000\nengines:\n  viassh:\n    host: \"ssh://root@127.0.0.1:{}\"\n    ssh_options: [\"IdentityFile={}\", \"IdentitiesOnly=yes\", \"UserKnownHostsFile={}\"]\n  boxctx:\n    context: the-build-box\n",
            remote.port,
            key.display(),
            known.display()
        ),
    )
    .expect("write the user config");
    crate::fixtures::chown_trees(
        &[
            &machine.home.join(".config"),
            &ssh_dir,
            &machine.home.join(".docker"),
        ],
        USER_UID,
    );
    let envs = [
        ("PADDOCK_TEST_FORBID_HOST_BINDS", "1"),
        ("SSH_AUTH_SOCK", "/nonexistent"),
    ];
    let run = |args: &[&str]| {
        let output = machine.run_with(args, &envs);
        assert!(
            output.status.success(),
            "paddock {args:?} as uid {USER_UID}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    };
    let image = test_image();
    for name in ["viassh", "boxctx"] {
        let job: serde_json::Value = serde_json::from_slice(&run(&[
            "create", "--engine", name, "--image", &image, "--task", name, "--json",
        ]))
        .expect("json");
        let id = text(&job, "id");
        assert_eq!(job["engine"], name, "{job}");
        // The container is on the test engine, whichever way it was reached.
        engine.docker_ok(&["inspect", &text(&job, "container_name")]);
        let branch = text(&job, "branch");
        let script = format!(
            "echo {name} > {name}.txt && git add {name}.txt && git commit -q -m 'via {name}'"
        );
        run(&["exec", &id, "--", "sh", "-c", &script]);
        assert_eq!(
            machine.repo_git(&["log", "-1", "--format=%s", &branch]),
            format!("via {name}")
        );
        run(&["rm", &id]);
        assert_eq!(
            machine.repo_git(&["log", "-1", "--format=%s", &branch]),
            format!("via {name}")
        );
    }
    let strangers: Vec<String> = foreign(&machine.repo, USER_UID)
        .into_iter()
        .chain(foreign(&machine.state_root(), USER_UID))
        .chain(foreign(&machine.home.join(".docker"), USER_UID))
        .collect();
    assert!(strangers.is_empty(), "not the user's: {strangers:?}");
}
