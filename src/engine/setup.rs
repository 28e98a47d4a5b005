//! A new job's own preparation, the last steps of `create` before `ready`: the untracked
//! files of `copy` (see `copy_files`) and the `setup` commands.
//!
//! Each setup command runs with `sh -c` through the runtime's exec, as `paddock exec` runs
//! one (an exec id, its output kept under `logs/<job>/execs/`, a line in the job's audit and
//! output logs), in the job's container (or, for the process runtime, as a child process in
//! its checkout), but without a state change or a sync: the job stays `creating` until the
//! last command ended, so no exec can start before setup is done. The results are kept in
//! the record (`setup`). A failed command (non-zero exit, timeout, or paddock could not run
//! it) stops the setup; without `setup_optional` it fails the create, which `create`'s
//! rollback then undoes whole, with the command's output in the error.
//!
//! Seam for a setup-only network (`setup_network`): today every command runs with the job's
//! own network through the one `Runtime::exec` call in `setup_one`; a setting for it belongs
//! in `config::JobSetup` (resolved per profile like the rest), and the call is where a
//! runtime would run the command elsewhere (`exec_beside` with that network).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;

use super::exec::{AuditEntry, TeeSink};
use super::execs::ExecRecorder;
use super::{Error, Paddock, Result};
use crate::config::JobSetup;
use crate::git::jobdir::JobGitDir;
use crate::job::{JobRecord, SETUP_OUTPUT_CAP, SetupRun};
use crate::output::{Discard, ExecResult};
use crate::runtime::ExecRequest;

impl Paddock {
    /// Copies the `copy` entries from the user's checkout into the job's and keeps them
    /// (with the cache paths already placed) out of git through the job's `info/exclude`.
    pub(super) fn place_copies(
        &self,
        record: &mut JobRecord,
        setup: &JobSetup,
        job_git: &JobGitDir,
    ) -> Result<()> {
        if !setup.copy.is_empty() {
            let owner = self.runtime_of(record).files_owner(record);
            record.copied =
                crate::copy_files::copy_into(&record.repo, &record.worktree, &setup.copy, owner)?;
        }
        Ok(job_git.add_excludes(&crate::copy_files::exclude_patterns(&record.copied))?)
    }

    /// Runs the setup commands in order (see the module docs); the record keeps each one's
    /// [`SetupRun`]. Err only for a failed command that is not optional.
    pub(super) async fn run_setup(&self, record: &mut JobRecord, setup: &JobSetup) -> Result<()> {
        let timeout = setup.timeout.unwrap_or(record.limits.timeout.0);
        let mut failed = None;
        for command in &setup.commands {
            if let Some(earlier) = &failed {
                record.setup.push(SetupRun {
                    command: command.clone(),
                    ok: false,
                    result: None,
                    error: Some(format!("not run: the setup command `{earlier}` failed")),
                });
                continue;
            }
            let (run, log) = self.setup_one(record, command, timeout).await;
            if !run.ok {
                if !setup.optional {
                    return Err(setup_failed(record, &run, timeout, log));
                }
                failed = Some(command.clone());
            }
            record.setup.push(run);
            self.store.save(record)?;
        }
        Ok(())
    }

    /// One setup command; also the file that keeps its whole output.
    async fn setup_one(
        &self,
        record: &mut JobRecord,
        command: &str,
        timeout: Duration,
    ) -> (SetupRun, std::path::PathBuf) {
        let cmd = vec!["sh".to_string(), "-c".to_string(), command.to_string()];
        let request = ExecRequest {
            cmd: cmd.clone(),
            env: BTreeMap::new(),
            workdir: None,
            timeout,
            kill_policy: record.limits.kill_policy,
            grace: record.limits.grace.0,
            output_cap: SETUP_OUTPUT_CAP,
            after: None,
        };
        let execs = self.home.execs_dir(&record.id);
        let recorder = ExecRecorder::start(&execs, &record.id, &cmd, timeout + request.grace);
        let log = execs.join(format!("{}.ndjson", recorder.id()));
        let mut discard = Discard;
        let mut tee = TeeSink {
            inner: &mut discard,
            recorder,
            log: self.open_output_log(&record.id),
        };
        let started_at = Utc::now();
        tee.log_start(started_at, &cmd);
        let mut outcome = self
            .runtime_of(record)
            .exec(record, &request, &mut tee)
            .await;
        tee.log_end(&outcome);
        if let Ok(done) = &mut outcome {
            done.result.exec_id = Some(tee.recorder.id().to_string());
            if let Some(id) = done.container_id.take() {
                record.container_id = Some(id);
            }
            if let Some(count) = done.oom_kills {
                record.oom_kills = count;
            }
        }
        match &outcome {
            Ok(done) => tee.recorder.finish(Ok(&done.result)),
            Err(error) => tee.recorder.finish(Err(error.to_string())),
        }
        let result = outcome.as_ref().ok().map(|o| &o.result);
        let entry = AuditEntry {
            command: &cmd,
            started_at,
            duration_ms: u64::try_from((Utc::now() - started_at).num_milliseconds()).unwrap_or(0),
            exit_code: result.map(|r| r.exit_code),
            timed_out: result.is_some_and(|r| r.timed_out),
            oom_killed: result.is_some_and(|r| r.oom_killed),
            truncated: result.is_some_and(|r| r.truncated),
            error: outcome.as_ref().err().map(ToString::to_string),
            sync_ms: None,
        };
        if let Err(error) = self.append_audit(&record.id, &entry) {
            tracing::warn!(job = %record.id, %error, "cannot append the setup command to the audit log");
        }
        let run = match outcome {
            Ok(done) => SetupRun {
                command: command.to_string(),
                ok: done.result.exit_code == 0 && !done.result.timed_out,
                result: Some(done.result),
                error: None,
            },
            Err(error) => SetupRun {
                command: command.to_string(),
                ok: false,
                result: None,
                error: Some(error.to_string()),
            },
        };
        (run, log)
    }
}

/// The error of a failed setup command that is not optional: its outcome and its output.
fn setup_failed(
    record: &JobRecord,
    run: &SetupRun,
    timeout: Duration,
    log: std::path::PathBuf,
) -> Error {
    let mut output = String::new();
    if let Some(ExecResult { stdout, stderr, .. }) = &run.result {
        for (name, text) in [("stderr", stderr), ("stdout", stdout)] {
            if !text.trim().is_empty() {
                output.push_str(&format!("\n--- {name} ---\n{}", text.trim_end()));
            }
        }
    }
    Error::SetupFailed {
        id: record.id.clone(),
        command: run.command.clone(),
        outcome: match &run.result {
            Some(result) if result.timed_out => {
                format!("timed out after {}", crate::units::HumanDuration(timeout))
            }
            _ => run.outcome(),
        },
        output,
        log,
    }
}
