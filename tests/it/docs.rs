//! The documentation, pinned to what it describes: the README stays a front door (short,
//! its two commands first) and every relative link and `#anchor` in it, ARCHITECTURE.md and
//! docs/ resolves; docs/commands.md has a section for every command `--help` lists and names
//! each of its flags; docs/json.md names every key of the `--json` snapshots; every key
//! `config show` prints is in docs/configuration.md; every `PADDOCK_*` variable the code
//! names is documented; every route of docs/openapi.yaml is in docs/api.md; every MCP tool is
//! in docs/mcp.md; every exit code is in the table. Checks words and names, not prose.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::fixtures::{FixtureRepo, TestHome};
use serde_json::Value;

const README_MAX_LINES: usize = 200;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(root().join(relative))
        .unwrap_or_else(|e| panic!("cannot read {relative}: {e}"))
}

/// The markdown files whose links are checked: the README, ARCHITECTURE.md and docs/*.md.
fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md"), root().join("ARCHITECTURE.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The lines of a markdown text outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push(line);
        }
    }
    out
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every heading of a markdown text (outside code), as written.
fn headings(text: &str) -> Vec<String> {
    prose_lines(text)
        .into_iter()
        .filter(|line| line.starts_with('#'))
        .map(|line| line.trim_start_matches('#').trim().to_string())
        .collect()
}

/// The anchors a markdown text offers (a repeated heading gets `-1`, `-2`, ... as on GitHub).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for heading in headings(text) {
        let base = slug(&heading);
        let count = seen.entry(base.clone()).or_default();
        out.insert(if *count == 0 {
            base.clone()
        } else {
            format!("{base}-{count}")
        });
        *count += 1;
    }
    out
}

/// Relative link targets (`[text](target)`, images too) of a markdown text, outside code.
fn relative_links(text: &str) -> Vec<String> {
    let link = regex_lite::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    prose_lines(text)
        .into_iter()
        .flat_map(|line| {
            link.captures_iter(line)
                .map(|c| c[1].to_string())
                .collect::<Vec<_>>()
        })
        .filter(|target| !target.contains("://") && !target.starts_with("mailto:"))
        .collect()
}

/// What is wrong with the links of one markdown file: missing files, missing anchors.
fn broken_links(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut broken = Vec::new();
    for target in relative_links(&text) {
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target.as_str(), None),
        };
        let resolved = if path.is_empty() {
            file.to_path_buf()
        } else {
            file.parent().unwrap().join(path)
        };
        if !resolved.exists() {
            broken.push(format!("{target}: no file {}", resolved.display()));
            continue;
        }
        if let Some(anchor) = anchor {
            let target_text = std::fs::read_to_string(&resolved).unwrap_or_default();
            if !anchors(&target_text).contains(anchor) {
                broken.push(format!("{target}: no heading with the anchor `#{anchor}`"));
            }
        }
    }
    broken
}

/// ARCHITECTURE.md stays short: modules, lifecycle and the four main data flows; the rest
/// lives in docs/ (internals, threat model, decisions).
const ARCHITECTURE_MAX_LINES: usize = 300;

#[test]
fn architecture_md_stays_short_and_names_the_main_data_flows() {
    let text = read("ARCHITECTURE.md");
    let lines = text.lines().count();
    assert!(
        lines <= ARCHITECTURE_MAX_LINES,
        "ARCHITECTURE.md has {lines} lines; keep it under {ARCHITECTURE_MAX_LINES}: move detail to docs/internals.md"
    );
    for heading in ["## Modules", "## Job lifecycle", "## Data flow"] {
        assert!(text.contains(heading), "ARCHITECTURE.md has `{heading}`");
    }
    for flow in ["**create**", "**exec**", "**sync**", "**sweep**"] {
        assert!(
            text.contains(flow),
            "ARCHITECTURE.md's data flow has {flow}"
        );
    }
}

#[test]
fn the_readme_is_a_front_door_and_every_doc_link_resolves() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(
        lines < README_MAX_LINES,
        "README.md has {lines} lines; the front door stays under {README_MAX_LINES}: move references to docs/"
    );
    // The two commands, in the first fenced block, which opens the README.
    let first_block: Vec<&str> = readme
        .lines()
        .skip_while(|line| !line.starts_with("```"))
        .skip(1)
        .take_while(|line| !line.starts_with("```"))
        .collect();
    assert!(
        readme
            .lines()
            .position(|l| l == "```sh")
            .is_some_and(|at| at < 10),
        "the README opens with its ```sh block of commands"
    );
    for command in ["cargo run -- run ", "bash .ci/run"] {
        assert!(
            first_block.iter().any(|line| line.starts_with(command)),
            "the README's first block runs `{command}...`"
        );
    }
    // Every doc is reachable from the README.
    let linked: BTreeSet<String> = relative_links(&readme)
        .into_iter()
        .map(|t| t.split('#').next().unwrap().to_string())
        .collect();
    let mut problems: Vec<String> = markdown_files()
        .iter()
        .skip(2)
        .map(|file| format!("docs/{}", file.file_name().unwrap().to_string_lossy()))
        .filter(|name| !linked.contains(name))
        .map(|name| format!("README.md does not link {name}"))
        .collect();
    for file in markdown_files() {
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        for problem in broken_links(&file) {
            problems.push(format!("{name}: {problem}"));
        }
    }
    assert!(problems.is_empty(), "links:\n{}", problems.join("\n"));
}

/// The subcommands a `--help` lists under `Commands:` (without `help`).
fn listed_commands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|line| !line.starts_with("Commands:"))
        .skip(1)
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// The long flags a `--help` defines (its option lines, not flags its prose mentions).
fn defined_flags(help: &str) -> Vec<String> {
    let option = regex_lite::Regex::new(r"^\s+(?:-[A-Za-z], )?(--[a-z][a-z0-9-]*)").unwrap();
    help.lines()
        .filter_map(|line| option.captures(line).map(|c| c[1].to_string()))
        .filter(|flag| flag != "--help" && flag != "--version")
        .collect()
}

#[test]
fn every_command_has_a_section_in_docs_commands_md_naming_its_flags() {
    let home = TestHome::new();
    let doc = read("docs/commands.md");
    let section_headings = headings(&doc);
    let mut commands: Vec<Vec<String>> = listed_commands(&home.ok(&["--help"]))
        .into_iter()
        .map(|name| vec![name])
        .collect();
    let mut missing = Vec::new();
    let mut checked = 0;
    while let Some(path) = commands.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = home.ok(&args);
        for sub in listed_commands(&help) {
            let mut longer = path.clone();
            longer.push(sub);
            commands.push(longer);
        }
        let name = format!("`paddock {}", path.join(" "));
        let has_section = section_headings.iter().any(|heading| {
            heading
                .match_indices(&name)
                .any(|(at, _)| matches!(heading[at + name.len()..].chars().next(), Some('`' | ' ')))
        });
        if !has_section {
            missing.push(format!("no heading names {name}`"));
        }
        for flag in defined_flags(&help) {
            let word =
                regex_lite::Regex::new(&format!(r"{}\b", regex_lite::escape(&flag))).unwrap();
            if !word.is_match(&doc) {
                missing.push(format!("paddock {}: {flag} is not in it", path.join(" ")));
            }
        }
        checked += 1;
    }
    assert!(checked > 30, "only {checked} commands found in --help");
    assert!(
        missing.is_empty(),
        "docs/commands.md:\n{}",
        missing.join("\n")
    );
}

/// Every object key anywhere in a JSON value.
fn keys(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                out.insert(key.clone());
                keys(inner, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| keys(item, out)),
        _ => {}
    }
}

#[test]
fn every_key_of_the_json_snapshots_is_in_docs_json_md() {
    let doc = read("docs/json.md");
    let dir = root().join("tests/it/snapshots");
    let mut snapshots: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with("_json.snap"))
        .collect();
    snapshots.sort();
    assert!(snapshots.len() > 10, "the JSON snapshots are under {dir:?}");
    let mut missing = Vec::new();
    for snapshot in &snapshots {
        let text = std::fs::read_to_string(snapshot).unwrap();
        // insta's header (`---`, source, expression, `---`), then the value.
        let body = text.splitn(3, "---\n").nth(2).unwrap_or_default();
        let value: Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("{}: not JSON ({e})", snapshot.display()));
        let mut found = BTreeSet::new();
        keys(&value, &mut found);
        for key in found {
            if !doc.contains(&format!("\"{key}\"")) && !doc.contains(&format!("`{key}`")) {
                let name = snapshot.file_name().unwrap().to_string_lossy().into_owned();
                missing.push(format!("`{key}` (from {name})"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/json.md does not name:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_key_config_show_prints_is_in_docs_configuration_md() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let path = repo.path().display().to_string();
    let shown = home.json(&["config", "show", "--repo", &path, "--json"]);
    let doc = read("docs/configuration.md");
    let values = shown["values"]
        .as_array()
        .expect("config show lists values");
    assert!(values.len() > 10, "{shown}");
    let mut missing = BTreeSet::new();
    for value in values {
        let key = value["key"].as_str().unwrap();
        let parts: Vec<&str> = key.split('.').collect();
        // `profiles.default.image`: `profiles:` and `image:` (the profile's name is an example).
        for part in [parts[0], parts[parts.len() - 1]] {
            let written =
                regex_lite::Regex::new(&format!(r"(?m)^\s*{}:", regex_lite::escape(part))).unwrap();
            if !written.is_match(&doc) {
                missing.insert(format!("{part}: (of {key})"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/configuration.md's keys lack:\n{}",
        missing.into_iter().collect::<Vec<_>>().join("\n")
    );
}

/// Rust files under a directory, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_paddock_variable_the_code_names_is_documented() {
    let mut files = Vec::new();
    for dir in ["src", "fixtures", "tests", "benches"] {
        rust_files(&root().join(dir), &mut files);
    }
    let this_file = root().join("tests/it/docs.rs");
    let variable = regex_lite::Regex::new(r#""(PADDOCK_[A-Z0-9_]+)""#).unwrap();
    let mut named: BTreeMap<String, PathBuf> = BTreeMap::new();
    for file in files.iter().filter(|f| **f != this_file) {
        let text = std::fs::read_to_string(file).unwrap();
        for capture in variable.captures_iter(&text) {
            named
                .entry(capture[1].to_string())
                .or_insert_with(|| file.clone());
        }
    }
    assert!(named.len() > 20, "found only {named:?}");
    let docs: String = markdown_files()
        .iter()
        .map(|file| std::fs::read_to_string(file).unwrap())
        .collect();
    let missing: Vec<String> = named
        .iter()
        .filter(|(name, _)| {
            !regex_lite::Regex::new(&format!(r"\b{name}\b"))
                .unwrap()
                .is_match(&docs)
        })
        .map(|(name, file)| format!("{name} (named in {})", file.display()))
        .collect();
    assert!(
        missing.is_empty(),
        "not in README.md or docs/ (docs/configuration.md for users, docs/testing.md for tests):\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_route_of_the_openapi_description_is_in_docs_api_md() {
    let spec = read("docs/openapi.yaml");
    let doc = read("docs/api.md");
    let mut routes = Vec::new();
    let mut path = None;
    for line in spec.lines() {
        if let Some(rest) = line.strip_prefix("  /") {
            path = Some(format!("/{}", rest.trim_end_matches(':')));
        } else if let Some(method) = ["get", "post", "put", "delete", "patch"]
            .into_iter()
            .find(|m| line.starts_with(&format!("    {m}:")))
            && let Some(path) = &path
        {
            routes.push(format!("{} {path}", method.to_uppercase()));
        } else if !line.starts_with(' ') {
            path = None;
        }
    }
    assert!(
        routes.len() > 15,
        "routes found in openapi.yaml: {routes:?}"
    );
    let missing: Vec<&String> = routes
        .iter()
        .filter(|route| {
            !doc.match_indices(route.as_str()).any(|(at, _)| {
                !doc[at + route.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphanumeric() || matches!(c, '/' | '{' | '_' | '-'))
            })
        })
        .collect();
    assert!(
        missing.is_empty(),
        "docs/api.md does not name these routes of docs/openapi.yaml: {missing:?}"
    );
}

#[test]
fn every_mcp_tool_is_in_docs_mcp_md() {
    let home = TestHome::new();
    let mut child = home
        .cmd(&["mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let messages = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"paddock-docs-test","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    ];
    {
        let mut stdin = child.stdin.take().unwrap();
        for message in messages {
            writeln!(stdin, "{message}").unwrap();
        }
    } // EOF ends the session.
    let output = child.wait_with_output().unwrap();
    let tools: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|answer| answer["id"] == 2)
        .flat_map(|answer| {
            answer["result"]["tools"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|tool| tool["name"].as_str().map(str::to_string))
        .collect();
    assert!(tools.len() > 5, "tools/list answered {tools:?}");
    let doc = read("docs/mcp.md");
    let missing: Vec<&String> = tools
        .iter()
        .filter(|tool| !doc.contains(&format!("| `{tool}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/mcp.md's tool table lacks {missing:?}"
    );
}

#[test]
fn every_exit_code_is_in_docs_commands_md() {
    let source = read("src/cli/exit.rs");
    let constant = regex_lite::Regex::new(r"(?m)^pub const [A-Z_]+: i32 = (\d+);").unwrap();
    let codes: Vec<String> = constant
        .captures_iter(&source)
        .map(|c| c[1].to_string())
        .collect();
    assert!(codes.len() > 10, "exit codes found: {codes:?}");
    let doc = read("docs/commands.md");
    let section: String = doc
        .split("\n## ")
        .find(|section| section.starts_with("Exit codes"))
        .expect("docs/commands.md has an `## Exit codes` section")
        .to_string();
    let missing: Vec<&String> = codes
        .iter()
        .filter(|code| !section.contains(&format!("\n| {code} |")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/commands.md's exit code table lacks {missing:?}"
    );
}
