//! The web dashboard in a real browser (headless Chromium over the DevTools protocol) against
//! a real daemon: `paddock dashboard` prints a sign-in URL; without it the browser gets no
//! job data; with it the job table shows three jobs and their states, a fourth job appears and
//! a stopped job changes state without a reload (the event stream), and a job page shows the
//! job's diff. A screenshot of each view goes to `target/artifacts/`.
//!
//! Needs Chromium (CI installs Debian's `chromium`); fails without it unless
//! PADDOCK_SKIP_BROWSER_TESTS=1.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};

use crate::api::Daemon;
use crate::browser::{Browser, chromium};
use crate::fixtures::{FixtureRepo, TestHome, docker_available, test_image};

fn artifacts() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("artifacts")
}

/// `paddock dashboard --json`, running until dropped; its sign-in URL.
struct DashboardCommand {
    child: Child,
    url: String,
    address: String,
}

impl DashboardCommand {
    fn start(home: &TestHome) -> DashboardCommand {
        let mut child = home
            .cmd(&["dashboard", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut text = String::new();
        let mut lines = BufReader::new(child.stdout.take().unwrap());
        // Pretty JSON: read up to its closing brace.
        while !text.trim_end().ends_with('}') {
            let mut line = String::new();
            assert!(
                lines.read_line(&mut line).unwrap() > 0,
                "dashboard printed: {text}"
            );
            text.push_str(&line);
        }
        let lease: serde_json::Value = serde_json::from_str(&text).unwrap();
        DashboardCommand {
            child,
            url: lease["url"].as_str().unwrap().to_string(),
            address: lease["address"].as_str().unwrap().to_string(),
        }
    }
}

impl Drop for DashboardCommand {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn state_of(id: &str) -> String {
    format!("document.querySelector('tr[data-job=\"{id}\"]')?.dataset.state")
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn dashboard_in_a_browser_shows_jobs_live_and_a_diff_only_after_sign_in() {
    let Some(binary) = chromium() else {
        if std::env::var("PADDOCK_SKIP_BROWSER_TESTS").as_deref() == Ok("1") {
            eprintln!("skipped: no chromium (PADDOCK_SKIP_BROWSER_TESTS=1)");
            return;
        }
        panic!("the browser test needs chromium (apt-get install chromium)");
    };
    if !docker_available("dashboard_in_a_browser_shows_jobs_live_and_a_diff_only_after_sign_in") {
        return;
    }
    let home = TestHome::new();
    let repo = FixtureRepo::new();
    // Docker jobs (the daemon's runtime), so the table has containers to show.
    let daemon = Daemon::start_with_runtime(&home, &[], "docker");
    let image = test_image();
    for (id, task) in [
        ("dash-one", "parse"),
        ("dash-two", "lint"),
        ("dash-three", "docs"),
    ] {
        home.create(
            &repo,
            &[
                "--id", id, "--agent", "claude", "--task", task, "--image", &image,
            ],
        );
    }
    // Work on one job, to find in its diff; another edits the same line as main will.
    home.sh(
        "dash-one",
        "printf 'fn dashboard_marker() {}\\n' > marker.rs && git add marker.rs && git commit -qm 'add the marker'",
    );
    home.sh(
        "dash-three",
        "echo 'three says' > README.md && git commit -qam 'three edits the readme'",
    );
    repo.write("README.md", "main says\n");
    repo.commit_all("main edits the readme");
    let dashboard = DashboardCommand::start(&home);
    assert!(
        dashboard.url.starts_with("http://127.0.0.2:"),
        "{}",
        dashboard.url
    );
    let root = format!("http://{}/", dashboard.address);
    let mut browser = Browser::launch(&binary);

    // Without the sign-in token: no job data, neither the page nor the fragment nor the API.
    browser.navigate(&root);
    browser.wait_for(
        "document.body.innerText.includes('Not signed in')",
        "a sign-in note",
    );
    let text = browser.eval("document.documentElement.outerHTML");
    assert!(!text.as_str().unwrap().contains("dash-one"), "{text}");
    let status = browser.call(
        "Runtime.evaluate",
        serde_json::json!({
            "expression": "Promise.all(['/fragments/jobs', '/v1/jobs', '/jobs/dash-one'].map(p => fetch(p).then(r => r.text().then(t => r.status + ':' + t.includes('dash-one')))))",
            "awaitPromise": true,
            "returnByValue": true
        }),
    );
    assert_eq!(
        status["result"]["value"],
        serde_json::json!(["401:false", "401:false", "401:false"]),
        "{status}"
    );

    // Sign in: the cookie replaces the token, which leaves the address bar.
    browser.navigate(&dashboard.url);
    browser.wait_for(
        "location.pathname === '/' && location.search === ''",
        "the redirect to /",
    );
    for id in ["dash-one", "dash-two", "dash-three"] {
        browser.wait_for(
            &format!(
                "{} === 'ready' || {} === 'exited'",
                state_of(id),
                state_of(id)
            ),
            id,
        );
    }
    // Container states and the conflicts flag (dash-three against main).
    browser.wait_for(
        "document.querySelector('tr[data-job=\"dash-one\"] .container')?.innerText.includes('running')",
        "dash-one's container running",
    );
    browser.wait_for(
        "document.querySelector('tr[data-job=\"dash-three\"] .merge')?.innerText === 'conflicts'",
        "dash-three's conflicts flag",
    );
    browser.wait_for(
        "document.querySelector('tr[data-job=\"dash-one\"] .merge')?.innerText === 'clean'",
        "dash-one merges cleanly",
    );
    let cookie_visible = browser.eval("document.cookie");
    assert_eq!(
        cookie_visible,
        serde_json::json!(""),
        "the session cookie is HttpOnly"
    );
    // Signing in a second time with the same one-time URL fails.
    let again = browser.call(
        "Runtime.evaluate",
        serde_json::json!({
            "expression": format!("fetch('{}', {{redirect: 'manual'}}).then(r => r.status)", dashboard.url),
            "awaitPromise": true,
            "returnByValue": true
        }),
    );
    assert_eq!(again["result"]["value"], serde_json::json!(401), "{again}");

    // Live: the page is not reloaded (the marker stays) while a job appears and one stops.
    browser.wait_for(
        "document.getElementById('live') && !document.getElementById('live').hidden",
        "the event stream",
    );
    browser.eval("window.__not_reloaded = 42");
    home.create(
        &repo,
        &[
            "--id",
            "dash-four",
            "--agent",
            "codex",
            "--task",
            "late",
            "--image",
            &image,
        ],
    );
    browser.wait_for(
        &format!("{} === 'ready'", state_of("dash-four")),
        "the fourth job appears",
    );
    let mut running = home
        .cmd(&["exec", "dash-two", "--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    browser.wait_for(
        &format!("{} === 'running'", state_of("dash-two")),
        "dash-two runs",
    );
    home.ok(&["stop", "dash-two"]);
    browser.wait_for(
        &format!("{} === 'failed'", state_of("dash-two")),
        "dash-two stopped",
    );
    browser.wait_for(
        "document.querySelector('tr[data-job=\"dash-two\"] .container')?.innerText.includes('exited')",
        "dash-two's container exited",
    );
    let _ = running.wait();
    assert_eq!(browser.eval("window.__not_reloaded"), serde_json::json!(42));
    browser.screenshot(&artifacts().join("dashboard-jobs.png"));

    // The job page: its diff, per file, coloured by line.
    browser.navigate(&format!("{root}jobs/dash-one"));
    browser.wait_for(
        "document.querySelector('#diff summary')?.innerText.includes('marker.rs')",
        "the diff's file",
    );
    browser.wait_for(
        "[...document.querySelectorAll('#diff .add')].some(l => l.innerText.includes('dashboard_marker'))",
        "the added line",
    );
    browser.wait_for(
        "document.getElementById('commits').innerText.includes('add the marker')",
        "the commit",
    );
    browser.screenshot(&artifacts().join("dashboard-job.png"));

    // An allowlist job's page lists what its proxy refused.
    home.create(
        &repo,
        &[
            "--id",
            "dash-five",
            "--allow",
            "example.org",
            "--image",
            &image,
        ],
    );
    home.sh(
        "dash-five",
        r#"bash -c 'h=${HTTPS_PROXY#http://}; exec 3<>/dev/tcp/${h%:*}/${h##*:}; printf "CONNECT denied.example:443 HTTP/1.1\r\nHost: denied.example\r\n\r\n" >&3; read -r -t 5 status <&3; echo "$status"'"#,
    );
    browser.navigate(&format!("{root}jobs/dash-five"));
    browser.wait_for(
        "document.getElementById('egress')?.innerText.includes('denied.example') && document.getElementById('egress').innerText.includes('refused')",
        "the proxy's refusal",
    );

    // Sweep, dry run first: nothing is removed by looking.
    browser.navigate(&format!("{root}sweep"));
    browser.wait_for(
        "document.querySelector('h1').innerText.includes('dry run')",
        "the dry run",
    );
    browser.screenshot(&artifacts().join("dashboard-sweep.png"));
    assert_eq!(home.job_records(), 5);

    drop(browser);
    drop(dashboard);
    daemon.stop();
}
