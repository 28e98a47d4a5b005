//! `copy`, caches and `setup` of a job on a remote engine (host binds forbidden): copied
//! files reach the job owned by the agent and never a commit, a copy that would read out of
//! the repository or land on a tracked file is refused and leaves nothing; caches are volumes
//! of the engine shared by jobs with the same key files, a new key seeded from the last
//! volume inside the engine, kept by `rm`, and out of reach of another repository's jobs;
//! setup commands run (beside, with another network, on the same volumes) and are recorded.

use std::time::Instant;

use serde_json::Value;

use super::{Engine, available, create_on, engine, home_with};
use crate::fixtures::{FixtureRepo, TestHome, test_image};

/// A repository whose committed `.paddock.yaml` is `config`, with an untracked `.env` (0600)
/// and `config/local.toml` in the user's checkout.
fn repo_with(config: &str) -> FixtureRepo {
    let repo = FixtureRepo::new();
    repo.write(".paddock.yaml", config);
    repo.write("package-lock.json", "{\"v\": 1}\n");
    repo.commit_all("paddock config");
    repo.write(".env", "API_KEY=local-secret\n");
    std::fs::set_permissions(
        repo.path().join(".env"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod");
    repo.write("config/local.toml", "port = 7000\n");
    repo
}

/// This install's volumes on `engine` (all, or with `role`).
fn volumes(home: &TestHome, engine: &Engine, role: Option<&str>) -> Vec<String> {
    let id = std::fs::read_to_string(home.root().join("home-id")).expect("home id");
    let mut args = vec![
        "volume".to_string(),
        "ls".into(),
        "-q".into(),
        "--filter".into(),
        format!("label=dev.paddock.home={}", id.trim()),
    ];
    if let Some(role) = role {
        args.extend(["--filter".into(), format!("label=dev.paddock.role={role}")]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut out: Vec<String> = engine
        .docker_ok(&args)
        .lines()
        .map(str::to_string)
        .collect();
    out.sort();
    out
}

/// The volumes mounted in a job's container on `engine`, with their targets.
fn mounted(home: &TestHome, engine: &Engine, id: &str) -> Vec<(String, String)> {
    let show = home.json(&["show", id, "--json"]);
    let container = show["job"]["container_name"].as_str().expect("container");
    let mounts = engine.docker_ok(&["inspect", "-f", "{{json .Mounts}}", container]);
    let mounts: Value = serde_json::from_str(&mounts).expect("mounts json");
    mounts
        .as_array()
        .expect("a list")
        .iter()
        .map(|m| {
            assert_eq!(m["Type"], "volume", "only volumes: {m}");
            (
                m["Name"].as_str().unwrap_or_default().to_string(),
                m["Destination"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn create_args(repo: &FixtureRepo, engine: &Engine, task: &str) -> Vec<String> {
    [
        "create",
        "--repo",
        &repo.path().display().to_string(),
        "--engine",
        engine.name,
        "--image",
        &test_image(),
        "--task",
        task,
        "--json",
    ]
    .iter()
    .map(ToString::to_string)
    .collect()
}

#[test]
fn a_remote_job_gets_its_copies_and_setup_and_bad_copies_leave_nothing() {
    if !available("a_remote_job_gets_its_copies_and_setup_and_bad_copies_leave_nothing") {
        return;
    }
    let engine = engine();
    let repo = repo_with(
        "copy: [\".env\", \"config/local.toml\"]\nsetup:\n  - id -u && cat .env && stat -c %u .env\n  - echo second-setup > setup.txt\n",
    );
    let home = home_with(engine).trusting(repo.path());
    let id = create_on(&home, engine, &repo, &["--task", "copy"]);
    let job = home.json(&["show", &id, "--json"])["job"].clone();
    assert_eq!(
        job["copied"],
        serde_json::json!([".env", "config/local.toml"]),
        "{job}"
    );
    // The setup commands ran in the job, in order, each one's output in the record.
    let setup = job["setup"].as_array().expect("setup runs");
    assert_eq!(setup.len(), 2, "{job}");
    assert!(setup.iter().all(|run| run["ok"] == true), "{job}");
    assert_eq!(
        setup[0]["result"]["stdout"], "1000\nAPI_KEY=local-secret\n1000\n",
        "{job}"
    );

    // The agent owns them, with the user's modes; git sees none of them, even `add -A`.
    let inside = home.sh(
        &id,
        "stat -c '%u %a %n' .env config config/local.toml && cat .env config/local.toml setup.txt \
         && git status --porcelain --ignored=no -- .env config && grep -x /.env /paddock/git/info/exclude",
    );
    assert_eq!(
        inside,
        "1000 600 .env\n1000 755 config\n1000 644 config/local.toml\nAPI_KEY=local-secret\nport = 7000\nsecond-setup\n/.env\n"
    );
    home.sh(
        &id,
        "echo more >> .env && git add -A && git commit -q -m work",
    );
    let branch = job["branch"].as_str().expect("branch").to_string();
    let tree = repo.git(&["ls-tree", "-r", "--name-only", &branch]);
    assert!(tree.lines().any(|l| l == "setup.txt"), "{tree}");
    assert!(
        !tree.contains(".env") && !tree.contains("local.toml"),
        "copied files were committed: {tree}"
    );
    home.ok(&["rm", &id, "--force"]);
    assert_eq!(
        std::fs::read_to_string(repo.path().join(".env")).expect("the user's .env"),
        "API_KEY=local-secret\n"
    );

    // A link out of the repository, and a destination the commit tracks: refused, and
    // nothing is left (no record, branch, container or volume on the engine).
    let outside = tempfile::tempdir().expect("tempdir");
    std::fs::write(outside.path().join("secret"), "host secret\n").expect("write");
    // And a cache whose path goes through a link the commit tracks.
    let bad = [
        ("copy: [leak]\n", "leads out of the repository"),
        ("copy: [package-lock.json]\n", "tracked in the repository"),
        (
            "caches:\n  - path: vendor/lib\n",
            "is a symlink (to `/tmp`)",
        ),
    ];
    for (config, said) in bad {
        let repo = repo_with(config);
        std::os::unix::fs::symlink(outside.path().join("secret"), repo.path().join("leak"))
            .expect("symlink");
        if config.starts_with("caches") {
            std::os::unix::fs::symlink("/tmp", repo.path().join("vendor")).expect("symlink");
            repo.commit_all("a tracked link");
        }
        let home = home_with(engine).trusting(repo.path());
        let args = create_args(&repo, engine, "bad");
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = home.run(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{config}: created");
        assert!(stderr.contains(said), "{config}: {stderr}");
        assert_eq!(repo.branches(), vec!["main".to_string()], "{config}");
        assert_eq!(home.job_records(), 0, "{config}");
        let left: Vec<String> = volumes(&home, engine, None)
            .into_iter()
            .filter(|v| !v.contains("-objects-"))
            .collect();
        assert_eq!(left, Vec::<String>::new(), "{config}");
    }
}

/// Caches: the config of a repository with a keyed `node_modules` cache and an `env` one,
/// and a setup that runs beside the job with another network.
const CACHES: &str = "caches:\n  - path: node_modules\n    key: [package-lock.json]\n    strategy: symlink\n  - env: TOOL_CACHE\n    name: tool\nsetup_network: open\nsetup:\n  - echo from-setup > node_modules/setup.txt && echo \"$TOOL_CACHE\" > \"$TOOL_CACHE/where\"\n";

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn remote_caches_are_volumes_shared_by_key_seeded_kept_by_rm_and_private_to_the_repository() {
    if !available("remote_caches_are_volumes_shared_by_key_seeded_kept_by_rm") {
        return;
    }
    let engine = engine();
    let repo = repo_with(CACHES);
    let home = home_with(engine).trusting(repo.path());
    let a = create_on(&home, engine, &repo, &["--task", "a"]);
    let b = create_on(&home, engine, &repo, &["--task", "b"]);
    let caches = volumes(&home, engine, Some("cache"));
    assert_eq!(
        caches.len(),
        2,
        "one node_modules and one tool volume: {caches:?}"
    );
    let node = caches
        .iter()
        .find(|v| v.contains("-cache-") && v.contains("-node_modules-"))
        .expect("the node_modules volume")
        .clone();
    for id in [&a, &b] {
        let mounts = mounted(&home, engine, id);
        assert!(
            mounts.contains(&(node.clone(), "/workspace/node_modules".to_string())),
            "{mounts:?}"
        );
    }
    // What one writes the other sees; the setup's throwaway container had the same volumes;
    // the agent owns the caches; git leaves them out.
    home.sh(
        &a,
        "echo written-by-job-a > node_modules/a.txt && git status --porcelain",
    );
    let seen = home.sh(
        &b,
        "cat node_modules/a.txt node_modules/setup.txt \"$TOOL_CACHE/where\" && stat -c %u node_modules \"$TOOL_CACHE\" && git status --porcelain",
    );
    assert!(
        seen.starts_with("written-by-job-a\nfrom-setup\n/paddock/caches/paddock-"),
        "{seen}"
    );
    assert!(seen.ends_with("1000\n1000\n"), "{seen}");
    home.sh(&a, "echo a > a.txt && git add -A && git commit -q -m a");

    // A new lockfile: a new volume, seeded inside the engine from the last one; what the new
    // job writes stays in its own.
    repo.write("package-lock.json", "{\"v\": 2}\n");
    repo.commit_all("new lockfile");
    let c = create_on(&home, engine, &repo, &["--task", "c"]);
    let caches = volumes(&home, engine, Some("cache"));
    assert_eq!(caches.len(), 3, "{caches:?}");
    assert!(!mounted(&home, engine, &c).iter().any(|(v, _)| *v == node));
    assert_eq!(
        home.sh(
            &c,
            "cat node_modules/a.txt && echo from-c > node_modules/c.txt"
        ),
        "written-by-job-a\n"
    );
    assert_eq!(
        home.sh(&a, "ls node_modules"),
        "a.txt\nsetup.txt\n",
        "a job of the old lockfile does not see the new volume"
    );

    // Another repository with the same config: its own volumes; nothing of this one's is
    // reachable from inside (a hostile agent looks everywhere it can).
    let other = repo_with(CACHES);
    let x = create_on(&home, engine, &other, &["--task", "x"]);
    let theirs = mounted(&home, engine, &x);
    assert!(
        !theirs.iter().any(|(v, _)| caches.contains(v)),
        "{theirs:?} {caches:?}"
    );
    let found = home.sh(
        &x,
        "ls node_modules; grep -rl written-by-job-a / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr --exclude-dir=dev 2>/dev/null; \
         touch /paddock-objects/paddock-caches/forged 2>/dev/null && echo forged a seed mark; true",
    );
    assert_eq!(found, "setup.txt\n", "{found}");

    // rm keeps the branch with its commit and leaves every cache volume.
    let branch = home.json(&["show", &a, "--json"])["job"]["branch"]
        .as_str()
        .expect("branch")
        .to_string();
    for id in [&a, &b, &c] {
        home.ok(&["rm", id, "--force"]);
    }
    assert_eq!(repo.git(&["log", "-1", "--format=%s", &branch]).trim(), "a");
    let after = volumes(&home, engine, Some("cache"));
    assert_eq!(after.len(), 5, "{after:?}");
    assert!(caches.iter().all(|v| after.contains(v)), "{after:?}");

    // `cache ls` shows them with the jobs using each; `prune` removes those of no live job,
    // never a volume of another install (labelled as a cache, but not with this install).
    let stranger = format!("paddock-stranger-cache-{}", std::process::id());
    engine.docker_ok(&[
        "volume",
        "create",
        "--label",
        "dev.paddock.home=another-install",
        "--label",
        "dev.paddock.role=cache",
        &stranger,
    ]);
    let listed = home.json(&["cache", "ls", "--json"]);
    let listed = listed.as_array().expect("entries");
    let on_engine: Vec<&Value> = listed
        .iter()
        .filter(|e| e["path"].as_str().is_some_and(|p| p.starts_with("eng1:")))
        .collect();
    assert_eq!(on_engine.len(), 5, "{listed:?}");
    assert!(
        on_engine
            .iter()
            .any(|e| e["jobs"] == serde_json::json!([x.clone()])),
        "{listed:?}"
    );
    let table = home.ok(&["cache", "ls"]);
    assert!(table.contains("node_modules (eng1)"), "{table}");
    let pruned = home.json(&["cache", "prune", "--unused-for", "0s", "--json"]);
    assert_eq!(
        pruned["removed"].as_array().map(Vec::len),
        Some(3),
        "{pruned}"
    );
    let left = volumes(&home, engine, Some("cache"));
    assert_eq!(left.len(), 2, "the live job's volumes stay: {left:?}");
    assert!(!left.iter().any(|v| caches.contains(v)), "{left:?}");
    home.ok(&["rm", &x, "--force"]);
    home.json(&["cache", "prune", "--unused-for", "0s", "--json"]);
    assert_eq!(volumes(&home, engine, Some("cache")), Vec::<String>::new());
    let stays = engine
        .docker(&["volume", "inspect", &stranger])
        .status
        .success();
    engine.docker_ok(&["volume", "rm", &stranger]);
    assert!(stays, "another install's volume was pruned");
}

/// Median of three create times: a job whose cache volume is new and empty, one whose new
/// volume is seeded (inside the engine) from a cache of 2,000 files (or
/// `PADDOCK_TEST_CACHE_FILES`, in hundreds), and one that shares a
/// volume that exists. A measurement, not a check (what seeding must do is asserted by
/// `remote_caches_are_volumes_shared_by_key_seeded_kept_by_rm_and_private_to_the_repository`):
/// run it on its own, on an idle machine.
#[test]
#[ignore = "a measurement (medians printed): cargo nextest run --run-ignored only -E 'test(remote_cache_seed_timing)'"]
fn remote_cache_seed_timing() {
    if !available("remote_cache_seed_timing") {
        return;
    }
    let engine = engine();
    let home = home_with(engine);
    let files: usize = std::env::var("PADDOCK_TEST_CACHE_FILES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000);
    let (mut first, mut seeded, mut shared) = (Vec::new(), Vec::new(), Vec::new());
    let timed = |repo: &FixtureRepo, task: &str| {
        let started = Instant::now();
        let id = create_on(&home, engine, repo, &["--task", task]);
        (id, started.elapsed().as_millis())
    };
    for round in 0..3 {
        let repo = repo_with("caches:\n  - path: node_modules\n    key: [package-lock.json]\n");
        let (a, ms) = timed(&repo, "first");
        first.push(ms);
        home.sh(
            &a,
            &format!("for d in $(seq 1 {}); do mkdir -p node_modules/p$d; for f in $(seq 1 100); do echo $d-$f > node_modules/p$d/f$f.js; done; done", files / 100),
        );
        repo.write("package-lock.json", &format!("{{\"v\": {}}}\n", round + 10));
        repo.commit_all("new lockfile");
        let (b, ms) = timed(&repo, "seeded");
        seeded.push(ms);
        assert_eq!(
            home.sh(&b, "find node_modules -type f | wc -l").trim(),
            (files / 100 * 100).to_string()
        );
        let (c, ms) = timed(&repo, "shared");
        shared.push(ms);
        for id in [a, b, c] {
            home.ok(&["rm", &id, "--force"]);
        }
    }
    let median = |v: &mut Vec<u128>| {
        v.sort_unstable();
        v[1]
    };
    eprintln!(
        "remote create, median of 3: first (new empty cache) {} ms, seeded from {files} files {} ms, shared {} ms",
        median(&mut first),
        median(&mut seeded),
        median(&mut shared)
    );
}
