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

/// Renders a diff as a patch, or with `stat` as a diffstat.
pub(super) fn render_diff(
    diff: &git2::Diff<'_>,
    stat: bool,
    path: &Path,
) -> Result<String, GitError> {
    if stat {
        let stats = diff.stats().map_err(read_err(path))?;
        let buf = stats
            .to_buf(git2::DiffStatsFormat::FULL, 80)
            .map_err(read_err(path))?;
        return Ok(String::from_utf8_lossy(&buf).into_owned());
    }
    let mut out = Vec::new();
    diff.print(git2::DiffFormat::Patch, |_, _, line| {
        if matches!(line.origin(), '+' | '-' | ' ') {
            out.push(line.origin() as u8);
        }
        out.extend_from_slice(line.content());
        true
    })
    .map_err(read_err(path))?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}
