//! The sync operation: brings a job's branch, and when asked a snapshot of its uncommitted
//! work, out of its sandbox into the user's repository (see `git::sync` for the protocol).
//!
//! It runs after every exec (in the exec's own sandbox session, and not at all when the
//! sandbox reports the branch where the host last synced it: see `piggyback`) and, always in
//! full, before `show`, `diff`, `log`, `rm` and each sweep removal.
//! A sync that fails leaves the user's refs where they were, records why on the job
//! (`sync_error`, shown by `show`) and emits `job.sync_failed`; the next good one clears it.
//! A history rewrite of the job's own branch inside (amend, rebase) is published as a forced
//! update of that branch only, and emits `job.branch_rewritten`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::{Error, Paddock, Result};
use crate::config::KillPolicy;
use crate::git::GitRepo;
use crate::git::scratch::ScratchRepo;
use crate::git::sync::{
    Received, SCRATCH_BRANCH, SCRATCH_STATE, SYNC_SCRIPT, SyncCapture, WorkState,
};
use crate::job::JobRecord;
use crate::runtime::ExecRequest;
use crate::store::FileLock;
use crate::wire::EventKind;

/// How long the sandbox half of a sync may take (a snapshot hashes every changed file).
const SYNC_TIMEOUT: Duration = Duration::from_secs(600);
/// How long to wait for another sync of the same job.
const SYNC_LOCK_WAIT: Duration = Duration::from_secs(660);

/// What a sync brings out of the sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncScope {
    /// The job's branch only (after an exec).
    Branch,
    /// The branch and a snapshot of uncommitted work (for reads and removal).
    BranchAndWork,
    /// The branch and a checkpoint: the snapshot's commit also holds the index and the
    /// `copy` files, and the sandbox refuses what it cannot save whole (`checkpoint`).
    Checkpoint,
}

/// What a sync found.
#[derive(Debug, Clone)]
pub struct Synced {
    /// The branch's commit inside, if the branch exists there.
    pub tip: Option<String>,
    /// The uncommitted work (a snapshot commit in the scratch repository).
    pub work: WorkState,
    /// Paths that were untracked inside.
    pub untracked: BTreeSet<String>,
    /// The untracked list was over its cap and not read (see `Received::untracked_cut`).
    pub untracked_cut: bool,
    /// The branch was rewritten (not a fast-forward of what the user's repository had).
    pub forced: bool,
    /// The pack this sync indexed into the scratch repository, if one came.
    pub pack: Option<std::path::PathBuf>,
    /// The commits the sandbox was told the host has, which the pack leaves out (the
    /// job's base, the known tip and snapshot; set by a sync that planned its own round).
    pub left_out: Vec<String>,
}

/// The sandbox half of a sync, ready to run, and what the host knew when it was made.
pub(super) struct SyncPlan {
    /// The script's arguments (see `sync.sh`).
    pub(super) args: Vec<String>,
    pub(super) env: Vec<(String, String)>,
    /// The branch's tip as the host has it (the scratch repository's, else the user's).
    pub(super) known_tip: Option<String>,
    /// The last snapshot the scratch repository received.
    pub(super) known_state: Option<String>,
    /// On a job's first sync: the user's tip of the branch, which the scratch repository
    /// takes as its own before it receives anything (see [`Paddock::prepare_scratch`]).
    seed: Option<String>,
    /// The user's object store, which the scratch repository borrows.
    user_objects: std::path::PathBuf,
}

/// What a checkpoint's sandbox half is told besides the arguments: the most its changed files
/// may take, and the `copy` files it keeps although they are ignored.
fn checkpoint_env(record: &JobRecord, scope: SyncScope) -> Vec<(String, String)> {
    if scope != SyncScope::Checkpoint {
        return Vec::new();
    }
    vec![
        (
            "PADDOCK_CHECKPOINT_MAX".into(),
            crate::git::sync::MAX_CHECKPOINT_BYTES.to_string(),
        ),
        ("PADDOCK_CHECKPOINT_COPY".into(), record.copied.join("\n")),
    ]
}

/// `most`, or what is left until `deadline` when that is sooner.
fn left_of(deadline: Option<Instant>, most: Duration) -> Duration {
    deadline.map_or(most, |d| {
        most.min(d.saturating_duration_since(Instant::now()))
    })
}

/// Writes a sync's outcome into the job's record: its error, or when it last succeeded.
pub(super) fn note_sync(record: &mut JobRecord, outcome: &Result<Synced>, now: DateTime<Utc>) {
    match outcome {
        Ok(_) => {
            record.sync_error = None;
            record.synced_at = Some(now);
        }
        Err(error) => record.sync_error = Some(error.to_string()),
    }
}

impl Paddock {
    /// The scratch repository that receives a job's syncs.
    pub(crate) fn scratch_of(&self, record: &JobRecord) -> ScratchRepo {
        ScratchRepo {
            path: self.home().job_scratch_repo(&record.id),
        }
    }

    pub(crate) fn repo_of(&self, record: &JobRecord) -> GitRepo {
        GitRepo::known(
            record.repo.clone(),
            record.git_common_dir.clone(),
            &self.home().locks_dir(),
        )
    }

    /// Syncs a job (see the module docs), recording the outcome on the job.
    pub async fn sync_job(&self, record: &JobRecord, scope: SyncScope) -> Result<Synced> {
        self.sync_job_by(record, scope, None).await
    }

    /// [`Paddock::sync_job`], given up at `deadline` when one is given (an exec's sync:
    /// the wait for the job's sync lock and the sandbox half both end by it), else within
    /// the usual waits.
    pub(super) async fn sync_job_by(
        &self,
        record: &JobRecord,
        scope: SyncScope,
        deadline: Option<Instant>,
    ) -> Result<Synced> {
        if record.is_legacy() {
            return Err(Error::Legacy {
                id: record.id.clone(),
            });
        }
        // A frozen sandbox runs nothing, a sync's half inside it included (a stopped VM
        // would not even answer): what was last synced stands, and it is no failed sync.
        if let Some(since) = record.paused_at {
            return Err(Error::Paused {
                id: record.id.clone(),
                since,
            });
        }
        let outcome = self.sync_unrecorded(record, scope, deadline).await;
        self.record_sync(record, &outcome);
        outcome
    }

    /// Notes a sync's outcome on the job and tells subscribers about failures and rewrites.
    pub(super) fn record_sync(&self, record: &JobRecord, outcome: &Result<Synced>) {
        let _ = self
            .store()
            .update(&record.id, |r| note_sync(r, outcome, Utc::now()));
        self.announce_sync(record, outcome);
    }

    /// Tells subscribers about a sync that failed or rewrote the branch.
    pub(super) fn announce_sync(&self, record: &JobRecord, outcome: &Result<Synced>) {
        match outcome {
            Ok(synced) if synced.forced => self.emit(
                EventKind::BranchRewritten,
                Some(&record.id),
                None,
                serde_json::json!({ "branch": record.branch, "tip": synced.tip }),
            ),
            Ok(_) => {}
            Err(error) => self.emit(
                EventKind::SyncFailed,
                Some(&record.id),
                None,
                serde_json::json!({ "error": error.to_string() }),
            ),
        }
    }

    /// The user's repository's own object store (the first of its object dirs).
    fn user_objects(record: &JobRecord) -> Result<std::path::PathBuf> {
        crate::git::object_dirs(&record.git_common_dir)
            .into_iter()
            .next()
            .ok_or_else(|| {
                Self::sync_failed(record, "the repository's object store is gone".into())
            })
    }

    pub(super) fn sync_failed(record: &JobRecord, message: String) -> Error {
        Error::Sync {
            id: record.id.clone(),
            message,
        }
    }

    /// Takes the job's sync lock, waiting at most `wait` for another sync of the job: one
    /// sync of a job touches its scratch repository at a time.
    pub(super) async fn sync_lock_for(
        &self,
        record: &JobRecord,
        wait: Duration,
    ) -> Result<FileLock> {
        let lock_path = self.home().job_dir(&record.id).join("sync.lock");
        Ok(
            tokio::task::spawn_blocking(move || FileLock::acquire(&lock_path, wait))
                .await
                .map_err(|e| Self::sync_failed(record, e.to_string()))??,
        )
    }

    /// What the sandbox half needs: what the host already has, and the script's arguments
    /// and environment. Writes nothing: a sync whose sandbox half finds nothing new never
    /// touches the scratch repository (see `piggyback`).
    pub(super) async fn plan_sync(&self, record: &JobRecord, scope: SyncScope) -> Result<SyncPlan> {
        let (git_dir, work_tree) = self
            .runtime_of(record)
            .layout()
            .git_paths(record)
            .ok_or_else(|| Self::sync_failed(record, "the job has no git dir yet".into()))?;
        let scratch = self.scratch_of(record);
        let user_objects = Self::user_objects(record)?;
        let (mut known_tip, known_state) = scratch.known().await?;
        let mut seed = None;
        if known_tip.is_none()
            && let Some(tip) = self
                .repo_of(record)
                .ref_target(&format!("refs/heads/{}", record.branch))
                .await?
        {
            // The first sync starts from what the user's repository has for the branch, so a
            // branch the sandbox cannot resolve still reads as the last good tip.
            seed = Some(tip.clone());
            known_tip = Some(tip);
        }
        let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        Ok(SyncPlan {
            args: vec![
                record.branch.clone(),
                dash(&known_tip),
                dash(&known_state),
                match scope {
                    SyncScope::Branch => "0",
                    SyncScope::BranchAndWork => "1",
                    SyncScope::Checkpoint => "2",
                }
                .into(),
                record.base_commit.clone(),
                user_objects.display().to_string(),
            ],
            env: vec![
                ("GIT_DIR".into(), git_dir.display().to_string()),
                ("GIT_WORK_TREE".into(), work_tree.display().to_string()),
                ("GIT_CONFIG_NOSYSTEM".into(), "1".into()),
                ("GIT_CONFIG_GLOBAL".into(), "/dev/null".into()),
                ("GIT_TERMINAL_PROMPT".into(), "0".into()),
                ("LC_ALL".into(), "C".into()),
            ]
            .into_iter()
            .chain(checkpoint_env(record, scope))
            .collect(),
            known_tip,
            known_state,
            seed,
            user_objects,
        })
    }

    /// Makes the scratch repository ready to receive what `plan`'s sandbox half sent: made
    /// if missing, and on a first sync pointed at the user's tip (unless a sync since did
    /// that). Called under the job's sync lock.
    pub(super) async fn prepare_scratch(&self, record: &JobRecord, plan: &SyncPlan) -> Result<()> {
        let scratch = self.scratch_of(record);
        scratch.ensure(&plan.user_objects).await?;
        if let Some(seed) = &plan.seed
            && scratch.known().await?.0.is_none()
        {
            scratch.set_branch(seed).await?;
        }
        Ok(())
    }

    async fn sync_unrecorded(
        &self,
        record: &JobRecord,
        scope: SyncScope,
        deadline: Option<Instant>,
    ) -> Result<Synced> {
        let left = |most: Duration| left_of(deadline, most);
        let _lock = self.sync_lock_for(record, left(SYNC_LOCK_WAIT)).await?;
        self.sync_under_lock(record, scope, deadline).await
    }

    /// A sync's two halves, for a caller that holds the job's sync lock (a checkpoint keeps
    /// it until the snapshot it received is kept).
    pub(super) async fn sync_under_lock(
        &self,
        record: &JobRecord,
        scope: SyncScope,
        deadline: Option<Instant>,
    ) -> Result<Synced> {
        let left = |most: Duration| left_of(deadline, most);
        let plan = self.plan_sync(record, scope).await?;
        self.prepare_scratch(record, &plan).await?;
        let (known_tip, known_state) = (plan.known_tip.clone(), plan.known_state.clone());
        let mut cmd = vec![
            "sh".into(),
            "-c".into(),
            SYNC_SCRIPT.into(),
            "paddock-sync".into(),
        ];
        cmd.extend(plan.args);
        let hint = match scope {
            SyncScope::Checkpoint => self.changed_hint(record).await,
            SyncScope::Branch | SyncScope::BranchAndWork => None,
        };
        let mut request = ExecRequest {
            cmd,
            env: plan.env.into_iter().collect(),
            workdir: None,
            timeout: left(SYNC_TIMEOUT),
            kill_policy: KillPolicy::Hard,
            grace: Duration::ZERO,
            output_cap: 4096,
            after: None,
            stdin: Default::default(),
            user: None,
        };
        if let Some(hint) = hint {
            hint.apply(&mut request);
        }
        let bundle = self.incoming_bundle(record);
        let mut capture = SyncCapture::new(bundle.clone());
        let ran = self
            .runtime_of(record)
            .exec_in_sandbox(record, &request, &mut capture)
            .await;
        if capture.said(crate::git::sync::LOOKED_AT_CHANGES) {
            tracing::debug!(job = %record.id, "the sandbox looked only at the changed paths");
        }
        let received = match ran {
            Ok(result) if result.timed_out => Err(format!(
                "the sync did not finish within {}",
                crate::units::HumanDuration(request.timeout)
            )),
            Ok(result) => capture.finish(result.exit_code),
            Err(error) => Err(format!("the sandbox could not run the sync: {error}")),
        };
        let outcome = self.apply_sync(record, scope, received, deadline).await;
        let _ = std::fs::remove_file(&bundle);
        outcome.map(|mut synced| {
            synced.left_out = [
                Some(&record.base_commit),
                known_tip.as_ref(),
                known_state.as_ref(),
            ]
            .into_iter()
            .flatten()
            .cloned()
            .collect();
            synced
        })
    }

    /// The host half: the checked stream into the scratch repository, then the branch into
    /// the user's repository (the pack checked by `deadline`, when given).
    /// A branch-only sync (after an exec) hands the user's repository the pack it received
    /// and moves the ref; a sync with uncommitted work fetches only what the branch needs, so
    /// snapshot objects never land in the user's repository unless `rm` publishes them.
    pub(super) async fn apply_sync(
        &self,
        record: &JobRecord,
        scope: SyncScope,
        received: std::result::Result<Received, String>,
        deadline: Option<Instant>,
    ) -> Result<Synced> {
        let received = received.map_err(|message| Self::sync_failed(record, message))?;
        let mut clock = super::stage_clock::StageClock::start();
        let scratch = self.scratch_of(record);
        // The pack's check is the host's one long step: it too ends by the deadline.
        let limit = deadline.map_or(Duration::MAX, |d| {
            d.saturating_duration_since(Instant::now())
        });
        let pack = scratch.receive(&received, &record.branch, limit).await?;
        clock.mark("receive");
        let mut forced = false;
        if let Some(tip) = &received.header.tip {
            let branch_ref = format!("refs/heads/{}", record.branch);
            let repo = self.repo_of(record);
            let current = repo.ref_target(&branch_ref).await?;
            if current.as_ref() != Some(tip) {
                if let Some(current) = &current {
                    forced = !scratch.is_fast_forward(current, tip).await?;
                }
                clock.mark("compare");
                // Read before the user's store holds what this sync brings.
                let own = if record.is_legacy() {
                    None
                } else {
                    self.own_commits_of_sync(record, &scratch, tip, current.as_deref())
                        .await
                };
                clock.mark("own");
                let fast = match scope {
                    SyncScope::Branch => repo
                        .adopt_pack_and_set_ref(
                            pack.as_deref(),
                            &branch_ref,
                            tip,
                            current.as_deref(),
                        )
                        .await
                        .is_ok(),
                    SyncScope::BranchAndWork | SyncScope::Checkpoint => false,
                };
                if !fast {
                    repo.publish(&scratch.path, &[(SCRATCH_BRANCH, branch_ref)])
                        .await?;
                }
                clock.mark("publish");
                if !record.is_legacy() {
                    self.note_own_commits(record, own);
                }
                clock.mark("note");
            }
        }
        clock.log(&record.id, "sync");
        Ok(Synced {
            tip: received.header.tip.clone(),
            work: received.header.state.clone(),
            untracked: received.untracked,
            untracked_cut: received.untracked_cut,
            forced,
            pack,
            left_out: Vec::new(),
        })
    }

    /// Saves the uncommitted work of the last snapshot sync as `refs/paddock/wip/<id>` in the
    /// repository's wip store (see [`wip_store_of`](Self::wip_store_of)); returns the commit,
    /// or `None` when there was none.
    pub(crate) async fn publish_wip(
        &self,
        record: &JobRecord,
        synced: &Synced,
    ) -> Result<Option<String>> {
        let WorkState::Snapshot(commit) = &synced.work else {
            return Ok(None);
        };
        let wip_ref = format!("refs/paddock/wip/{}", record.id);
        self.ensure_wip_store(record)
            .await?
            .publish(&self.scratch_of(record).path, &[(SCRATCH_STATE, wip_ref)])
            .await?;
        Ok(Some(commit.clone()))
    }

    /// Where a repository's wip snapshots go: `$PADDOCK_HOME/wip/<repo-key>.git`, a bare
    /// repository of paddock's (0700) that borrows the user's objects through its
    /// alternates. Snapshots never land in the user's object store, which every job of the
    /// repository reads (as it was at the job's create), and this store is never mounted
    /// into a job. The user takes work back with `git fetch <store> refs/paddock/wip/<id>`.
    pub(crate) fn wip_store_of(&self, record: &JobRecord) -> std::path::PathBuf {
        self.home()
            .root()
            .join("wip")
            .join(format!("{}.git", record.repo_key))
    }

    /// The wip store as a repository to read, when it exists.
    pub(crate) fn wip_repo_of(&self, record: &JobRecord) -> Option<GitRepo> {
        let store = self.wip_store_of(record);
        store
            .join("objects")
            .is_dir()
            .then(|| GitRepo::known(store.clone(), store, &self.home().locks_dir()))
    }

    /// Makes the wip store if missing (in a temporary directory, renamed into place, so two
    /// removals at once never see half of one).
    pub(super) async fn ensure_wip_store(&self, record: &JobRecord) -> Result<GitRepo> {
        if let Some(repo) = self.wip_repo_of(record) {
            return Ok(repo);
        }
        let store = self.wip_store_of(record);
        let parent = store
            .parent()
            .expect("the wip store has a parent")
            .to_path_buf();
        let io = |path: &std::path::Path| {
            let path = path.to_path_buf();
            move |source| crate::store::StoreError::Io { path, source }
        };
        std::fs::create_dir_all(&parent).map_err(io(&parent))?;
        let user_objects = Self::user_objects(record)?;
        let tmp = parent.join(format!(".tmp-{}", crate::job::random_hex(8)));
        let made = ScratchRepo { path: tmp.clone() }
            .ensure(&user_objects)
            .await;
        let placed = made.map_err(Error::from).and_then(|()| {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o700))
                .map_err(io(&tmp))?;
            match std::fs::rename(&tmp, &store) {
                Ok(()) => Ok(()),
                // Another removal made it first.
                Err(_) if store.join("objects").is_dir() => Ok(()),
                Err(source) => Err(io(&store)(source).into()),
            }
        });
        let _ = crate::tree::remove_tree(&tmp);
        placed?;
        Ok(self
            .wip_repo_of(record)
            .expect("the wip store was just made"))
    }
}

impl Paddock {
    /// Where one sync's stream is captured: a name of its own in the job's directory, so
    /// a sync run in an exec's session (captured before it takes the job's sync lock) and
    /// a full sync of the same job (a `show`, a sweep) never write or remove each other's
    /// file (seen: a piggybacked bundle gone before it was read).
    pub(super) fn incoming_bundle(&self, record: &JobRecord) -> std::path::PathBuf {
        self.home()
            .job_dir(&record.id)
            .join(format!("incoming-{}.bundle", crate::ids::random_hex(8)))
    }
}
