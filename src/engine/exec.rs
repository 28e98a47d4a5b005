//! Running commands in a job: `exec` (then a sync of its branch), `run` (create, exec, rm),
//! `stop`, `shell` and the job's output log. Every exec is appended to the audit log and
//! recorded under its own id (see `execs`).

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::execs::ExecRecorder;
use super::piggyback::{Piggyback, Piggybacked};
use super::{Error, ExecOptions, Paddock, Result, SyncScope};
use crate::job::{JobId, JobRecord, JobState};
use crate::runtime::exec::{DEFAULT_OUTPUT_CAP, StreamKind};
use crate::runtime::{ExecOutcome, ExecRequest, ExecResult, OutputSink, RuntimeError};
use crate::wire::EventKind;

/// The least time the sync after a command gets, even when the command used its whole
/// deadline (a command killed at its timeout may have committed first).
const SYNC_AFTER_MIN: std::time::Duration = std::time::Duration::from_secs(5);

/// One line of `$PADDOCK_HOME/logs/<job>/exec.jsonl`.
#[derive(Debug, Clone, Serialize)]
pub(super) struct AuditEntry<'a> {
    pub(super) command: &'a [String],
    pub(super) started_at: DateTime<Utc>,
    pub(super) duration_ms: u64,
    pub(super) exit_code: Option<i64>,
    pub(super) timed_out: bool,
    pub(super) oom_killed: bool,
    pub(super) truncated: bool,
    pub(super) error: Option<String>,
    /// How long bringing the job's branch into the user's repository took after the command
    /// (none when nothing had to come: see `sync`).
    pub(super) sync_ms: Option<u64>,
    /// What the sync after the command did: `synced`, `failed`, or `unchanged` (the sandbox
    /// reported the branch where the host last synced it: no sync round ran). Absent when
    /// the command did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) sync: Option<&'static str>,
}

/// What the sync after an exec's command did.
enum AfterCommand {
    /// The command did not run: no sync.
    NotRun,
    /// The sandbox reported the branch unchanged: no sync round.
    Unchanged,
    /// A sync ran: its time, whether it failed, and, for one that ran in the exec's session,
    /// its outcome still to be noted on the job with the exec's own record update.
    Synced {
        ms: u64,
        failed: bool,
        unnoted: Option<Result<super::Synced>>,
    },
}

/// Passes output on to the caller's sink, to the exec's own output record and to the job's
/// output log, so `paddock logs --follow` sees it as it comes.
pub(super) struct TeeSink<'a> {
    pub(super) inner: &'a mut dyn OutputSink,
    pub(super) recorder: ExecRecorder,
    pub(super) log: Option<super::output_log::OutputLog>,
}

impl TeeSink<'_> {
    /// The `==> TIME $ COMMAND` line that opens an exec in the output log.
    pub(super) fn log_start(&mut self, started_at: DateTime<Utc>, cmd: &[String]) {
        if let Some(log) = &mut self.log {
            let _ = log.line(&format!(
                "==> {} $ {}",
                started_at.to_rfc3339(),
                shell_words(cmd)
            ));
        }
    }

    /// The `<== exit N after Dms` line that closes it.
    pub(super) fn log_end(&mut self, outcome: &std::result::Result<ExecOutcome, RuntimeError>) {
        let Some(log) = &mut self.log else {
            return;
        };
        let summary = match outcome {
            Ok(o) => format!(
                "exit {}{}{} after {}ms",
                o.result.exit_code,
                if o.result.timed_out {
                    " (timed out)"
                } else {
                    ""
                },
                if o.result.oom_killed {
                    " (out of memory)"
                } else {
                    ""
                },
                o.result.duration_ms
            ),
            Err(e) => format!("failed: {e}"),
        };
        let _ = log.line(&format!("\n<== {summary}"));
    }
}

impl OutputSink for TeeSink<'_> {
    fn write(&mut self, stream: StreamKind, bytes: &[u8]) {
        self.inner.write(stream, bytes);
        self.recorder.write(stream, bytes);
        if let Some(log) = &mut self.log
            && log.output(bytes).is_err()
        {
            self.log = None;
        }
    }
}

/// A command line for logs: words with spaces are quoted.
fn shell_words(cmd: &[String]) -> String {
    cmd.iter()
        .map(|w| {
            if w.is_empty() || w.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
                format!("'{}'", w.replace('\'', "'\\''"))
            } else {
                w.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// What the exec ran on and under, from the job's record: the one place `meta` is made.
fn exec_meta(
    runtime: &dyn crate::runtime::Runtime,
    record: &crate::job::JobRecord,
    image_id: Option<String>,
    exec_path: Option<&'static str>,
) -> crate::output::ExecMeta {
    let limits = &record.limits;
    crate::output::ExecMeta {
        runtime: runtime.describe().name.to_string(),
        image: runtime.layout().sandboxed().then(|| limits.image.clone()),
        image_id,
        exec_path: exec_path.map(str::to_string),
        paddock_version: env!("CARGO_PKG_VERSION").to_string(),
        checkout: record.checkout.to_string(),
        limits: crate::output::ExecLimits {
            cpus: limits.cpus.to_string(),
            memory: limits.memory.to_string(),
            pids: limits.pids,
            disk: record.disk.map(|d| d.to_string()),
            network: limits.network.to_string(),
            allow: limits.allow.iter().map(ToString::to_string).collect(),
        },
    }
}

/// What no process can be given (a NUL in an argument, the environment or the directory; an
/// environment name with `=`): a 400 before anything runs, never a failure of paddock's.
fn check_exec_request(options: &ExecOptions) -> Result<()> {
    let bad = |reason: &str| {
        Err(Error::BadExec {
            reason: reason.to_string(),
        })
    };
    if options.cmd.iter().any(|arg| arg.contains('\0')) {
        return bad("an argument holds a NUL byte");
    }
    if options
        .env
        .iter()
        .any(|(name, value)| name.is_empty() || name.contains(['=', '\0']) || value.contains('\0'))
    {
        return bad("an environment name is empty or holds `=` or NUL, or a value holds NUL");
    }
    if options.workdir.as_deref().is_some_and(|w| w.contains('\0')) {
        return bad("the working directory holds a NUL byte");
    }
    let inputs = [
        options.stdin.is_some(),
        options.stdin_base64.is_some(),
        options.stdin_stream.is_some(),
    ];
    if inputs.into_iter().filter(|given| *given).count() > 1 {
        return bad("give one standard input: `stdin`, `stdin_base64` or a streamed body");
    }
    Ok(())
}

/// The command's standard input, from whichever of the options gave one.
fn exec_stdin(options: &mut ExecOptions) -> Result<crate::runtime::exec::ExecStdin> {
    use crate::runtime::exec::ExecStdin;
    use base64::Engine as _;
    if let Some(text) = options.stdin.take() {
        return Ok(ExecStdin::bytes(text.into_bytes()));
    }
    if let Some(encoded) = options.stdin_base64.take() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_bytes())
            .map_err(|error| Error::BadExec {
                reason: format!("`stdin_base64` is not base64: {error}"),
            })?;
        return Ok(ExecStdin::bytes(bytes));
    }
    Ok(std::mem::take(&mut options.stdin_stream))
}

impl Paddock {
    /// The uid and gid an exec runs as when they are not the agent's, after checking that
    /// the job's runtime contains them.
    pub(super) async fn other_user(
        &self,
        record: &crate::job::JobRecord,
        user: Option<crate::wire::ExecUser>,
    ) -> Result<Option<(u32, u32)>> {
        let user = user.unwrap_or_default();
        let agent = crate::runtime::agent_user(record.limits.uid);
        if !user.is_other(agent) {
            return Ok(None);
        }
        let runtime = self.runtime_of(record);
        let Some(users) = runtime.capabilities().other_users else {
            return Err(Error::UserNotContained {
                id: record.id.clone(),
                user,
                runtime: record.runtime,
            });
        };
        users.check_other_user(record).await?;
        Ok(Some(user.ids(agent)))
    }

    /// Runs a command in a job: the job becomes `running`, then `exited` or `timed-out` (or
    /// `failed` when paddock itself could not run it). Output goes to `sink` as it comes and
    /// to the job's output log; every exec is appended to the audit log.
    #[expect(
        clippy::too_many_lines,
        reason = "exec's admission, run and sync in order (issue 42: one runtime round trip)"
    )]
    pub async fn exec(
        &self,
        id: &str,
        mut options: ExecOptions,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecResult> {
        let mut clock = super::stage_clock::StageClock::start();
        check_exec_request(&options)?;
        let stdin = exec_stdin(&mut options)?;
        let record = self.load(id)?;
        if record.is_legacy() {
            return Err(Error::Legacy { id: record.id });
        }
        if matches!(
            record.state,
            JobState::Queued | JobState::Creating | JobState::Removed
        ) {
            return Err(Error::NotRunnable {
                id: record.id,
                state: record.state,
            });
        }
        let record = match record.paused_at {
            Some(_) if options.resume => self.resume_for_exec(record).await?,
            Some(since) => {
                return Err(Error::Paused {
                    id: record.id,
                    since,
                });
            }
            None => record,
        };
        // Another user than the agent only where the runtime contains it (checked before a
        // slot is taken: a refusal waits for nothing).
        let other_user = self.other_user(&record, options.user).await?;
        // Held until the exec ends (the guard frees it on every path).
        let _slot = self
            .admit_exec(&record.id, options.no_wait, options.waiter.as_deref())
            .await?;
        clock.mark("admit");
        // A container started since the last exec runs its devcontainer's postStartCommand.
        self.post_start(&mut record.clone(), false).await?;
        // A remote job's ports are served by a relay here, started again when it is gone.
        self.ensure_port_relay(&record).await?;
        // `checkpoint: {before_exec: true}`: the state before this exec, kept to roll back to.
        if let Some(keep) = record.auto_checkpoints {
            self.auto_checkpoint(&record, keep).await?;
        }
        // The branch sync rides along in the exec's own sandbox session when it can.
        // Not after another user's command: the sync runs as the agent, on settled files.
        let piggyback = match other_user {
            None => self.piggyback_sync(&record).await,
            Some(_) => None,
        };
        clock.mark("plan");
        let request = ExecRequest {
            cmd: options.cmd.clone(),
            env: options.env,
            workdir: options.workdir,
            timeout: options.timeout.map_or(record.limits.timeout.0, |t| t.0),
            kill_policy: record.limits.kill_policy,
            grace: record.limits.grace.0,
            output_cap: options.output_cap.unwrap_or(DEFAULT_OUTPUT_CAP),
            after: piggyback.as_ref().map(|p| p.snippet.clone()),
            stdin,
            user: other_user,
        };
        let started_at = Utc::now();
        let command_deadline = std::time::Instant::now() + request.timeout + request.grace;
        // The state check and the record of it, right before the command starts; a crash
        // before the exec's end makes `running` stale anyway, so its rename is not waited for.
        let (record, moved) = self
            .store
            .update_lazily(&record.id, |r| r.transition(JobState::Running, started_at))?;
        moved?;
        clock.mark("running");
        let recorder = ExecRecorder::start(
            &self.home.execs_dir(&record.id),
            &record.id,
            &options.cmd,
            request.timeout + request.grace,
        );
        self.emit(
            EventKind::JobState,
            Some(&record.id),
            Some(JobState::Running),
            serde_json::json!({ "exec": recorder.id() }),
        );
        sink.started(recorder.id());
        let mut tee = TeeSink {
            inner: sink,
            recorder,
            log: self.open_output_log(&record.id),
        };
        tee.log_start(started_at, &options.cmd);
        clock.mark("prepare");
        let mut outcome = self
            .runtime_of(&record)
            .exec(&record, &request, &mut tee)
            .await;
        // The files a piggybacked sync left in the job's outbox, brought where they are read
        // (a remote job's are in a volume of its engine); a failure fails the exec.
        if request.after.is_some()
            && outcome.is_ok()
            && let Err(error) = self.place_of(&record).collect_outbox(&record).await
        {
            outcome = Err(error);
        }
        // What another user left in the job's files is the agent's again before the sync
        // (or anything of paddock's) reads them; whatever the command's outcome.
        if let Some(user) = other_user
            && let Some(users) = self.runtime_of(&record).capabilities().other_users
            && let Err(error) = users.settle(&record, user).await
        {
            outcome = Err(error);
        }
        clock.mark("runtime");
        // The command's commits reach the user's repository before exec returns.
        // The sync ends by the exec's own deadline, with a little room after a command that
        // used all of it: the exec answers within its timeout and grace plus that room.
        let sync_by = command_deadline.max(std::time::Instant::now() + SYNC_AFTER_MIN);
        let after = match &mut outcome {
            Ok(done) => {
                self.sync_after(&record, piggyback, &mut done.result, sync_by)
                    .await
            }
            Err(_) => AfterCommand::NotRun,
        };
        clock.mark("sync");
        let finished = Utc::now();
        let (state, exit_code, oom_killed) = match &outcome {
            Ok(o) if o.result.timed_out => (
                JobState::TimedOut,
                Some(o.result.exit_code),
                o.result.oom_killed,
            ),
            Ok(o) => (
                JobState::Exited,
                Some(o.result.exit_code),
                o.result.oom_killed,
            ),
            Err(_) => (JobState::Failed, None, false),
        };
        tee.log_end(&outcome);
        if let Ok(done) = &mut outcome {
            done.result.exec_id = Some(tee.recorder.id().to_string());
            let runtime = self.runtime_of(&record);
            done.result.meta = Some(Box::new(exec_meta(
                runtime.as_ref(),
                &record,
                done.image_id.take(),
                done.exec_path,
            )));
        }
        let (container_id, oom_kills) = match &outcome {
            Ok(o) => (o.container_id.clone(), o.oom_kills),
            Err(_) => (None, None),
        };
        let unnoted = match &after {
            AfterCommand::Synced { unnoted, .. } => unnoted.as_ref(),
            _ => None,
        };
        // The exec's status file and the job's record are written at the same time: each
        // waits for its own fsync, and neither needs the other.
        let result_or_error = outcome
            .as_ref()
            .map(|done| &done.result)
            .map_err(ToString::to_string);
        let recorder = &mut tee.recorder;
        let updated = std::thread::scope(|scope| {
            let finishing = scope.spawn(move || recorder.finish(result_or_error));
            // As lazily as `running`: the exec's result is durable in its status file, and a
            // crash within the next journal commit leaves the record as during the exec.
            let updated = self.store.update_lazily(&record.id, |r| {
                // A concurrent rm may have moved the job on; the exec result still gets
                // recorded.
                let _ = r.transition(state, finished);
                r.exit_code = exit_code.or(r.exit_code);
                r.oom_killed = oom_killed;
                if let Some(id) = container_id {
                    r.container_id = Some(id);
                }
                if let Some(count) = oom_kills {
                    r.oom_kills = count;
                }
                if let Some(synced) = unnoted {
                    super::sync::note_sync(r, synced, finished);
                }
            });
            finishing
                .join()
                .expect("recording an exec's end does not panic");
            updated
        });
        updated?;
        clock.mark("record");
        if let Some(synced) = unnoted {
            self.announce_sync(&record, synced);
        }
        let (sync_ms, sync) = match &after {
            AfterCommand::NotRun => (None, None),
            AfterCommand::Unchanged => (None, Some("unchanged")),
            AfterCommand::Synced { ms, failed, .. } => {
                (Some(*ms), Some(if *failed { "failed" } else { "synced" }))
            }
        };
        let entry = AuditEntry {
            command: &options.cmd,
            started_at,
            duration_ms: u64::try_from((finished - started_at).num_milliseconds()).unwrap_or(0),
            exit_code,
            timed_out: state == JobState::TimedOut,
            oom_killed,
            truncated: outcome.as_ref().is_ok_and(|o| o.result.truncated),
            error: outcome.as_ref().err().map(ToString::to_string),
            sync_ms,
            sync,
        };
        self.append_audit(&record.id, &entry)?;
        self.emit(
            EventKind::ExecFinished,
            Some(&record.id),
            Some(state),
            serde_json::json!({
                "exec": tee.recorder.id(),
                "command": options.cmd,
                "exit_code": exit_code,
                "timed_out": entry.timed_out,
                "oom_killed": oom_killed,
                "duration_ms": entry.duration_ms,
                "sync_error": outcome.as_ref().ok().and_then(|o| o.result.sync_error.clone()),
                "meta": outcome.as_ref().ok().and_then(|o| o.result.meta.clone()),
            }),
        );
        clock.mark("log");
        // `push: on-sync`: after the exec's own bookkeeping, so a slow remote never delays
        // what the exec recorded; its failure is the push's (an event), never the exec's.
        if record.push == crate::config::PushPolicy::OnSync
            && matches!(after, AfterCommand::Synced { failed: false, .. })
        {
            self.push_after_sync(&record).await;
            clock.mark("push");
        }
        clock.log(&record.id, "exec");
        Ok(outcome?.result)
    }

    /// Brings the branch out after a command that ran, by `deadline`: through the
    /// piggybacked sync when it reported, else with a sync of its own. A failure goes into
    /// `result.sync_error`.
    async fn sync_after(
        &self,
        record: &JobRecord,
        piggyback: Option<Piggyback>,
        result: &mut ExecResult,
        deadline: std::time::Instant,
    ) -> AfterCommand {
        let started = std::time::Instant::now();
        let finished = match piggyback {
            Some(piggyback) => self.finish_piggyback(record, piggyback, deadline).await,
            None => Piggybacked::Missing,
        };
        let (outcome, in_sandbox_ms, unnoted) = match finished {
            Piggybacked::Unchanged => return AfterCommand::Unchanged,
            Piggybacked::Synced(outcome, sandbox_ms) => {
                // The sync ran inside the exec: its time is not the command's. (Its time comes
                // from files the agent can touch: never more than the exec took.)
                let sandbox_ms = sandbox_ms.min(result.duration_ms);
                result.duration_ms -= sandbox_ms;
                let error = outcome.as_ref().err().map(ToString::to_string);
                (error, sandbox_ms, Some(outcome))
            }
            // `sync_job` notes its outcome on the job itself.
            Piggybacked::Missing => {
                let synced = self
                    .sync_job_by(record, SyncScope::Branch, Some(deadline))
                    .await;
                (synced.err().map(|e| e.to_string()), 0, None)
            }
        };
        let failed = outcome.is_some();
        result.sync_error = outcome;
        AfterCommand::Synced {
            ms: crate::units::millis(started.elapsed()) + in_sandbox_ms,
            failed,
            unnoted,
        }
    }

    /// The job's output log (`logs/<job>/output.log`), opened for appending; none when it
    /// cannot be (the exec goes on without it).
    pub(super) fn open_output_log(&self, id: &JobId) -> Option<super::output_log::OutputLog> {
        super::output_log::OutputLog::open(
            &self.home.logs_dir(id),
            super::output_log::OUTPUT_LOG_CAP,
        )
    }

    pub(super) fn append_audit(&self, id: &JobId, entry: &AuditEntry<'_>) -> Result<()> {
        use std::io::Write;
        let path = self.home.logs_dir(id).join("exec.jsonl");
        let mut line = serde_json::to_vec(entry).expect("audit entries serialize");
        line.push(b'\n');
        std::fs::create_dir_all(self.home.logs_dir(id))
            .and_then(|()| {
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
            })
            .and_then(|mut file| file.write_all(&line))
            .map_err(|source| Error::Log {
                id: id.clone(),
                path,
                source,
            })
    }

    /// Stops what runs in a job (its container) with a bounded grace; true when something was
    /// running. The job stays; the next exec starts the container again.
    pub async fn stop(&self, id: &str, grace: Option<std::time::Duration>) -> Result<bool> {
        // A frozen process cannot act on the TERM that asks it to end.
        let record = self.thaw(self.load(id)?).await?;
        let grace = grace.unwrap_or(record.limits.grace.0);
        let stopped = self.runtime_of(&record).stop(&record, grace).await?;
        self.stop_port_relay(&record).await;
        if record.state == JobState::Running {
            self.store
                .update(&record.id, |r| r.transition(JobState::Failed, Utc::now()))?
                .1?;
        }
        // What the stopped processes committed, up to their last moment, reaches the
        // repository (a failure is recorded on the job, and the stop still stands).
        if stopped && !record.is_legacy() {
            let _ = self.sync_job(&record, SyncScope::Branch).await;
        }
        Ok(stopped)
    }

    /// An interactive shell in the job: in its container (started if needed) or, for the
    /// process runtime, in its worktree. Returns the shell's exit code.
    pub async fn shell(&self, id: &str) -> Result<i32> {
        let record = self.load(id)?;
        // As before an exec: a container started since runs its postStartCommand first.
        self.post_start(&mut record.clone(), false).await?;
        self.ensure_port_relay(&record).await?;
        let mut command = self.runtime_of(&record).shell_command(&record).await?;
        let status = command
            .status()
            .await
            .map_err(|source| RuntimeError::Spawn {
                program: "shell".into(),
                dir: record.worktree.clone(),
                source,
            })?;
        self.store
            .update(&record.id, |r| r.last_activity_at = Utc::now())?;
        if !record.is_legacy()
            && let Err(error) = self.sync_job(&record, SyncScope::Branch).await
        {
            eprintln!("paddock: {}", crate::text::block(&error.to_string()));
        }
        Ok(status.code().unwrap_or(1))
    }

    /// The job's output log: every exec's command, output and exit.
    pub fn output_log(&self, id: &str) -> Result<PathBuf> {
        let record = self.load(id)?;
        Ok(self.home.logs_dir(&record.id).join("output.log"))
    }
}
