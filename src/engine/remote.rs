//! `create --engine NAME`: a job on a Docker engine of the user config's `engines:`, whose
//! files live in volumes there (see `crate::engines`). What such a job cannot have yet is
//! refused before anything is reserved; its files are filled by the runtime's stream
//! (`EngineVolumes::fill_files`) from a git dir written here, on the host, before any agent ran.

use super::{CreateRequest, Error, Paddock, Result};
use crate::config::{Config, Profile, RuntimeChoice};
use crate::engines::EngineError;
use crate::git::GitRepo;
use crate::git::jobdir::JobGitDir;
use crate::job::{JobId, JobRecord};
use crate::runtime::{Resolved, RuntimeError};

/// Where the job git dir's alternates point inside a remote job's container: the objects of
/// the repository's cache volume.
const REMOTE_ALTERNATES: &str = "/paddock-objects/objects\n";

fn unsupported(name: &str, what: &str) -> Error {
    EngineError::Invalid {
        name: name.to_string(),
        message: format!("{what} is not supported on a remote engine yet"),
    }
    .into()
}

impl Paddock {
    /// The engine a new job asks for (`--engine`; `auto` placed by `placement`, whose lock
    /// the caller holds until the job's record exists), checked against the user config, and
    /// the refusals of what a remote job cannot have yet; `None`: the local engine.
    pub(super) async fn engine_of(
        &self,
        config: &Config,
        request: &CreateRequest,
        (id, repo_key): (&JobId, &str),
        profile: &Profile,
    ) -> Result<(Option<String>, Option<super::placement::Placed>)> {
        // `create --engine` wins over the profile's `engine:`.
        let chosen = request
            .engine
            .as_deref()
            .or(profile.engine.as_ref().map(|engine| engine.value.as_str()));
        let Some(name) = chosen.filter(|name| *name != "local") else {
            return Ok((None, None));
        };
        if name != "auto" {
            crate::engines::find(&config.engines, name)?;
        }
        match profile.runtime.value {
            RuntimeChoice::Process => return Err(unsupported(name, "the process runtime")),
            RuntimeChoice::Microvm => return Err(unsupported(name, "the microvm runtime")),
            _ => {}
        }
        // An allowlist job's proxy runs on the engine from its proxy image (see
        // `runtime/docker/remote/egress.rs`), and its secrets go to it there by an exec's
        // stdin (`runtime/docker/remote/secrets.rs`).
        if profile.disk.is_some() {
            return Err(unsupported(
                name,
                "a disk limit (an engine's volumes have a size only on an xfs data root with project quotas)",
            ));
        }
        // Ports are relayed through the engine's API into the job's network namespace,
        // which a gVisor job's own network stack keeps to itself.
        if !profile.ports.value.is_empty() && profile.runtime.value == RuntimeChoice::Runsc {
            return Err(unsupported(name, "`ports` of a gVisor (runsc) job"));
        }
        if name == "auto" {
            let placed = self
                .place_auto(
                    config,
                    (id, repo_key),
                    request.waiter.as_deref(),
                    request.no_wait,
                )
                .await?;
            return Ok((Some(placed.engine.clone()), Some(placed)));
        }
        Ok((Some(name.to_string()), None))
    }

    /// The runtime of a job on the remote engine `engine`: Docker (runc, or runsc when
    /// asked for), ready there with the job's image.
    pub(super) async fn resolve_remote(&self, engine: &str, profile: &Profile) -> Result<Resolved> {
        let kind = self.runtimes.remote_kind(profile.runtime.value);
        let runtime = self.runtimes.on_engine(kind, Some(engine));
        match runtime
            .check_ready(&profile.image.value, profile.network.value)
            .await
        {
            Ok(()) => Ok(Resolved {
                kind,
                warning: None,
            }),
            Err(RuntimeError::ImageMissing { image }) => Err(EngineError::Invalid {
                name: engine.to_string(),
                message: format!(
                    "image `{image}` is not on this engine: run `paddock image build --engine {engine}`"
                ),
            }
            .into()),
            Err(error) => Err(error.into()),
        }
    }

    /// Fills a remote job's volumes: its git dir written on the host (the branch at `tip`,
    /// alternates naming the engine's object cache, excludes of its copies and caches), then
    /// sent with what the cache lacks, its `copy` files (staged by `prepare_remote`) and its
    /// cache volumes made and seeded.
    pub(super) async fn fill_remote(
        &self,
        repo: &GitRepo,
        record: &mut JobRecord,
        tip: &str,
        cache_specs: &[crate::cache::CacheSpec],
        setup: &crate::config::JobSetup,
    ) -> Result<()> {
        let job_dir = self.home.job_dir(&record.id);
        let staged = job_dir.join("stage-git");
        let io = |path: &std::path::Path| {
            let path = path.to_path_buf();
            move |source| crate::store::StoreError::Io { path, source }
        };
        let job_git = JobGitDir::create(&staged, repo, &record.branch, tip).await?;
        let prepared = self
            .prepare_remote(repo, record, tip, cache_specs, setup, &job_git)
            .await;
        if let Err(error) = prepared {
            let _ = super::checkout::remove_tree(&staged).await;
            let _ = std::fs::remove_file(crate::engines::staged_copies(&job_dir));
            return Err(error);
        }
        self.store.save(record)?;
        let alternates = staged.join("objects/info/alternates");
        std::fs::write(&alternates, REMOTE_ALTERNATES).map_err(io(&alternates))?;
        // The engine's cache holds the boundary of what it received; the fill puts it there.
        let _ = std::fs::remove_file(staged.join("shallow"));
        if let Some(outbox) = record.outbox() {
            std::fs::create_dir_all(&outbox).map_err(io(&outbox))?;
        }
        let started = std::time::Instant::now();
        let runtime = self.runtime_of(record);
        let filled = match runtime.capabilities().volumes {
            Some(volumes) => volumes.fill_files(record, &staged, tip).await,
            None => Err(crate::runtime::lacks(
                runtime.as_ref(),
                "fill a remote engine's volumes",
            )),
        };
        let _ = super::checkout::remove_tree(&staged).await;
        let _ = std::fs::remove_file(crate::engines::staged_copies(&job_dir));
        let report = filled?;
        tracing::info!(
            job = %record.id,
            bytes = report.bytes,
            objects = report.objects,
            elapsed = ?started.elapsed(),
            "filled the job's volumes on its engine"
        );
        record.engine_fill = Some(report);
        self.store.save(record)?;
        Ok(())
    }
}

/// How long `ls` and `show` wait for an engine's answer before calling it unreachable.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl Paddock {
    /// Says of each view of a remote job whether its engine answers now (one look per
    /// engine): `ls`, `show` and the API show `unreachable` jobs as such.
    pub(super) async fn engine_statuses(&self, views: &mut [crate::wire::JobView]) {
        let engines: std::collections::BTreeSet<String> =
            views.iter().filter_map(|v| v.engine.clone()).collect();
        for engine in engines {
            let runtime = self.runtimes.engine(Some(&engine));
            let answered = match runtime.capabilities().images {
                Some(images) => matches!(
                    tokio::time::timeout(PROBE_TIMEOUT, images.engine_facts()).await,
                    Ok(Ok(_))
                ),
                None => false,
            };
            let status = if answered { "reachable" } else { "unreachable" };
            for view in views.iter_mut() {
                if view.engine.as_deref() == Some(engine.as_str()) {
                    view.engine_status = Some(status.to_string());
                }
                if view.engine.as_deref() == Some(engine.as_str()) && !view.ports.is_empty() {
                    let running = self.port_relay_process(&view.id).is_some();
                    view.port_relay = Some(if running { "running" } else { "not running" }.into());
                }
            }
        }
    }
}
