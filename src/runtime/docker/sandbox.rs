//! [`DockerRuntime`]: the [`Runtime`] contract over the container functions of this module.
//! One value per OCI runtime (runc, runsc); both share the daemon, the labels and the
//! container naming, so either lists and reaps every container of the install.

use std::path::PathBuf;
use std::time::Duration;

use super::{
    CONTAINER_GIT_DIR, CONTAINER_OUTBOX, agent_user, check_ready, container_name,
    create_first_container, ensure_running, first_error, list_job_containers, remove_egress,
    remove_job_container, remove_labelled_container, stop_job, stop_job_container,
};
use crate::config::NetworkMode;
use crate::job::{JobId, JobRecord, RuntimeKind};
use crate::runtime::{
    EngineFacts, ExecOutcome, ExecRequest, ExecResult, OutputSink, Runtime, RuntimeError, Sandbox,
    SandboxRole,
};
use crate::store::{JobStore, PaddockHome};

/// Jobs in containers of one OCI runtime (`Docker` = runc, `Runsc` = gVisor).
pub struct DockerRuntime {
    home: PaddockHome,
    kind: RuntimeKind,
}

impl DockerRuntime {
    pub fn new(home: &PaddockHome, kind: RuntimeKind) -> DockerRuntime {
        DockerRuntime {
            home: home.clone(),
            kind,
        }
    }
}

#[async_trait::async_trait]
impl Runtime for DockerRuntime {
    async fn sandbox_status(&self, record: &JobRecord) -> Option<crate::runtime::SandboxStatus> {
        super::stats::sandbox_status(&self.home, record).await
    }

    fn isolation_note(&self) -> &'static str {
        if self.kind == RuntimeKind::Runsc {
            "container (gVisor runsc): user-space kernel, own filesystem and network, resource limits, non-root"
        } else {
            "container (runc): own filesystem and network, resource limits, non-root"
        }
    }

    fn files_owner(&self, record: &JobRecord) -> Option<(u32, u32)> {
        // Only as root: the agent's uid in the container then differs from paddock's own.
        let (uid, gid) = agent_user(record.limits.uid);
        (crate::sys::is_root() && uid != 0).then_some((uid, gid))
    }

    fn sandbox_git_paths(&self, record: &JobRecord) -> Option<(PathBuf, PathBuf)> {
        record.git_dir.as_ref()?;
        Some((
            CONTAINER_GIT_DIR.into(),
            record.limits.workspace_dir.clone().into(),
        ))
    }

    fn sandbox_objects(&self) -> Option<PathBuf> {
        Some(super::CONTAINER_OBJECTS.into())
    }

    fn sandbox_outbox(&self) -> Option<PathBuf> {
        Some(CONTAINER_OUTBOX.into())
    }

    async fn check_ready(&self, image: &str, network: NetworkMode) -> Result<(), RuntimeError> {
        check_ready(self.kind, image, network).await
    }

    fn sandbox_name(&self, id: &JobId) -> Option<String> {
        Some(container_name(&self.home, id))
    }

    async fn start(&self, record: &JobRecord) -> Result<Option<String>, RuntimeError> {
        create_first_container(&self.home, record).await.map(Some)
    }

    async fn exec(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecOutcome, RuntimeError> {
        let (result, container_id, oom_kills) =
            super::exec::exec(&self.home, record, request, sink).await?;
        let image_id = super::image_of(&container_id).await;
        Ok(ExecOutcome {
            result,
            container_id: Some(container_id),
            oom_kills,
            image_id,
        })
    }

    async fn exec_in_sandbox(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecResult, RuntimeError> {
        super::exec::exec_in_sandbox(&self.home, record, request, sink).await
    }

    async fn exec_beside(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
        network: NetworkMode,
    ) -> Result<ExecOutcome, RuntimeError> {
        let result =
            super::exec::exec_beside(&self.home, record, request, sink, network, "setup").await?;
        Ok(ExecOutcome {
            result,
            container_id: None,
            oom_kills: None,
            image_id: None,
        })
    }

    async fn start_pool_slot(&self, slot: &crate::pool::PoolSlot) -> Result<String, RuntimeError> {
        super::pool::start_slot(&self.home, slot).await
    }

    fn pool_binds(&self, record: &JobRecord) -> Result<Vec<crate::pool::HostBind>, String> {
        super::pool::claim_binds(record)
    }

    async fn adopt_pool_slot(
        &self,
        record: &JobRecord,
        slot: &crate::pool::PoolSlot,
    ) -> Result<String, RuntimeError> {
        super::pool::adopt_slot(record, slot).await
    }

    async fn remove_pool_slot(
        &self,
        slot: &crate::pool::PoolSlot,
        job_name: Option<&str>,
    ) -> Result<(), RuntimeError> {
        super::pool::remove_slot_container(&self.home, slot, job_name).await
    }

    async fn shell_command(
        &self,
        record: &JobRecord,
    ) -> Result<tokio::process::Command, RuntimeError> {
        ensure_running(&self.home, record).await?;
        Ok(super::exec::interactive_shell(record))
    }

    async fn stop(&self, record: &JobRecord, grace: Duration) -> Result<bool, RuntimeError> {
        stop_job(&self.home, record, grace).await
    }

    async fn stop_for_removal(
        &self,
        store: &JobStore,
        record: JobRecord,
    ) -> Result<JobRecord, RuntimeError> {
        stop_job_container(&self.home, store, record).await
    }

    async fn destroy(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        remove_job_container(&self.home, record).await
    }

    async fn apply_network(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        super::egress::write_policy(&self.home, record)
    }

    async fn cut_connections(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        super::egress::restart_sidecar(&self.home, record).await
    }

    async fn list_sandboxes(&self) -> Result<Vec<Sandbox>, RuntimeError> {
        list_job_containers(&self.home).await
    }

    async fn remove_sandbox(&self, sandbox: &Sandbox) -> Result<(), RuntimeError> {
        let (home, name, job) = (&self.home, sandbox.name.as_str(), sandbox.job.as_str());
        match sandbox.role {
            // A job's container takes its sidecar and network (named after it) along, so an
            // orphan of any naming, old `paddock-<job>` or `paddock-<install>-<job>`, goes
            // whole.
            SandboxRole::Job => first_error([
                remove_labelled_container(home, name, job).await,
                remove_egress(home, name, job).await,
            ]),
            // An egress sidecar goes with its network.
            SandboxRole::Egress => match name.strip_suffix("-egress") {
                Some(base) => remove_egress(home, base, job).await,
                None => remove_labelled_container(home, name, job).await,
            },
            SandboxRole::Sync | SandboxRole::Pool => {
                remove_labelled_container(home, name, job).await
            }
        }
    }

    async fn guard_job_ranges(&self, image: &str) -> Option<Result<bool, RuntimeError>> {
        let guard = async { super::ranges::ensure(&super::connect()?, image).await };
        Some(guard.await.map(|guard| guard == super::Guard::Installed))
    }

    async fn engine_facts(&self) -> Option<Result<EngineFacts, RuntimeError>> {
        Some(super::facts::engine_facts().await)
    }

    async fn build_image(
        &self,
        base_image: &str,
        tag: &str,
        progress: &mut (dyn for<'line> FnMut(&'line str) + Send),
    ) -> Result<String, RuntimeError> {
        super::image::build_image(base_image, tag, self.home.id(), progress).await
    }

    async fn labelled_images(
        &self,
        repository: &str,
    ) -> Result<Vec<(String, Option<chrono::DateTime<chrono::Utc>>)>, RuntimeError> {
        super::image::labelled_images(repository, self.home.id()).await
    }

    async fn remove_image(&self, tag: &str) -> Result<(), RuntimeError> {
        super::image::remove_image(tag).await
    }

    async fn image_env(&self, tag: &str) -> Result<Option<Vec<String>>, RuntimeError> {
        super::image::image_env(tag).await
    }

    async fn build_from_context(
        &self,
        context: Vec<u8>,
        dockerfile: &str,
        args: &std::collections::BTreeMap<String, String>,
        target: Option<&str>,
        tag: &str,
        progress: &mut (dyn for<'line> FnMut(&'line str) + Send),
    ) -> Result<String, RuntimeError> {
        super::image::build_from_context(
            context,
            dockerfile,
            args,
            target,
            tag,
            self.home.id(),
            progress,
        )
        .await
    }
}
