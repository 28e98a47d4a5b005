//! [`DockerRuntime`]: the [`Runtime`] contract over the container functions of this module.
//! One value per OCI runtime (runc, runsc); both share the daemon, the labels and the
//! container naming, so either lists and reaps every container of the install.

use std::time::Duration;

use super::{
    check_ready, create_first_container, ensure_running, first_error, list_job_containers,
    remove_egress, remove_job_container, remove_labelled_container, stop_job, stop_job_container,
};
use crate::config::NetworkMode;
use crate::job::{JobRecord, RuntimeKind};
use crate::pool::{HostBind, PoolSlot};
use crate::runtime::capabilities::{
    Capabilities, EngineVolumes, Freeze, Images, Network, OtherUsers, Pool, PortRelay, Sandboxes,
};
use crate::runtime::{
    Described, EngineFacts, ExecOutcome, ExecRequest, ExecResult, OutputSink, Runtime,
    RuntimeError, Sandbox, SandboxLayout, SandboxRole, SandboxStatus,
};
use crate::store::{JobStore, PaddockHome};

/// Jobs in containers of one OCI runtime (`Docker` = runc, `Runsc` = gVisor).
pub struct DockerRuntime {
    home: PaddockHome,
    kind: RuntimeKind,
    /// The daemon this runtime talks to: this host's, or an engine of `engines:`.
    daemon: super::Daemon,
    layout: SandboxLayout,
}

impl DockerRuntime {
    pub fn new(home: &PaddockHome, kind: RuntimeKind) -> DockerRuntime {
        DockerRuntime::on(home, kind, super::Daemon::local())
    }

    /// A runtime for jobs on `daemon` (this host's, or a remote engine's).
    pub fn on(home: &PaddockHome, kind: RuntimeKind, daemon: super::Daemon) -> DockerRuntime {
        DockerRuntime {
            home: home.clone(),
            kind,
            daemon,
            layout: SandboxLayout::named(home),
        }
    }
}

#[async_trait::async_trait]
impl Runtime for DockerRuntime {
    fn describe(&self) -> Described<'_> {
        Described {
            name: if self.kind == RuntimeKind::Runsc {
                "runsc"
            } else {
                "runc"
            },
            isolation: if self.kind == RuntimeKind::Runsc {
                "container (gVisor runsc): user-space kernel, own filesystem and network, resource limits, non-root"
            } else {
                "container (runc): own filesystem and network, resource limits, non-root"
            },
            engine: self.daemon.engine(),
            ports: true,
            host_caches: true,
            fuse_checkout: if self.kind == RuntimeKind::Runsc {
                Some(
                    "gVisor (runsc) cannot open a fuse-overlayfs checkout; use `--checkout worktree` (the default without root), or run paddock as root (kernel overlayfs)",
                )
            } else if crate::overlay::fuse_shares() {
                None
            } else {
                Some(
                    "not root and `/etc/fuse.conf` has no `user_allow_other`, so a container cannot open a fuse-overlayfs checkout (add that line, or use `--checkout worktree`)",
                )
            },
        }
    }

    fn layout(&self) -> &SandboxLayout {
        &self.layout
    }

    fn capabilities(&self) -> Capabilities<'_> {
        // A remote engine cannot publish a job's ports on this host nor mount its files:
        // the engine's API carries both.
        let remote = self.daemon.is_remote();
        Capabilities {
            sandboxes: Some(self),
            images: Some(self),
            network: Some(self),
            pool: Some(self),
            ports: remote.then_some(self as &dyn PortRelay),
            volumes: remote.then_some(self as &dyn EngineVolumes),
            freeze: Some(self),
            // gVisor's kernel contains root; runc's is the host's. A remote engine's
            // containers have no helper of this host's to settle another user's files.
            other_users: (self.kind == RuntimeKind::Runsc && !remote)
                .then_some(self as &dyn OtherUsers),
        }
    }

    async fn check_ready(&self, image: &str, network: NetworkMode) -> Result<(), RuntimeError> {
        check_ready(&self.daemon, self.kind, image, network).await
    }

    async fn start(&self, record: &JobRecord) -> Result<Option<String>, RuntimeError> {
        create_first_container(&self.daemon, &self.home, record)
            .await
            .map(Some)
    }

    async fn exec(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecOutcome, RuntimeError> {
        let done = super::exec::exec(&self.daemon, &self.home, record, request, sink).await?;
        if self.daemon.is_remote() && super::egress::has_sealed_network(&self.daemon, record) {
            // The proxy's decisions of this command, where the host's readers look.
            if let Err(error) =
                super::remote::egress::pull_log(&self.daemon, &self.home, record).await
            {
                tracing::warn!(job = %record.id, %error, "cannot copy the egress log from the engine");
            }
        }
        let image_id = match done.image {
            Some(image) => Some(image),
            None => super::image_of(&self.daemon, &done.container_id).await,
        };
        Ok(ExecOutcome {
            result: done.result,
            container_id: Some(done.container_id),
            oom_kills: done.oom_kills,
            image_id,
            exec_path: Some(done.exec_path),
        })
    }

    async fn exec_in_sandbox(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecResult, RuntimeError> {
        super::beside::exec_in_sandbox(&self.daemon, &self.home, record, request, sink).await
    }

    async fn shell_command(
        &self,
        record: &JobRecord,
    ) -> Result<tokio::process::Command, RuntimeError> {
        let running = super::ensure_running_status(&self.daemon, &self.home, record).await?;
        super::exec::interactive_shell(&self.daemon, record, running.exec_server)
    }

    async fn stop(&self, record: &JobRecord, grace: Duration) -> Result<bool, RuntimeError> {
        stop_job(&self.daemon, &self.home, record, grace).await
    }

    async fn stop_for_removal(
        &self,
        store: &JobStore,
        record: JobRecord,
    ) -> Result<JobRecord, RuntimeError> {
        stop_job_container(&self.daemon, &self.home, store, record).await
    }

    async fn destroy(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        remove_job_container(&self.daemon, &self.home, record).await
    }

    async fn status(&self, record: &JobRecord) -> Option<SandboxStatus> {
        super::stats::sandbox_status(&self.daemon, &self.home, record).await
    }
}

#[async_trait::async_trait]
impl Sandboxes for DockerRuntime {
    async fn list_sandboxes(&self) -> Result<Vec<Sandbox>, RuntimeError> {
        list_job_containers(&self.daemon, &self.home).await
    }

    async fn remove_sandbox(&self, sandbox: &Sandbox) -> Result<(), RuntimeError> {
        let (home, name, job) = (&self.home, sandbox.name.as_str(), sandbox.job.as_str());
        match sandbox.role {
            // A job's container takes its sidecar and network (named after it) along, so an
            // orphan of any naming, old `paddock-<job>` or `paddock-<install>-<job>`, goes
            // whole.
            SandboxRole::Job => first_error([
                remove_labelled_container(&self.daemon, home, name, job).await,
                remove_egress(&self.daemon, home, name, job).await,
            ]),
            // An egress sidecar goes with its network.
            SandboxRole::Egress => match name.strip_suffix("-egress") {
                Some(base) => remove_egress(&self.daemon, home, base, job).await,
                None => remove_labelled_container(&self.daemon, home, name, job).await,
            },
            SandboxRole::Sync | SandboxRole::Pool => {
                remove_labelled_container(&self.daemon, home, name, job).await
            }
        }
    }
}

#[async_trait::async_trait]
impl Images for DockerRuntime {
    async fn engine_facts(&self) -> Result<EngineFacts, RuntimeError> {
        super::facts::engine_facts(&self.daemon).await
    }

    async fn build_image(
        &self,
        base_image: &str,
        tag: &str,
        tools: crate::runtime::capabilities::AgentTools,
        progress: &mut (dyn for<'line> FnMut(&'line str) + Send),
    ) -> Result<String, RuntimeError> {
        let id = super::image::build_image(
            &self.daemon,
            (base_image, tag, tools),
            self.home.id(),
            progress,
        )
        .await?;
        if self.daemon.is_remote() {
            // The egress proxy of the engine's allowlist jobs: this binary in an image.
            super::remote::proxy_image::build_proxy_image(
                &self.daemon,
                base_image,
                self.home.id(),
                progress,
            )
            .await?;
        }
        Ok(id)
    }

    async fn build_from_context(
        &self,
        context: Vec<u8>,
        build: &crate::runtime::ContextBuild<'_>,
        progress: &mut (dyn for<'line> FnMut(&'line str) + Send),
    ) -> Result<String, RuntimeError> {
        super::image::build_from_context(&self.daemon, context, build, self.home.id(), progress)
            .await
    }

    async fn labelled_images(
        &self,
        repository: &str,
    ) -> Result<Vec<(String, Option<chrono::DateTime<chrono::Utc>>)>, RuntimeError> {
        super::image::labelled_images(&self.daemon, repository, self.home.id()).await
    }

    async fn remove_image(&self, tag: &str) -> Result<(), RuntimeError> {
        super::image::remove_image(&self.daemon, tag).await
    }

    async fn image_env(&self, tag: &str) -> Result<Option<Vec<String>>, RuntimeError> {
        super::image::image_env(&self.daemon, tag).await
    }

    async fn sandbox_image(&self, record: &JobRecord) -> Option<String> {
        super::image_of(&self.daemon, &super::job_container(record)).await
    }

    async fn image_file(
        &self,
        tag: &str,
        path: &str,
        cap: u64,
    ) -> Result<Option<Vec<u8>>, RuntimeError> {
        super::export::image_file(&self.daemon, (tag, self.home.id()), path, cap).await
    }
}

#[async_trait::async_trait]
impl Network for DockerRuntime {
    async fn apply_network(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        super::egress::write_policy(&self.daemon, &self.home, record)?;
        if self.daemon.is_remote() {
            super::remote::egress::push_policy(&self.daemon, &self.home, record).await?;
        }
        Ok(())
    }

    async fn cut_connections(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        super::egress::restart_sidecar(&self.daemon, &self.home, record).await
    }

    async fn refresh_egress_log(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        if !self.daemon.is_remote() || !super::egress::has_sealed_network(&self.daemon, record) {
            return Ok(());
        }
        super::remote::egress::pull_log(&self.daemon, &self.home, record).await
    }

    async fn guard_job_ranges(&self, image: &str) -> Option<Result<bool, RuntimeError>> {
        let guard =
            async { super::ranges::ensure(&self.daemon, &self.daemon.connect()?, image).await };
        Some(guard.await.map(|guard| guard == super::Guard::Installed))
    }

    async fn exec_beside(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
        network: NetworkMode,
    ) -> Result<ExecOutcome, RuntimeError> {
        let result = super::beside::exec_beside(
            &self.daemon,
            &self.home,
            record,
            request,
            sink,
            network,
            "setup",
        )
        .await?;
        Ok(ExecOutcome {
            result,
            container_id: None,
            oom_kills: None,
            image_id: None,
            exec_path: Some(super::resident::PATH_DOCKER),
        })
    }
}

#[async_trait::async_trait]
impl Pool for DockerRuntime {
    fn unsupported(&self) -> Option<&'static str> {
        super::pool::unsupported(self.kind)
    }

    fn fixed_limits(&self) -> bool {
        // A container's limits are updated when a job adopts it.
        false
    }

    async fn start_pool_slot(&self, slot: &PoolSlot) -> Result<String, RuntimeError> {
        if self.daemon.is_remote() {
            super::remote::pool::start_slot(&self.daemon, &self.home, slot).await
        } else {
            super::pool::start_slot(&self.daemon, &self.home, slot).await
        }
    }

    fn pool_binds(&self, record: &JobRecord) -> Result<Vec<HostBind>, String> {
        super::pool::claim_binds(record)
    }

    async fn pool_claimed(&self, record: &JobRecord, slot: &PoolSlot) -> Result<(), RuntimeError> {
        let _ = record;
        if !self.daemon.is_remote() {
            return Ok(());
        }
        super::remote::pool::check_slot(&self.daemon, &self.home, slot).await
    }

    async fn adopt_pool_slot(
        &self,
        record: &JobRecord,
        slot: &PoolSlot,
    ) -> Result<String, RuntimeError> {
        if self.daemon.is_remote() {
            super::remote::pool::adopt_slot(&self.daemon, record, slot).await
        } else {
            super::pool::adopt_slot(&self.daemon, record, slot).await
        }
    }

    async fn remove_pool_slot(
        &self,
        slot: &PoolSlot,
        job_name: Option<&str>,
    ) -> Result<(), RuntimeError> {
        if self.daemon.is_remote() {
            super::remote::pool::remove_slot(&self.daemon, &self.home, slot).await
        } else {
            super::pool::remove_slot_container(&self.daemon, &self.home, slot, job_name).await
        }
    }
}

#[async_trait::async_trait]
impl PortRelay for DockerRuntime {
    async fn relay_port(
        &self,
        record: &JobRecord,
        port: u16,
        client: tokio::net::TcpStream,
    ) -> Result<(), RuntimeError> {
        super::port_relay::relay(&self.daemon, &self.home, record, port, client).await
    }
}

#[async_trait::async_trait]
impl EngineVolumes for DockerRuntime {
    async fn fill_files(
        &self,
        record: &JobRecord,
        staged_git: &std::path::Path,
        tip: &str,
    ) -> Result<crate::engines::FillReport, RuntimeError> {
        super::remote::fill::fill(&self.daemon, &self.home, record, staged_git, tip).await
    }

    async fn collect_outbox(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        super::remote::outbox::collect_outbox(&self.daemon, record).await
    }

    async fn remove_files(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        super::remote::volumes::remove_job_volumes(&self.daemon, &self.home, record).await
    }

    async fn cache_volumes(&self) -> Result<Vec<crate::engines::CacheVolume>, RuntimeError> {
        super::cache_volumes::list(&self.daemon, &self.home).await
    }

    async fn remove_cache_volume(&self, name: &str) -> Result<bool, RuntimeError> {
        super::cache_volumes::remove(&self.daemon, &self.home, name).await
    }

    async fn stat_path(&self, record: &JobRecord, path: &str) -> Result<Option<u32>, RuntimeError> {
        super::archive::stat(&self.daemon, &super::container_of(record), path).await
    }

    async fn download_path(
        &self,
        record: &JobRecord,
        path: &str,
        cap: u64,
    ) -> Result<Option<Vec<u8>>, RuntimeError> {
        super::archive::download(&self.daemon, &super::container_of(record), path, cap).await
    }

    async fn upload_into(
        &self,
        record: &JobRecord,
        dir: &str,
        tar: Vec<u8>,
    ) -> Result<(), RuntimeError> {
        super::archive::upload(&self.daemon, &super::container_of(record), dir, tar).await
    }
}

#[async_trait::async_trait]
impl Freeze for DockerRuntime {
    async fn freeze(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        super::freeze::freeze(&self.daemon, &self.home, record).await
    }

    async fn thaw(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        super::freeze::thaw(&self.daemon, &self.home, record).await
    }

    fn reads_while_frozen(&self) -> bool {
        true
    }

    async fn freeze_if_running(&self, record: &JobRecord) -> Result<bool, RuntimeError> {
        super::freeze::freeze_if_running(&self.daemon, &self.home, record).await
    }
}

#[async_trait::async_trait]
impl OtherUsers for DockerRuntime {
    async fn check_other_user(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        ensure_running(&self.daemon, &self.home, record).await?;
        super::users::check(&self.daemon, record).await
    }

    async fn settle(&self, record: &JobRecord, user: (u32, u32)) -> Result<(), RuntimeError> {
        super::users::settle(&self.daemon, record, user).await
    }

    fn root_layer_outside_disk(&self) -> bool {
        true
    }
}
