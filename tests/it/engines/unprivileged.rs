//! The way people run it, on a remote engine: an unprivileged user (uid 4243, in the docker
//! group) with no `PADDOCK_HOME` (state in `~/.local/share/paddock` of a 0700 home), the
//! repository in that home, the engine's client certificates in a 0700 directory of theirs.
//! A job on the engine (its profile's `engine:`) commits; the commit is on the user's branch, `rm` keeps it, the user's
//! repository and state root hold nothing owned by anyone else, and no host path reached
//! the engine.

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

use super::{Engine, available, engine};
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

/// eng1's entry of the user config with its TLS files copied into the user's own config dir
/// (the test engine's sit where the user cannot read them).
fn user_engine_entry(engine: &Engine, machine: &Machine) -> String {
    let certs = machine.home.join(".config/paddock/eng1");
    std::fs::create_dir_all(&certs).expect("mkdir");
    for name in ["ca.pem", "cert.pem", "key.pem"] {
        std::fs::copy(engine.dir.join("certs").join(name), certs.join(name)).expect("copy");
    }
    engine.config_entry().replace(
        &engine.dir.join("certs").display().to_string(),
        &certs.display().to_string(),
    )
}

#[test]
fn an_unprivileged_user_s_job_on_a_remote_engine_commits_and_rm_keeps_it() {
    if !available("an_unprivileged_user_s_job_on_a_remote_engine_commits_and_rm_keeps_it") {
        return;
    }
    let engine = engine();
    let machine = Machine::new(Who::User);
    let entry = user_engine_entry(engine, &machine);
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

/// The same user with what a remote job can have besides its checkout: a `copy` file, a
/// cache volume, a port relayed to this machine's loopback, and a warm slot of its profile's
/// pool on the engine. Nothing of it needs root here or leaves a file of another owner.
#[test]
fn an_unprivileged_user_s_remote_jobs_get_copies_caches_ports_and_a_warm_slot() {
    if !available("an_unprivileged_user_s_remote_jobs_get_copies_caches_ports_and_a_warm_slot") {
        return;
    }
    let engine = engine();
    let machine = Machine::new(Who::User);
    let entry = user_engine_entry(engine, &machine);
    let image = test_image();
    // The repository's `copy` is a trusted repository's.
    let repo = machine.repo.display().to_string();
    std::fs::write(
        machine.home.join(".config/paddock/config.yaml"),
        format!(
            "trust: [{repo:?}]\nadmission:\n  memory: 1024g\n  cpus: 1000\nprofiles:\n  default:\n    engine: eng1\n    image: {image}\n    pool: {{size: 1}}\n  full:\n    engine: eng1\n    image: {image}\n    caches:\n      - path: node_modules\n        key: [package-lock.json]\nengines:\n{entry}"
        ),
    )
    .expect("write the user config");
    std::fs::write(machine.repo.join(".paddock.yaml"), "copy: [\".env\"]\n").expect("write");
    std::fs::write(machine.repo.join("package-lock.json"), "{}\n").expect("write");
    machine.repo_git(&["add", ".paddock.yaml", "package-lock.json"]);
    machine.repo_git(&["commit", "-q", "-m", "copy and a lockfile"]);
    std::fs::write(machine.repo.join(".env"), "TOKEN=local\n").expect("write");
    crate::fixtures::chown_trees(&[&machine.home], USER_UID);
    let forbid = [("PADDOCK_TEST_FORBID_HOST_BINDS", "1")];
    let run = |args: &[&str]| {
        let output = machine.run_with(args, &forbid);
        assert!(
            output.status.success(),
            "paddock {args:?} as uid {USER_UID}: {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let json =
        |args: &[&str]| -> serde_json::Value { serde_json::from_str(&run(args)).expect("json") };

    // The user builds this paddock's proxy image there (the port relay runs from it).
    super::proxy_image(engine, "user", |args| drop(run(args)));

    // A cache, a copy and a port, on the `full` profile.
    let job = json(&[
        "create",
        "--profile",
        "full",
        "--port",
        "3000",
        "--task",
        "full",
        "--json",
    ]);
    let id = text(&job, "id");
    assert_eq!(job["engine"], "eng1", "{job}");
    let inside = run(&[
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "cat .env && id -u && stat -c %u .env && touch node_modules/mine && stat -c %u node_modules/mine",
    ]);
    // The agent's uid (the user's own, for a user's jobs) owns the copy and can write the cache.
    let agent = USER_UID.to_string();
    assert_eq!(inside, format!("TOKEN=local\n{agent}\n{agent}\n{agent}\n"));
    let script = format!(
        r#"setsid -f perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalAddr => "0.0.0.0", LocalPort => 3000, Listen => 5, ReuseAddr => 1) or die "listen: $!"; while ($c = $s->accept) {{ print $c "HTTP/1.0 200 OK\r\n\r\nhello from {id}\n"; close $c }}' >/dev/null 2>&1 </dev/null"#
    );
    run(&["exec", &id, "--", "sh", "-c", &script]);
    let address = run(&["port", &id, "3000"]);
    let address = address.trim();
    assert!(address.starts_with("127.0.0.1:"), "{address}");
    let answer = crate::ports::fetch(address, &id);
    assert!(answer.contains(&format!("hello from {id}")), "{answer}");

    // A warm slot of the default profile on the engine, claimed by the next create.
    run(&["pool", "fill", "--engine", "eng1"]);
    let warm = json(&["create", "--task", "warm", "--json"]);
    assert_eq!(warm["pool"]["start"], "warm", "{warm}");
    let warm_id = text(&warm, "id");
    let branch = text(&warm, "branch");
    run(&[
        "exec",
        &warm_id,
        "--",
        "sh",
        "-c",
        "cat .env > /dev/null && echo warm > warm.txt && git add warm.txt && git commit -q -m 'from a warm slot'",
    ]);
    assert_eq!(
        machine.repo_git(&["log", "-1", "--format=%s", &branch]),
        "from a warm slot"
    );

    run(&["rm", &id]);
    run(&["rm", &warm_id]);
    run(&["pool", "drain"]);
    assert!(
        std::net::TcpStream::connect(address).is_err(),
        "the relay of a removed job still listens"
    );
    let strangers: Vec<String> = foreign(&machine.repo, USER_UID)
        .into_iter()
        .chain(foreign(&machine.state_root(), USER_UID))
        .collect();
    assert!(strangers.is_empty(), "not the user's: {strangers:?}");
}
