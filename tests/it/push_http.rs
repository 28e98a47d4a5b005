//! `paddock push` to a `git http-backend` behind basic auth, served by the test on loopback,
//! with the host's credential helper (which the job never sees), as root and as an
//! unprivileged user with the helper in their own global config. The rest of push's tests
//! are in `push.rs`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::fixtures::{FixtureRepo, TestHome, closed_dir, docker_available, git, text};
use crate::push::{heads, push};

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
