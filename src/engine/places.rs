//! Which `Place` a job's files have, and what each does across the job's life: `place_of`
//! is the one choice, made from the job's runtime (a runtime that keeps files in an
//! engine's volumes has them there; every other job has a checkout on this host); create's
//! fill, the outbox pull of an exec's sync, the sweep's look for a vanished checkout and
//! the removal of a job's files ask it instead of branching on `JobRecord::engine`.
//!
//! Invariants: a job's files are made before any agent runs and removed only after its
//! sandbox is gone, each thing removed checked to be ours right before (a checkout under
//! our root with our marker; a volume with this install's and the job's labels).

use super::failpoints::crash_point;
use super::files::HostDir;
use super::files_inside::{As, inside_path};
use super::files_remote::EngineFiles;
use super::{Paddock, Result};
use crate::git::GitRepo;
use crate::job::JobRecord;
use crate::place::{JobFiles, Place, WorkspacePath};
use crate::runtime::RuntimeError;
use crate::wire::{FileBytes, FileList, FileWritten};

impl Paddock {
    /// Where `record`'s files live: this host, or volumes of its engine.
    pub(crate) fn place_of<'a>(&'a self, record: &JobRecord) -> Box<dyn JobFiles + 'a> {
        let runtime = self.runtime_of(record);
        if runtime.capabilities().volumes.is_none() {
            return Box::new(OnHost { paddock: self });
        }
        Box::new(OnEngine {
            paddock: self,
            files: EngineFiles::new(runtime.clone()),
            runtime,
        })
    }
}

/// A local job's files: its checkout (worktree or overlay, on its disk when it has one)
/// and its git dir and outbox under `work/<id>/`.
struct OnHost<'a> {
    paddock: &'a Paddock,
}

/// A remote job's files: volumes of its engine, filled and read back by streams through
/// the engine's API; only its scratch repository and outbox copies are on this host.
struct OnEngine<'a> {
    paddock: &'a Paddock,
    files: EngineFiles,
    /// The job's runtime, whose volumes these are.
    runtime: std::sync::Arc<dyn crate::runtime::Runtime>,
}

impl OnEngine<'_> {
    fn volumes(&self) -> Result<&dyn crate::runtime::capabilities::EngineVolumes, RuntimeError> {
        self.runtime.capabilities().volumes.ok_or_else(|| {
            crate::runtime::lacks(self.runtime.as_ref(), "keep a job's files in volumes")
        })
    }
}

#[async_trait::async_trait]
impl Place for OnHost<'_> {
    async fn open_file(
        &self,
        record: &JobRecord,
        path: &WorkspacePath,
        who: Option<(u32, u32)>,
        limit: Option<u64>,
    ) -> Result<FileBytes> {
        HostDir.open_file(record, path, who, limit).await
    }

    async fn put_file(
        &self,
        record: &JobRecord,
        path: &WorkspacePath,
        bytes: FileBytes,
        owner: Option<(u32, u32)>,
    ) -> Result<FileWritten> {
        HostDir.put_file(record, path, bytes, owner).await
    }

    async fn write_file(
        &self,
        record: &JobRecord,
        path: &WorkspacePath,
        bytes: Vec<u8>,
        owner: Option<(u32, u32)>,
    ) -> Result<FileWritten> {
        HostDir.write_file(record, path, bytes, owner).await
    }

    async fn list_dir(&self, record: &JobRecord, path: &WorkspacePath) -> Result<FileList> {
        HostDir.list_dir(record, path).await
    }
}

#[async_trait::async_trait]
impl JobFiles for OnHost<'_> {
    async fn fill(
        &self,
        repo: &GitRepo,
        record: &mut JobRecord,
        tip: &str,
        caches: &[crate::cache::CacheSpec],
        setup: &crate::config::JobSetup,
    ) -> Result<()> {
        let job_git = self.paddock.fill_local(repo, record, tip).await?;
        crash_point("checked-out");
        self.paddock
            .place_local_extras(record, caches, setup, &job_git)
            .await
    }

    async fn collect_outbox(&self, _record: &JobRecord) -> Result<(), RuntimeError> {
        // The sandbox wrote the host's outbox itself.
        Ok(())
    }

    fn files_gone(&self, record: &JobRecord) -> bool {
        record.git_dir.is_some() && !record.worktree.exists()
    }

    fn holds_work(&self, record: &JobRecord) -> bool {
        record.worktree.exists()
    }

    async fn remove(&self, repo: &GitRepo, record: &JobRecord) -> Result<()> {
        self.paddock.remove_checkout(repo, record).await
    }
}

#[async_trait::async_trait]
impl Place for OnEngine<'_> {
    /// Read in the sandbox as the job's user, whom the sandbox's kernel checks (`who` is
    /// the same user). The file API streams a remote job's workspace through its sandbox:
    /// the engine's archive API answers a file whole.
    async fn open_file(
        &self,
        record: &JobRecord,
        path: &WorkspacePath,
        _who: Option<(u32, u32)>,
        limit: Option<u64>,
    ) -> Result<FileBytes> {
        self.files.check_path(record, path).await?;
        self.paddock
            .read_inside(record, &inside_path(record, path), limit, As::default())
            .await
    }

    /// Written in the sandbox as the job's user (its files are the agent's already).
    async fn put_file(
        &self,
        record: &JobRecord,
        path: &WorkspacePath,
        bytes: FileBytes,
        _owner: Option<(u32, u32)>,
    ) -> Result<FileWritten> {
        self.files.check_path(record, path).await?;
        let mut written = self
            .paddock
            .write_inside(record, &inside_path(record, path), bytes, As::default())
            .await?;
        written.path.clone_from(&path.shown);
        Ok(written)
    }

    async fn write_file(
        &self,
        record: &JobRecord,
        path: &WorkspacePath,
        bytes: Vec<u8>,
        owner: Option<(u32, u32)>,
    ) -> Result<FileWritten> {
        self.files.write_file(record, path, bytes, owner).await
    }

    async fn list_dir(&self, record: &JobRecord, path: &WorkspacePath) -> Result<FileList> {
        self.files.list_dir(record, path).await
    }
}

#[async_trait::async_trait]
impl JobFiles for OnEngine<'_> {
    async fn fill(
        &self,
        repo: &GitRepo,
        record: &mut JobRecord,
        tip: &str,
        caches: &[crate::cache::CacheSpec],
        setup: &crate::config::JobSetup,
    ) -> Result<()> {
        self.paddock
            .fill_remote(repo, record, tip, caches, setup)
            .await?;
        crash_point("checked-out");
        Ok(())
    }

    async fn collect_outbox(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        self.volumes()?.collect_outbox(record).await
    }

    fn files_gone(&self, _record: &JobRecord) -> bool {
        // Its files are on the engine; whether that answers is the sweep's other question.
        false
    }

    fn holds_work(&self, _record: &JobRecord) -> bool {
        true
    }

    async fn remove(&self, repo: &GitRepo, record: &JobRecord) -> Result<()> {
        // Both are tried: the volumes on the engine, then what the job has on this host
        // (its scratch repository and outbox copies under `work/<id>/`).
        let volumes = match self.volumes() {
            Ok(volumes) => volumes.remove_files(record).await,
            Err(error) => Err(error),
        };
        let here = self.paddock.remove_checkout(repo, record).await;
        volumes?;
        here
    }
}
