//! The images a Dockerfile builds from, read the way the engine's builder reads them, so an
//! untrusted repository's build can be held to the images the user allows: each stage's
//! `FROM` and each `COPY --from` that names an image rather than an earlier stage, with the
//! `ARG`s before the first `FROM` resolved (their defaults, then the build's args, as the
//! builder does). A reference this cannot resolve for certain (a variable in `--from`, a
//! parser directive it does not know) is an error, never a guess: the caller refuses it.

use std::collections::BTreeMap;

/// One image a Dockerfile reads, with the line of the instruction that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsedImage {
    pub image: String,
    pub line: usize,
}

/// The images `dockerfile` builds from (not `scratch`, not its own stages), in order.
pub fn images_used(
    dockerfile: &str,
    build_args: &BTreeMap<String, String>,
) -> Result<Vec<UsedImage>, String> {
    let escape = escape_char(dockerfile)?;
    let mut globals: BTreeMap<String, String> = BTreeMap::new();
    let mut stages: Vec<String> = Vec::new();
    let mut used = Vec::new();
    let mut seen_from = false;
    for (line, instruction) in instructions(dockerfile, escape) {
        let (keyword, rest) = instruction
            .split_once(char::is_whitespace)
            .unwrap_or((instruction.as_str(), ""));
        let rest = rest.trim();
        match keyword.to_ascii_uppercase().as_str() {
            "ARG" if !seen_from => {
                for (name, default) in arg_declarations(rest) {
                    let value = build_args.get(&name).cloned().or(default);
                    globals.insert(name, value.unwrap_or_default());
                }
            }
            "FROM" => {
                seen_from = true;
                let words: Vec<&str> = rest
                    .split_whitespace()
                    .filter(|w| !w.starts_with("--"))
                    .collect();
                let Some(first) = words.first() else {
                    return Err(format!("line {line}: a FROM names no image"));
                };
                let image = expand(first, &globals, line)?;
                if image.is_empty() {
                    return Err(format!("line {line}: FROM `{first}` names no image"));
                }
                if !is_stage(&image, &stages) && image != "scratch" {
                    used.push(UsedImage { image, line });
                }
                stages.push(match words.as_slice() {
                    [_, alias, name] if alias.eq_ignore_ascii_case("as") => {
                        name.to_ascii_lowercase()
                    }
                    _ => String::new(),
                });
            }
            "COPY" => {
                for flag in rest.split_whitespace().take_while(|w| w.starts_with("--")) {
                    let Some(from) = flag.strip_prefix("--from=") else {
                        continue;
                    };
                    if from.contains('$') {
                        return Err(format!(
                            "line {line}: `--from={from}` names its source with a variable"
                        ));
                    }
                    let numbered = from.parse::<usize>().is_ok_and(|n| n < stages.len());
                    if !numbered && !is_stage(from, &stages) {
                        used.push(UsedImage {
                            image: from.to_string(),
                            line,
                        });
                    }
                }
            }
            _ => {}
        }
    }
    Ok(used)
}

fn is_stage(name: &str, stages: &[String]) -> bool {
    let name = name.to_ascii_lowercase();
    stages
        .iter()
        .any(|stage| !stage.is_empty() && *stage == name)
}

/// The escape character of the file's parser directives (`\` unless `# escape=` says `` ` ``).
fn escape_char(dockerfile: &str) -> Result<char, String> {
    for line in dockerfile.lines() {
        let Some(directive) = line.trim().strip_prefix('#') else {
            break;
        };
        let Some((key, value)) = directive.split_once('=') else {
            break;
        };
        match key.trim().to_ascii_lowercase().as_str() {
            "escape" => {
                return match value.trim() {
                    "\\" => Ok('\\'),
                    "`" => Ok('`'),
                    other => Err(format!("an escape directive of `{other}`")),
                };
            }
            "syntax" | "check" => {}
            _ => break,
        }
    }
    Ok('\\')
}

/// The file's instructions, continuation lines joined, comments dropped, each with the line
/// it starts on.
fn instructions(dockerfile: &str, escape: char) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (index, raw) in dockerfile.lines().enumerate() {
        let trimmed = raw.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_some()) {
            continue;
        }
        let (text, continues) = match trimmed.strip_suffix(escape) {
            Some(text) => (text, true),
            None => (trimmed, false),
        };
        let entry = current.get_or_insert_with(|| (index + 1, String::new()));
        if !entry.1.is_empty() {
            entry.1.push(' ');
        }
        entry.1.push_str(text);
        if !continues
            && let Some(done) = current.take()
            && !done.1.trim().is_empty()
        {
            out.push(done);
        }
    }
    out.extend(current.filter(|(_, text)| !text.trim().is_empty()));
    out
}

/// `ARG A=1 B C="x"`: each name and its default (quotes taken off).
fn arg_declarations(rest: &str) -> Vec<(String, Option<String>)> {
    rest.split_whitespace()
        .map(|word| match word.split_once('=') {
            Some((name, value)) => (
                name.to_string(),
                Some(value.trim_matches(['"', '\'']).to_string()),
            ),
            None => (word.to_string(), None),
        })
        .collect()
}

/// `$NAME`, `${NAME}`, `${NAME:-word}` and `${NAME:+word}` from `vars` (unset: empty, as the
/// builder does).
fn expand(word: &str, vars: &BTreeMap<String, String>, line: usize) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = word.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'{') {
            chars.next();
            let inner: String = chars.by_ref().take_while(|&c| c != '}').collect();
            let (name, modifier) = match inner.find(':') {
                Some(at) => (&inner[..at], Some(&inner[at..])),
                None => (inner.as_str(), None),
            };
            let value = vars.get(name).filter(|v| !v.is_empty());
            match modifier {
                None => out.push_str(value.map_or("", String::as_str)),
                Some(m) if m.starts_with(":-") => {
                    out.push_str(value.map_or(&m[2..], String::as_str));
                }
                Some(m) if m.starts_with(":+") => {
                    out.push_str(if value.is_some() { &m[2..] } else { "" });
                }
                Some(m) => {
                    return Err(format!(
                        "line {line}: `${{{name}{m}}}` is not a form the builder takes"
                    ));
                }
            }
        } else {
            let name: String =
                std::iter::from_fn(|| chars.next_if(|c| c.is_ascii_alphanumeric() || *c == '_'))
                    .collect();
            out.push_str(vars.get(&name).map_or("", String::as_str));
        }
    }
    Ok(out)
}

/// Whether `image` is one `allowed` (globs over image references) lets a repository's
/// devcontainer use; a reference with no tag or digest is also tried as `:latest`.
pub fn image_allowed(image: &str, allowed: &[String]) -> bool {
    let last = image.rsplit('/').next().unwrap_or(image);
    let tagged = if last.contains(':') || image.contains('@') {
        image.to_string()
    } else {
        format!("{image}:latest")
    };
    allowed.iter().any(|pattern| {
        globset::Glob::new(pattern).is_ok_and(|glob| {
            let matcher = glob.compile_matcher();
            matcher.is_match(image) || matcher.is_match(&tagged)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn used(dockerfile: &str, args: &[(&str, &str)]) -> Result<Vec<String>, String> {
        let args = args
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        images_used(dockerfile, &args).map(|u| u.into_iter().map(|u| u.image).collect())
    }

    #[test]
    fn stages_args_and_copies_resolve_as_the_builder_reads_them() {
        let file = "# syntax=docker/dockerfile:1\nARG BASE=paddock-base:bookworm\nFROM ${BASE} AS build\nRUN make\n\
                    FROM build\nCOPY --from=build /out /out\nCOPY --from=0 /a /a\n\
                    COPY --chown=1:1 --from=tools:1 /bin/x /x\nFROM scratch\n";
        assert_eq!(
            used(file, &[]).expect("resolves"),
            ["paddock-base:bookworm", "tools:1"]
        );
        // The build's args win over the file's defaults.
        assert_eq!(
            used(file, &[("BASE", "secret-image:2")]).expect("resolves")[0],
            "secret-image:2"
        );
        // Continuations, comments inside them, lower-case keywords, other forms.
        let file = "from \\\n  # a comment\n  --platform=linux/amd64 \\\n  $IMG\nARG LATE=x\nFROM ${MISSING:-fallback:1}\n";
        assert_eq!(
            used(&format!("ARG IMG=one:2\n{file}"), &[]).expect("resolves"),
            ["one:2", "fallback:1"]
        );
        let ticks = "# escape=`\nFROM a:1 `\n  AS x\nFROM x\n";
        assert_eq!(used(ticks, &[]).expect("resolves"), ["a:1"]);
    }

    #[test]
    fn what_it_cannot_resolve_for_certain_is_an_error() {
        assert!(used("FROM a\nCOPY --from=$X / /\n", &[]).is_err());
        assert!(used("FROM ${X:?required}\n", &[]).is_err());
        assert!(used("ARG X\nFROM $X\n", &[]).is_err());
        assert!(used("# escape=!\nFROM a\n", &[]).is_err());
    }

    #[test]
    fn allowed_images_match_by_glob_and_untagged_as_latest() {
        let allowed = ["paddock-base:*".to_string(), "ubuntu:latest".to_string()];
        assert!(image_allowed("paddock-base:bookworm", &allowed));
        assert!(image_allowed("ubuntu", &allowed));
        assert!(!image_allowed("ubuntu:22.04", &allowed));
        assert!(!image_allowed("company/deploy-tools:1", &allowed));
        assert!(!image_allowed("localhost:5000/x", &allowed));
    }
}
