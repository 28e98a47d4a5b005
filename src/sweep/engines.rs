//! The sweep's view of jobs on remote engines (`engines:`): each such job's containers are
//! listed on its own engine, and a job whose engine does not answer is `unreachable`: kept,
//! never removed or marked failed (its work is on a machine the sweep cannot see, and comes
//! back when that engine does). The install's containers on an engine that answers whose
//! job has no record are reaped there as on the local engine; such an orphan's volumes
//! (its files) go only once its work is saved: its branch and uncommitted work, synced out
//! of the volumes as any job's (the checked bundle stream), kept as `refs/paddock/wip/<id>`
//! in the repository's wip store. Work that cannot be saved keeps its volumes, and the
//! report says why.

use super::{SweepOptions, SweepReport};
use crate::engine::{Paddock, SyncScope};
use crate::git::GitRepo;
use crate::job::{JobId, JobRecord};
use crate::runtime::Sandbox;

/// A remote orphan whose work is saved: the stand-in record its sync ran with, its
/// repository, and how to fetch the work.
pub(super) struct SavedOrphan {
    record: JobRecord,
    repo: GitRepo,
    fetch: String,
}

impl Paddock {
    /// The install's containers on a remote job's engine (its `runtime`'s), or why that
    /// engine did not answer.
    pub(super) async fn engine_sandboxes(
        &self,
        runtime: &dyn crate::runtime::Runtime,
    ) -> Result<Vec<Sandbox>, String> {
        match runtime.capabilities().sandboxes {
            Some(sandboxes) => sandboxes.list_sandboxes().await.map_err(|e| e.to_string()),
            None => Ok(Vec::new()),
        }
    }

    /// The install's orphans on each engine of `engines:` that answers (see
    /// `reap_orphans_on`, `save_engine_orphan`).
    pub(super) async fn reap_engine_orphans(
        &self,
        options: &SweepOptions,
        report: &mut SweepReport,
    ) {
        let Ok(config) = self.config(None) else {
            return;
        };
        for name in config.engines.keys() {
            let runtime = self.runtimes().engine(Some(name));
            self.reap_orphans_on(runtime.as_ref(), options, report)
                .await;
        }
    }

    /// Saves the work of the remote job `id`, whose record is gone, from its volumes on
    /// `engine` (its container `container` still there): a sync of its branch and
    /// uncommitted work, as `rm` makes, with a stand-in record (the default profile's image
    /// and limits) in its container or a throwaway one beside it. The repository is the one
    /// whose object cache the container mounts (Docker's word, not the job's), known on
    /// this host. Returns why not when it cannot.
    pub(super) async fn save_engine_orphan(
        &self,
        engine: &str,
        container: &Sandbox,
        id: &JobId,
    ) -> Result<SavedOrphan, String> {
        let cache_prefix = crate::engines::object_cache(self.home().tag(), "");
        let key = container
            .volumes
            .iter()
            .find_map(|volume| volume.strip_prefix(&cache_prefix))
            .ok_or("its container mounts no object cache of this install")?;
        let (_, root, common) = self
            .home()
            .repos()
            .into_iter()
            .find(|(known, _, _)| known == key)
            .ok_or_else(|| format!("its repository (key {key}) is not known on this host"))?;
        let repo = GitRepo::known(root, common, &self.home().locks_dir());
        let worktree = self.home().worktree_path(key, id);
        let mut record = self
            .orphan_record(&repo, id.clone(), &worktree, Some(engine))
            .await
            .map_err(|error| error.to_string())?;
        record.container_name = Some(container.name.clone());
        record.git_dir = Some(self.home().job_git_dir(id));
        let synced = self
            .sync_job(&record, SyncScope::BranchAndWork)
            .await
            .map_err(|error| format!("its sync failed: {error}"))?;
        match self.publish_wip(&record, &synced).await {
            Ok(Some(_)) => Ok(SavedOrphan {
                fetch: format!(
                    "git fetch {} refs/paddock/wip/{id}",
                    self.wip_store_of(&record).display()
                ),
                record,
                repo,
            }),
            Ok(None) => Err("its sync brought no snapshot of its work".into()),
            Err(error) => Err(format!("its work could not be kept: {error}")),
        }
    }

    /// Removes a remote orphan's volumes (labels checked right before) once its container
    /// is gone and its work `saved`; keeps them, saying why, when the save failed.
    pub(super) async fn reap_engine_orphan_files(
        &self,
        engine: &str,
        container: &Sandbox,
        saved: Result<SavedOrphan, String>,
        report: &mut SweepReport,
    ) {
        // By its listed name, so an orphan named before names carried the install goes too.
        let volumes = crate::engines::JOB_VOLUMES
            .iter()
            .map(|(kind, _)| crate::engines::job_volume(&container.name, kind))
            .collect::<Vec<_>>()
            .join(", ")
            + &format!(" on engine `{engine}`");
        let saved = match saved {
            Ok(saved) => saved,
            Err(why) => {
                report.kept(
                    "volume",
                    volumes,
                    format!("the files of a job with no record, kept: its work could not be saved ({why}); look with `docker volume ls --filter label=dev.paddock.job=JOB`, remove with `docker volume rm`"),
                );
                return;
            }
        };
        // A create may have taken the id since (its volumes would carry the same labels).
        if self.store().exists(&saved.record.id) {
            report.kept("volume", volumes, "a job with this id exists again");
            return;
        }
        let reason = format!(
            "the files of a job with no record; its work saved: {}",
            saved.fetch
        );
        match self
            .place_of(&saved.record)
            .remove(&saved.repo, &saved.record)
            .await
        {
            Ok(()) => report.removed("volume", volumes, reason),
            Err(error) => report.error("volume", volumes, reason, error),
        }
    }
}
