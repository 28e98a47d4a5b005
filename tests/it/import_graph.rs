//! The import graph between the library's files, and the rule that it has no circle: each
//! file can be read from the ones below it. A file's edges are the items it names (`use`
//! statements and qualified paths through `crate::`, `super::`, `self::`, its child modules
//! or its imported names), each resolved through the `use` tables of the modules it passes
//! (a `mod.rs` that imports or re-exports a child's item leads to that child's file) to the
//! file that defines it. A module's own use of its descendants is its facade and not an
//! edge; everything else is, a child's use of its parent's items included.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One source file of the library: its module path (`["runtime", "docker", "calls"]`).
struct File {
    path: PathBuf,
    module: Vec<String>,
    /// Local name → absolute path, from its `use` statements (`*` entries: glob prefixes).
    uses: BTreeMap<String, Vec<String>>,
    globs: Vec<Vec<String>>,
    /// Every path it names, as written (first segment unresolved).
    paths: Vec<Vec<String>>,
}

fn files() -> Vec<File> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned();
            // The binary is a crate of its own; unit-test files are test code.
            if !name.ends_with(".rs") || name == "main.rs" || name.ends_with("tests.rs") {
                continue;
            }
            let relative = path.strip_prefix(&src).expect("under src");
            let mut module: Vec<String> = relative
                .iter()
                .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_string())
                .collect();
            if module.last().is_some_and(|m| m == "mod" || m == "lib") {
                module.pop();
            }
            let code = super::architecture::code(&path);
            let (uses, globs) = use_table(&code);
            out.push(File {
                paths: qualified_paths(&code),
                path,
                module,
                uses,
                globs,
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

fn ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `a::b::{c, d::e as f, g::*}` → (local name, path) pairs and glob prefixes.
fn expand_use(tree: &str, prefix: &[String], out: &mut Vec<(String, Vec<String>)>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let head: Vec<String> = split_path(&tree[..open]);
        let mut base = prefix.to_vec();
        base.extend(head);
        let close = tree
            .rfind('}')
            .filter(|&close| close > open)
            .unwrap_or(tree.len());
        let inner = &tree[open + 1..close];
        let mut depth = 0;
        let mut start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use(&inner[start..i], &base, out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand_use(&inner[start..], &base, out);
        return;
    }
    if tree.is_empty() {
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((path, alias)) => (path, Some(alias.trim().to_string())),
        None => (tree, None),
    };
    let mut full = prefix.to_vec();
    full.extend(split_path(path));
    let Some(last) = full.last().cloned() else {
        return;
    };
    if last == "self" {
        full.pop();
    }
    let name = alias.unwrap_or_else(|| full.last().cloned().unwrap_or_default());
    out.push((name, full));
}

fn split_path(text: &str) -> Vec<String> {
    text.split("::")
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The file's `use` statements as written (resolved later, see [`resolve`]).
fn use_table(code: &str) -> (BTreeMap<String, Vec<String>>, Vec<Vec<String>>) {
    let mut uses = BTreeMap::new();
    let mut globs = Vec::new();
    for statement in code.split(';') {
        let trimmed = statement.trim_start();
        let body = ["pub(crate) use ", "pub(super) use ", "pub use ", "use "]
            .iter()
            .find_map(|lead| trimmed.strip_prefix(lead));
        let Some(body) = body else {
            continue;
        };
        let mut pairs = Vec::new();
        expand_use(body, &[], &mut pairs);
        for (name, path) in pairs {
            if matches!(
                path.first().map(String::as_str),
                Some("std" | "core" | "alloc")
            ) {
                continue;
            }
            if name == "*" {
                globs.push(path[..path.len() - 1].to_vec());
            } else {
                uses.insert(name, path);
            }
        }
    }
    (uses, globs)
}

/// `path` as `file` names it, made absolute: through `crate`, `super`, `self`, a child
/// module of the file's or a name it imports; `None` for anything else (an outside crate, a
/// local item, a type's associated path).
fn resolve(
    path: &[String],
    file: &File,
    by_module: &BTreeMap<Vec<String>, usize>,
    depth: usize,
) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut base = file.module.clone();
    let rest: &[String] = match first.as_str() {
        "crate" => {
            base.clear();
            &path[1..]
        }
        "self" => &path[1..],
        "super" => {
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
            rest
        }
        _ => {
            let mut child = file.module.clone();
            child.push(first.clone());
            if by_module.contains_key(&child) {
                path
            } else if let Some(used) = file.uses.get(first).filter(|_| depth < 8) {
                let mut full = resolve(used, file, by_module, depth + 1)?;
                full.extend(path[1..].iter().cloned());
                return Some(full);
            } else {
                return None;
            }
        }
    };
    base.extend(rest.iter().cloned());
    Some(base)
}

/// Every `a::b(::c)*` the code names.
fn qualified_paths(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !ident(chars[i]) || (i > 0 && (ident(chars[i - 1]) || chars[i - 1] == ':')) {
            i += 1;
            continue;
        }
        let mut segments = Vec::new();
        let mut j = i;
        loop {
            let start = j;
            while j < chars.len() && ident(chars[j]) {
                j += 1;
            }
            segments.push(chars[start..j].iter().collect::<String>());
            if j + 2 < chars.len() && chars[j] == ':' && chars[j + 1] == ':' && ident(chars[j + 2])
            {
                j += 2;
            } else {
                break;
            }
        }
        if segments.len() > 1 {
            out.push(segments);
        }
        i = j.max(i + 1);
    }
    out
}

/// The file index that defines what `path` (absolute) names, through re-exports.
fn defining_file(
    path: &[String],
    files: &[File],
    by_module: &BTreeMap<Vec<String>, usize>,
    depth: usize,
) -> Option<usize> {
    let k = (0..=path.len())
        .rev()
        .find(|&k| by_module.contains_key(&path[..k]))?;
    let file = by_module[&path[..k]];
    let Some(item) = path.get(k) else {
        return Some(file);
    };
    if depth < 8 {
        let owner = &files[file];
        if let Some(mut next) = owner
            .uses
            .get(item)
            .and_then(|target| resolve(target, owner, by_module, 0))
        {
            next.extend(path[k + 1..].iter().cloned());
            if next != path {
                return defining_file(&next, files, by_module, depth + 1).or(Some(file));
            }
        }
    }
    Some(file)
}

/// File index → the files it depends on (its own descendants left out).
fn edges(files: &[File]) -> Vec<BTreeSet<usize>> {
    let by_module: BTreeMap<Vec<String>, usize> = files
        .iter()
        .enumerate()
        .map(|(i, f)| (f.module.clone(), i))
        .collect();
    let mut graph = vec![BTreeSet::new(); files.len()];
    for (i, file) in files.iter().enumerate() {
        let named = (file.uses.values())
            .chain(&file.globs)
            .chain(&file.paths)
            .filter_map(|path| resolve(path, file, &by_module, 0));
        for path in named {
            if let Some(target) = defining_file(&path, files, &by_module, 0)
                && target != i
                && !files[target].module.starts_with(&file.module)
            {
                graph[i].insert(target);
            }
        }
    }
    graph
}

/// The graph's strongly connected components of more than one file (Tarjan).
fn circles(graph: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        graph: &'a [BTreeSet<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in s.graph[v].clone().iter() {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(index) if s.on_stack[w] => s.low[v] = s.low[v].min(index),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort_unstable();
                s.out.push(component);
            }
        }
    }
    let n = graph.len();
    let mut state = State {
        graph,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if state.index[v].is_none() {
            visit(&mut state, v);
        }
    }
    state.out
}

fn describe(files: &[File], component: &[usize]) -> String {
    let names: Vec<String> = component
        .iter()
        .map(|&i| files[i].module.join("::"))
        .collect();
    format!("[{}]", names.join(", "))
}

/// The edges inside a circle, `a -> b` each, so a reader sees what to cut.
fn inner_edges(files: &[File], graph: &[BTreeSet<usize>], component: &[usize]) -> String {
    let name = |i: usize| files[i].module.join("::");
    let mut lines = Vec::new();
    for &from in component {
        for &to in &graph[from] {
            if component.contains(&to) {
                lines.push(format!("{} -> {}", name(from), name(to)));
            }
        }
    }
    lines.join("; ")
}

/// No file reaches itself through the files it imports: each can be read from the ones
/// below it. A circle is named with the edges inside it.
#[test]
fn no_files_import_each_other_in_a_circle() {
    let files = files();
    let graph = edges(&files);
    assert!(files.len() > 100, "the scan found the files");
    let found: Vec<String> = circles(&graph)
        .iter()
        .map(|component| {
            let edges = inner_edges(&files, &graph, component);
            format!("{}: {edges}", describe(&files, component))
        })
        .collect();
    assert!(found.is_empty(), "files in import circles: {found:#?}");
}

/// The rule can fail: two files planted to name each other are one circle.
#[test]
fn a_planted_circle_is_found() {
    let plant = |module: &[&str], code: &str| {
        let module: Vec<String> = module.iter().map(ToString::to_string).collect();
        let (uses, globs) = use_table(code);
        File {
            path: PathBuf::from(module.join("/")),
            paths: qualified_paths(code),
            module,
            uses,
            globs,
        }
    };
    let files = vec![
        plant(&["a"], "pub mod b;\npub mod c;\npub use c::Thing;\n"),
        plant(&["a", "b"], "use super::Thing;\npub fn f() {}\n"),
        plant(&["a", "c"], "pub struct Thing;\nfn g() { super::b::f() }\n"),
    ];
    let found = circles(&edges(&files));
    assert_eq!(found.len(), 1, "b -> a::Thing (c's) -> c -> b::f");
    assert_eq!(describe(&files, &found[0]), "[a::b, a::c]");
}
