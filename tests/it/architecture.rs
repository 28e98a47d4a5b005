//! The crate's shape, checked: the top-level modules import each other without a cycle (and
//! files without a circle: `import_graph`), the HTTP API does not reach into the CLI, no
//! source file outgrows ~1,000 lines (functions are held to 100 by `clippy::too_many_lines`,
//! each exception an `#[expect]` with its reason), `unsafe` lives in one module, and only a
//! runtime's own folder names its kind (a new runtime is a folder and a registry line). A
//! restructure that breaks one of these fails here, not in review.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A file may hold a whole concept; past this it holds more than one.
const MAX_LINES: usize = 1000;

fn source_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The top-level module a file belongs to (`src/git/sync.rs` → `git`).
fn module_of(path: &Path) -> String {
    let relative = path
        .strip_prefix(Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
        .unwrap();
    let first = relative.components().next().unwrap().as_os_str();
    first.to_string_lossy().trim_end_matches(".rs").to_string()
}

/// Code without comments and without unit tests (at the end of a file, or a `tests.rs`).
pub(crate) fn code(path: &Path) -> String {
    if path.file_name().is_some_and(|name| name == "tests.rs") {
        return String::new();
    }
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => &text,
    };
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Which top-level modules each one names through `crate::`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let files = source_files();
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let from = module_of(file);
        if from == "lib" || from == "main" {
            continue;
        }
        let text = code(file);
        let deps = graph.entry(from.clone()).or_default();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            if rest.starts_with('{') {
                // `use crate::{a, b::c}`: every first segment in the braces.
                let group = &rest[1..rest.find('}').unwrap_or(rest.len())];
                for item in group.split(',') {
                    let name: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if modules.contains(&name) && name != from {
                        deps.insert(name);
                    }
                }
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&name) && name != from {
                deps.insert(name);
            }
        }
    }
    graph
}

#[test]
fn top_level_modules_import_each_other_without_a_cycle() {
    let graph = imports();
    // Depth-first search with colours; a grey node reached again closes a cycle.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        colour: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        colour.insert(node.to_string(), 1);
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match colour.get(next).copied().unwrap_or(0) {
                1 => {
                    let start = path.iter().position(|n| n == next).unwrap();
                    let mut cycle = path[start..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(cycle) = visit(next, graph, colour, path) {
                        return Some(cycle);
                    }
                }
                _ => {}
            }
        }
        path.pop();
        colour.insert(node.to_string(), 2);
        None
    }
    let mut colour = BTreeMap::new();
    for node in graph.keys() {
        if colour.get(node).copied().unwrap_or(0) == 0
            && let Some(cycle) = visit(node, &graph, &mut colour, &mut Vec::new())
        {
            panic!("import cycle: {}", cycle.join(" -> "));
        }
    }
    assert!(graph.len() > 10, "the scan found the modules: {graph:?}");
}

#[test]
fn the_http_api_does_not_depend_on_the_cli() {
    let graph = imports();
    // The daemon's edges (serve, api, dashboard, metrics) and the helpers are apart from
    // the CLI; the helpers may use its one table of exit codes, nothing else of it.
    for front in ["daemon", "client", "engine", "ops", "wire", "error"] {
        assert!(graph.contains_key(front), "no module `{front}`: {graph:?}");
        assert!(
            !graph.get(front).is_some_and(|deps| deps.contains("cli")),
            "`{front}` imports `cli`: {:?}",
            graph.get(front)
        );
    }
}

#[test]
fn no_source_file_outgrows_a_thousand_lines() {
    // The library's files, and the benchmark's, the shared fixtures' and the tests' too.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = source_files();
    let mut dirs: Vec<PathBuf> = ["benches", "benches/paddock", "fixtures", "tests/it"]
        .iter()
        .map(|d| root.join(d))
        .collect();
    for entry in std::fs::read_dir(root.join("tests/it")).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            dirs.push(path);
        }
    }
    for dir in dirs {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let long: Vec<String> = files
        .into_iter()
        .filter_map(|file| {
            let lines = std::fs::read_to_string(&file).unwrap().lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", file.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these: {long:?}");
}

#[test]
fn unsafe_code_lives_in_one_module() {
    let unsafe_modules: std::collections::BTreeSet<String> = source_files()
        .into_iter()
        .filter(|file| code(file).contains("unsafe {") || code(file).contains("unsafe fn"))
        .map(|file| module_of(&file))
        .collect();
    assert_eq!(unsafe_modules, ["sys".to_string()].into());
}

/// Agent text reaches a person's terminal only through `cli::say` (and `text`): no CLI file
/// prints with the std macros, which would pass escape sequences through.
#[test]
fn the_cli_prints_only_through_say() {
    let macros = ["println!(", "eprintln!(", "print!(", "eprint!("];
    let printing: Vec<String> = source_files()
        .into_iter()
        .filter(|file| module_of(file) == "cli" && !file.ends_with("say.rs"))
        .filter(|file| {
            let code = code(file);
            macros.iter().any(|name| {
                code.match_indices(name)
                    .any(|(at, _)| at == 0 || !code.as_bytes()[at - 1].is_ascii_alphanumeric())
            })
        })
        .map(|file| file.display().to_string())
        .collect();
    assert!(
        printing.is_empty(),
        "print through cli::say (say!/tell!): {printing:?}"
    );
}

/// The files that may name a runtime kind's variant: each runtime's own folder, the record
/// type that defines the kinds, and the resolution of a profile's choice into a kind.
const KIND_NAMERS: &[&str] = &[
    "src/runtime/docker/",
    "src/runtime/microvm/",
    "src/runtime/process/",
    "src/runtime/fake/",
    "src/job.rs",
    "src/runtime/runtimes.rs",
];

/// The variants of `RuntimeKind` that `code` names.
fn kinds_named(code: &str) -> Vec<&'static str> {
    ["Docker", "Runsc", "Process", "Microvm"]
        .into_iter()
        .filter(|variant| code.contains(&format!("RuntimeKind::{variant}")))
        .collect()
}

/// A source file's path from the package's root (`src/runtime/docker/mod.rs`).
fn relative(file: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    file.strip_prefix(root)
        .expect("a source file is under the package")
        .to_string_lossy()
        .into_owned()
}

/// A new runtime is one folder under `src/runtime/` plus one line in its registry: the rest
/// of the crate asks a runtime what it is and can do (its `describe`, `layout` and
/// `capabilities`), never which kind it is.
#[test]
fn only_a_runtimes_folder_names_its_kind() {
    let named: Vec<String> = source_files()
        .into_iter()
        .filter_map(|file| {
            let relative = relative(&file);
            if KIND_NAMERS
                .iter()
                .any(|allowed| relative.starts_with(allowed))
            {
                return None;
            }
            let kinds = kinds_named(&code(&file));
            (!kinds.is_empty()).then(|| format!("{relative}: {kinds:?}"))
        })
        .collect();
    assert!(
        named.is_empty(),
        "ask the runtime (describe, layout, capabilities) instead: {named:?}"
    );
}

/// The check above can fail: a planted line naming a kind is found.
#[test]
fn a_planted_kind_name_is_found() {
    let planted = "if record.runtime == crate::job::RuntimeKind::Microvm { refuse() }";
    assert_eq!(kinds_named(planted), ["Microvm"]);
    assert!(kinds_named("runtime.describe().ports").is_empty());
}

/// Where a job's files live and how it runs are decided once, when its runtime is built
/// (`Runtimes::of_job`); everything else asks that runtime. Only the Docker runtime's own
/// folder (whose calls take the engine as a `Daemon` value), the builder and the wire view
/// (which shows the field) read the record's engine, and nothing picks a job's runtime by its
/// kind alone (that is this host's runtime, whatever engine the job is on).
#[test]
fn the_records_engine_is_read_where_its_runtime_is_built() {
    // The Docker runtime too asks its `Daemon` (the value `of_job` built) whether the job is
    // on a remote engine, never the record again.
    let allowed = ["src/runtime/on_engine.rs", "src/wire.rs"];
    // A job record by the names it goes by (`record`, `r`, `job`, `rec`), its `engine` read.
    let reads_of_records_engine =
        regex_lite::Regex::new(r"\b(record|r|job|rec)\.engine\b").expect("a valid pattern");
    let readers: Vec<String> = source_files()
        .into_iter()
        .filter_map(|file| {
            let relative = relative(&file);
            let text = code(&file);
            // The record's engine read directly, or its kind's runtime picked without it
            // (this host's runtime of that kind, whatever engine the job is on).
            let reads = reads_of_records_engine.find_iter(&text).count()
                + text.matches(".of(record.runtime)").count();
            (reads > 0 && !allowed.iter().any(|a| relative.starts_with(a)))
                .then(|| format!("{relative} ({reads})"))
        })
        .collect();
    assert!(
        readers.is_empty(),
        "ask the job's runtime (Paddock::runtime_of) instead: {readers:?}"
    );
}
