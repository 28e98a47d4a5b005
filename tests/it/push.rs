//! `paddock push` (issue 29, item 4): exactly the job's branch goes to a remote of the
//! user's repository config, with the host's credentials: a bare remote on disk and a `git
//! http-backend` behind basic auth served by the test on loopback; another ref, a rewrite
//! without `--force-with-lease`, a URL for a remote and a remote the agent planted in its
//! own git config are refused or never read; `push: on-sync`; the API route and the MCP
//! tool; a gVisor job; an unprivileged user with the helper in their own global config.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::api::{Daemon, api};
use crate::fixtures::{FixtureRepo, TestHome, closed_dir, docker_available, git, text};

/// A bare repository on disk, made `origin` of `repo` (in the user's repository config)
/// with `main` pushed to it.
fn bare_origin(repo: &FixtureRepo, name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = closed_dir("paddock-remote-");
    let bare = dir.path().join("remote.git");
    git(
        dir.path(),
        &["init", "-q", "--bare", "-b", "main", "remote.git"],
    );
    repo.git(&["remote", "add", name, bare.to_str().unwrap()]);
    repo.git(&["push", "-q", name, "main"]);
    (dir, bare)
}

/// The branches of a bare repository, `name=sha` each.
pub(crate) fn heads(bare: &Path) -> Vec<String> {
    git(
        bare,
        &[
            "for-each-ref",
            "--format=%(refname:short)=%(objectname)",
            "refs/heads",
            "refs/tags",
        ],
    )
    .lines()
    .map(str::to_string)
    .collect()
}

/// `paddock push JOB ARGS --json`, returning the exit code and the parsed report (or stderr).
pub(crate) fn push(home: &TestHome, job: &str, args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["push", job, "--json"];
    all.extend_from_slice(args);
    let output = home.run(&all);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (
        output.status.code().unwrap_or(-1),
        serde_json::from_str(&stdout).unwrap_or(Value::Null),
        stderr,
    )
}

#[test]
fn push_publishes_exactly_the_jobs_branch_and_refuses_a_rewrite_without_the_lease() {
    let home = TestHome::new();
    let repo = FixtureRepo::new();
    let (_remote, bare) = bare_origin(&repo, "origin");
    // The user's config asks for more than one ref (every branch, tags): a push of a job's
    // branch sends that branch only.
    repo.git(&["branch", "other"]);
    repo.git(&["tag", "-a", "v1", "-m", "v1"]);
    repo.git(&["config", "remote.origin.push", "refs/heads/*:refs/heads/*"]);
    repo.git(&["config", "push.followTags", "true"]);
    let job = home.create(&repo, &[]);
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    home.sh(
        &id,
        "echo one > one.txt && git add one.txt && git commit -qm one",
    );

    let (code, report, stderr) = push(&home, &id, &[]);
    assert_eq!(code, 0, "{stderr}");
    let tip = repo.git(&["rev-parse", &branch]);
    assert_eq!(report["remote"], "origin", "{report}");
    assert_eq!(report["url"], bare.to_str().unwrap());
    assert_eq!(report["ref"], format!("refs/heads/{branch}"));
    assert_eq!(report["old"], Value::Null);
    assert_eq!(report["new"], tip.as_str());
    assert_eq!(report["updated"], true);
    assert_eq!(report["forced"], false);
    assert_eq!(report["pull_request_url"], Value::Null);
    let main = repo.git(&["rev-parse", "main"]);
    assert_eq!(
        heads(&bare),
        vec![format!("{branch}={tip}"), format!("main={main}")],
        "only the job's branch was added (no `other`, no tag)"
    );

    // Again: nothing to send.
    let (code, report, _) = push(&home, &id, &[]);
    assert_eq!(code, 0);
    assert_eq!(report["updated"], false, "{report}");
    assert_eq!(report["old"], tip.as_str());

    // A commit the job made after the last exec is synced first, as `show` does.
    home.sh(
        &id,
        "echo two > two.txt && git add two.txt && git commit -qm two",
    );
    let (code, report, stderr) = push(&home, &id, &[]);
    assert_eq!(code, 0, "{stderr}");
    let second = repo.git(&["rev-parse", &branch]);
    assert_eq!(report["old"], tip.as_str());
    assert_eq!(report["new"], second.as_str());
    assert_eq!(git(&bare, &["rev-parse", &branch]), second);

    // The job rewrites its branch: refused without the lease (exit 6, the remote untouched).
    home.sh(&id, "git commit -q --amend -m rewritten");
    let (code, _, stderr) = push(&home, &id, &[]);
    assert_eq!(code, 6, "{stderr}");
    assert!(stderr.contains("rewrite"), "{stderr}");
    assert!(stderr.contains("--force-with-lease"), "{stderr}");
    assert_eq!(git(&bare, &["rev-parse", &branch]), second);
    let (code, report, stderr) = push(&home, &id, &["--force-with-lease"]);
    assert_eq!(code, 0, "{stderr}");
    let rewritten = repo.git(&["rev-parse", &branch]);
    assert_ne!(rewritten, second);
    assert_eq!(report["forced"], true, "{report}");
    assert_eq!(report["old"], second.as_str());
    assert_eq!(git(&bare, &["rev-parse", &branch]), rewritten);

    // Only remotes the user's config names: a URL, a path, an unknown name, an option.
    for remote in [
        bare.to_str().unwrap(),
        "file:///tmp/x.git",
        "nowhere",
        "--mirror",
    ] {
        let output = home.run(&["push", &id, &format!("--remote={remote}")]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(4), "{remote}: {stderr}");
        assert!(stderr.contains("is not a remote of"), "{remote}: {stderr}");
    }

    // The event says what went where.
    let events = home.ok(&["events", "--job", &id, "--json"]);
    let pushed: Vec<Value> = events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "job.pushed")
        .collect();
    assert_eq!(pushed.len(), 3, "{events}");
    assert_eq!(pushed[2]["detail"]["forced"], true);
    assert_eq!(pushed[2]["detail"]["new"], rewritten.as_str());
}

#[test]
fn push_goes_to_the_branchs_upstream_and_names_a_pull_request_page() {
    let home = TestHome::new();
    let repo = FixtureRepo::new();
    let (_remote, bare) = bare_origin(&repo, "upstream");
    let job = home.create(&repo, &[]);
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    home.sh(&id, "echo x > x.txt && git add x.txt && git commit -qm x");
    // The user's config sends the branch to `upstream`'s `review/feature`, and that remote
    // pushes to a GitHub-style URL through `pushurl`, rewritten back to the bare repository
    // by the user's own `url.*.insteadOf`.
    repo.git(&["config", &format!("branch.{branch}.remote"), "upstream"]);
    repo.git(&[
        "config",
        &format!("branch.{branch}.merge"),
        "refs/heads/review/feature",
    ]);
    repo.git(&[
        "config",
        "remote.upstream.pushurl",
        "https://github.com/acme/widgets.git",
    ]);
    repo.git(&[
        "config",
        &format!("url.{}.insteadOf", bare.display()),
        "https://github.com/acme/widgets.git",
    ]);
    let (code, report, stderr) = push(&home, &id, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["remote"], "upstream", "{report}");
    assert_eq!(report["ref"], "refs/heads/review/feature");
    assert_eq!(report["url"], "https://github.com/acme/widgets.git");
    assert_eq!(
        report["pull_request_url"],
        "https://github.com/acme/widgets/pull/new/review/feature"
    );
    assert_eq!(
        git(&bare, &["rev-parse", "review/feature"]),
        repo.git(&["rev-parse", &branch])
    );
    assert!(
        !heads(&bare)
            .iter()
            .any(|h| h.starts_with(&format!("{branch}="))),
        "the branch went to its upstream name only"
    );
    // The human form says the same.
    home.sh(&id, "echo y > y.txt && git add y.txt && git commit -qm y");
    let out = home.ok(&["push", &id]);
    assert!(
        out.contains(&format!(
            "pushed {branch} to upstream refs/heads/review/feature"
        )),
        "{out}"
    );
    assert!(
        out.contains(
            "open a pull request: https://github.com/acme/widgets/pull/new/review/feature"
        ),
        "{out}"
    );
}

#[test]
fn a_remote_the_agent_planted_in_its_own_git_config_is_never_read() {
    if !docker_available("a_remote_the_agent_planted_in_its_own_git_config_is_never_read") {
        return;
    }
    planted_config_case("docker");
}

#[test]
fn push_from_a_gvisor_job() {
    if !docker_available("push_from_a_gvisor_job") {
        return;
    }
    planted_config_case("runsc");
}

/// A container job (`runtime`) whose agent points `origin`'s pushurl, a new remote `evil`
/// and `url.*.insteadOf` at a bare repository of the attacker's: the push goes where the
/// user's config says, `evil` is no remote, and the attacker's repository stays empty.
fn planted_config_case(runtime: &str) {
    let home = TestHome::new();
    let repo = FixtureRepo::new();
    let (_remote, bare) = bare_origin(&repo, "origin");
    let evil_dir = closed_dir("paddock-evil-");
    let evil = evil_dir.path().join("evil.git");
    git(evil_dir.path(), &["init", "-q", "--bare", "evil.git"]);
    let image = crate::fixtures::test_image();
    let job = home.create(&repo, &["--runtime", runtime, "--image", &image]);
    assert_eq!(job["runtime"], runtime, "{job}");
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    let evil_url = evil.display().to_string();
    let plant = format!(
        "remote.origin.pushurl={evil_url}\nremote.origin.url={evil_url}\nremote.evil.url={evil_url}\n\
         url.{evil_url}.insteadOf={bare}\nbranch.{branch}.remote=evil\n",
        bare = bare.display()
    );
    let set_all = |flag: &str| {
        plant
            .lines()
            .map(|line| {
                let (key, value) = line.split_once('=').unwrap();
                format!("git config {flag} '{key}' '{value}'")
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    // The agent plants it where it can: its global config (its job git dir's `config` is
    // mounted read-only, so that attempt fails).
    let planted = home.sh(
        &id,
        &format!(
            "echo p > p.txt && git add p.txt && git commit -qm p; {}; {}; \
             git config --get remote.evil.url; git config --get remote.origin.pushurl",
            set_all("--global"),
            set_all(""),
        ),
    );
    assert_eq!(
        planted.lines().collect::<Vec<_>>(),
        [evil_url.as_str(); 2],
        "{planted}"
    );
    // And, as if it had got there, in the job's private git dir on the host: never read.
    let work = home.root().join("work").join(&id);
    let job_config = [
        work.join("git/config"),
        work.join("overlay/layers/git/config"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .unwrap_or_else(|| panic!("the job's git config under {}", work.display()));
    for line in plant.lines() {
        let (key, value) = line.split_once('=').unwrap();
        git(
            &work,
            &["config", "--file", job_config.to_str().unwrap(), key, value],
        );
    }
    let (code, report, stderr) = push(&home, &id, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["remote"], "origin", "{report}");
    assert_eq!(report["url"], bare.to_str().unwrap());
    let tip = repo.git(&["rev-parse", &branch]);
    assert_eq!(git(&bare, &["rev-parse", &branch]), tip);
    let output = home.run(&["push", &id, "--remote", "evil"]);
    assert_eq!(output.status.code(), Some(4));
    assert!(heads(&evil).is_empty(), "the attacker's remote got nothing");
    home.ok(&["rm", &id, "--delete-branch"]);
}

#[test]
fn push_on_sync_pushes_after_each_exec_that_moves_the_branch_and_a_failure_never_fails_it() {
    let home = TestHome::new();
    let config = home.dir.path().join("config/paddock/config.yaml");
    let mut text_of = std::fs::read_to_string(&config).unwrap();
    text_of.push_str("profiles:\n  default:\n    push: on-sync\n");
    std::fs::write(&config, text_of).unwrap();
    let repo = FixtureRepo::new();
    let (_remote, bare) = bare_origin(&repo, "origin");
    // A repository's own file cannot turn pushing on (or off) for the user.
    repo.write(".paddock.yaml", "profiles:\n  default:\n    push: manual\n");
    repo.commit_all("repo config");
    let job = home.create(&repo, &[]);
    let id = text(&job, "id");
    let branch = text(&job, "branch");

    home.sh(&id, "echo a > a.txt && git add a.txt && git commit -qm a");
    let tip = repo.git(&["rev-parse", &branch]);
    assert_eq!(
        git(&bare, &["rev-parse", &branch]),
        tip,
        "pushed after the exec"
    );
    // An exec that moves nothing pushes nothing (no event).
    home.sh(&id, "true");
    home.sh(&id, "echo b > b.txt && git add b.txt && git commit -qm b");
    let second = repo.git(&["rev-parse", &branch]);
    assert_eq!(git(&bare, &["rev-parse", &branch]), second);

    // The remote goes away: the exec still succeeds; the failure is an event and on the job.
    std::fs::rename(&bare, bare.with_extension("gone")).unwrap();
    home.sh(&id, "echo c > c.txt && git add c.txt && git commit -qm c");
    let view = home.json(&["show", &id, "--json"]);
    let error = view["job"]["push_error"]
        .as_str()
        .or(view["push_error"].as_str())
        .unwrap_or_else(|| panic!("push_error on the job: {view}"))
        .to_string();
    assert!(error.contains("git"), "{error}");
    let events = home.ok(&["events", "--job", &id, "--json"]);
    let kinds: Vec<String> = events
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|e| e["type"].as_str().unwrap_or_default().to_string())
        .filter(|k| k.starts_with("job.push"))
        .collect();
    assert_eq!(
        kinds,
        ["job.pushed", "job.pushed", "job.push_failed"],
        "{events}"
    );
    // Back: the next exec's push clears it.
    std::fs::rename(bare.with_extension("gone"), &bare).unwrap();
    home.sh(&id, "echo d > d.txt && git add d.txt && git commit -qm d");
    let view = home.json(&["show", &id, "--json"]);
    assert!(!view.to_string().contains("push_error"), "{view}");
    assert_eq!(
        git(&bare, &["rev-parse", &branch]),
        repo.git(&["rev-parse", &branch])
    );
}

#[test]
fn the_api_route_pushes_and_an_mcp_session_pushes_only_its_own_jobs() {
    let home = TestHome::new();
    let repo = FixtureRepo::new();
    let (_remote, bare) = bare_origin(&repo, "origin");
    let job = home.create(&repo, &[]);
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    home.sh(&id, "echo a > a.txt && git add a.txt && git commit -qm a");
    let daemon = Daemon::start(&home, &[]);
    let (status, report) = api(
        &daemon.socket,
        "POST",
        &format!("/v1/jobs/{id}/push"),
        Some(&json!({"remote": "origin"})),
    );
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["ref"], format!("refs/heads/{branch}"));
    assert_eq!(
        git(&bare, &["rev-parse", &branch]),
        repo.git(&["rev-parse", &branch])
    );
    let (status, answer) = api(
        &daemon.socket,
        "POST",
        &format!("/v1/jobs/{id}/push"),
        Some(&json!({"remote": "/tmp/elsewhere.git"})),
    );
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = api(
        &daemon.socket,
        "POST",
        &format!("/v1/jobs/{id}/push"),
        Some(&json!({"refspec": "refs/heads/main:refs/heads/main"})),
    );
    assert!(status >= 400, "unknown fields are refused: {answer}");
    daemon.stop();

    // An MCP session did not create this job: job_push is refused.
    let mut mcp = crate::mcp::McpClient::start(&home, &[]);
    let result = mcp.call("job_push", &json!({"job": id}));
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(result["structuredContent"]["error"]["code"], "refused");
    // With every job allowed, it pushes (already there: nothing sent).
    let mut all = crate::mcp::McpClient::start(&home, &["--all-jobs"]);
    let result = all.call("job_push", &json!({"job": id}));
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["updated"], false, "{result}");
}

/// Issue 40, item 4: a push publishes only the job's history. An agent that merged the
/// user's never-pushed branch (readable in the object store it borrows) into its own branch
/// gets its push refused, naming that branch and the commit; `--include-local-history`
/// pushes anyway. The job's own commits push even after the user merged them into an
/// unpushed local branch.
#[test]
fn a_push_refuses_the_users_unpushed_history_an_agent_merged_in() {
    let home = TestHome::new();
    let repo = FixtureRepo::new();
    let (_remote, bare) = bare_origin(&repo, "origin");
    // The user's private work: a branch never pushed.
    repo.git(&["switch", "-q", "-c", "private"]);
    repo.write("secret-plan.txt", "the user's unpublished plan\n");
    let private = repo.commit_all("private: not for the remote");
    repo.git(&["switch", "-q", "main"]);

    // The agent finds it in the objects it can read and merges it in (keeping its tree).
    let job = home.create(&repo, &["--runtime", "process", "--task", "merger"]);
    let id = text(&job, "id");
    home.sh(
        &id,
        &format!(
            "echo mine > mine.txt && git add mine.txt && git commit -qm mine && git merge -q -s ours --no-edit {private}"
        ),
    );
    let (code, _, stderr) = push(&home, &id, &[]);
    assert_eq!(code, 9, "{stderr}");
    assert!(
        stderr.contains("private") && stderr.contains(&private[..10]),
        "names the branch and the commit: {stderr}"
    );
    assert!(stderr.contains("--include-local-history"), "{stderr}");
    assert!(
        !heads(&bare).iter().any(|h| h.contains(&private)),
        "nothing went out"
    );
    let rev_list = |rev: &str| git(&bare, &["rev-list", "--all"]).contains(rev);
    assert!(
        !rev_list(&private),
        "the private commit is not on the remote"
    );
    // `show` and `diff` say the branch carries history from outside the job.
    let shown = home.json(&["show", &id, "--json"]);
    let outside = &shown["outside_history"];
    assert_eq!(outside["count"], 1, "{shown}");
    assert_eq!(outside["refs"], serde_json::json!(["private"]), "{shown}");
    assert_eq!(outside["commits"][0]["sha"], private.as_str(), "{shown}");
    let human = home.ok(&["show", &id]);
    assert!(
        human.contains("outside") && human.contains("private"),
        "{human}"
    );
    let diff = home.run(&["diff", &id, "--stat"]);
    let note = String::from_utf8_lossy(&diff.stderr);
    assert!(
        note.contains("did not make") && note.contains("private"),
        "{note}"
    );
    // The user's choice: push it anyway.
    let (code, report, stderr) = push(&home, &id, &["--include-local-history"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["updated"], true, "{report}");
    assert!(rev_list(&private));

    // A job whose own commits the user merged into an unpushed local branch still pushes:
    // those commits are the job's.
    let job = home.create(&repo, &["--runtime", "process", "--task", "own"]);
    let (id, branch) = (text(&job, "id"), text(&job, "branch"));
    home.sh(
        &id,
        "echo own > own.txt && git add own.txt && git commit -qm own",
    );
    home.ok(&["log", &id]);
    repo.git(&["switch", "-q", "-c", "integration"]);
    repo.git(&["merge", "-q", "--no-edit", &branch]);
    repo.git(&["switch", "-q", "main"]);
    let (code, report, stderr) = push(&home, &id, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["updated"], true, "{report}");
    let shown = home.json(&["show", &id, "--json"]);
    assert!(shown["outside_history"].is_null(), "{shown}");
}

/// Issue 40, item 4: a commit of the user's that no ref reaches any more (a deleted
/// branch's, still in the object store the job borrows) is not the job's either: merged in,
/// `show` reports it and `push` refuses it.
#[test]
fn a_push_refuses_a_deleted_branchs_commit_an_agent_merged_in() {
    let home = TestHome::new();
    let repo = FixtureRepo::new();
    let (_remote, bare) = bare_origin(&repo, "origin");
    repo.git(&["switch", "-q", "-c", "draft"]);
    repo.write("draft.txt", "a draft the user threw away\n");
    let draft = repo.commit_all("draft: thrown away");
    repo.git(&["switch", "-q", "main"]);
    repo.git(&["branch", "-q", "-D", "draft"]);

    let job = home.create(&repo, &["--runtime", "process", "--task", "digger"]);
    let id = text(&job, "id");
    home.sh(
        &id,
        &format!(
            "echo mine > mine.txt && git add mine.txt && git commit -qm mine && git merge -q -s ours --no-edit {draft}"
        ),
    );
    let shown = home.json(&["show", &id, "--json"]);
    let outside = &shown["outside_history"];
    assert_eq!(outside["count"], 1, "{shown}");
    assert_eq!(outside["refs"], serde_json::json!([]), "{shown}");
    assert_eq!(outside["commits"][0]["sha"], draft.as_str(), "{shown}");
    let (code, _, stderr) = push(&home, &id, &[]);
    assert_eq!(code, 9, "{stderr}");
    assert!(stderr.contains(&draft[..10]), "names the commit: {stderr}");
    assert!(
        !git(&bare, &["rev-list", "--all"]).contains(&draft),
        "the thrown-away commit is not on the remote"
    );
}
