//! `paddock push` (issue 29, item 4): exactly the job's branch goes to a remote of the
//! user's repository config, with the host's credentials: a bare remote on disk and a `git
//! http-backend` behind basic auth served by the test on loopback; another ref, a rewrite
//! without `--force-with-lease`, a URL for a remote and a remote the agent planted in its
//! own git config are refused or never read; `push: on-sync`; the API route and the MCP
//! tool; a gVisor job; an unprivileged user with the helper in their own global config.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

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
fn heads(bare: &Path) -> Vec<String> {
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
fn push(home: &TestHome, job: &str, args: &[&str]) -> (i32, Value, String) {
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

/// A `git http-backend` behind basic auth on a loopback port, run by python3's http.server
/// (the test's own listener; stopped on drop).
struct HttpRemote {
    child: Child,
    url: String,
    root: tempfile::TempDir,
}

const HTTP_BACKEND: &str = r#"
import base64, http.server, os, subprocess, sys
root, user, password, port_file = sys.argv[1:5]
expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
class Handler(http.server.BaseHTTPRequestHandler):
    def cgi(self):
        if self.headers.get("Authorization") != expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="test"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path, _, query = self.path.partition("?")
        env = dict(os.environ, GIT_PROJECT_ROOT=root, GIT_HTTP_EXPORT_ALL="1",
                   PATH_INFO=path, QUERY_STRING=query, REQUEST_METHOD=self.command,
                   CONTENT_TYPE=self.headers.get("Content-Type", ""),
                   CONTENT_LENGTH=str(len(body)), REMOTE_USER=user, REMOTE_ADDR="127.0.0.1",
                   GIT_HTTP_MAX_REQUEST_BUFFER="100M")
        for k in list(env):
            if k.startswith("HTTP_"): del env[k]
        if self.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = self.headers["Content-Encoding"]
        if self.headers.get("Git-Protocol"):
            env["HTTP_GIT_PROTOCOL"] = self.headers["Git-Protocol"]
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        head, _, rest = out.partition(b"\r\n\r\n")
        if not rest and b"\n\n" in out:
            head, _, rest = out.partition(b"\n\n")
        status = 200
        headers = []
        for line in head.decode().splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(rest)))
        self.end_headers()
        self.wfile.write(rest)
    do_GET = cgi
    do_POST = cgi
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
"#;

impl HttpRemote {
    fn start(user: &str, password: &str) -> HttpRemote {
        let root = closed_dir("paddock-http-remote-");
        git(
            root.path(),
            &["init", "-q", "--bare", "-b", "main", "r.git"],
        );
        git(
            &root.path().join("r.git"),
            &["config", "http.receivepack", "true"],
        );
        let script = root.path().join("serve.py");
        std::fs::write(&script, HTTP_BACKEND).unwrap();
        let port_file = root.path().join("port");
        let child = Command::new("python3")
            .arg(&script)
            .arg(root.path())
            .args([user, password])
            .arg(&port_file)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 runs");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let port = loop {
            if let Ok(port) = std::fs::read_to_string(&port_file) {
                break port;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the test's http-backend did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        HttpRemote {
            child,
            url: format!("http://127.0.0.1:{port}/r.git"),
            root,
        }
    }

    fn bare(&self) -> PathBuf {
        self.root.path().join("r.git")
    }
}

impl Drop for HttpRemote {
    fn drop(&mut self) {
        let _ = self.child.kill();
        if std::thread::panicking()
            && let Some(stderr) = self.child.stderr.take()
        {
            for line in BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
                .take(50)
            {
                eprintln!("http-backend: {line}");
            }
        }
        let _ = self.child.wait();
    }
}

#[test]
fn push_to_an_http_remote_uses_the_hosts_credential_helper_which_the_job_never_sees() {
    if !docker_available("push_to_an_http_remote_uses_the_hosts_credential_helper") {
        return;
    }
    let password = format!("pw-{}", std::process::id());
    let server = HttpRemote::start("alice", &password);
    // The user's own HOME (and so their global git config) reaches the push.
    let user_home = closed_dir("paddock-user-home-");
    let home = TestHome::new().env("HOME", user_home.path().to_str().unwrap());
    let repo = FixtureRepo::new();
    repo.git(&["remote", "add", "origin", &server.url]);
    let job = home.create_docker(&repo, &[]);
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    home.sh(
        &id,
        "echo web > web.txt && git add web.txt && git commit -qm web",
    );

    // No credentials yet: the server refuses, and so does the push (git's error, exit 7).
    let (code, _, stderr) = push(&home, &id, &[]);
    assert_eq!(code, 7, "{stderr}");
    assert!(heads(&server.bare()).is_empty());

    // The user's credential helper, in the user's repository config on the host.
    repo.git(&[
        "config",
        "credential.helper",
        &format!("!f() {{ echo username=alice; echo password={password}; }}; f"),
    ]);
    let (code, report, stderr) = push(&home, &id, &[]);
    assert_eq!(code, 0, "{stderr}");
    let tip = repo.git(&["rev-parse", &branch]);
    assert_eq!(report["url"], server.url.as_str(), "{report}");
    assert_eq!(report["new"], tip.as_str());
    assert_eq!(heads(&server.bare()), vec![format!("{branch}={tip}")]);

    // The same helper in the user's global config ($HOME/.gitconfig) instead.
    repo.git(&["config", "--unset", "credential.helper"]);
    std::fs::write(
        user_home.path().join(".gitconfig"),
        format!(
            "[credential]\n\thelper = \"!f() {{ echo username=alice; echo password={password}; }}; f\"\n"
        ),
    )
    .unwrap();
    home.sh(&id, "echo global >> web.txt && git commit -qam global");
    let (code, report, stderr) = push(&home, &id, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["old"], tip.as_str(), "{report}");
    assert_eq!(
        git(&server.bare(), &["rev-parse", &branch]),
        repo.git(&["rev-parse", &branch])
    );

    // A remote whose URL carries the password (the user's choice): it works, and the
    // password shows nowhere paddock prints, on success or on failure.
    let with_password = server
        .url
        .replace("http://", &format!("http://alice:{password}@"));
    repo.git(&["remote", "add", "inline", &with_password]);
    home.sh(&id, "echo more >> web.txt && git commit -qam more");
    let output = home.run(&["push", &id, "--remote", "inline", "--json"]);
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{printed}");
    assert!(!printed.contains(&password), "{printed}");
    assert!(printed.contains(&server.url), "{printed}");
    // A failing one, through a `pushurl` (named on git's command line) with the password.
    repo.git(&[
        "config",
        "remote.inline.pushurl",
        &with_password.replace("/r.git", "/missing.git"),
    ]);
    let output = home.run(&["push", &id, "--remote", "inline"]);
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(7), "{printed}");
    assert!(!printed.contains(&password), "{printed}");

    // Inside the job: neither the password nor the helper, anywhere the agent can look.
    let seen = home.sh(
        &id,
        "env; cat /paddock/git/config; git config --list --show-origin 2>&1; cat ~/.gitconfig ~/.git-credentials 2>&1; true",
    );
    assert!(!seen.contains(&password), "{seen}");
    assert!(!seen.contains("alice"), "{seen}");
    // Nor in what paddock printed or kept.
    let show = home.ok(&["show", &id, "--json"]);
    assert!(!show.contains(&password));
    let events = home.ok(&["events", "--json"]);
    assert!(!events.contains(&password));
    home.ok(&["rm", &id, "--delete-branch"]);
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

/// The unprivileged user of `.ci/run` (`useradd --uid 4243 paddock-ci`).
const USER_UID: u32 = 4243;

#[test]
fn an_unprivileged_user_pushes_with_their_own_global_credentials() {
    let user_exists = Command::new("id")
        .arg(USER_UID.to_string())
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        user_exists,
        "needs a user of uid {USER_UID} (.ci/run makes it: `useradd --uid {USER_UID} paddock-ci`)"
    );
    let password = format!("pw-user-{}", std::process::id());
    let server = HttpRemote::start("bob", &password);
    // The user's world, below a closed dir of theirs: home, repository.
    let top = closed_dir("paddock-push-user-");
    let user_home = top.path().join("home");
    let repo = top.path().join("repo");
    std::fs::create_dir_all(user_home.join(".config/paddock")).unwrap();
    std::fs::write(
        user_home.join(".config/paddock/config.yaml"),
        "admission:\n  memory: 1024g\n  cpus: 1000\n",
    )
    .unwrap();
    std::fs::write(
        user_home.join(".gitconfig"),
        format!(
            "[user]\n\tname = Bob\n\temail = bob@example.com\n[credential]\n\thelper = \"!f() {{ echo username=bob; echo password={password}; }}; f\"\n"
        ),
    )
    .unwrap();
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README.md"), "# user\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "initial"]);
    git(&repo, &["remote", "add", "origin", &server.url]);
    crate::fixtures::chown_trees(&[top.path()], USER_UID);
    let run = |args: &[&str]| {
        let output = Command::new("setpriv")
            .arg(format!("--reuid={USER_UID}"))
            .arg(format!("--regid={USER_UID}"))
            .arg("--clear-groups")
            .arg("--")
            .arg(env!("CARGO_BIN_EXE_paddock"))
            .args(args)
            .current_dir(&repo)
            .env_remove("PADDOCK_CONFIG")
            .env_remove("PADDOCK_PROFILE")
            .env_remove("PADDOCK_NO_DAEMON")
            .env("PADDOCK_HOME", user_home.join(".local/share/paddock"))
            .env("HOME", &user_home)
            .env("XDG_CONFIG_HOME", user_home.join(".config"))
            .stdin(Stdio::null())
            .output()
            .expect("paddock runs");
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "paddock {args:?} as {USER_UID}: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        stdout
    };
    let job: Value =
        serde_json::from_str(&run(&["create", "--runtime", "process", "--json"])).unwrap();
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    run(&[
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "echo u > u.txt && git add u.txt && git commit -qm u",
    ]);
    let report: Value = serde_json::from_str(&run(&["push", &id, "--json"])).unwrap();
    assert_eq!(report["updated"], true, "{report}");
    let tip = git(&repo, &["-c", "safe.directory=*", "rev-parse", &branch]);
    assert_eq!(report["new"], tip.as_str());
    assert_eq!(heads(&server.bare()), vec![format!("{branch}={tip}")]);
    run(&["rm", &id, "--delete-branch"]);
}
