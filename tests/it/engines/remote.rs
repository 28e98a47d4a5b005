//! create / exec (a commit) / show / diff / rm of a job on the remote engine, with no host
//! path mounted into any of its containers; the object cache sends a second job of the same
//! repository only what is new.

use serde_json::Value;

use super::{available, create_on, engine, home_with};
use crate::fixtures::{FixtureRepo, TestHome, text};

/// The job's record as the store keeps it.
fn record(home: &TestHome, id: &str) -> Value {
    let path = home.root().join("jobs").join(format!("{id}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("the record")).expect("json")
}

#[test]
fn a_job_on_a_remote_engine_commits_syncs_and_rm_keeps_its_work() {
    if !available("a_job_on_a_remote_engine_commits_syncs_and_rm_keeps_its_work") {
        return;
    }
    let engine = engine();
    let repo = FixtureRepo::new();
    let home = home_with(engine);
    // doctor reaches the engine over TLS and finds the image there.
    let doctor = home.run(&["doctor", "--json"]);
    let checks: Value = serde_json::from_slice(&doctor.stdout).expect("doctor json");
    let check = checks
        .as_array()
        .expect("checks")
        .iter()
        .find(|c| c["name"] == "engine")
        .expect("an engine check")
        .clone();
    assert_eq!(check["status"], "ok", "{check}");
    assert!(
        check["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("eng1:") && d.contains("present")),
        "{check}"
    );
    let id = create_on(&home, engine, &repo, &["--task", "remote"]);
    let show: Value = home.json(&["show", &id, "--json"])["job"].clone();
    assert_eq!(show["engine"], "eng1", "{show}");
    let container = show["container_name"]
        .as_str()
        .expect("a container")
        .to_string();

    // The container lives on the remote engine only, with volumes and no host path.
    assert!(
        !std::process::Command::new("docker")
            .args(["inspect", &container])
            .output()
            .expect("docker")
            .status
            .success(),
        "no container of the job on the local engine"
    );
    let mounts = engine.docker_ok(&["inspect", "-f", "{{json .Mounts}}", &container]);
    let mounts: Value = serde_json::from_str(&mounts).expect("mounts json");
    let mounts = mounts.as_array().expect("a list");
    assert!(!mounts.is_empty());
    assert!(
        mounts.iter().all(|m| m["Type"] == "volume"),
        "only volumes: {mounts:?}"
    );

    // The checkout is there, and a commit made inside reaches the user's branch by exec's end.
    let listing = home.sh(
        &id,
        "cat src/lib.rs && git status --porcelain && git log --oneline",
    );
    assert!(listing.contains("pub fn answer"), "{listing}");
    let branch = show["branch"].as_str().expect("branch").to_string();
    home.sh(
        &id,
        "echo remote > remote.txt && git add remote.txt && git commit -q -m 'from the engine'",
    );
    let subject = repo.git(&["log", "-1", "--format=%s", &branch]);
    assert_eq!(subject.trim(), "from the engine");
    let tip = repo.git(&["rev-parse", &branch]);

    // show and diff read it (they sync first, through the engine).
    home.sh(&id, "echo wip > wip.txt");
    let diff = home.ok(&["diff", &id]);
    assert!(diff.contains("remote.txt"), "{diff}");
    let shown: Value = home.json(&["show", &id, "--json"]);
    assert!(shown["job"]["sync_error"].is_null(), "{shown}");
    assert_eq!(shown["changes"]["commits_ahead"], 1, "{shown}");

    // `pause` freezes the container on its engine (the engine says it is paused), `resume`
    // thaws it there.
    home.ok(&["pause", &id]);
    let paused = engine.docker_ok(&["inspect", "-f", "{{.State.Paused}}", &container]);
    assert_eq!(paused.trim(), "true");
    home.ok(&["resume", &id]);
    let paused = engine.docker_ok(&["inspect", "-f", "{{.State.Paused}}", &container]);
    assert_eq!(paused.trim(), "false");
    assert_eq!(home.sh(&id, "echo thawed"), "thawed\n");

    checkpoint_on_the_engine(&home, &id);

    stdin_on_the_engine(&home, &id);

    // rm keeps the commit and saves the uncommitted `wip.txt` (without `--force`, a failed
    // save fails the rm); the job's container and volumes on the engine are gone, the
    // repository's object cache stays.
    let removed: Value = home.json(&["rm", &id, "--json"]);
    assert_eq!(repo.git(&["rev-parse", &branch]), tip);
    let store = text(&removed, "wip_store");
    let wip_commit = text(&removed, "wip_commit");
    let saved = std::process::Command::new("git")
        .args(["show", &format!("{wip_commit}:wip.txt")])
        .current_dir(&store)
        .output()
        .expect("git runs");
    assert_eq!(String::from_utf8_lossy(&saved.stdout), "wip\n", "{removed}");
    assert!(!engine.docker(&["inspect", &container]).status.success());
    let volumes = engine.docker_ok(&["volume", "ls", "-q"]);
    assert!(
        !volumes.lines().any(|v| v.starts_with(&container)),
        "{volumes}"
    );
    assert!(
        volumes.lines().any(|v| v.contains("-objects-")),
        "{volumes}"
    );
    assert_eq!(repo.git(&["status", "--porcelain"]), "");
}

/// `exec -i` over the engine's TLS connection: 8 MiB of bytes that are not text reach the
/// command intact, and the end of the input (a half-close) ends its stdin.
fn stdin_on_the_engine(home: &TestHome, id: &str) {
    let input = home.dir.path().join("remote-stdin.bin");
    let bytes: Vec<u8> = (0..8u32 << 20)
        .map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()[2])
        .collect();
    std::fs::write(&input, &bytes).expect("write the input");
    let hash_of = |out: &[u8]| {
        String::from_utf8_lossy(out)
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let want = hash_of(
        &std::process::Command::new("sha256sum")
            .arg(&input)
            .output()
            .expect("sha256sum")
            .stdout,
    );
    let fed = home
        .cmd(&["exec", "-i", id, "--", "sha256sum"])
        .stdin(std::fs::File::open(&input).expect("the input"))
        .output()
        .expect("paddock runs");
    assert_eq!(
        hash_of(&fed.stdout),
        want,
        "{}",
        String::from_utf8_lossy(&fed.stderr)
    );
}

/// A checkpoint comes out of the engine as the checked stream (the idle job is read in its
/// container, nothing of the agent's running to freeze), goes back into its volumes as a
/// bundle, and forks into a job on the same engine.
fn checkpoint_on_the_engine(home: &TestHome, id: &str) {
    let cp = home.json(&["checkpoint", id, "--name", "remote", "--json"]);
    assert_eq!(cp["frozen"], false, "{cp}");
    home.sh(id, "rm wip.txt && echo junk > junk.txt");
    home.ok(&["restore", id, "remote"]);
    let probe = "cat wip.txt; test -e junk.txt && echo junk || echo clean";
    assert_eq!(home.sh(id, probe), "wip\nclean\n");
    let forked = home.json(&["fork", id, "--from", "remote", "--json"]);
    let fork = text(&forked["jobs"][0], "id");
    assert_eq!(forked["jobs"][0]["engine"], "eng1", "{forked}");
    assert_eq!(home.sh(&fork, probe), "wip\nclean\n");
    home.ok(&["rm", &fork, "--force"]);
}

#[test]
fn a_second_job_of_a_large_repository_sends_under_a_tenth_of_the_first() {
    if !available("a_second_job_of_a_large_repository_sends_under_a_tenth") {
        return;
    }
    let engine = engine();
    let files: usize = std::env::var("PADDOCK_TEST_ENGINE_FILES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(5_000);
    let repo = FixtureRepo::with_files(files, 200);
    let home = home_with(engine);
    let started = std::time::Instant::now();
    let first = create_on(&home, engine, &repo, &["--task", "first"]);
    let first_ms = started.elapsed().as_millis();
    // One more commit on the base: the second job's base has a new file.
    repo.write("new.txt", "new\n");
    repo.commit_all("one more");
    let started = std::time::Instant::now();
    let second = create_on(&home, engine, &repo, &["--task", "second"]);
    let second_ms = started.elapsed().as_millis();
    let sent = |id: &str| {
        record(&home, id)["engine_fill"]["bytes"]
            .as_u64()
            .expect("fill bytes")
    };
    let (a, b) = (sent(&first), sent(&second));
    eprintln!(
        "engine fill, {files} files: first job {a} bytes in {first_ms} ms, second {b} bytes in {second_ms} ms"
    );
    assert!(b * 10 < a, "second {b} bytes, first {a}");
    let count = home.sh(&second, "git ls-files | wc -l && cat new.txt");
    assert!(count.contains("new"), "{count}");
    home.ok(&["rm", &first, "--force"]);
    home.ok(&["rm", &second, "--force"]);
}

/// `shell` reaches the job on its engine over TLS (the `docker` CLI with the engine's
/// certificates); commands piped in run, the shell's exit code comes back, and a commit made
/// in it is on the branch when the shell ends.
#[test]
fn a_shell_in_a_remote_job_runs_and_its_commit_syncs() {
    if !available("a_shell_in_a_remote_job_runs_and_its_commit_syncs") {
        return;
    }
    use std::io::Write as _;
    let engine = engine();
    let repo = FixtureRepo::new();
    let home = home_with(engine);
    let id = create_on(&home, engine, &repo, &["--task", "shell"]);
    let branch = home.json(&["show", &id, "--json"])["job"]["branch"]
        .as_str()
        .expect("branch")
        .to_string();
    let mut shell = home
        .cmd(&["shell", &id])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("shell runs");
    writeln!(
        shell.stdin.take().expect("stdin"),
        "echo in-$(hostname)-as-$(id -u); echo s > s.txt && git add s.txt && git commit -q -m 'from a remote shell'; exit 4"
    )
    .expect("write");
    let out = shell.wait_with_output().expect("shell ends");
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("-as-1000"), "{said}");
    assert_eq!(
        repo.git(&["log", "-1", "--format=%s", &branch]).trim(),
        "from a remote shell"
    );
    home.ok(&["rm", &id, "--force"]);
}
