//! The operations a front end asks of paddock, behind one trait: the engine ([`Paddock`])
//! implements it by doing the work, the daemon client ([`crate::client::DaemonClient`]) by
//! asking a running `paddock serve`. The CLI picks one of the two once, at start, and every
//! command is written against the trait, never against either.
//!
//! A new operation is a method here, its engine implementation and one HTTP route (which
//! the client calls); a new front end (the dashboard, MCP) calls this trait too.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use crate::Paddock;
use crate::error::Result;
use crate::output::OutputSink;
use crate::wire::{
    AdmissionView, ApplyReport, CheckpointList, CheckpointRemoved, CheckpointRequest,
    CheckpointView, CommitInfo, ConflictsQuery, ConflictsReport, CreateRequest, Event, EventQuery,
    ExecInfo, ExecOptions, ExecResult, ExecUser, FileBytes, FileList, FileReader, FileWritten,
    ForkAnswer, ForkRequest, JobDetails, JobDiff, JobView, MergeReport, MergeRequest,
    NetworkChange, PauseAnswer, PushReport, PushRequest, RemoveOptions, RemoveReport,
    RestoreAnswer, RestoreRequest, RunReport,
};

/// paddock's job operations (see the module docs).
pub trait Operations {
    /// Creates a job; the warning says when `auto` fell back to the process runtime.
    fn create(
        &self,
        request: CreateRequest,
    ) -> impl Future<Output = Result<(JobView, Option<String>)>>;

    /// The host budget, what holds it (jobs' reserves, busy exec slots) and who waits.
    fn admission(&self) -> impl Future<Output = Result<AdmissionView>>;

    /// All jobs, or those of one repository.
    fn list(&self, repo: Option<&Path>) -> impl Future<Output = Result<Vec<JobView>>>;

    /// One job as it is recorded, without reading its git state.
    fn view(&self, id: &str) -> impl Future<Output = Result<JobView>>;

    /// A job with what it changed (after a sync).
    fn show(&self, id: &str) -> impl Future<Output = Result<JobDetails>>;

    /// The patch (or diffstat) of the job's changes against its base, and the commits on
    /// its branch the job did not make.
    fn diff(&self, id: &str, stat: bool) -> impl Future<Output = Result<JobDiff>>;

    /// Commits on the job's branch since its base, newest first.
    fn log(&self, id: &str) -> impl Future<Output = Result<Vec<CommitInfo>>>;

    /// Runs a command in a job, its output to `sink` as it comes.
    fn exec(
        &self,
        id: &str,
        options: ExecOptions,
        sink: &mut dyn OutputSink,
    ) -> impl Future<Output = Result<ExecResult>>;

    /// Removes a job without losing its work.
    fn remove(
        &self,
        id: &str,
        options: RemoveOptions,
    ) -> impl Future<Output = Result<RemoveReport>>;

    /// Stops what runs in a job; true when something was running.
    fn stop(&self, id: &str, grace: Option<Duration>) -> impl Future<Output = Result<bool>>;

    /// Freezes every process of a job in place (they keep their memory, use no CPU).
    fn pause(&self, id: &str) -> impl Future<Output = Result<PauseAnswer>>;

    /// Thaws a paused job's processes.
    fn resume(&self, id: &str) -> impl Future<Output = Result<PauseAnswer>>;

    /// Saves a job's state (branch tip, index, changes, untracked and `copy` files) as a
    /// named checkpoint.
    fn checkpoint(
        &self,
        id: &str,
        request: CheckpointRequest,
    ) -> impl Future<Output = Result<CheckpointView>>;

    /// A job's checkpoints, oldest first (the job may be gone).
    fn checkpoints(&self, id: &str) -> impl Future<Output = Result<CheckpointList>>;

    /// Removes one checkpoint of a job.
    fn checkpoint_remove(
        &self,
        id: &str,
        name: &str,
    ) -> impl Future<Output = Result<CheckpointRemoved>>;

    /// Puts a checkpoint back into its job.
    fn restore(
        &self,
        id: &str,
        request: RestoreRequest,
    ) -> impl Future<Output = Result<RestoreAnswer>>;

    /// Makes new jobs from a checkpoint of a job.
    fn fork(&self, id: &str, request: ForkRequest) -> impl Future<Output = Result<ForkAnswer>>;

    /// Changes what a live `allowlist` job may reach, from its next connection on.
    fn set_network(&self, id: &str, change: NetworkChange)
    -> impl Future<Output = Result<JobView>>;

    /// Which jobs merge cleanly into their base and which conflict with each other,
    /// computed without touching any working tree.
    fn conflicts(&self, query: ConflictsQuery) -> impl Future<Output = Result<ConflictsReport>>;

    /// Lands a job's branch on a branch of the user's repository.
    fn merge(&self, id: &str, request: MergeRequest) -> impl Future<Output = Result<MergeReport>>;

    /// Pushes exactly a job's branch (synced first) to a remote of the user's repository,
    /// with the user's own git credentials on the host.
    fn push(&self, id: &str, request: PushRequest) -> impl Future<Output = Result<PushReport>>;

    /// Applies a job's committed and uncommitted changes to the user's checkout, uncommitted.
    fn apply(&self, id: &str) -> impl Future<Output = Result<ApplyReport>>;

    /// The install's events that `query` asks for, each to `sink` until it returns false
    /// (or, without `follow`, the replay ends).
    fn events(
        &self,
        query: EventQuery,
        sink: &mut (dyn FnMut(Event) -> bool + Send),
    ) -> impl Future<Output = Result<()>>;

    /// A job's execs, oldest first.
    fn execs(&self, id: &str) -> impl Future<Output = Result<Vec<ExecInfo>>>;

    /// One exec of a job: running or finished, and its result.
    fn exec_info(&self, id: &str, exec: &str) -> impl Future<Output = Result<ExecInfo>>;

    /// An exec's output log (NDJSON lines) from byte `offset`, to `sink`; with `follow`,
    /// until the exec ends. Returns the offset after the last byte given.
    fn exec_output(
        &self,
        id: &str,
        exec: &str,
        offset: u64,
        follow: bool,
        sink: &mut (dyn FnMut(&[u8]) + Send),
    ) -> impl Future<Output = Result<u64>>;

    /// The bytes of a file of a job, streamed: by the path the agent sees
    /// (`/workspace/src/x.rs`) or relative to the workspace (links never followed), or
    /// outside it the sandbox's own file (see `engine::files`). A file over `limit` bytes
    /// is refused (too large) before a byte moves. As another `user` than the agent (where
    /// the runtime contains it, as for `exec --user`) the sandbox answers, with that user's
    /// permissions; so for every method below.
    fn read_file(
        &self,
        id: &str,
        path: &str,
        user: ExecUser,
        limit: Option<u64>,
    ) -> impl Future<Output = Result<FileBytes>>;

    /// Creates or replaces a file of a job (missing directories are made), whole or not
    /// at all: a transfer cut short leaves nothing under the target's name.
    fn write_file(
        &self,
        id: &str,
        path: &str,
        bytes: FileBytes,
        user: ExecUser,
    ) -> impl Future<Output = Result<FileWritten>>;

    /// A directory of a job as a tar, streamed as the job's sandbox makes it (as the job's
    /// user; a process job has no sandbox: refused).
    fn read_tar(
        &self,
        id: &str,
        path: &str,
        user: ExecUser,
    ) -> impl Future<Output = Result<FileReader>>;

    /// Unpacks a tar into a directory of a job (made if missing) in its sandbox, as the
    /// job's user, whole or not at all.
    fn write_tar(
        &self,
        id: &str,
        path: &str,
        tar: FileReader,
        user: ExecUser,
    ) -> impl Future<Output = Result<FileWritten>>;

    /// The entries of a directory of a job's workspace.
    fn list_files(
        &self,
        id: &str,
        path: &str,
        user: ExecUser,
    ) -> impl Future<Output = Result<FileList>>;

    /// The orchestrator's one-shot: create, exec, then remove exactly as `rm` does (work is
    /// never lost; the branch stays when it has commits). With `keep`, the job stays.
    fn run(
        &self,
        create: CreateRequest,
        exec: ExecOptions,
        keep: bool,
        sink: &mut dyn OutputSink,
    ) -> impl Future<Output = Result<(RunReport, Option<String>)>> {
        async move {
            let (job, warning) = self.create(create).await?;
            let id = job.id.to_string();
            let result = self.exec(&id, exec, sink).await;
            let job = self.view(&id).await.unwrap_or(job);
            let branch_kept = if keep {
                true
            } else {
                self.remove(&id, RemoveOptions::default())
                    .await?
                    .branch_kept
            };
            Ok((
                RunReport {
                    job,
                    result: result?,
                    branch_kept,
                },
                warning,
            ))
        }
    }
}

impl Operations for Paddock {
    async fn create(&self, request: CreateRequest) -> Result<(JobView, Option<String>)> {
        let created = Paddock::create(self, request).await?;
        Ok((self.view_of(&created.record), created.warning))
    }

    async fn admission(&self) -> Result<AdmissionView> {
        self.admission_view()
    }

    async fn list(&self, repo: Option<&Path>) -> Result<Vec<JobView>> {
        self.list_views(repo).await
    }

    async fn conflicts(&self, query: ConflictsQuery) -> Result<ConflictsReport> {
        Paddock::conflicts(self, &query).await
    }

    async fn merge(&self, id: &str, request: MergeRequest) -> Result<MergeReport> {
        Paddock::merge(self, id, request).await
    }

    async fn apply(&self, id: &str) -> Result<ApplyReport> {
        Paddock::apply(self, id).await
    }

    async fn push(&self, id: &str, request: PushRequest) -> Result<PushReport> {
        Paddock::push(self, id, request).await
    }

    async fn view(&self, id: &str) -> Result<JobView> {
        Ok(self.view_of(&self.load(id)?))
    }

    async fn show(&self, id: &str) -> Result<JobDetails> {
        Paddock::show(self, id).await
    }

    async fn diff(&self, id: &str, stat: bool) -> Result<JobDiff> {
        Paddock::diff(self, id, stat).await
    }

    async fn log(&self, id: &str) -> Result<Vec<CommitInfo>> {
        Paddock::log(self, id).await
    }

    async fn exec(
        &self,
        id: &str,
        options: ExecOptions,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecResult> {
        Paddock::exec(self, id, options, sink).await
    }

    async fn remove(&self, id: &str, options: RemoveOptions) -> Result<RemoveReport> {
        Paddock::remove(self, id, options).await
    }

    async fn stop(&self, id: &str, grace: Option<Duration>) -> Result<bool> {
        Paddock::stop(self, id, grace).await
    }

    async fn pause(&self, id: &str) -> Result<PauseAnswer> {
        Paddock::pause(self, id).await
    }

    async fn resume(&self, id: &str) -> Result<PauseAnswer> {
        Paddock::resume(self, id).await
    }

    async fn checkpoint(&self, id: &str, request: CheckpointRequest) -> Result<CheckpointView> {
        Paddock::checkpoint(self, id, &request).await
    }

    async fn checkpoints(&self, id: &str) -> Result<CheckpointList> {
        Paddock::checkpoints(self, id)
    }

    async fn checkpoint_remove(&self, id: &str, name: &str) -> Result<CheckpointRemoved> {
        Paddock::checkpoint_remove(self, id, name).await
    }

    async fn restore(&self, id: &str, request: RestoreRequest) -> Result<RestoreAnswer> {
        Paddock::restore(self, id, &request).await
    }

    async fn fork(&self, id: &str, request: ForkRequest) -> Result<ForkAnswer> {
        Paddock::fork(self, id, &request).await
    }

    async fn set_network(&self, id: &str, change: NetworkChange) -> Result<JobView> {
        Paddock::set_network(self, id, change).await
    }

    async fn events(
        &self,
        query: EventQuery,
        sink: &mut (dyn FnMut(Event) -> bool + Send),
    ) -> Result<()> {
        let mut feed = self.event_feed(&query, None)?;
        while let Some(event) = feed.next().await? {
            if !sink(event) {
                break;
            }
        }
        Ok(())
    }

    async fn execs(&self, id: &str) -> Result<Vec<ExecInfo>> {
        Paddock::execs(self, id)
    }

    async fn exec_info(&self, id: &str, exec: &str) -> Result<ExecInfo> {
        Paddock::exec_info(self, id, exec)
    }

    async fn exec_output(
        &self,
        id: &str,
        exec: &str,
        offset: u64,
        follow: bool,
        sink: &mut (dyn FnMut(&[u8]) + Send),
    ) -> Result<u64> {
        let mut output = self.exec_output_reader(id, exec, offset, follow)?;
        while let Some(chunk) = output.next_chunk().await? {
            sink(&chunk);
        }
        Ok(output.offset())
    }

    async fn read_file(
        &self,
        id: &str,
        path: &str,
        user: ExecUser,
        limit: Option<u64>,
    ) -> Result<FileBytes> {
        Paddock::read_file(self, id, path, user, limit).await
    }

    async fn write_file(
        &self,
        id: &str,
        path: &str,
        bytes: FileBytes,
        user: ExecUser,
    ) -> Result<FileWritten> {
        Paddock::write_file(self, id, path, bytes, user).await
    }

    async fn read_tar(&self, id: &str, path: &str, user: ExecUser) -> Result<FileReader> {
        Paddock::read_tar(self, id, path, user).await
    }

    async fn write_tar(
        &self,
        id: &str,
        path: &str,
        tar: FileReader,
        user: ExecUser,
    ) -> Result<FileWritten> {
        Paddock::write_tar(self, id, path, tar, user).await
    }

    async fn list_files(&self, id: &str, path: &str, user: ExecUser) -> Result<FileList> {
        Paddock::list_files(self, id, path, user).await
    }
}
