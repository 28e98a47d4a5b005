//! What the merged and conflicts marks need of each job's branch, read for a whole batch of
//! jobs in one open of the user's repository (git2, on a blocking thread): `ls` of 200 jobs
//! after the base moved would otherwise open the repository four times per job.

use super::{GitError, GitRepo, blocking, read_err};

/// One job's question: its branch tip, the commit it was made from, and its base's tip now.
#[derive(Debug, Clone)]
pub struct MarkAsk {
    pub tip: String,
    pub job_base: String,
    pub base_tip: String,
}

/// The answers git2 can give without a merge.
#[derive(Debug, Clone)]
pub struct MarkFacts {
    /// The branch has commits beyond the commit the job was made from.
    pub ahead: bool,
    /// The files the tip changes since its merge base with the base tip, sorted.
    pub files: Vec<String>,
    /// The base tip contains the tip (no merge needed to know it is in).
    pub contained: bool,
    /// The base tip's tree.
    pub base_tree: String,
}

impl GitRepo {
    /// [`MarkFacts`] for each ask, in order, in one open; an ask git cannot answer (an
    /// object missing) gets its own error and the others still get theirs.
    pub async fn mark_facts(
        &self,
        asks: Vec<MarkAsk>,
    ) -> Result<Vec<Result<MarkFacts, GitError>>, GitError> {
        let this = self.clone();
        blocking(move || {
            let repo = this.open_git2()?;
            let path = this.common_dir.as_path();
            Ok(asks.iter().map(|ask| facts_of(&repo, path, ask)).collect())
        })
        .await
    }
}

fn facts_of(
    repo: &git2::Repository,
    path: &std::path::Path,
    ask: &MarkAsk,
) -> Result<MarkFacts, GitError> {
    let oid = |s: &str| git2::Oid::from_str(s).map_err(read_err(path));
    let (tip, job_base, base_tip) = (oid(&ask.tip)?, oid(&ask.job_base)?, oid(&ask.base_tip)?);
    let descends = |descendant, ancestor| -> Result<bool, GitError> {
        Ok(descendant == ancestor
            || repo
                .graph_descendant_of(descendant, ancestor)
                .map_err(read_err(path))?)
    };
    let ahead = !descends(job_base, tip)?;
    let contained = descends(base_tip, tip)?;
    let files = changed_since_fork(repo, path, base_tip, tip)?;
    let base_tree = repo
        .find_commit(base_tip)
        .map_err(read_err(path))?
        .tree_id()
        .to_string();
    Ok(MarkFacts {
        ahead,
        files,
        contained,
        base_tree,
    })
}

/// The files `tip` changes since its merge base with `base`, sorted and each once.
pub(super) fn changed_since_fork(
    repo: &git2::Repository,
    path: &std::path::Path,
    base: git2::Oid,
    tip: git2::Oid,
) -> Result<Vec<String>, GitError> {
    let tree = |oid| {
        repo.find_commit(oid)
            .and_then(|c| c.tree())
            .map_err(read_err(path))
    };
    let fork = repo.merge_base(base, tip).map_err(read_err(path))?;
    let diff = repo
        .diff_tree_to_tree(Some(&tree(fork)?), Some(&tree(tip)?), None)
        .map_err(read_err(path))?;
    let mut files: Vec<String> = diff
        .deltas()
        .flat_map(|d| [d.old_file().path(), d.new_file().path()])
        .flatten()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    files.sort();
    files.dedup();
    Ok(files)
}
