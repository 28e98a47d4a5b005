//! `create`: validate every input, reserve the id with an exclusive record write, then make
//! the branch, the private git dir, the checkout, the caches and the container, rolling all
//! of it back when a step fails. Failpoints let tests kill it between steps
//! (`PADDOCK_CRASH_AT`) and prove that a sweep cleans up each crash, or make a step fail
//! (`PADDOCK_FAIL_AT`) and prove that the rollback leaves nothing.

use std::collections::BTreeMap;

use chrono::Utc;

use super::failpoints::{crash_point, fail_point};
use super::{CreateRequest, Created, Error, Paddock, Result};
use crate::config::{CheckoutMode, NetworkMode, Profile, Source};
use crate::git::{self, GitRepo};
use crate::job::{JobId, JobRecord, JobState, Limits, RECORD_SCHEMA};
use crate::runtime::RuntimeError;
use crate::store::StoreError;
use crate::wire::EventKind;

impl Paddock {
    /// Refuses `branch` of the repository `repo_key` when a job holds it (as its own
    /// branch): another job's syncs, or a merge into it, would rewrite that job's work.
    pub(super) fn refuse_held_branch(&self, repo_key: &str, branch: &str) -> Result<()> {
        let (records, _) = self.store.list()?;
        match records
            .into_iter()
            .find(|r| r.repo_key == repo_key && r.branch == branch)
        {
            Some(holder) => Err(Error::BranchHeld {
                branch: branch.to_string(),
                job: holder.id,
            }),
            None => Ok(()),
        }
    }
}

/// Refuses `--allow` together with an explicit network other than `allowlist` (the
/// runtime's readiness check then says whether it can give the network at all).
fn check_network(request: &CreateRequest, network: NetworkMode) -> Result<()> {
    if !request.allow.is_empty() && network != NetworkMode::Allowlist {
        return Err(Error::Network {
            network,
            reason: "`--allow` needs `--network allowlist` (or no `--network`)".into(),
        });
    }
    Ok(())
}

/// The checkout a job of `profile` gets. Unset anywhere, it is `overlay` where that is
/// proven (`kernel_overlay`: kernel overlayfs, paddock is root) and the portable `worktree`
/// elsewhere. A disk limit needs the overlay checkout, and implies it unless some layer
/// asked for `worktree` (then the create is refused, before anything is reserved).
fn checkout_of(profile: &Profile, kernel_overlay: bool) -> Result<CheckoutMode> {
    let checkout = &profile.checkout;
    if checkout.source == Source::Default {
        return Ok(if kernel_overlay || profile.disk.is_some() {
            CheckoutMode::Overlay
        } else {
            CheckoutMode::Worktree
        });
    }
    if profile.disk.is_none() || checkout.value != CheckoutMode::Worktree {
        return Ok(checkout.value);
    }
    let set_by = match &checkout.source {
        Source::Default => return Ok(CheckoutMode::Overlay),
        Source::Flag(_) => "`--checkout worktree`".to_string(),
        Source::Env(var) => format!("`{var}=worktree`"),
        Source::UserFile(path) | Source::RepoFile(path) => {
            format!("`checkout: worktree` in `{}`", path.display())
        }
    };
    Err(crate::disk::DiskError::NeedsOverlay { set_by }.into())
}

/// The git disk a job of `profile` gets (`git_disk`): a container job without a disk limit,
/// where loop devices work (root); `None` elsewhere (a limit's disk holds the git dir; a
/// process job's agent runs on the host anyway; without root nothing can be capped).
fn git_disk_of(
    profile: &Profile,
    disk: Option<crate::units::ByteSize>,
    sandboxed: bool,
) -> Result<Option<crate::units::ByteSize>> {
    if disk.is_some() || !sandboxed || crate::disk::available().is_err() {
        return Ok(None);
    }
    let size = profile.git_disk.value;
    crate::disk::check_size("git_disk", size)?;
    Ok(Some(size))
}

impl Paddock {
    /// Creates a job: branch, worktree, and (with a container runtime) its container.
    pub async fn create(&self, request: CreateRequest) -> Result<Created> {
        self.create_for(request, None).await
    }

    /// [`create`](Self::create) for a client that may go away while the job is queued
    /// (`client` then changes or closes): its place is given up. Once admitted, the job is
    /// built to the end either way.
    #[expect(
        clippy::too_many_lines,
        reason = "create's steps in order, each rolled back on failure (issue 42 keeps the plan as a value)"
    )]
    pub async fn create_for(
        &self,
        request: CreateRequest,
        client: Option<super::ClientGone>,
    ) -> Result<Created> {
        let repo = GitRepo::open(&request.repo, &self.home.locks_dir()).await?;
        let config = self.config(Some(&repo.root))?;
        let agent = request.agent.clone().unwrap_or_else(|| "agent".to_string());
        let (profile_name, mut profile) =
            config.select_profile(request.profile.as_deref(), &agent, request.task.as_deref())?;
        profile.apply(
            &request.overrides(),
            &crate::config::Source::Flag("create".into()),
        );

        let id = match &request.id {
            // `pool-…` names warm pool slots (their containers and labels).
            Some(id) if id.starts_with("pool-") => {
                return Err(crate::job::JobError::InvalidId { id: id.clone() }.into());
            }
            Some(id) => JobId::parse(id)?,
            None => JobId::generate(request.task.as_deref().unwrap_or(&agent)),
        };
        let template = &config.branch_template.value;
        let mut branch = render_branch(template, &agent, request.task.as_deref(), &id);
        if request.from_checkpoint.is_some() && !branch.contains(id.as_str()) {
            // A fork's task is its source's: the template alone would name the source's
            // branch (and each sibling's) again.
            let suffix = id.as_str().rsplit('-').next().unwrap_or(id.as_str());
            branch = format!("{branch}-fork-{suffix}");
        }
        if !git::is_valid_branch_name(&branch) {
            return Err(Error::InvalidBranch {
                branch,
                template: template.clone(),
            });
        }
        let forked_from = request
            .from_checkpoint
            .as_deref()
            .map(super::fork::parse_from)
            .transpose()?;
        let base = match (&request.base, &forked_from) {
            (Some(base), _) => base.clone(),
            (None, Some(from)) => self.fork_base(&repo, from).await?,
            (None, None) => config
                .base
                .as_ref()
                .map_or_else(|| "HEAD".to_string(), |b| b.value.clone()),
        };
        let base_commit = repo.resolve_commit(&base).await?;
        let branch_exists = repo.branch_exists(&branch).await?;
        if branch_exists && !request.reuse_branch {
            return Err(Error::BranchExists {
                branch,
                repo: repo.root.clone(),
            });
        }
        // A reused branch is never one a job holds: its syncs would rewrite each other's work.
        if branch_exists {
            self.refuse_held_branch(&repo.key(), &branch)?;
        }
        if self.store.exists(&id) {
            return Err(StoreError::Exists { id }.into());
        }
        let repo_key = repo.key();
        let worktree = self.home.worktree_path(&repo_key, &id);
        if worktree.exists() {
            return Err(Error::WorktreeExists { path: worktree });
        }
        // Before anything is reserved: a bad devcontainer.json or a failed build leaves nothing.
        let devcontainer = self
            .devcontainer_env(
                &repo,
                &base_commit,
                &mut profile,
                &super::devcontainer::RepoAllowance {
                    trusted: crate::config::trusts_repo(&config, &repo.root),
                    images: &config.devcontainer_images,
                },
            )
            .await?;
        let secrets = crate::secrets::for_job(
            &config.secrets,
            config.egress.upstream_ca.as_ref(),
            &mut profile,
            &request.secrets,
        )?;
        check_network(&request, profile.network.value)?;
        let driver = crate::overlay::driver();
        let kernel_overlay = matches!(driver, Ok(crate::overlay::Driver::Kernel));
        let checkout = checkout_of(&profile, kernel_overlay)?;
        let disk = profile.disk.as_ref().map(|disk| disk.value);
        if let Some(limit) = disk {
            crate::disk::check_limit(limit)?;
            crate::disk::available()?;
        }
        let overlay_driver = match checkout {
            CheckoutMode::Overlay => Some(driver?),
            CheckoutMode::Worktree => None,
        };
        // A bad `copy` entry (missing, a link out of the repository) fails before anything
        // is reserved; the copy itself checks again.
        let setup = config.job_setup(&profile_name);
        super::setup::SetupPlace::of(&setup, profile.network.value)?;
        if !setup.copy.is_empty() {
            crate::copy_files::check_sources(&repo.root, &setup.copy)?;
        }
        let (engine, placed) = self
            .engine_of(&config, &request, (&id, &repo_key), &profile)
            .await?;
        let runtime = match &engine {
            Some(engine) => self.resolve_remote(engine, &profile).await?,
            None => {
                self.runtimes
                    .resolve(
                        profile.runtime.value,
                        &profile.image.value,
                        profile.network.value,
                    )
                    .await?
            }
        };
        let described = self.runtimes.of(runtime.kind).describe();
        super::ports::check_ports(&profile.ports.value, described.ports)?;
        check_root_layer(
            profile.rootfs.value,
            disk,
            runtime.kind,
            self.runtimes.of(runtime.kind).capabilities().other_users,
        )?;
        if !described.host_caches {
            refuse_host_caches(config.caches.value.iter().chain(&profile.caches.value))?;
        }
        if let Some(driver) = overlay_driver {
            crate::overlay::check_sandbox(driver, described.fuse_checkout)?;
        }
        // A reserve above a limit is refused before anything is reserved.
        let reserve = profile.reserve()?;
        // A remote job's files are volumes of its engine: no disk of the host's.
        let git_disk = match engine {
            Some(_) => None,
            None => git_disk_of(
                &profile,
                disk,
                self.runtimes.of(runtime.kind).layout().sandboxed(),
            )?,
        };
        // With a disk of its own, the job's git dir (and its outbox beside it) live on it.
        let git_dir = if disk.is_some() || git_disk.is_some() {
            crate::disk::git_dir(&self.home.job_dir(&id))
        } else {
            self.home.job_git_dir(&id)
        };

        let now = Utc::now();
        let record = JobRecord {
            schema: RECORD_SCHEMA,
            id: id.clone(),
            repo: repo.root.clone(),
            git_common_dir: repo.common_dir.clone(),
            git_dir: Some(git_dir),
            repo_key: repo_key.clone(),
            branch: branch.clone(),
            branch_created: !branch_exists,
            base,
            base_commit: base_commit.clone(),
            worktree: worktree.clone(),
            agent,
            task: request.task.clone(),
            profile: profile_name,
            runtime: runtime.kind,
            limits: Limits {
                secrets,
                ..Limits::from(&profile)
            },
            reserve: Some(reserve),
            container_id: None,
            container_name: self.runtimes.of(runtime.kind).layout().sandbox_name(&id),
            state: JobState::Creating,
            created_at: now,
            last_activity_at: now,
            finished_at: None,
            paused_at: None,
            frozen_by: None,
            exit_code: None,
            oom_killed: false,
            oom_kills: 0,
            owner: crate::job::ProcessId::current(),
            caches: Vec::new(),
            labels: request
                .labels
                .iter()
                .map(|l| (l.key.clone(), l.value.clone()))
                .collect(),
            sync_error: None,
            synced_at: None,
            copied: Vec::new(),
            setup: Vec::new(),
            queue_seq: None,
            ports: Vec::new(),
            checkout,
            pristine: None,
            pool: None,
            disk,
            git_disk,
            object_view: None,
            push: profile.push.value,
            push_error: None,
            devcontainer,
            engine,
            engine_fill: None,
            forked_from,
            auto_checkpoints: profile
                .checkpoint
                .value
                .before_exec
                .then_some(profile.checkpoint.value.keep),
        };
        // What of the repository's file was refused is said once, at create.
        let warning = super::setup::join_warnings(
            runtime.warning,
            config
                .repo_trust
                .as_ref()
                .and_then(crate::config::RepoTrust::warning),
        );
        // The build's plan is made now, from the repository and config in hand, and kept
        // with the job while it waits for its turn.
        let plan = self.plan_build(repo, &config, &record, warning);
        let record = self
            .admit_create(record, &request, &config.admission, client)
            .await;
        drop(placed);
        self.finish_create(record?, plan).await
    }

    /// What building an admitted job takes, computed once: from the repository and config
    /// that `create` already holds (kept with the job across its wait in the queue), or, for
    /// a queued create another process left, from its record.
    pub(super) fn plan_build(
        &self,
        repo: GitRepo,
        config: &crate::config::Config,
        record: &JobRecord,
        warning: Option<String>,
    ) -> BuildPlan {
        let cache_specs: Vec<crate::cache::CacheSpec> = config
            .caches
            .value
            .iter()
            .chain(
                config
                    .profiles
                    .get(&record.profile)
                    .map(|p| p.caches.value.as_slice())
                    .unwrap_or_default(),
            )
            .cloned()
            .chain(super::devcontainer::volume_caches(record))
            .collect();
        let (setup, warning) = super::setup::commands_of(
            config,
            record,
            self.runtime_of(record).layout().sandboxed(),
            warning,
        );
        let pool = config
            .select_profile(Some(&record.profile), &record.agent, record.task.as_deref())
            .map(|(_, profile)| profile.pool.value)
            .unwrap_or_default();
        BuildPlan {
            repo,
            cache_specs,
            setup,
            pool,
            warning,
        }
    }

    /// The plan of a queued create whose process is gone: its record names the repository,
    /// whose config is read now.
    pub(super) async fn plan_from_record(&self, record: &JobRecord) -> Result<BuildPlan> {
        let repo = GitRepo::open(&record.repo, &self.home.locks_dir()).await?;
        let config = self.config(Some(&repo.root))?;
        Ok(self.plan_build(repo, &config, record, None))
    }

    /// The steps of `create` once the job is admitted (its record `creating`): build it by
    /// its plan, or roll back everything a failed step made.
    pub(super) async fn finish_create(
        &self,
        mut record: JobRecord,
        plan: BuildPlan,
    ) -> Result<Created> {
        let _slot = match &self.build_slots {
            Some(slots) => Some(
                slots
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("the build semaphore is never closed"),
            ),
            None => None,
        };
        let BuildPlan {
            repo,
            cache_specs,
            setup,
            pool,
            warning,
        } = plan;
        match self
            .build(&repo, &mut record, &cache_specs, &setup, pool)
            .await
        {
            Ok(()) => {
                self.emit(
                    EventKind::JobCreated,
                    Some(&record.id),
                    Some(record.state),
                    serde_json::json!({
                        "branch": record.branch,
                        "runtime": record.runtime.to_string(),
                    }),
                );
                Ok(Created { record, warning })
            }
            Err(error) => {
                if let Err(cleanup) = self.rollback(&repo, &record).await {
                    tracing::warn!(job = %record.id, error = %cleanup, "rollback after a failed create was incomplete");
                }
                Err(error)
            }
        }
    }

    /// The steps of `create` after the id is reserved; any error here is rolled back.
    async fn build(
        &self,
        repo: &GitRepo,
        record: &mut JobRecord,
        cache_specs: &[crate::cache::CacheSpec],
        setup: &crate::config::JobSetup,
        pool: crate::config::PoolSettings,
    ) -> Result<()> {
        crash_point("reserved");
        self.home
            .register_repo(&record.repo_key, &repo.root, &repo.common_dir)?;
        self.home.mark_worktree(&record.repo_key, &record.id)?;
        crash_point("marked");
        let tip = if record.branch_created {
            // Only a branch this run made is the job's to delete on rollback: since the check
            // at validation (a wait in the queue, say), another job or the user may have
            // made it, and then creating it fails and the rollback leaves it alone.
            record.branch_created = false;
            repo.create_branch(&record.branch, &record.base_commit)
                .await?;
            record.branch_created = true;
            fail_point("branch")?;
            record.base_commit.clone()
        } else {
            repo.resolve_commit(&format!("refs/heads/{}", record.branch))
                .await?
        };
        crash_point("registered");
        if self.runtime_of(record).capabilities().volumes.is_some() {
            // A warm slot's container and volumes become the job's before the fill writes them.
            self.claim_remote(record, pool, !cache_specs.is_empty())
                .await?;
        }
        // Where the job's files live makes them: a checkout on this host, or volumes of
        // its engine filled by a stream (`engine/places.rs`).
        self.place_of(record)
            .fill(repo, record, &tip, cache_specs, setup)
            .await?;
        self.start_built(record, setup, pool).await
    }

    /// A local job's `copy` files and caches, in its checkout on this host (a remote job's
    /// go in with its fill: `fill_remote`).
    pub(super) async fn place_local_extras(
        &self,
        record: &mut JobRecord,
        cache_specs: &[crate::cache::CacheSpec],
        setup: &crate::config::JobSetup,
        job_git: &crate::git::jobdir::JobGitDir,
    ) -> Result<()> {
        fail_point("checkout")?;
        // Copied files go in before the caches (a cache may not land on one) and before the
        // container exists; they are the agent's from the start (see `copy_files`).
        self.place_copies(record, setup, job_git)?;
        fail_point("copy")?;
        if !cache_specs.is_empty() {
            // On a blocking thread: a `copy` cache copies an entry earlier jobs wrote.
            let (caches_dir, repo_key, worktree, specs, container) = (
                self.home.caches_dir(),
                record.repo_key.clone(),
                record.worktree.clone(),
                cache_specs.to_vec(),
                self.runtimes.in_engine(record.runtime),
            );
            record.caches = tokio::task::spawn_blocking(move || {
                crate::cache::place(&caches_dir, &repo_key, &worktree, &specs, container)
            })
            .await
            .expect("placing caches does not panic")?;
            job_git.add_excludes(&crate::cache::exclude_patterns(&record.caches))?;
        }
        if !record.caches.is_empty() || !record.copied.is_empty() {
            self.store.save(record)?;
        }
        fail_point("caches")?;
        Ok(())
    }

    /// The last steps of `create`, once the job's files are in place: its ports, its
    /// container (warm or cold), its setup commands, `ready`.
    async fn start_built(
        &self,
        record: &mut JobRecord,
        setup: &crate::config::JobSetup,
        pool: crate::config::PoolSettings,
    ) -> Result<()> {
        self.publish_ports(record)?;
        record.container_id = match self.start_warm(record, pool).await? {
            Some(id) => Some(id),
            None => self.runtime_of(record).start(record).await?,
        };
        // A remote job's ports: this host's relay of them (see `port_relay`).
        self.ensure_port_relay(record).await?;
        crash_point("started");
        // A fork's files become its checkpoint's before its setup runs (`engine/fork.rs`);
        // an overlay checkout's were made so before its sandbox started (`checkout.rs`).
        if let Some(from) = record.forked_from.clone()
            && !self.fork_restored_on_host(record)
        {
            self.restore_fork(record, &from).await?;
            crash_point("restored");
        }
        // The job is `ready` only once its setup ran (a failure here is rolled back whole).
        self.run_setup(record, setup).await?;
        self.post_start(record, true).await?;
        fail_point("setup")?;
        record.transition(JobState::Ready, Utc::now())?;
        record.owner = None;
        fail_point("record")?;
        self.store.save(record)?;
        Ok(())
    }

    /// Undoes a partial create: container (with its network and sidecar), worktree and job
    /// dir, branch (if we made it), marker, record. Every step is tried even when an earlier
    /// one failed; a container that is not ours (its name taken by someone else) is left
    /// alone and counts as nothing to undo. When a step failed, the marker and the record
    /// stay (state `creating`), so a sweep finishes the job once this process is gone.
    async fn rollback(&self, repo: &GitRepo, record: &JobRecord) -> Result<()> {
        let mut failed: Option<Error> = None;
        match self.runtime_of(record).destroy(record).await {
            Ok(()) | Err(RuntimeError::NotOurContainer { .. }) => {}
            Err(error) => failed = Some(error.into()),
        }
        if let Err(error) = self.place_of(record).remove(repo, record).await {
            failed.get_or_insert(error);
        }
        if record.branch_created
            && let Err(error) = repo.delete_branch(&record.branch).await
        {
            failed.get_or_insert(error.into());
        }
        if let Some(error) = failed {
            return Err(error);
        }
        let _ = std::fs::remove_file(self.home.worktree_marker(&record.repo_key, &record.id));
        self.store.remove(&record.id)?;
        Ok(())
    }
}

/// A VM sees only what is shared into it: a cache that is a link to, a mount of, or a
/// variable naming a host directory would point nowhere there, so only `copy` caches (their
/// entry copied into the checkout) are taken under the microVM runtime.
fn refuse_host_caches<'a>(specs: impl Iterator<Item = &'a crate::cache::CacheSpec>) -> Result<()> {
    for spec in specs {
        let (name, strategy) = spec.resolve()?;
        if strategy != crate::cache::Strategy::Copy {
            return Err(crate::cache::CacheError::Spec {
                name,
                message: format!(
                    "`strategy: {strategy}` needs a host directory in the job, which the microVM runtime does not share yet: use `strategy: copy` or another runtime"
                ),
            }
            .into());
        }
    }
    Ok(())
}

/// A create's plan for building its admitted job: the repository, the caches, the setup
/// commands (with their warning) and the pool settings, computed once (`plan_build`).
pub(super) struct BuildPlan {
    repo: GitRepo,
    cache_specs: Vec<crate::cache::CacheSpec>,
    setup: crate::config::JobSetup,
    pool: crate::config::PoolSettings,
    warning: Option<String>,
}

/// Fills a branch template. Without a task, `{task}` becomes the job id.
pub fn render_branch(template: &str, agent: &str, task: Option<&str>, id: &JobId) -> String {
    let values = BTreeMap::from([
        ("{agent}", agent),
        ("{task}", task.unwrap_or(id.as_str())),
        ("{id}", id.as_str()),
    ]);
    values
        .iter()
        .fold(template.to_string(), |acc, (key, value)| {
            acc.replace(key, value)
        })
}

/// A root layer the job writes (`rootfs: writable`) is for root inside, so only where root
/// is contained; and with a disk limit only where that layer is inside the limit (Docker
/// keeps a container's layer in its own storage, which the job's disk image does not hold:
/// an `apt-get install` there would write past the limit the user set).
fn check_root_layer(
    rootfs: crate::config::RootFs,
    disk: Option<crate::units::ByteSize>,
    runtime: crate::job::RuntimeKind,
    other_users: Option<&dyn crate::runtime::capabilities::OtherUsers>,
) -> Result<(), Error> {
    if rootfs.is_read_only() {
        return Ok(());
    }
    let Some(other_users) = other_users else {
        return Err(Error::WritableRootNotContained { runtime });
    };
    match disk {
        Some(limit) if other_users.root_layer_outside_disk() => {
            Err(Error::WritableRootUnbounded { runtime, limit })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_limit_implies_overlay_unless_worktree_was_asked_for() {
        let mut profile = Profile::default();
        assert_eq!(
            checkout_of(&profile, false).unwrap(),
            CheckoutMode::Worktree
        );
        // Unset anywhere: overlay where kernel overlayfs works.
        assert_eq!(checkout_of(&profile, true).unwrap(), CheckoutMode::Overlay);
        profile.checkout.source = Source::Flag("create".into());
        assert_eq!(checkout_of(&profile, true).unwrap(), CheckoutMode::Worktree);
        profile.checkout.source = Source::Default;
        profile.disk = Some(crate::config::Sourced {
            value: crate::units::ByteSize(200 << 20),
            source: Source::Flag("create".into()),
        });
        assert_eq!(checkout_of(&profile, false).unwrap(), CheckoutMode::Overlay);
        profile.checkout.source = Source::Env("PADDOCK_CHECKOUT".into());
        let error = checkout_of(&profile, false).unwrap_err();
        assert_eq!(error.kind(), crate::error::ErrorKind::InvalidInput);
        assert!(
            error.to_string().contains("`PADDOCK_CHECKOUT=worktree`"),
            "{error}"
        );
        profile.checkout.value = CheckoutMode::Overlay;
        assert_eq!(checkout_of(&profile, false).unwrap(), CheckoutMode::Overlay);
    }

    #[test]
    fn branch_template_defaults_task_to_id() {
        let id = JobId::parse("j1").unwrap();
        assert_eq!(
            render_branch("agent/{agent}/{task}", "claude", Some("FR-1"), &id),
            "agent/claude/FR-1"
        );
        assert_eq!(
            render_branch("agent/{agent}/{task}", "agent", None, &id),
            "agent/agent/j1"
        );
    }

    #[test]
    fn a_writable_root_needs_contained_root_and_with_a_disk_limit_a_layer_the_limit_holds() {
        use crate::config::RootFs;
        use crate::job::RuntimeKind;
        let docker = crate::runtime::fake::FakeRuntime::default();
        let limit = Some(crate::units::ByteSize(200 << 20));
        // Read-only: anything goes.
        check_root_layer(RootFs::ReadOnly, limit, RuntimeKind::Docker, None).unwrap();
        let error =
            check_root_layer(RootFs::Writable, None, RuntimeKind::Docker, None).unwrap_err();
        assert!(
            matches!(error, Error::WritableRootNotContained { .. }),
            "{error}"
        );
        // The fake keeps its root layer where Docker does: outside the job's disk.
        check_root_layer(RootFs::Writable, None, RuntimeKind::Runsc, Some(&docker)).unwrap();
        let error = check_root_layer(RootFs::Writable, limit, RuntimeKind::Runsc, Some(&docker))
            .unwrap_err();
        assert!(
            matches!(error, Error::WritableRootUnbounded { .. }),
            "{error}"
        );
        assert_eq!(error.kind(), crate::error::ErrorKind::InvalidInput);
        assert!(error.to_string().contains("200"), "{error}");
    }
}
