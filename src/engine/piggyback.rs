//! The sync after an exec, run in the exec's own sandbox session, right after the command
//! (see `ExecRequest::after`): no second round trip to the sandbox, and, when the command
//! left the job's branch where the host last synced it, no sync at all.
//!
//! The snippet first looks at the branch with shell builtins only (no process is started):
//! the loose ref `refs/heads/<branch>` of the job's git dir, else its line in
//! `packed-refs`. When that names the tip the host already has (the scratch repository's,
//! else the user's), it writes `unchanged` to the job's outbox and ends. Otherwise it runs
//! `sync.sh` as any sync does, its stream into the outbox, and writes the script's exit code
//! and time. The host reads the outbox files as untrusted input (`outbox`: never through a
//! symlink, only regular files, capped before a byte is read, by the exec's deadline, on a
//! blocking thread); the stream goes through the same checks (`SyncCapture`, fsck'd
//! bundle) as every sync.
//!
//! Why a lying "unchanged" costs nothing but the sync the agent chose to hide: the agent
//! controls the sandbox, so it can always forge the report (it can read the outbox name
//! from the wrapper's command line and write the files, or point the ref file at the old
//! tip while git resolves another). But the report only ever *skips* work: the host then
//! changes nothing (no ref, no record, no `synced_at`), so what it knows as synced stays the
//! last tip that came through a checked stream. Every later sync compares the sandbox's
//! branch with that tip again: the next exec's check, and the full syncs of `stop`, `show`,
//! `diff`, `log`, `rm`, `merge`, `apply` and the sweep, which never take this shortcut. A
//! commit hidden this way is brought out by the next of them, as a commit made by a
//! background process after the exec ended is. The check compares with the host's tip
//! rather than with the branch before the command, so such commits are caught too.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::outbox::{capture_sync, sync_files};
use super::sync::SyncPlan;
use super::{Paddock, Result, SyncScope, Synced};
use crate::git::sync::{SYNC_SCRIPT, SyncCapture};
use crate::job::JobRecord;

/// What the snippet writes to `<name>.rc` when the branch is where the host has it.
const UNCHANGED: &str = "unchanged";

/// `sync.sh`'s exit code when `git pack-objects` failed.
const PACK_FAILED: i64 = 78;

/// A branch sync prepared to run after an exec's command.
pub(crate) struct Piggyback {
    /// The shell snippet the runtime runs after the command.
    pub snippet: String,
    /// The host path of the outbox files, without their extension.
    host_base: PathBuf,
    plan: SyncPlan,
    /// The script was handed the tip and resolved nothing: a failure may be a commit the
    /// host took as present that the job's git dir lacks, so the exec syncs again in full.
    fast: bool,
}

/// How a piggybacked sync ended.
pub(crate) enum Piggybacked {
    /// The sandbox reported the branch at the host's tip, and the user's repository has it
    /// there: nothing to sync, nothing recorded.
    Unchanged,
    /// The sync ran in the exec's session: its outcome (not yet noted on the job) and how
    /// long its sandbox half took (ms).
    Synced(Result<Synced>, u64),
    /// No usable report (the command was killed, say) or the user's branch moved: the
    /// caller syncs on its own.
    Missing,
}

/// Quotes `text` for `sh`.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// How long an exec waits for another sync of its job before its command (a `show` running a
/// snapshot sync, say): past it, the command runs without a piggybacked sync and the exec
/// syncs on its own afterwards, by its deadline.
const PLAN_LOCK_WAIT: Duration = Duration::from_secs(2);

/// How many lines of `packed-refs` the check reads (the shell's `read` takes a byte per
/// call): a job's git dir packs its branch and a few tags; a longer file means a full sync.
const PACKED_LINES: u32 = 32;

/// The shell that sets `_pd_t` to the branch's tip as the job's git dir at `git_dir` has
/// it, read with builtins only; empty when the refs are in any other shape (a symbolic or
/// symlinked ref, a `commondir` or `reftable` that git would follow, the branch past the
/// first lines of `packed-refs`): then the full sync runs, which asks git itself.
fn tip_check(git_dir: &str, branch: &str) -> String {
    let dir = quote(git_dir);
    let name = quote(&format!("refs/heads/{branch}"));
    format!(
        "_pd_t=; _pd_r={dir}/{name}; \
         if [ ! -e {dir}/commondir ] && [ ! -e {dir}/reftable ]; then \
           if [ -f \"$_pd_r\" ] && [ ! -L \"$_pd_r\" ]; then IFS= read -r _pd_t <\"$_pd_r\" || _pd_t=; \
           elif [ ! -e \"$_pd_r\" ] && [ ! -L \"$_pd_r\" ] && [ -f {dir}/packed-refs ]; then \
             _pd_i=0; \
             while [ $_pd_i -lt {PACKED_LINES} ] && read -r _pd_o _pd_n; do \
               if [ \"$_pd_n\" = {name} ]; then _pd_t=$_pd_o; break; fi; _pd_i=$((_pd_i + 1)); \
             done <{dir}/packed-refs; \
           fi; \
         fi"
    )
}

/// What the snippet left in `<name>.rc`.
#[derive(Debug, PartialEq, Eq)]
enum Report {
    Unchanged,
    /// The sync script's exit code.
    Ran(i64),
}

fn parse_report(bytes: &[u8]) -> Option<Report> {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    if text == UNCHANGED {
        return Some(Report::Unchanged);
    }
    text.parse::<i64>().ok().map(Report::Ran)
}

/// How long the sync script ran inside (ms): from the birth of its stream file (the shell
/// made it as the script started) to the last write of its exit code. Timestamps the agent
/// could set, so only ever used as the sync's share of the exec's reported duration; 0 when
/// the filesystem keeps no birth time.
fn sandbox_ms(stream: &Path, rc: &Path) -> u64 {
    let started = std::fs::symlink_metadata(stream).and_then(|m| m.created());
    let ended = std::fs::symlink_metadata(rc).and_then(|m| m.modified());
    match (started, ended) {
        (Ok(started), Ok(ended)) => ended
            .duration_since(started)
            .map_or(0, crate::units::millis),
        _ => 0,
    }
}

impl Paddock {
    /// Prepares a branch sync to run in the same sandbox session as an exec, right after its
    /// command. Its files go to the job's outbox (a host directory mounted at
    /// `/paddock/outbox`). `None` when the job's runtime has no outbox or the plan cannot be
    /// made (the exec then syncs on its own).
    pub(crate) async fn piggyback_sync(&self, record: &JobRecord) -> Option<Piggyback> {
        let outbox = record.outbox()?;
        let inside_outbox = self.runtime_of(record).layout().outbox()?;
        if record.is_legacy() || !outbox.is_dir() {
            return None;
        }
        let plan = {
            let _lock = self.sync_lock_for(record, PLAN_LOCK_WAIT).await.ok()?;
            self.plan_sync(record, SyncScope::Branch).await.ok()?
        };
        let name = crate::ids::random_hex(12);
        let inside = inside_outbox.join(&name);
        let out = |ext: &str| quote(&format!("{}.{ext}", inside.display()));
        // Prefix assignments rather than `env`: one process fewer.
        let mut sync = String::new();
        for (key, value) in &plan.env {
            sync.push_str(&format!("{key}={} ", quote(value)));
        }
        sync.push_str(&format!("sh -c {} paddock-sync", quote(SYNC_SCRIPT)));
        for arg in &plan.args {
            sync.push(' ');
            sync.push_str(&quote(arg));
        }
        // The script's time inside is read from the files' own times (see `sandbox_ms`), so
        // no `date` process runs.
        let redirected = |sync: &str| {
            format!(
                "{sync} >{} 2>{}; echo $? >{}",
                out("stream"),
                out("err"),
                out("rc")
            )
        };
        // A job whose last sync failed syncs in full, so a good one clears the error.
        let git_dir = plan.env.iter().find(|(key, _)| key == "GIT_DIR");
        let (snippet, fast) = match (&plan.known_tip, &record.sync_error, git_dir) {
            // The tip the check read goes to the script, which then resolves nothing
            // (`fast` in sync.sh).
            (Some(tip), None, Some((_, git_dir))) => (
                format!(
                    "{}; if [ \"$_pd_t\" = {} ]; then echo {UNCHANGED} >{}; else {}; fi",
                    tip_check(git_dir, &record.branch),
                    quote(tip),
                    out("rc"),
                    redirected(&format!("PADDOCK_SYNC_TIP=\"$_pd_t\" {sync}"))
                ),
                true,
            ),
            _ => (redirected(&sync), false),
        };
        Some(Piggyback {
            snippet,
            host_base: outbox.join(name),
            plan,
            fast,
        })
    }

    /// Finishes a piggybacked sync from the files its exec left in the outbox, by
    /// `deadline` (reads that pass it stop, and the sync fails). The outcome of a sync that
    /// ran is returned, not noted on the job: the exec writes it with the exec's own record
    /// update.
    pub(crate) async fn finish_piggyback(
        &self,
        record: &JobRecord,
        piggyback: Piggyback,
        deadline: Instant,
    ) -> Piggybacked {
        let file = |ext: &str| piggyback.host_base.with_extension(ext);
        let [_, _, rc] = sync_files(&piggyback.host_base);
        let report = tokio::task::spawn_blocking(move || rc.read())
            .await
            .ok()
            .and_then(Result::ok)
            .and_then(|bytes| parse_report(&bytes));
        let outcome = match report {
            None => Piggybacked::Missing,
            Some(Report::Unchanged) => self.confirm_unchanged(record, &piggyback.plan).await,
            // `pack-objects` failed in a fast sync: a commit the host took as present may be
            // gone from the job's git dir.
            Some(Report::Ran(PACK_FAILED)) if piggyback.fast => Piggybacked::Missing,
            Some(Report::Ran(rc)) => {
                let sandbox_ms = sandbox_ms(&file("stream"), &file("rc"));
                tracing::debug!(job = %record.id, sandbox_ms, "piggybacked sync ran");
                match self.apply_piggyback(record, &piggyback, rc, deadline).await {
                    // A stream that passed its checks and still failed to apply (the ref
                    // file named a tag, say): the full sync resolves what the fast one took
                    // as given. A stream refused at its checks stays refused.
                    (Err(error), true) if piggyback.fast => {
                        tracing::debug!(job = %record.id, %error, "the fast sync failed: syncing in full");
                        Piggybacked::Missing
                    }
                    (outcome, _) => Piggybacked::Synced(outcome, sandbox_ms),
                }
            }
        };
        let files = ["rc", "stream", "err"].map(file);
        let _ = tokio::task::spawn_blocking(move || {
            for file in files {
                let _ = std::fs::remove_file(file);
            }
        })
        .await;
        outcome
    }

    /// The sandbox says the branch is at the host's tip: nothing comes out of it. The user's
    /// repository must still have the branch there (a sync puts it back when it was moved
    /// or deleted on the host); when it does not, a full sync does that.
    async fn confirm_unchanged(&self, record: &JobRecord, plan: &SyncPlan) -> Piggybacked {
        let branch_ref = format!("refs/heads/{}", record.branch);
        match self.repo_of(record).ref_target(&branch_ref).await {
            Ok(current) if current.is_some() && current == plan.known_tip => Piggybacked::Unchanged,
            _ => Piggybacked::Missing,
        }
    }

    /// The host half of a sync that ran in the exec's session: its files read (capped, by
    /// `deadline`, on a blocking thread), then applied under the job's sync lock. Also
    /// whether the stream passed its checks (then a failure was the applying's).
    async fn apply_piggyback(
        &self,
        record: &JobRecord,
        piggyback: &Piggyback,
        rc: i64,
        deadline: Instant,
    ) -> (Result<Synced>, bool) {
        let [stream, stderr, _] = sync_files(&piggyback.host_base);
        let bundle = self.incoming_bundle(record);
        let capture_to = bundle.clone();
        let received = tokio::task::spawn_blocking(move || {
            let mut capture = SyncCapture::new(capture_to);
            capture_sync(&stream, &stderr, &mut capture, deadline);
            capture.finish(rc)
        })
        .await
        .unwrap_or_else(|error| Err(format!("reading the sync stream failed: {error}")));
        // A refused stream fails here, without waiting for the lock the deadline may not
        // leave time for.
        if let Err(message) = received {
            let _ = std::fs::remove_file(&bundle);
            return (Err(Self::sync_failed(record, message)), false);
        }
        let applying = std::time::Instant::now();
        let wait = deadline.saturating_duration_since(Instant::now());
        let outcome = match self.sync_lock_for(record, wait).await {
            Ok(_lock) => match self.prepare_scratch(record, &piggyback.plan).await {
                Ok(()) => {
                    self.apply_sync(record, SyncScope::Branch, received, Some(deadline))
                        .await
                }
                Err(error) => Err(error),
            },
            Err(error) => Err(error),
        };
        tracing::debug!(
            job = %record.id,
            host_ms = crate::units::millis(applying.elapsed()),
            "piggybacked sync applied"
        );
        let _ = std::fs::remove_file(&bundle);
        (outcome, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_are_read_strictly() {
        assert_eq!(parse_report(b"unchanged\n"), Some(Report::Unchanged));
        assert_eq!(parse_report(b"0\n"), Some(Report::Ran(0)));
        assert_eq!(parse_report(b"3\n"), Some(Report::Ran(3)));
        assert_eq!(parse_report(b"0 12\n"), None);
        assert_eq!(parse_report(b"unchanged 0\n"), None);
        assert_eq!(parse_report(b""), None);
    }

    /// Runs the tip check against a git dir laid out by hand; returns what it found.
    fn check(setup: impl FnOnce(&Path)) -> String {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("refs/heads/agent")).expect("mkdir");
        setup(dir.path());
        let script = format!(
            "{}; printf %s \"$_pd_t\"",
            tip_check(&dir.path().display().to_string(), "agent/x")
        );
        let output = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .expect("sh runs");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).expect("utf-8")
    }

    const A: &str = "0123456789abcdef0123456789abcdef01234567";
    const B: &str = "89abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn the_tip_check_reads_loose_then_packed_refs() {
        let loose = check(|dir| {
            std::fs::write(dir.join("refs/heads/agent/x"), format!("{A}\n")).expect("write")
        });
        assert_eq!(loose, A);
        let packed = check(|dir| {
            std::fs::write(
                dir.join("packed-refs"),
                format!("# pack-refs with: peeled fully-peeled sorted\n{B} refs/heads/agent/w\n^{A}\n{A} refs/heads/agent/x\n"),
            )
            .expect("write");
        });
        assert_eq!(packed, A);
        let both = check(|dir| {
            std::fs::write(dir.join("refs/heads/agent/x"), format!("{B}\n")).expect("write");
            std::fs::write(dir.join("packed-refs"), format!("{A} refs/heads/agent/x\n"))
                .expect("write");
        });
        assert_eq!(both, B, "a loose ref wins over packed-refs, as in git");
    }

    #[test]
    fn the_tip_check_gives_up_on_refs_git_would_read_elsewhere() {
        let symbolic = check(|dir| {
            std::fs::write(dir.join("refs/heads/agent/x"), "ref: refs/heads/main\n")
                .expect("write");
        });
        assert_ne!(symbolic, A);
        let symlinked = check(|dir| {
            std::fs::write(dir.join("tip"), format!("{A}\n")).expect("write");
            std::os::unix::fs::symlink(dir.join("tip"), dir.join("refs/heads/agent/x"))
                .expect("symlink");
        });
        assert_eq!(symlinked, "");
        let common = check(|dir| {
            std::fs::write(dir.join("refs/heads/agent/x"), format!("{A}\n")).expect("write");
            std::fs::write(dir.join("commondir"), "/elsewhere\n").expect("write");
        });
        assert_eq!(common, "");
        let missing = check(|_| {});
        assert_eq!(missing, "");
        let far = check(|dir| {
            let mut packed: String = (0..PACKED_LINES)
                .map(|i| format!("{B} refs/tags/t{i}\n"))
                .collect();
            packed.push_str(&format!("{A} refs/heads/agent/x\n"));
            std::fs::write(dir.join("packed-refs"), packed).expect("write");
        });
        assert_eq!(far, "", "a long packed-refs is git's to read");
        let quoted = {
            let dir = tempfile::tempdir().expect("temp dir");
            let odd = dir.path().join("it's a dir");
            std::fs::create_dir_all(odd.join("refs/heads")).expect("mkdir");
            std::fs::write(odd.join("refs/heads/b"), format!("{A}\n")).expect("write");
            let script = format!(
                "{}; printf %s \"$_pd_t\"",
                tip_check(&odd.display().to_string(), "b")
            );
            let output = std::process::Command::new("sh")
                .args(["-c", &script])
                .output()
                .expect("sh");
            String::from_utf8(output.stdout).expect("utf-8")
        };
        assert_eq!(quoted, A, "paths are quoted");
    }
}
