//! The test double of a runtime, registered like any other (`FakeRuntime::register`): it
//! runs a job's commands as the process runtime does (on this host, in the job's worktree,
//! so a job's commits are real), holds no sandbox of its own, lists the sandboxes a test
//! gives it and records what it is asked to start, stop and remove. The fast tier of tests
//! drives create, exec, sync, remove and sweep through it in milliseconds, with no daemon.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::NetworkMode;
use crate::job::{JobRecord, RuntimeKind};
use crate::runtime::capabilities::{Capabilities, Freeze, OtherUsers, Sandboxes};
use crate::runtime::registration::Registry;
use crate::runtime::{
    Described, ExecOutcome, ExecRequest, ExecResult, OutputSink, Runtime, RuntimeError, Sandbox,
    SandboxLayout, SandboxStatus,
};
use crate::store::{JobStore, PaddockHome};

/// A runtime that starts nothing (or fails to), runs commands as host processes, and keeps
/// a log of what it was asked.
#[derive(Default)]
pub struct FakeRuntime {
    /// `start` fails (as an engine that refuses a container).
    pub fail_start: bool,
    /// `exec` fails before running anything (as an engine that stopped answering).
    pub fail_exec: bool,
    /// What `list_sandboxes` answers; `remove_sandbox` and `destroy` take from it.
    pub sandboxes: Mutex<Vec<Sandbox>>,
    /// The jobs (and sandboxes' jobs) removed, in order.
    pub destroyed: Mutex<Vec<String>>,
    /// The jobs started, in order.
    pub started: Mutex<Vec<String>>,
    /// The jobs stopped, in order.
    pub stopped: Mutex<Vec<String>>,
    /// Each exec's command, in order.
    pub execs: Mutex<Vec<Vec<String>>>,
    /// The jobs frozen now (`freeze` adds, `thaw` takes away).
    pub frozen: Mutex<Vec<String>>,
    /// The jobs frozen for a checkpoint's moment, in order.
    pub checkpoint_freezes: Mutex<Vec<String>>,
    /// Whether it offers [`OtherUsers`] (as gVisor does); it runs their commands as the
    /// agent all the same (it is the process runtime underneath).
    pub other_users: bool,
    /// Each other user's exec, in order: (its uid and gid, whether `settle` followed).
    pub other_user_execs: Mutex<Vec<((u32, u32), bool)>>,
}

static HOST: SandboxLayout = SandboxLayout::Host;

impl FakeRuntime {
    /// A registration that makes `fake` the runtime of every container kind and of
    /// process jobs, and the image engine (so the sweep lists its sandboxes).
    pub fn register(self: &Arc<Self>) -> impl Fn(&mut Registry, &PaddockHome) + Sync + use<> {
        let fake = self.clone();
        move |registry: &mut Registry, _home: &PaddockHome| {
            for kind in [RuntimeKind::Docker, RuntimeKind::Runsc] {
                registry.add(kind, fake.clone());
                registry.add_to_engine(kind);
            }
            registry.add(RuntimeKind::Process, fake.clone());
            registry.set_fallback(RuntimeKind::Process);
        }
    }

    fn log(list: &Mutex<Vec<String>>, job: &str) {
        list.lock()
            .expect("a test's log is never poisoned")
            .push(job.to_string());
    }
}

#[async_trait::async_trait]
impl Runtime for FakeRuntime {
    fn describe(&self) -> Described<'_> {
        Described {
            name: "fake",
            isolation: "fake: a test double running host processes",
            engine: None,
            ports: false,
            host_caches: true,
            fuse_checkout: None,
        }
    }

    fn layout(&self) -> &SandboxLayout {
        &HOST
    }

    fn capabilities(&self) -> Capabilities<'_> {
        Capabilities {
            sandboxes: Some(self),
            freeze: Some(self),
            other_users: self.other_users.then_some(self as &dyn OtherUsers),
            ..Capabilities::default()
        }
    }

    async fn check_ready(&self, _image: &str, _network: NetworkMode) -> Result<(), RuntimeError> {
        Ok(())
    }

    async fn start(&self, record: &JobRecord) -> Result<Option<String>, RuntimeError> {
        if self.fail_start {
            return Err(RuntimeError::Docker {
                action: "start container",
                target: record.id.to_string(),
                message: "the fake refuses".into(),
            });
        }
        Self::log(&self.started, record.id.as_str());
        Ok(Some(format!("fake-{}", record.id)))
    }

    async fn exec(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecOutcome, RuntimeError> {
        if self.fail_exec {
            return Err(RuntimeError::Docker {
                action: "exec",
                target: record.id.to_string(),
                message: "the fake stopped answering".into(),
            });
        }
        self.execs
            .lock()
            .expect("a test's log is never poisoned")
            .push(request.cmd.clone());
        if let Some(user) = request.user {
            self.other_user_execs
                .lock()
                .expect("a test's log is never poisoned")
                .push((user, false));
        }
        Ok(ExecOutcome {
            result: crate::runtime::process::exec(record, request, sink).await?,
            container_id: Some(format!("fake-{}", record.id)),
            oom_kills: None,
            image_id: None,
            exec_path: Some("process"),
        })
    }

    async fn exec_in_sandbox(
        &self,
        record: &JobRecord,
        request: &ExecRequest,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecResult, RuntimeError> {
        crate::runtime::process::exec(record, request, sink).await
    }

    async fn shell_command(
        &self,
        _record: &JobRecord,
    ) -> Result<tokio::process::Command, RuntimeError> {
        Err(RuntimeError::EmptyCommand)
    }

    async fn stop(&self, record: &JobRecord, _grace: Duration) -> Result<bool, RuntimeError> {
        Self::log(&self.stopped, record.id.as_str());
        Ok(false)
    }

    async fn stop_for_removal(
        &self,
        _store: &JobStore,
        record: JobRecord,
    ) -> Result<JobRecord, RuntimeError> {
        Self::log(&self.stopped, record.id.as_str());
        Ok(record)
    }

    async fn destroy(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        Self::log(&self.destroyed, record.id.as_str());
        self.sandboxes
            .lock()
            .expect("a test's list is never poisoned")
            .retain(|s| s.job != record.id.as_str());
        Ok(())
    }

    async fn status(&self, _record: &JobRecord) -> Option<SandboxStatus> {
        None
    }
}

#[async_trait::async_trait]
impl Sandboxes for FakeRuntime {
    async fn list_sandboxes(&self) -> Result<Vec<Sandbox>, RuntimeError> {
        Ok(self
            .sandboxes
            .lock()
            .expect("a test's list is never poisoned")
            .clone())
    }

    async fn remove_sandbox(&self, sandbox: &Sandbox) -> Result<(), RuntimeError> {
        Self::log(&self.destroyed, &sandbox.job);
        self.sandboxes
            .lock()
            .expect("a test's list is never poisoned")
            .retain(|s| s.name != sandbox.name);
        Ok(())
    }
}

#[async_trait::async_trait]
impl OtherUsers for FakeRuntime {
    async fn check_other_user(&self, _record: &JobRecord) -> Result<(), RuntimeError> {
        Ok(())
    }

    /// Where Docker keeps it: the engine's tests of `rootfs: writable` with a disk limit.
    fn root_layer_outside_disk(&self) -> bool {
        true
    }

    async fn settle(&self, _record: &JobRecord, user: (u32, u32)) -> Result<(), RuntimeError> {
        let mut execs = self
            .other_user_execs
            .lock()
            .expect("a test's log is never poisoned");
        if let Some(last) = execs.last_mut().filter(|(ids, _)| *ids == user) {
            last.1 = true;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Freeze for FakeRuntime {
    async fn freeze(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        let mut frozen = self.frozen.lock().expect("a test's log is never poisoned");
        if !frozen.iter().any(|job| job == record.id.as_str()) {
            frozen.push(record.id.to_string());
        }
        Ok(())
    }

    async fn thaw(&self, record: &JobRecord) -> Result<(), RuntimeError> {
        self.frozen
            .lock()
            .expect("a test's log is never poisoned")
            .retain(|job| job != record.id.as_str());
        Ok(())
    }

    fn reads_while_frozen(&self) -> bool {
        true
    }

    async fn freeze_if_running(&self, record: &JobRecord) -> Result<bool, RuntimeError> {
        Self::log(&self.checkpoint_freezes, record.id.as_str());
        self.freeze(record).await?;
        Ok(true)
    }
}
