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
