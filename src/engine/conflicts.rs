//! `conflicts` and the merged mark: each job's branch against its base branch, and pairs of
//! jobs against each other, computed with `git merge-tree` in a quarantine (see
//! `git::merge`): no working tree, index or ref is touched, and no object is written into
//! the user's repository.
//!
//! A job's base branch is its recorded base when that names a branch (`HEAD`: the branch the
//! repository has checked out now); a tag or commit base does not move. One job's answer
//! against its base is cached in `work/<id>/merge-status.json`, keyed by the branch tip, the
//! base and its tip, so `ls` reads files and refs and runs git only for jobs whose branch or
//! base moved. `watch_conflicts` (the daemon's sweep tick) turns a change of that answer into
//! `job.conflict` / `job.conflict_resolved` events, remembering what it last told in
//! `work/<id>/merge-notified`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Paddock, Result};
use crate::git::GitRepo;
use crate::git::marks::MarkAsk;
use crate::git::merge::MergeSession;
use crate::job::{JobId, JobRecord, JobState};
use crate::wire::{ConflictsQuery, ConflictsReport, EventKind, JobConflicts, JobPair, MergeStatus};

/// A job's branch and base, as the user's repository has them now.
#[derive(Debug, Clone)]
pub(crate) struct Facts {
    /// The base branch (or the ref given, or the recorded base when it is no branch).
    pub base: String,
    /// Whether `base` is a branch of the repository.
    pub base_is_branch: bool,
    pub base_tip: String,
    pub branch_tip: Option<String>,
}

/// The cached answer for one (branch tip, base, base tip).
#[derive(Debug, Serialize, Deserialize)]
struct Cached {
    branch_tip: String,
    base: String,
    base_tip: String,
    status: MergeStatus,
}

/// Merges computed on demand in one read-only session per repository (made on first need).
pub(crate) struct Checker<'a> {
    paddock: &'a Paddock,
    pub repo: GitRepo,
    session: Option<MergeSession>,
}

impl<'a> Checker<'a> {
    pub fn new(paddock: &'a Paddock, repo: GitRepo) -> Checker<'a> {
        Checker {
            paddock,
            repo,
            session: None,
        }
    }

    pub async fn session(&mut self) -> Result<&MergeSession> {
        if self.session.is_none() {
            let tmp = self.paddock.home().root().join("tmp");
            self.session = Some(self.repo.read_only_merges(&tmp, &[]).await?);
        }
        Ok(self.session.as_ref().expect("made above"))
    }

    /// The job's branch against `facts.base`, from the cache when its key matches.
    pub async fn status(&mut self, record: &JobRecord, facts: &Facts) -> Result<MergeStatus> {
        self.statuses(&[(record, facts)])
            .await?
            .pop()
            .expect("one answer per job")
    }

    /// Each job's branch against its base, in order: cached answers read, and the rest
    /// worked out together (one git2 open for their facts, one `merge-tree --stdin` for the
    /// merges they need), so a moved base costs a few processes, not a few per job. A job
    /// git cannot answer for gets its own error; the outer one is the batch's.
    pub async fn statuses(
        &mut self,
        jobs: &[(&JobRecord, &Facts)],
    ) -> Result<Vec<Result<MergeStatus>>> {
        let mut answers: Vec<Option<Result<MergeStatus>>> = Vec::with_capacity(jobs.len());
        let mut asks = Vec::new();
        for (i, (record, facts)) in jobs.iter().enumerate() {
            // A branch still at its base (a job that made no commit): nothing to ask git.
            let Some(tip) = facts
                .branch_tip
                .clone()
                .filter(|tip| *tip != facts.base_tip && *tip != record.base_commit)
            else {
                answers.push(Some(Ok(MergeStatus {
                    base: facts.base.clone(),
                    base_tip: facts.base_tip.clone(),
                    branch_tip: facts.branch_tip.clone(),
                    merged: false,
                    clean: true,
                    files: Vec::new(),
                    conflicts: Vec::new(),
                })));
                continue;
            };
            if let Some(cached) = self.cached(record, facts, &tip) {
                answers.push(Some(Ok(cached)));
                continue;
            }
            answers.push(None);
            asks.push((
                i,
                MarkAsk {
                    tip,
                    job_base: record.base_commit.clone(),
                    base_tip: facts.base_tip.clone(),
                },
            ));
        }
        if !asks.is_empty() {
            let facts = self
                .repo
                .mark_facts(asks.iter().map(|(_, ask)| ask.clone()).collect())
                .await?;
            // The merges of the branches their base does not already contain, in one batch.
            let pairs: Vec<(String, String)> = asks
                .iter()
                .zip(&facts)
                .filter(|(_, f)| f.as_ref().is_ok_and(|f| !f.contained))
                .map(|((_, ask), _)| (ask.base_tip.clone(), ask.tip.clone()))
                .collect();
            let mut merges = if pairs.is_empty() {
                Vec::new()
            } else {
                self.session().await?.merge_trees(&pairs).await?
            }
            .into_iter();
            for ((i, ask), facts) in asks.into_iter().zip(facts) {
                let status = facts.map_err(Into::into).map(|facts| {
                    let (merged, conflicts) = if facts.contained {
                        (facts.ahead, Vec::new())
                    } else {
                        let outcome = merges.next().expect("one outcome per pair");
                        let same_tree = outcome.tree == facts.base_tree;
                        (
                            facts.ahead && outcome.clean() && same_tree,
                            outcome.conflicts,
                        )
                    };
                    MergeStatus {
                        base: jobs[i].1.base.clone(),
                        base_tip: ask.base_tip,
                        branch_tip: Some(ask.tip),
                        merged,
                        clean: conflicts.is_empty(),
                        files: facts.files,
                        conflicts,
                    }
                });
                if let Ok(status) = &status {
                    self.keep(jobs[i].0, status);
                }
                answers[i] = Some(status);
            }
        }
        Ok(answers
            .into_iter()
            .map(|a| a.expect("every job answered"))
            .collect())
    }

    /// The cached answer for this tip, base and base tip, if one is kept.
    fn cached(&self, record: &JobRecord, facts: &Facts, tip: &str) -> Option<MergeStatus> {
        let bytes = std::fs::read(self.cache_of(record)).ok()?;
        let cached = serde_json::from_slice::<Cached>(&bytes).ok()?;
        (cached.branch_tip == tip && cached.base == facts.base && cached.base_tip == facts.base_tip)
            .then_some(cached.status)
    }

    fn cache_of(&self, record: &JobRecord) -> PathBuf {
        self.paddock
            .home()
            .job_dir(&record.id)
            .join("merge-status.json")
    }

    /// Keeps an answer for the next look, without waiting for the disk: a cache lost in a
    /// crash, torn (unreadable) or not written (the job's dir is gone mid-removal) costs one
    /// recompute, and two fsyncs per job made a cold `ls` of 200 jobs wait 1.7 s here.
    fn keep(&self, record: &JobRecord, status: &MergeStatus) {
        let cache = self.cache_of(record);
        let Some(tip) = status.branch_tip.clone() else {
            return;
        };
        let cached = Cached {
            branch_tip: tip,
            base: status.base.clone(),
            base_tip: status.base_tip.clone(),
            status: status.clone(),
        };
        if cache.parent().is_some_and(Path::is_dir) {
            let bytes = serde_json::to_vec(&cached).expect("a status serializes");
            let _ = crate::atomic::replace_unsynced(&cache, &bytes);
        }
    }
}

/// Whether a job has a branch to look at (a queued or half-made job has none yet).
fn has_branch(record: &JobRecord) -> bool {
    !matches!(record.state, JobState::Queued | JobState::Creating) && !record.is_legacy()
}

impl Paddock {
    /// The branch tips and bases of `records` (all of `repo`), read in one open; with
    /// `base`, that ref (resolved here) is every job's base.
    pub(crate) async fn facts(
        &self,
        repo: &GitRepo,
        records: &[&JobRecord],
        base: Option<&str>,
    ) -> Result<Vec<Facts>> {
        let head = if base.is_none() && records.iter().any(|r| r.base == "HEAD") {
            repo.head_branch().await?
        } else {
            None
        };
        let candidate = |record: &JobRecord| -> Option<String> {
            let name = base.unwrap_or(&record.base);
            let name = name.strip_prefix("refs/heads/").unwrap_or(name);
            if name == "HEAD" {
                head.clone()
            } else {
                Some(name.to_string())
            }
        };
        let mut refs = Vec::new();
        for record in records {
            refs.push(format!("refs/heads/{}", record.branch));
            refs.push(candidate(record).map_or_else(String::new, |b| format!("refs/heads/{b}")));
        }
        let tips = repo.ref_targets(refs).await?;
        let given = match base {
            Some(base) => Some(repo.resolve_commit(base).await?),
            None => None,
        };
        Ok(records
            .iter()
            .zip(tips.chunks(2))
            .map(|(record, tips)| {
                let (branch_tip, base_branch_tip) = (tips[0].clone(), tips[1].clone());
                match (base_branch_tip, &given) {
                    (Some(tip), _) => Facts {
                        base: candidate(record).expect("a tip means a branch"),
                        base_is_branch: true,
                        base_tip: tip,
                        branch_tip,
                    },
                    (None, Some(given)) => Facts {
                        base: base.unwrap_or_default().to_string(),
                        base_is_branch: false,
                        base_tip: given.clone(),
                        branch_tip,
                    },
                    (None, None) => Facts {
                        base: record.base.clone(),
                        base_is_branch: false,
                        base_tip: record.base_commit.clone(),
                        branch_tip,
                    },
                }
            })
            .collect())
    }

    /// One job's branch against its base branch (cached; see the module docs).
    pub(crate) async fn merge_status(&self, record: &JobRecord) -> Result<MergeStatus> {
        let repo = self.repo_of(record);
        let facts = self.facts(&repo, &[record], None).await?;
        Checker::new(self, repo).status(record, &facts[0]).await
    }

    /// The (merged, merges cleanly) marks of each job that has a branch (`ls`); a job whose
    /// answer cannot be had is left out.
    pub(crate) async fn merge_marks(&self, records: &[JobRecord]) -> HashMap<JobId, (bool, bool)> {
        let mut marks = HashMap::new();
        for (repo, group) in by_repo(self, records.iter().filter(|r| has_branch(r))) {
            let Ok(facts) = self.facts(&repo, &group, None).await else {
                continue;
            };
            let jobs: Vec<(&JobRecord, &Facts)> = group.iter().copied().zip(&facts).collect();
            let Ok(statuses) = Checker::new(self, repo).statuses(&jobs).await else {
                continue;
            };
            for ((record, _), status) in jobs.iter().zip(statuses) {
                if let Ok(status) = status {
                    marks.insert(record.id.clone(), (status.merged, status.clean));
                }
            }
        }
        marks
    }

    /// `conflicts`: each job against its base (or `query.base`), and each pair of jobs of
    /// one repository that change a file in common, merged with each other.
    pub async fn conflicts(&self, query: &ConflictsQuery) -> Result<ConflictsReport> {
        let records = if query.jobs.is_empty() {
            self.list(query.repo.as_deref())
                .await?
                .into_iter()
                .filter(has_branch)
                .collect()
        } else {
            let mut records = Vec::new();
            for id in &query.jobs {
                let record = self.load(id)?;
                if !has_branch(&record) {
                    return Err(super::Error::NotRunnable {
                        id: record.id.clone(),
                        state: record.state,
                    });
                }
                records.push(record);
            }
            records
        };
        let mut report = ConflictsReport {
            jobs: Vec::new(),
            pairs: Vec::new(),
        };
        for (repo, group) in by_repo(self, records.iter()) {
            let facts = self.facts(&repo, &group, query.base.as_deref()).await?;
            let mut checker = Checker::new(self, repo);
            let first = report.jobs.len();
            let jobs: Vec<(&JobRecord, &Facts)> = group.iter().copied().zip(&facts).collect();
            for ((record, _), status) in jobs.iter().zip(checker.statuses(&jobs).await?) {
                report.jobs.push(JobConflicts {
                    id: record.id.clone(),
                    branch: record.branch.clone(),
                    sync_error: record.sync_error.clone(),
                    status: status?,
                });
            }
            let jobs = &report.jobs[first..];
            for (i, a) in jobs.iter().enumerate() {
                for b in &jobs[i + 1..] {
                    let (Some(tip_a), Some(tip_b)) = (&a.status.branch_tip, &b.status.branch_tip)
                    else {
                        continue;
                    };
                    let shared: Vec<String> = a
                        .status
                        .files
                        .iter()
                        .filter(|f| b.status.files.contains(f))
                        .cloned()
                        .collect();
                    if shared.is_empty() {
                        continue;
                    }
                    let outcome = checker
                        .session()
                        .await?
                        .merge_tree(tip_a, tip_b, None)
                        .await?;
                    report.pairs.push(JobPair {
                        jobs: [a.id.clone(), b.id.clone()],
                        shared_files: shared,
                        clean: outcome.clean(),
                        conflicts: outcome.conflicts,
                    });
                }
            }
        }
        Ok(report)
    }

    /// Tells subscribers when a job's branch starts or stops conflicting with its base
    /// branch (after the base or the branch moved): `job.conflict` with the files,
    /// `job.conflict_resolved`. Run at each of the daemon's sweeps.
    pub async fn watch_conflicts(&self) {
        let Ok((records, _)) = self.store().list() else {
            return;
        };
        for (repo, group) in by_repo(self, records.iter().filter(|r| has_branch(r))) {
            let Ok(facts) = self.facts(&repo, &group, None).await else {
                continue;
            };
            let jobs: Vec<(&JobRecord, &Facts)> = group
                .iter()
                .copied()
                .zip(&facts)
                .filter(|(_, facts)| facts.branch_tip.is_some())
                .collect();
            let statuses = match Checker::new(self, repo).statuses(&jobs).await {
                Ok(statuses) => statuses,
                Err(error) => {
                    tracing::debug!(%error, "conflict checks failed");
                    continue;
                }
            };
            for ((record, _), status) in jobs.iter().zip(statuses) {
                match status {
                    Ok(status) => self.notify_conflict(record, &status),
                    Err(error) => {
                        tracing::debug!(job = %record.id, %error, "conflict check failed")
                    }
                }
            }
        }
    }

    fn notify_conflict(&self, record: &JobRecord, status: &MergeStatus) {
        let marker = self.home().job_dir(&record.id).join("merge-notified");
        let told_conflict = marker.exists();
        let conflicting = !status.clean;
        if conflicting == told_conflict || !marker.parent().is_some_and(Path::is_dir) {
            return;
        }
        let written = if conflicting {
            crate::atomic::write_atomic(&marker, status.base_tip.as_bytes(), false)
        } else {
            std::fs::remove_file(&marker)
        };
        if written.is_err() {
            return;
        }
        let (kind, detail) = if conflicting {
            (
                EventKind::JobConflict,
                serde_json::json!({
                    "base": status.base, "base_tip": status.base_tip,
                    "branch_tip": status.branch_tip, "files": status.conflicts,
                }),
            )
        } else {
            (
                EventKind::JobConflictResolved,
                serde_json::json!({
                    "base": status.base, "base_tip": status.base_tip,
                    "branch_tip": status.branch_tip,
                }),
            )
        };
        self.emit(kind, Some(&record.id), None, detail);
    }
}

impl Paddock {
    /// Removes merge quarantines (`tmp/merge-*`) older than an hour: a process killed in
    /// the middle of a merge leaves one behind. Returns how many went.
    pub fn clear_stale_quarantines(&self) -> usize {
        let Ok(entries) = std::fs::read_dir(self.home().root().join("tmp")) else {
            return 0;
        };
        let hour = std::time::Duration::from_secs(3600);
        entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("merge-"))
            .filter(|e| {
                e.metadata()
                    .and_then(|m| m.modified())
                    .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > hour))
            })
            .filter(|e| std::fs::remove_dir_all(e.path()).is_ok())
            .count()
    }
}

/// `records` grouped by repository (in the order first seen).
fn by_repo<'r>(
    paddock: &Paddock,
    records: impl Iterator<Item = &'r JobRecord>,
) -> Vec<(GitRepo, Vec<&'r JobRecord>)> {
    let mut groups: BTreeMap<PathBuf, usize> = BTreeMap::new();
    let mut out: Vec<(GitRepo, Vec<&JobRecord>)> = Vec::new();
    for record in records {
        match groups.get(&record.git_common_dir) {
            Some(&i) => out[i].1.push(record),
            None => {
                groups.insert(record.git_common_dir.clone(), out.len());
                out.push((paddock.repo_of(record), vec![record]));
            }
        }
    }
    out
}
