//! Forking a job (issue 43): N new jobs, each on a branch of its own, each starting from one
//! checkpoint of the source job (its files, index and commits), with the source's profile,
//! runtime, checkout, engine and limits unless the request says otherwise, each recorded as
//! forked from it (`forked_from`).
//!
//! A fork is a create with `from_checkpoint`: its base is the checkpoint's HEAD, and the
//! checkpoint is restored into it (`restore_into`) after its sandbox starts and before its
//! setup commands, while its record is still `creating`. So each fork waits for room in the
//! host budget as any create does (saying so on a terminal), takes a warm pool slot when
//! there is one, and one killed half way is rolled back by the sweep like any create whose
//! creator is gone. The N creates run at once; when one fails, the others are removed and
//! the fork fails whole (a fork leaves all its jobs or none).

use super::checkpoint::{Stored, made};
use super::{Error, Paddock, Result};
use crate::config::RuntimeChoice;
use crate::git::GitRepo;
use crate::job::{ForkedFrom, JobRecord};
use crate::wire::{CreateRequest, EventKind, ForkAnswer, ForkRequest, JobView, Label, MAX_FORKS};

impl Paddock {
    /// Makes `request.count` jobs from a checkpoint of job `id` (see the module docs).
    pub async fn fork(&self, id: &str, request: &ForkRequest) -> Result<ForkAnswer> {
        if request.count == 0 || request.count > MAX_FORKS {
            return Err(Error::ForkCount {
                count: request.count,
                most: MAX_FORKS,
            });
        }
        // A fork is all or none: more forks than `admission.max_jobs` allows in all can
        // never be made, and is refused before anything is (not after a wait).
        if let Some(most) = self
            .admission()?
            .budget()
            .max_jobs
            .and_then(|most| u32::try_from(most).ok())
            .filter(|most| request.count > *most)
        {
            return Err(Error::ForkCount {
                count: request.count,
                most,
            });
        }
        let record = self.load(id)?;
        made(&record)?;
        let stored = match &request.from {
            Some(name) => self.load_checkpoint(record.id.as_str(), name)?,
            None => {
                let name = super::checkpoint::default_name("fork");
                self.take_checkpoint(&record, &name).await?;
                self.load_checkpoint(record.id.as_str(), &name)?
            }
        };
        let creates =
            (0..request.count).map(|_| self.create(fork_request(&record, &stored, request)));
        let made: Vec<Result<super::Created>> = futures_util::future::join_all(creates).await;
        let mut jobs = Vec::new();
        let mut failure = None;
        for outcome in made {
            match outcome {
                Ok(created) => jobs.push(created.record),
                Err(error) => {
                    failure.get_or_insert(error);
                }
            }
        }
        if let Some(error) = failure {
            // All or none: the forks that were made hold nothing but the checkpoint. They go
            // at once, as they were made, so a refused fork answers soon.
            let options = crate::wire::RemoveOptions::from_flags(true, false, None, true);
            let removals = jobs.iter().map(|job| async move {
                if let Err(cleanup) = self.remove(job.id.as_str(), options).await {
                    tracing::warn!(job = %job.id, error = %cleanup, "removing a fork after another failed");
                }
            });
            futures_util::future::join_all(removals).await;
            return Err(error);
        }
        let views: Vec<JobView> = jobs.iter().map(|job| self.view_of(job)).collect();
        self.emit(
            EventKind::JobForked,
            Some(&record.id),
            None,
            serde_json::json!({
                "checkpoint": stored.view.name,
                "jobs": views.iter().map(|v| v.id.to_string()).collect::<Vec<_>>(),
            }),
        );
        Ok(ForkAnswer {
            source: record.id.to_string(),
            checkpoint: stored.view,
            jobs: views,
        })
    }

    /// A fork's base when none is given: the checkpoint's HEAD where the repository has it
    /// (the branch's tip, which the checkpoint's sync published), else the branch's tip then.
    pub(super) async fn fork_base(&self, repo: &GitRepo, from: &ForkedFrom) -> Result<String> {
        let stored = self.load_checkpoint(&from.job, &from.checkpoint)?;
        if stored.repo_key != repo.key() {
            return Err(Error::CheckpointRepo {
                checkpoint: format!("{}:{}", from.job, from.checkpoint),
                repo: stored.repo,
            });
        }
        if repo.resolve_commit(&stored.view.head).await.is_ok() {
            return Ok(stored.view.head);
        }
        stored.view.tip.ok_or_else(|| Error::Checkpoint {
            id: record_id(&from.job),
            message: "its HEAD is not in the repository and its branch had no commit".into(),
        })
    }

    /// Restores the checkpoint a new job was forked from into it (create's step after its
    /// sandbox starts).
    pub(super) async fn restore_fork(&self, record: &JobRecord, from: &ForkedFrom) -> Result<()> {
        let stored = self.load_checkpoint(&from.job, &from.checkpoint)?;
        self.restore_into(
            record,
            &stored,
            false,
            std::slice::from_ref(&record.base_commit),
            true,
        )
        .await
    }
}

fn record_id(job: &str) -> crate::job::JobId {
    crate::job::JobId::parse(job).unwrap_or_else(|_| crate::job::JobId::generate("job"))
}

/// What `--from-checkpoint JOB:NAME` names.
pub(super) fn parse_from(text: &str) -> Result<ForkedFrom> {
    let (job, checkpoint) = text.split_once(':').ok_or_else(|| Error::CheckpointName {
        name: crate::text::short_line(text, 80),
        why: "name it as JOB:CHECKPOINT",
    })?;
    Ok(ForkedFrom {
        job: crate::job::JobId::parse(job)?.to_string(),
        checkpoint: super::checkpoint::check_name(checkpoint)?,
    })
}

/// The create request of one fork: the source job's settings, the checkpoint to start from.
fn fork_request(source: &JobRecord, stored: &Stored, request: &ForkRequest) -> CreateRequest {
    let limits = &source.limits;
    // The engine the source lives on, as its view names it (a fork stays on that engine).
    let engine = JobView::from(source).engine;
    CreateRequest {
        repo: source.repo.clone(),
        agent: Some(source.agent.clone()),
        task: request.task.clone().or_else(|| source.task.clone()),
        profile: Some(source.profile.clone()),
        runtime: source.runtime.to_string().parse::<RuntimeChoice>().ok(),
        checkout: Some(source.checkout),
        image: Some(limits.image.clone()),
        memory: Some(limits.memory),
        disk: source.disk,
        cpus: Some(limits.cpus),
        pids: Some(limits.pids),
        network: Some(limits.network),
        allow: limits.allow.clone(),
        ports: limits.ports.clone(),
        secrets: limits
            .secrets
            .as_ref()
            .map(|s| s.secrets.iter().map(|secret| secret.name.clone()).collect())
            .unwrap_or_default(),
        engine,
        timeout: Some(limits.timeout),
        labels: source
            .labels
            .iter()
            .map(|(key, value)| Label {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        from_checkpoint: Some(format!("{}:{}", stored.view.job, stored.view.name)),
        no_wait: request.no_wait,
        waiter: request.waiter.clone(),
        ..CreateRequest::default()
    }
}
