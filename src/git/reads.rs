//! Reads through git2 shared by the repository and the scratch repositories: commit walks,
//! changed files, rendered diffs.

use std::path::Path;

use super::{FileChange, GitError, read_err};

pub(super) fn commits_between(
    repo: &git2::Repository,
    base: &str,
    tip: &str,
    path: &Path,
) -> Result<Vec<git2::Oid>, GitError> {
    let mut walk = repo.revwalk().map_err(read_err(path))?;
    walk.push(git2::Oid::from_str(tip).map_err(read_err(path))?)
        .map_err(read_err(path))?;
    walk.hide(git2::Oid::from_str(base).map_err(read_err(path))?)
        .map_err(read_err(path))?;
    walk.collect::<Result<Vec<_>, _>>().map_err(read_err(path))
}

pub(super) fn status_name(delta: git2::Delta) -> &'static str {
    match delta {
        git2::Delta::Added => "added",
        git2::Delta::Deleted => "deleted",
        git2::Delta::Modified => "modified",
        git2::Delta::Renamed => "renamed",
        git2::Delta::Copied => "copied",
        git2::Delta::Untracked => "untracked",
        git2::Delta::Typechange => "typechange",
        git2::Delta::Conflicted => "conflicted",
        _ => "changed",
    }
}

pub(super) fn file_changes(diff: &git2::Diff<'_>) -> Vec<FileChange> {
    diff.deltas()
        .map(|delta| FileChange {
            path: delta
                .new_file()
                .path()
                .or_else(|| delta.old_file().path())
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            status: status_name(delta.status()).to_string(),
        })
        .collect()
}

/// A diffstat as `git diff --stat` prints one, with each name quoted as git's
/// `core.quotePath` does (`text::path`): libgit2's own stat prints names raw, so a name with
/// a newline or an escape sequence would forge lines or act on the reader's terminal.
fn render_stat(diff: &git2::Diff<'_>, path: &Path) -> Result<String, GitError> {
    const BAR: usize = 50;
    let mut rows = Vec::new();
    let (mut insertions, mut deletions) = (0, 0);
    for (index, delta) in diff.deltas().enumerate() {
        let name = delta
            .new_file()
            .path()
            .or_else(|| delta.old_file().path())
            .map(|p| crate::text::path(&p.to_string_lossy()).into_owned())
            .unwrap_or_default();
        let patch = git2::Patch::from_diff(diff, index).map_err(read_err(path))?;
        let counts = match patch {
            Some(patch) if !delta.flags().is_binary() => {
                let (_, added, removed) = patch.line_stats().map_err(read_err(path))?;
                insertions += added;
                deletions += removed;
                Some((added, removed))
            }
            _ => None,
        };
        rows.push((name, counts));
    }
    if rows.is_empty() {
        return Ok(String::new());
    }
    let name_width = rows
        .iter()
        .map(|(n, _)| n.chars().count())
        .max()
        .unwrap_or(0);
    let most = rows
        .iter()
        .filter_map(|(_, c)| c.map(|(a, r)| a + r))
        .max()
        .unwrap_or(0);
    let binary = rows.iter().any(|(_, c)| c.is_none());
    let count_width = most.to_string().len().max(if binary { 3 } else { 0 });
    let mut out = String::new();
    for (name, counts) in &rows {
        let Some((added, removed)) = counts else {
            out.push_str(&format!(" {name:<name_width$} | {:>count_width$}\n", "Bin"));
            continue;
        };
        let total = added + removed;
        // Scaled like git's: a change too small to show still gets one mark.
        let scale = |n: usize| {
            if most <= BAR || n == 0 {
                n
            } else {
                (n * BAR / most).max(1)
            }
        };
        let bar = format!(
            "{}{}",
            "+".repeat(scale(*added)),
            "-".repeat(scale(*removed))
        );
        out.push_str(&format!(
            " {name:<name_width$} | {total:>count_width$} {bar}\n"
        ));
    }
    // As git words it: a part with nothing in it is left out.
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    out.push_str(&format!(" {} changed", plural(rows.len(), "file")));
    if insertions > 0 {
        out.push_str(&format!(", {}(+)", plural(insertions, "insertion")));
    }
    if deletions > 0 {
        out.push_str(&format!(", {}(-)", plural(deletions, "deletion")));
    }
    out.push('\n');
    Ok(out)
}

/// A file bigger than this counts as binary in stats and patches (8 MiB): libgit2 then never
/// loads it, so an agent's 500 MB file costs the host no memory when it is shown.
pub(crate) const BINARY_OVER: u64 = 8 << 20;
/// The most of a patch the host renders (32 MiB); the rest is cut with a marker line.
pub(crate) const PATCH_CAP: usize = 32 << 20;

/// Options for every diff whose contents the host reads (stats, patches): big files count
/// as binary ([`BINARY_OVER`]).
pub(super) fn content_diff_options() -> git2::DiffOptions {
    let mut options = git2::DiffOptions::new();
    options.max_size(i64::try_from(BINARY_OVER).expect("a small constant"));
    options
}

/// Renders a diff as a patch, or with `stat` as a diffstat.
pub(super) fn render_diff(
    diff: &git2::Diff<'_>,
    stat: bool,
    path: &Path,
) -> Result<String, GitError> {
    if stat {
        return render_stat(diff, path);
    }
    let mut out = Vec::new();
    let mut cut = false;
    let printed = diff.print(git2::DiffFormat::Patch, |_, _, line| {
        if out.len() + line.content().len() + 1 > PATCH_CAP {
            // Stops the walk: libgit2 answers it with a user error, handled below.
            cut = true;
            return false;
        }
        if matches!(line.origin(), '+' | '-' | ' ') {
            out.push(line.origin() as u8);
        }
        out.extend_from_slice(line.content());
        true
    });
    if !cut {
        printed.map_err(read_err(path))?;
    }
    let mut text = String::from_utf8_lossy(&out).into_owned();
    if cut {
        text.push_str(&format!(
            "\n[paddock: patch truncated at {}]\n",
            crate::units::format_size(PATCH_CAP as u64)
        ));
    }
    Ok(text)
}
