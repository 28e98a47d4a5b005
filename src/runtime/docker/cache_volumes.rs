//! A remote job's caches (see `engine/remote_prep.rs`): one volume of the engine per
//! (install, repository, cache, key hash), labelled with the install and what it is, mounted
//! in the job's containers (and in a setup's throwaway container beside) at the cache's place,
//! made and seeded by the job's fill helper before any agent of the job has run.
//!
//! Seeding: a new volume gets a copy of the most recently used volume of the same cache and
//! repository on that engine (last use as this install's host saw it, else the newest), made
//! inside the engine by the fill helper (`cp -a`, links kept as links, then given to the
//! agent's uid), never through this host. Whether a volume was seeded is a mark in the
//! repository's object cache volume (`paddock-caches/<volume>`, holding the volume's creation
//! time, so a volume pruned and made again is seeded again), which only helpers write and
//! jobs mount read-only: a job cannot make a later job skip or redo a seed. Two fills of the
//! same new volume take turns under a lock there; the second finds the mark.
//!
//! Trust: a cache volume holds what jobs of one repository wrote, shared by those jobs only
//! (the repository key is in its name and labels); a job of another repository never mounts
//! it. Nothing in it is read by this host. `rm` and the sweep remove only a job's own
//! volumes, never a cache's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bollard::Docker;
use bollard::models::{Mount, MountTypeEnum, VolumeCreateRequest};
use bollard::query_parameters::ListVolumesOptionsBuilder;

use super::{API_TIMEOUT, LABEL_HOME, LABEL_ROLE, call, optional};
use crate::job::JobRecord;
use crate::runtime::RuntimeError;
use crate::store::PaddockHome;

/// The label naming the repository (its key) a cache volume belongs to.
pub const LABEL_CACHE_REPO: &str = "dev.paddock.cache.repo";
/// The label naming the cache (its name in the config).
pub const LABEL_CACHE_NAME: &str = "dev.paddock.cache.name";
/// The role of a cache volume.
pub const ROLE_CACHE: &str = "cache";

fn volume_mount(source: &str, target: &str, read_only: bool) -> Mount {
    Mount {
        target: Some(target.to_string()),
        source: Some(source.to_string()),
        typ: Some(MountTypeEnum::VOLUME),
        read_only: Some(read_only),
        ..Default::default()
    }
}

/// The cache volumes of a remote job's containers, at each cache's place: its path in the
/// workspace, or (an `env` cache) its entry, which its variable names.
pub(super) fn job_mounts(record: &JobRecord) -> Vec<Mount> {
    let workspace = Path::new(&record.limits.workspace_dir);
    record
        .caches
        .iter()
        .filter_map(|cache| {
            let volume = crate::engines::volume_of(cache)?;
            let target = match &cache.path {
                Some(path) => workspace.join(path),
                None => cache.entry.clone(),
            };
            Some(volume_mount(
                volume,
                &target.to_string_lossy(),
                cache.readonly,
            ))
        })
        .collect()
}

/// One cache volume the fill prepares: its name, its creation time (the seed mark), the
/// volume it is seeded from, and where its mount point goes in the workspace.
pub(super) struct Planned {
    volume: String,
    created: String,
    seed: Option<String>,
    path: Option<String>,
}

/// Where a job's last use of a cache volume is kept on this host (its mtime).
fn last_use(home: &PaddockHome, engine: &str, volume: &str) -> PathBuf {
    crate::engines::last_use_mark(home.root(), engine, volume)
}

fn last_used(home: &PaddockHome, engine: &str, volume: &str) -> Option<std::time::SystemTime> {
    std::fs::metadata(last_use(home, engine, volume))
        .and_then(|m| m.modified())
        .ok()
}

/// Keeps that the job's cache volumes were used now (on this host: jobs cannot forge it).
pub(super) fn mark_used(daemon: &super::Daemon, home: &PaddockHome, planned: &[Planned]) {
    let engine = daemon.engine().unwrap_or_default().to_string();
    for plan in planned {
        let path = last_use(home, &engine, &plan.volume);
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(error) = std::fs::write(&path, b"") {
            tracing::debug!(path = %path.display(), %error, "cannot keep a cache volume's last use");
        }
    }
}

/// Makes (or finds) the job's cache volumes on its engine, each checked to be this
/// install's cache of the job's repository, and picks the seed of each.
pub(super) async fn plan(
    daemon: &super::Daemon,
    docker: &Docker,
    home: &PaddockHome,
    record: &JobRecord,
) -> Result<Vec<Planned>, RuntimeError> {
    let engine = daemon.engine().unwrap_or_default().to_string();
    let mut planned = Vec::new();
    for cache in &record.caches {
        let Some(volume) = crate::engines::volume_of(cache) else {
            continue;
        };
        let labels = HashMap::from([
            (LABEL_HOME.to_string(), home.id().to_string()),
            (LABEL_ROLE.to_string(), ROLE_CACHE.to_string()),
            (LABEL_CACHE_REPO.to_string(), record.repo_key.clone()),
            (LABEL_CACHE_NAME.to_string(), cache.name.clone()),
        ]);
        let request = VolumeCreateRequest {
            name: Some(volume.to_string()),
            labels: Some(labels.clone()),
            ..Default::default()
        };
        // An existing volume comes back as it is: its labels say whose it is.
        let made = call(
            "create volume",
            volume,
            API_TIMEOUT,
            docker.create_volume(request),
        )
        .await?;
        let ours = labels
            .iter()
            .all(|(k, v)| made.labels.get(k).is_some_and(|have| have == v));
        if !ours {
            return Err(RuntimeError::Docker {
                action: "create volume",
                target: volume.to_string(),
                message: "a volume of that name exists and is not this install's cache of the repository: not used".into(),
            });
        }
        let filters = HashMap::from([(
            "label".to_string(),
            labels.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        )]);
        let options = ListVolumesOptionsBuilder::new().filters(&filters).build();
        let listed = call(
            "list volumes",
            volume,
            API_TIMEOUT,
            docker.list_volumes(Some(options)),
        )
        .await?;
        // The most recently used other volume of the cache, by this host's marks, then by
        // creation (label filters match exactly, so another repository's never comes).
        let seed = listed
            .volumes
            .unwrap_or_default()
            .into_iter()
            .filter(|other| other.name != volume && other.labels == made.labels)
            .max_by_key(|other| {
                (
                    last_used(home, &engine, &other.name),
                    other.created_at.as_ref().map(ToString::to_string),
                )
            })
            .map(|other| other.name);
        planned.push(Planned {
            volume: volume.to_string(),
            created: made
                .created_at
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default()
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || matches!(c, ':' | '.' | '-' | '+'))
                .collect(),
            seed,
            path: cache.path.clone(),
        });
    }
    Ok(planned)
}

/// The fill helper's mounts of the planned volumes: each at `/paddock/cache-new/<i>`, its
/// seed read-only at `/paddock/cache-seed/<i>`.
pub(super) fn helper_mounts(planned: &[Planned]) -> Vec<Mount> {
    let mut mounts = Vec::new();
    for (i, plan) in planned.iter().enumerate() {
        mounts.push(volume_mount(
            &plan.volume,
            &format!("/paddock/cache-new/{i}"),
            false,
        ));
        if let Some(seed) = &plan.seed {
            mounts.push(volume_mount(
                seed,
                &format!("/paddock/cache-seed/{i}"),
                true,
            ));
        }
    }
    mounts
}

/// `text` single-quoted for `sh`.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The fill script's part for the caches (`$C` the object cache, `$W` the workspace): each
/// cache's mount point made in the workspace, each volume seeded and given to `uid:gid`
/// once (see the module docs). A seed that changes while it is copied is taken as it comes.
pub(super) fn script(planned: &[Planned], uid: u32, gid: u32) -> String {
    let mut script = String::new();
    if planned.is_empty() {
        return script;
    }
    script.push_str("mkdir -p \"$C/paddock-caches\"\n");
    for (i, plan) in planned.iter().enumerate() {
        if let Some(path) = &plan.path {
            script.push_str(&format!("mkdir -p \"$W\"/{}\n", quote(path)));
        }
        let mark = format!("\"$C/paddock-caches/\"{}", quote(&plan.volume));
        // Only into an empty volume: one a job already wrote (its mark lost with the object
        // cache) may hold links, and root here writes through none of them.
        let copy = if plan.seed.is_some() {
            format!(
                "[ -n \"$(ls -A /paddock/cache-new/{i})\" ] || cp -a /paddock/cache-seed/{i}/. /paddock/cache-new/{i}/ 2>/dev/null || true"
            )
        } else {
            "true".to_string()
        };
        script.push_str(&format!(
            r#"(
  flock 9
  if [ "$(cat {mark} 2>/dev/null)" != {created} ]; then
    {copy}
    chown -R {uid}:{gid} /paddock/cache-new/{i}
    printf '%s\n' {created} >{mark}
  fi
) 9>{mark}.lock
"#,
            created = quote(&plan.created),
        ));
    }
    script
}

/// This install's cache volumes on the current engine.
pub(super) async fn list(
    daemon: &super::Daemon,
    home: &PaddockHome,
) -> Result<Vec<crate::engines::CacheVolume>, RuntimeError> {
    let docker = daemon.connect()?;
    let filters = HashMap::from([(
        "label".to_string(),
        vec![
            format!("{LABEL_HOME}={}", home.id()),
            format!("{LABEL_ROLE}={ROLE_CACHE}"),
        ],
    )]);
    let options = ListVolumesOptionsBuilder::new().filters(&filters).build();
    let listed = call(
        "list volumes",
        "cache volumes",
        API_TIMEOUT,
        docker.list_volumes(Some(options)),
    )
    .await?;
    Ok(listed
        .volumes
        .unwrap_or_default()
        .into_iter()
        .map(|volume| crate::engines::CacheVolume {
            repo_key: volume
                .labels
                .get(LABEL_CACHE_REPO)
                .cloned()
                .unwrap_or_default(),
            cache: volume
                .labels
                .get(LABEL_CACHE_NAME)
                .cloned()
                .unwrap_or_default(),
            created_at: volume.created_at.as_ref().map(ToString::to_string),
            name: volume.name,
        })
        .collect())
}

/// Removes the cache volume `name` when it carries this install's labels as a cache,
/// looked at right before; false when it is gone or not ours. The engine refuses to remove
/// a volume a container (a job's, running or not) still has.
pub(super) async fn remove(
    daemon: &super::Daemon,
    home: &PaddockHome,
    name: &str,
) -> Result<bool, RuntimeError> {
    let docker = daemon.connect()?;
    let Some(volume) = optional(
        "inspect volume",
        name,
        API_TIMEOUT,
        docker.inspect_volume(name),
    )
    .await?
    else {
        return Ok(false);
    };
    let ours = volume.labels.get(LABEL_HOME).map(String::as_str) == Some(home.id())
        && volume.labels.get(LABEL_ROLE).map(String::as_str) == Some(ROLE_CACHE);
    if !ours {
        return Ok(false);
    }
    super::remote::volumes::remove_volume(&docker, name).await?;
    Ok(true)
}
