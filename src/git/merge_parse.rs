//! Reading `git merge-tree --write-tree -z --name-only` output, one merge's or (with
//! `--stdin`, git 2.40 or newer) a batch's: the merged tree and the conflicted paths with
//! their conflict types (from git's `CONFLICT (<type>)` messages). Pure parsing, no I/O.

use serde::{Deserialize, Serialize};

/// One file a merge cannot resolve, and how (`contents`, `modify/delete`, `add/add`,
/// `rename/delete`, ..., from git's `CONFLICT (<type>)`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConflictFile {
    pub path: String,
    #[serde(rename = "type")]
    pub kind: String,
}

/// The result of one merge: the merged tree and the files that conflict (none: clean).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeOutcome {
    pub tree: String,
    pub conflicts: Vec<ConflictFile>,
}

/// Parses `merge-tree --write-tree -z --name-only` output: the tree, the conflicted paths,
/// an empty field, then messages (`N`, N paths, the type, the message).
pub(super) fn parse_merge_tree(output: &[u8], conflicted: bool) -> Option<MergeOutcome> {
    parse_one(&mut fields_of(output), conflicted)
}

/// The NUL-separated fields of git's `-z` output.
fn fields_of(output: &[u8]) -> impl Iterator<Item = String> + '_ {
    output
        .split(|&b| b == 0)
        .map(|f| String::from_utf8_lossy(f).into_owned())
}

/// Parses `merge-tree --stdin --name-only` output for `count` merges, in input order: each
/// is `<status>` (1 clean, 0 conflicted), then one merge's `-z` output as above, then an
/// empty field. `None` when the output does not hold `count` merges.
pub(super) fn parse_merge_batch(output: &[u8], count: usize) -> Option<Vec<MergeOutcome>> {
    let mut fields = fields_of(output);
    let mut outcomes = Vec::with_capacity(count);
    for _ in 0..count {
        let conflicted = match fields.next()?.as_str() {
            "1" => false,
            "0" => true,
            _ => return None,
        };
        outcomes.push(parse_one(&mut fields, conflicted)?);
        // A clean merge's section ends right after its tree; a conflicted one's messages
        // end at the empty field `parse_one` consumed.
        if !conflicted && !fields.next()?.is_empty() {
            return None;
        }
    }
    Some(outcomes)
}

/// One merge's fields: the tree, and for a conflicted merge the paths up to an empty field
/// and then the messages, up to the next empty field or the end.
fn parse_one(fields: &mut impl Iterator<Item = String>, conflicted: bool) -> Option<MergeOutcome> {
    let tree = fields.next()?.trim().to_string();
    let mut conflicts: Vec<ConflictFile> = Vec::new();
    if !conflicted {
        return Some(MergeOutcome { tree, conflicts });
    }
    let mut paths = Vec::new();
    for field in fields.by_ref() {
        if field.is_empty() {
            break;
        }
        if !paths.contains(&field) {
            paths.push(field);
        }
    }
    // Messages: the types of the conflicted paths.
    while let Some(count) = fields.next() {
        let Ok(count) = count.parse::<usize>() else {
            break;
        };
        let named: Vec<String> = fields.by_ref().take(count).collect();
        let kind = fields.next().unwrap_or_default();
        let _message = fields.next();
        let Some(kind) = kind
            .strip_prefix("CONFLICT (")
            .and_then(|k| k.strip_suffix(')'))
        else {
            continue;
        };
        for path in named {
            if paths.contains(&path) && !conflicts.iter().any(|c| c.path == path) {
                conflicts.push(ConflictFile {
                    path,
                    kind: kind.to_string(),
                });
            }
        }
    }
    for path in paths {
        if !conflicts.iter().any(|c| c.path == path) {
            conflicts.push(ConflictFile {
                path,
                kind: "conflict".into(),
            });
        }
    }
    conflicts.sort_by(|a, b| a.path.cmp(&b.path));
    Some(MergeOutcome { tree, conflicts })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_tree_output_is_read_with_conflict_types() {
        let fields = [
            "55b2",
            "f",
            "g",
            "",
            "1",
            "f",
            "Auto-merging",
            "Auto-merging f\n",
            "1",
            "f",
            "CONFLICT (contents)",
            "CONFLICT (content): Merge conflict in f\n",
            "1",
            "g",
            "CONFLICT (modify/delete)",
            "g deleted\n",
            "",
        ];
        let output = fields.join("\0");
        let output = output.as_bytes();
        let outcome = parse_merge_tree(output, true).unwrap();
        assert_eq!(outcome.tree, "55b2");
        assert_eq!(
            outcome.conflicts,
            vec![
                ConflictFile {
                    path: "f".into(),
                    kind: "contents".into()
                },
                ConflictFile {
                    path: "g".into(),
                    kind: "modify/delete".into()
                },
            ]
        );
        let clean = parse_merge_tree(b"abcd\0", false).unwrap();
        assert!(clean.clean() && clean.tree == "abcd");
    }

    #[test]
    fn a_batch_is_read_merge_by_merge_whatever_each_holds() {
        // Conflicted (with messages), clean, conflicted: as `git merge-tree --stdin` prints.
        let fields = [
            "0",
            "t1",
            "a",
            "",
            "1",
            "a",
            "Auto-merging",
            "Auto-merging a\n",
            "1",
            "a",
            "CONFLICT (contents)",
            "CONFLICT (content): Merge conflict in a\n",
            "",
            "1",
            "t2",
            "",
            "0",
            "t3",
            "b",
            "",
            "1",
            "b",
            "CONFLICT (modify/delete)",
            "b deleted\n",
            "",
            "",
        ];
        let output = fields.join("\0");
        let outcomes = parse_merge_batch(output.as_bytes(), 3).unwrap();
        assert_eq!(outcomes[0].tree, "t1");
        assert_eq!(outcomes[0].conflicts[0].kind, "contents");
        assert!(outcomes[1].clean() && outcomes[1].tree == "t2");
        assert_eq!(outcomes[2].conflicts[0].path, "b");
        assert_eq!(outcomes[2].conflicts[0].kind, "modify/delete");
        assert!(
            parse_merge_batch(output.as_bytes(), 4).is_none(),
            "one merge too many"
        );
        assert!(
            parse_merge_batch(b"2\0t\0\0", 1).is_none(),
            "an unknown status"
        );
    }
}
