//! The API against its own document: docs/openapi.yaml validates as OpenAPI 3.x with a
//! validator that is not paddock's (`openapi-spec-validator`), and schemathesis, driven by
//! the document alone, sends every operation generated valid and invalid inputs over TCP to a
//! real `paddock serve` holding real jobs (one for the id-bearing routes, three more for the
//! routes that remove one). The run fails on a status, content type, header or body the
//! document does not describe, and on any 5xx; a failure prints the `curl` line that
//! reproduces it. Seed and example count are fixed, so a run is repeatable and bounded. Both
//! tools are installed by `.ci/run` (pinned); without them these tests fail saying so.

use std::path::Path;
use std::process::{Command, Output};

use crate::api::{Daemon, api};
use crate::fixtures::{FixtureRepo, TestHome};
use serde_json::json;

/// The seed of every run (a failure reproduces with it).
const SEED: u64 = 28;
/// Generated test cases per operation in the fuzzing phase.
const MAX_EXAMPLES: u32 = 25;
const TOKEN: &str = "contract-token-0123456789abcdef";
/// The checks that hold the API to its document. Left out: those needing several users or
/// links between operations, `positive_data_acceptance` (a valid-looking body for a repository
/// that does not exist is rightly refused) and `negative_data_rejection` (the API reads
/// sizes and durations also as numbers, more than the document promises).
const EXCLUDED_CHECKS: &str = "positive_data_acceptance,negative_data_rejection,use_after_free,\
    ensure_resource_availability,ignored_auth,object_level_authorization";

fn document() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/openapi.yaml")
}

/// How to get the two tools (`.ci/run` does this).
const INSTALL: &str =
    "install them with `pip install schemathesis==4.32.5 openapi-spec-validator==0.9.0`";

fn tool(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{program}` ({e}): {INSTALL}"))
}

#[test]
fn the_document_validates_as_openapi_with_a_third_party_validator() {
    let output = tool(
        "python3",
        &[
            "-c",
            "import sys\n\
             from openapi_spec_validator import validate\n\
             from openapi_spec_validator.readers import read_from_filename\n\
             spec, _ = read_from_filename(sys.argv[1])\n\
             validate(spec)\n\
             print('valid', spec['openapi'])",
            document().to_str().unwrap(),
        ],
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.starts_with("valid 3."),
        "docs/openapi.yaml is not valid OpenAPI 3.x: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A daemon on TCP with jobs to aim at: `fuzz` (with one finished exec) and `victim-1..3`
/// for the routes that remove a job.
struct Target {
    daemon: Daemon,
    _repo: FixtureRepo,
    home: TestHome,
    addr: String,
    exec: String,
}

fn target() -> Target {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    // A fork asks for up to 64 jobs per request: at most 12 jobs at once, and a short wait
    // for room, keep the fuzzed forks from piling up (one past the cap answers 429, which
    // the document describes, and removes the forks it made).
    std::fs::write(
        home.user_config(),
        "admission:\n  memory: 1024g\n  cpus: 1000\n  max_running_execs: 1000\n  max_jobs: 12\n  max_wait: 2s\n",
    )
    .unwrap();
    let (daemon, addr, _token_file) = Daemon::start_on_tcp(&home, TOKEN, &[], "process");
    for id in ["fuzz", "victim-1", "victim-2", "victim-3"] {
        home.create(&repo, &["--id", id, "--runtime", "process"]);
    }
    let result = home.json(&["exec", "--json", "fuzz", "--", "echo", "hi"]);
    let exec = result["exec_id"].as_str().expect("an exec id").to_string();
    Target {
        daemon,
        _repo: repo,
        home,
        addr,
        exec,
    }
}

impl Target {
    /// Runs schemathesis with `document` against the daemon; `extra` narrows the run.
    fn schemathesis(&self, document: &Path, extra: &[&str]) -> Output {
        let config = self.home.dir.path().join("schemathesis.toml");
        std::fs::write(
            &config,
            format!(
                r#"base-url = "http://{addr}"
headers = {{ Authorization = "Bearer {TOKEN}" }}
seed = {SEED}
request-timeout = 60
[generation]
max-examples = {MAX_EXAMPLES}
[dictionaries]
jobs = {{ values = ["fuzz"] }}
victims = {{ values = ["victim-1", "victim-2", "victim-3"] }}
execs = {{ values = ["{exec}"] }}
[parameters]
"path.id" = {{ dictionary = "jobs", probability = 0.8 }}
"path.exec" = {{ dictionary = "execs", probability = 0.8 }}
# The routes that remove a job aim at the victims, so the others keep a job to work on.
[[operations]]
include-name-regex = "^(DELETE /v1/jobs/[{{]id[}}]|POST /v1/jobs/[{{]id[}}]/merge)$"
parameters = {{ "path.id" = {{ dictionary = "victims", probability = 0.8 }} }}
# A following event stream's first event has only an id, which an SSE reader does not
# dispatch: the stream is cut after 3 s instead of at the first event.
[[operations]]
include-name = "GET /v1/events"
max-stream-events = 1
request-timeout = 3
"#,
                addr = self.addr,
                exec = self.exec,
            ),
        )
        .unwrap();
        let mut args = vec![
            "--config-file",
            config.to_str().unwrap(),
            "run",
            document.to_str().unwrap(),
            "--checks",
            "all",
            "--exclude-checks",
            EXCLUDED_CHECKS,
            "--phases",
            "examples,coverage,fuzzing",
            "--workers",
            "1",
            "--max-failures",
            "50",
        ];
        args.extend_from_slice(extra);
        // schemathesis keeps a cache and reports in its working directory: the test's own.
        Command::new("st")
            .args(&args)
            .current_dir(self.home.dir.path())
            .output()
            .unwrap_or_else(|e| panic!("cannot run `st` ({e}): {INSTALL}"))
    }
}

#[test]
fn every_answer_of_the_api_is_one_its_document_describes() {
    let target = target();
    let started = std::time::Instant::now();
    let output = target.schemathesis(&document(), &[]);
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("schemathesis ran {:?}", started.elapsed());
    assert!(
        output.status.success(),
        "schemathesis found answers docs/openapi.yaml does not describe (each with the curl \
         line that reproduces it):\n{report}"
    );
    assert!(report.contains("passed"), "{report}");
    // The daemon still answers after all of it.
    let jobs = target.home.json(&["ls", "--json"]);
    assert!(jobs.is_array(), "{jobs}");
    target.daemon.stop();
}

#[test]
fn a_status_the_document_leaves_out_fails_the_run() {
    let target = target();
    // The document with `GET /v1/jobs/{id}`'s 404 taken out; the run asks for jobs that are
    // not there, so the daemon answers a 404 the copy does not describe.
    let spec = std::fs::read_to_string(document()).unwrap();
    let show = spec.find("summary: Show a job").expect("GET /v1/jobs/{id}");
    let status = show + spec[show..].find("\"404\":").expect("its 404");
    let line_end = status + spec[status..].find('\n').unwrap();
    let line_start = spec[..status].rfind('\n').unwrap();
    let cut = format!("{}{}", &spec[..line_start], &spec[line_end..]);
    let copy = target.home.dir.path().join("openapi-without-404.yaml");
    std::fs::write(&copy, cut).unwrap();
    let output = target.schemathesis(&copy, &["--include-name", "GET /v1/jobs/{id}"]);
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "{report}");
    assert!(
        report.contains("Undocumented status code") && report.contains("Received: 404"),
        "{report}"
    );
    assert!(
        report.contains("curl"),
        "a failure says how to reproduce it: {report}"
    );
    target.daemon.stop();
}

#[test]
fn a_missing_program_exits_127_and_every_rejection_is_the_json_error_body() {
    let target = target();
    let socket = &target.daemon.socket;
    for cmd in [json!([""]), json!(["no-such-program-28"])] {
        let (status, result) = api(
            socket,
            "POST",
            "/v1/jobs/fuzz/exec",
            Some(&json!({"cmd": cmd})),
        );
        assert_eq!(status, 200, "{result}");
        assert_eq!(result["exit_code"], 127, "{result}");
        assert!(
            result["stderr"]
                .as_str()
                .unwrap()
                .contains("command not found"),
            "{result}"
        );
        assert_eq!(result["meta"]["runtime"], "process", "{result}");
        assert_eq!(result["meta"]["limits"]["network"], "none", "{result}");
        assert!(result["meta"]["paddock_version"].is_string(), "{result}");
    }
    let (status, body) = api(
        socket,
        "POST",
        "/v1/jobs/fuzz/exec",
        Some(&json!({"cmd": ["true"], "workdir": "not/there"})),
    );
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_input")),
        "{body}"
    );
    // axum's own rejections (a query string, an unknown route, a method) answer JSON too.
    for (method, path, want) in [
        ("DELETE", "/v1/jobs/victim-1?keep_branch=maybe", 400),
        ("POST", "/v1/sweep?dry_run=2", 400),
        ("GET", "/v1/no-such-route", 404),
        ("PATCH", "/v1/jobs", 405),
    ] {
        let (status, body) = api(socket, method, path, None);
        assert_eq!(status, want, "{method} {path}: {body}");
        assert!(
            body["error"]["code"].is_string() && body["error"]["message"].is_string(),
            "{method} {path}: {body}"
        );
    }
    target.daemon.stop();
}
