//! What a remote engine's object cache lacks of a job's base commit, as one pack: the
//! commit and every tree and blob of its tree (a shallow boundary: no history), minus the
//! objects of the commits the cache says it holds. Exact sets, not `--revs` walks: a walk
//! that stops at a held commit would also skip objects of that commit's history, which a
//! shallow cache never received.

use std::collections::BTreeSet;
use std::path::Path;

use super::GitError;
use super::call::GitCall;

/// The most held commits whose trees are subtracted (the newest ones the cache names).
pub const MAX_HAVES: usize = 8;

/// The objects `rev-list --objects --no-walk` lists for `commits` (each commit and its whole
/// tree), as ids.
async fn objects_of(common_dir: &Path, commits: &[String]) -> Result<BTreeSet<String>, GitError> {
    let mut call = GitCall::new(common_dir, &["rev-list", "--objects", "--no-walk"])
        .git_dir(common_dir)
        .timeout(super::call::CHECKOUT_TIMEOUT);
    for commit in commits {
        call = call.arg(commit);
    }
    let (_, out) = call.output(&[0]).await?;
    Ok(String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|line| line.split(' ').next())
        .filter(|id| !id.is_empty())
        .map(str::to_string)
        .collect())
}

/// Which of `commits` (hex ids a cache named: untrusted text) the repository has.
async fn known(common_dir: &Path, commits: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for commit in commits {
        let hex = commit.len() >= 40 && commit.chars().all(|c| c.is_ascii_hexdigit());
        if hex
            && GitCall::new(common_dir, &["cat-file", "-e"])
                .git_dir(common_dir)
                .arg(format!("{commit}^{{commit}}"))
                .output(&[0])
                .await
                .is_ok()
        {
            out.push(commit.clone());
        }
    }
    out
}

/// The pack of what an engine's cache lacks of `base` given the commits it holds
/// (`haves`), written to `out`; returns the number of objects in it.
pub async fn pack_for_engine(
    common_dir: &Path,
    base: &str,
    haves: &[String],
    out: &Path,
) -> Result<usize, GitError> {
    let mut wanted = objects_of(common_dir, &[base.to_string()]).await?;
    let haves: Vec<String> = haves.iter().rev().take(MAX_HAVES).cloned().collect();
    let haves = known(common_dir, &haves).await;
    if !haves.is_empty() {
        for id in objects_of(common_dir, &haves).await? {
            wanted.remove(&id);
        }
    }
    let list = out.with_extension("list");
    let text: String = wanted.iter().map(|id| format!("{id}\n")).collect();
    std::fs::write(&list, text).map_err(|source| GitError::Io {
        path: list.clone(),
        source,
    })?;
    let result = GitCall::new(common_dir, &["pack-objects", "--stdout", "-q"])
        .git_dir(common_dir)
        .stdin_from(&list, 0)
        .timeout(super::call::CHECKOUT_TIMEOUT)
        .output(&[0])
        .await;
    let _ = std::fs::remove_file(&list);
    let (_, pack) = result?;
    std::fs::write(out, pack).map_err(|source| GitError::Io {
        path: out.to_path_buf(),
        source,
    })?;
    Ok(wanted.len())
}
