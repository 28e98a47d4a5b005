//! The CLI's contracts as snapshots: every `--help`, the human tables of `ls`, `show` and
//! `doctor`, and every `--json` shape. A change to any of them shows up in review as a
//! changed file under `tests/it/snapshots/`. Values that differ between runs and machines (ids'
//! random parts, SHAs, times, durations, temporary paths, versions) are replaced by
//! placeholders; keys and structure are kept, so an added, renamed or removed field shows.
//! Uses the process runtime so Docker's presence does not change them.

use std::path::Path;

use crate::fixtures::{FixtureRepo, TestHome, text};
use serde_json::Value;

/// Every command, as its `--help` is reached.
const COMMANDS: &[&str] = &[
    "",
    "create",
    "ls",
    "show",
    "diff",
    "log",
    "rm",
    "exec",
    "run",
    "shell",
    "logs",
    "execs",
    "events",
    "stop",
    "pause",
    "resume",
    "checkpoint",
    "checkpoint rm",
    "checkpoints",
    "restore",
    "fork",
    "net",
    "port",
    "cp",
    "cat",
    "mcp",
    "conflicts",
    "merge",
    "apply",
    "push",
    "image",
    "image build",
    "doctor",
    "sweep",
    "pool",
    "pool status",
    "pool fill",
    "pool drain",
    "serve",
    "dashboard",
    "cache",
    "cache ls",
    "cache prune",
    "config",
    "config show",
    "trust",
];

#[test]
fn help_of_every_command() {
    let home = TestHome::new();
    for command in COMMANDS {
        let mut args: Vec<&str> = command.split_whitespace().collect();
        args.push("--help");
        let output = home.run(&args);
        assert!(output.status.success(), "{command} --help");
        let name = if command.is_empty() {
            "help".to_string()
        } else {
            format!("help_{}", command.replace(' ', "_"))
        };
        insta::assert_snapshot!(name, String::from_utf8_lossy(&output.stdout));
    }
    // Every command the top-level help lists is in COMMANDS, so a new one gets its snapshot.
    let top = home.ok(&["--help"]);
    let listed = top
        .lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help");
    for name in listed {
        assert!(COMMANDS.contains(&name), "`{name}` has no --help snapshot");
    }
}

/// Replaces what varies between runs in a text: temporary paths, job ids' random suffixes,
/// SHAs, times and durations.
struct Scrubber {
    pairs: Vec<(String, String)>,
}

impl Scrubber {
    fn new(home: &TestHome, repo: &FixtureRepo) -> Scrubber {
        let canonical = |p: &Path| p.canonicalize().unwrap().display().to_string();
        let mut pairs = vec![
            (canonical(&home.root()), "[home]".to_string()),
            (canonical(repo.path()), "[repo]".to_string()),
            (home.root().display().to_string(), "[home]".to_string()),
            (repo.path().display().to_string(), "[repo]".to_string()),
            // The test's user config lives beside its home.
            (canonical(home.dir.path()), "[test-dir]".to_string()),
            (
                home.dir.path().display().to_string(),
                "[test-dir]".to_string(),
            ),
        ];
        if let Ok(id) = std::fs::read_to_string(home.root().join("home-id")) {
            pairs.push((id.trim().to_string(), "[home-id]".to_string()));
        }
        // The fixture repository's key (its name and a hash of its path).
        if let Some(name) = repo.path().file_name() {
            let name = name.to_string_lossy().replace('.', "_");
            pairs.push((name, "[repo-name]".to_string()));
        }
        Scrubber { pairs }
    }

    fn text(&self, text: &str) -> String {
        let mut text = text.to_string();
        for (from, to) in &self.pairs {
            text = text.replace(from, to);
        }
        let rules: &[(&str, &str)] = &[
            (
                r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)",
                "[time]",
            ),
            (r"\b[0-9a-f]{40}\b", "[sha]"),
            (r"\b[0-9a-f]{64}\b", "[id64]"),
            (r"-[0-9a-f]{6}\b", "-[rand]"),
            (r"\[repo-name\]-[0-9a-f]{8}", "[repo-key]"),
            (r"\b[0-9a-f]{10,12}\b", "[short]"),
            (r"\b\d+(ms|s|m|h|d)\b", "[dur]"),
            (r"\b\d+(\.\d+)? ?(B|KiB|MiB|GiB|TiB)\b", "[size]"),
        ];
        for (pattern, to) in rules {
            text = regex_replace(&text, pattern, to);
        }
        text
    }

    fn json(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.text(s)),
            Value::Number(_) => Value::String("[number]".into()),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.json(v)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| match (k.as_str(), v) {
                        // An exec's meta: the checkout kind follows the machine (overlay as
                        // root with overlayfs), the version the release.
                        ("checkout", Value::String(_)) => (k.clone(), "[checkout]".into()),
                        ("paddock_version", Value::String(_)) => (k.clone(), "[version]".into()),
                        _ => (k.clone(), self.json(v)),
                    })
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

fn regex_replace(text: &str, pattern: &str, to: &str) -> String {
    let regex = regex_lite::Regex::new(pattern).expect("the scrub patterns are valid");
    regex.replace_all(text, to).into_owned()
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn json_shapes_and_human_tables() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let path = repo.path().display().to_string();
    let create = |task: &str| {
        home.json(&[
            "create",
            "--repo",
            &path,
            "--task",
            task,
            "--runtime",
            "process",
            "--label",
            "ticket=FR-7",
            "--json",
        ])
    };
    let first = create("first");
    let second = create("second");
    let id = text(&first, "id");
    let scrub = Scrubber::new(&home, &repo);

    insta::assert_json_snapshot!("create_json", scrub.json(&first));
    let exec = home.json(&[
        "exec",
        &id,
        "--json",
        "--",
        "sh",
        "-c",
        "echo one > one.txt && git add one.txt && git commit -q -m one && echo wip > wip.txt",
    ]);
    insta::assert_json_snapshot!("exec_json", scrub.json(&exec));
    insta::assert_json_snapshot!(
        "execs_json",
        scrub.json(&home.json(&["execs", &id, "--json"]))
    );
    insta::assert_json_snapshot!("ls_json", scrub.json(&home.json(&["ls", "--json"])));
    // Column widths follow the values the placeholders replace: compare the columns.
    let table = regex_replace(&scrub.text(&home.ok(&["ls"])), " {2,}", "  ");
    insta::assert_snapshot!("ls_table", table);
    insta::assert_json_snapshot!(
        "show_json",
        scrub.json(&home.json(&["show", &id, "--json"]))
    );
    insta::assert_snapshot!("show_human", scrub.text(&home.ok(&["show", &id])));
    insta::assert_json_snapshot!("log_json", scrub.json(&home.json(&["log", &id, "--json"])));
    insta::assert_snapshot!("diff_stat", scrub.text(&home.ok(&["diff", &id, "--stat"])));
    insta::assert_json_snapshot!(
        "conflicts_json",
        scrub.json(&home.json(&["conflicts", "--json"]))
    );
    // A bare remote beside the install (its path scrubs as the test's dir).
    let remote = home.dir.path().join("remote.git");
    crate::fixtures::git(
        home.dir.path(),
        &["init", "-q", "--bare", "-b", "main", "remote.git"],
    );
    repo.git(&["remote", "add", "origin", remote.to_str().unwrap()]);
    insta::assert_json_snapshot!(
        "push_json",
        scrub.json(&home.json(&["push", &id, "--json"]))
    );
    insta::assert_json_snapshot!(
        "merge_json",
        scrub.json(&home.json(&["merge", &id, "--squash", "--json"]))
    );
    insta::assert_json_snapshot!(
        "config_show_json",
        scrub.json(&home.json(&["config", "show", "--repo", &path, "--json"]))
    );
    insta::assert_json_snapshot!(
        "cache_ls_json",
        scrub.json(&home.json(&["cache", "ls", "--json"]))
    );
    insta::assert_json_snapshot!(
        "sweep_dry_run_json",
        scrub.json(&home.json(&["sweep", "--dry-run", "--json"]))
    );
    insta::assert_json_snapshot!(
        "rm_json",
        scrub.json(&home.json(&["rm", &text(&second, "id"), "--json"]))
    );
    insta::assert_json_snapshot!(
        "rm_with_work_json",
        scrub.json(&home.json(&["rm", &id, "--json"]))
    );
    let run = home.json(&[
        "run",
        "--repo",
        &path,
        "--task",
        "once",
        "--runtime",
        "process",
        "--json",
        "--",
        "true",
    ]);
    insta::assert_json_snapshot!("run_json", scrub.json(&run));
    let events: Vec<Value> = home
        .ok(&["events", "--json"])
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    insta::assert_json_snapshot!("events_json", scrub.json(&Value::Array(events)));
    // The last event only: an exec's detail is cut at a width its duration changes.
    let table = scrub.text(&home.ok(&["events", "--since", "11"]));
    let table = regex_replace(&table, " {2,}", "  ");
    insta::assert_snapshot!("events_table", table);
}

/// `doctor`'s checks: their names and the shape of each; what a check finds depends on the
/// machine, so only that is replaced.
#[test]
fn doctor_checks_and_shape() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let checks = home.json(&["doctor", "--json"]);
    let shapes: Vec<Value> = checks
        .as_array()
        .unwrap()
        .iter()
        .map(|check| {
            serde_json::json!({
                "name": check["name"],
                "status": "[machine]",
                "detail": "[machine]",
                "fix": if check["fix"].is_null() { Value::Null } else { "[machine]".into() },
            })
        })
        .collect();
    insta::assert_json_snapshot!("doctor_json", shapes);
    let human = home.run(&["doctor"]);
    // `{status}  {name:<16} {detail}`: the layout and the names, not what the machine has.
    let names: Vec<String> = String::from_utf8_lossy(&human.stdout)
        .lines()
        .filter(|line| !line.starts_with(' ') && line.len() > 6)
        .map(|line| {
            format!(
                "[status]  {}",
                line[6..].chars().take(16).collect::<String>().trim_end()
            )
        })
        .collect();
    insta::assert_snapshot!("doctor_human_names", names.join("\n"));
    drop(repo);
}
