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
//! The network setup has (`setup_network`, `setup_allow`; [`SetupPlace`]): by default the
//! job's own, in the job's container. `none` or `open` different from the job's: each command
//! runs in a throwaway container beside the job's (same image, mounts, user and limits; its
//! own network; `Runtime::exec_beside`), so what setup leaves in the workspace and caches
//! stays and the job's container never had that network; processes and HOME do not stay.
//! `allowlist` (an `allowlist` job only): in the job's container, its proxy's policy widened
//! by `setup_allow` for the setup and put back before the job is `ready` (a failure to put
//! it back fails the create). The process runtime isolates no network: there the setting
//! changes nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;

use super::exec::{AuditEntry, TeeSink};
use super::execs::ExecRecorder;
use super::{Error, Paddock, Result};
use crate::config::{JobSetup, NetworkMode};
use crate::egress::AllowEntry;
use crate::git::jobdir::JobGitDir;
use crate::job::{JobRecord, SETUP_OUTPUT_CAP, SetupRun};
use crate::output::{Discard, ExecResult};
use crate::runtime::ExecRequest;

/// Where and with which network the setup commands run.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum SetupPlace {
    /// In the job's container, with its own network.
    Job,
    /// In a throwaway container beside the job's, with this network (`none` or `open`).
    Beside(NetworkMode),
    /// In the job's container, its allow-list widened by these entries during setup.
    Widened(Vec<AllowEntry>),
}

impl SetupPlace {
    /// The place for `setup` in a job whose network is `network`; refuses an `allowlist`
    /// setup in a job without the proxy that enforces it (checked before anything is made).
    pub(super) fn of(setup: &JobSetup, network: NetworkMode) -> Result<SetupPlace> {
        let wanted = setup
            .network
            .or((!setup.allow.is_empty()).then_some(NetworkMode::Allowlist));
        match wanted {
            None => Ok(SetupPlace::Job),
            Some(NetworkMode::Allowlist) if network == NetworkMode::Allowlist => {
                if setup.allow.is_empty() {
                    Ok(SetupPlace::Job)
                } else {
                    Ok(SetupPlace::Widened(setup.allow.clone()))
                }
            }
            Some(NetworkMode::Allowlist) => Err(Error::Network {
                network,
                reason: "`setup_network: allowlist` (or `setup_allow`) needs a job whose network is `allowlist` (its proxy enforces the list); use `setup_network: open`, or `network: allowlist` for the job".into(),
            }),
            Some(wanted) if wanted == network => Ok(SetupPlace::Job),
            Some(wanted) => Ok(SetupPlace::Beside(wanted)),
        }
    }
}

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
            let owner = self.runtime_of(record).layout().files_owner(record);
            record.copied =
                crate::copy_files::copy_into(&record.repo, &record.worktree, &setup.copy, owner)?;
        }
        Ok(job_git.add_excludes(&crate::copy_files::exclude_patterns(&record.copied))?)
    }

    /// Runs the setup commands in order (see the module docs); the record keeps each one's
    /// [`SetupRun`]. Err only for a failed command that is not optional.
    pub(super) async fn run_setup(&self, record: &mut JobRecord, setup: &JobSetup) -> Result<()> {
        if setup.commands.is_empty() {
            return Ok(());
        }
        let place = SetupPlace::of(setup, record.limits.network)?;
        if let SetupPlace::Widened(extra) = &place {
            let mut widened = record.clone();
            widened.limits.allow.extend(extra.iter().cloned());
            crate::runtime::apply_network(self.runtime_of(record).as_ref(), &widened).await?;
        }
        let ran = self.run_setup_commands(record, setup, &place).await;
        if matches!(place, SetupPlace::Widened(_)) {
            // The agent never gets setup's list: a failure to narrow it again fails the create,
            // and tunnels setup opened (a process it left running could hold one) are cut.
            let runtime = self.runtime_of(record);
            crate::runtime::apply_network(runtime.as_ref(), record).await?;
            crate::runtime::cut_connections(runtime.as_ref(), record).await?;
        }
        ran
    }

    async fn run_setup_commands(
        &self,
        record: &mut JobRecord,
        setup: &JobSetup,
        place: &SetupPlace,
    ) -> Result<()> {
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
            let (run, log) = self.setup_one(record, command, timeout, place).await;
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
    pub(super) async fn setup_one(
        &self,
        record: &mut JobRecord,
        command: &str,
        timeout: Duration,
        place: &SetupPlace,
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
            stdin: Default::default(),
            user: None,
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
        let runtime = self.runtime_of(record);
        let mut outcome = match place {
            SetupPlace::Beside(network) => {
                crate::runtime::exec_beside(runtime.as_ref(), record, &request, &mut tee, *network)
                    .await
            }
            SetupPlace::Job | SetupPlace::Widened(_) => {
                runtime.exec(record, &request, &mut tee).await
            }
        };
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
            sync: None,
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
pub(super) fn setup_failed(
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

/// What a new job runs at create: its profile's setup commands, then its devcontainer's
/// lifecycle commands. Outside a sandbox (the process runtime) nothing a repository's
/// untrusted files ask runs: its `.paddock.yaml` setup and the devcontainer's commands are
/// left out, and the returned warning (added to `warning`) says so.
pub(super) fn commands_of(
    config: &crate::config::Config,
    record: &crate::job::JobRecord,
    sandboxed: bool,
    warning: Option<String>,
) -> (crate::config::JobSetup, Option<String>) {
    let mut setup = config.job_setup_where(&record.profile, sandboxed);
    let mut warning = warning;
    if !sandboxed && crate::config::setup_from_untrusted_repo(config, &record.profile) {
        warning = join_warnings(
            warning,
            Some(format!(
                "the setup commands of the repository's untrusted {} were not run: a process-runtime job has no sandbox (`paddock trust REPO` runs them)",
                crate::config::REPO_CONFIG_FILE
            )),
        );
    }
    let trusted = config
        .repo_trust
        .as_ref()
        .is_none_or(|trust| trust.trusted_by.is_some());
    if let Some(devcontainer) = &record.devcontainer
        && (sandboxed || trusted)
    {
        setup.commands.extend(devcontainer.setup.iter().cloned());
    }
    (setup, warning)
}

/// Both warnings, a line apart, or the one there is.
pub(super) fn join_warnings(first: Option<String>, second: Option<String>) -> Option<String> {
    match (first, second) {
        (Some(a), Some(b)) => Some(format!("{a}\n{b}")),
        (a, b) => a.or(b),
    }
}
