//! Filling a remote job's volumes at create (see `remote`): a helper container on the
//! engine with the job's volumes and the repository's object cache, before any agent of the
//! job has run. It says which commits the cache holds; the host packs what the cache lacks
//! of the job's commit (`git::remote`: that commit's tree, no history) and uploads the pack
//! and the job's git dir (written on the host by `JobGitDir`, alternates re-pointed) through
//! the archive API; the helper indexes the pack into the cache, checks the tree out into the
//! workspace volume as the job's git dir says, and gives the files to the agent's uid. A
//! job's `copy` files (a tar the engine checked and staged) go into the workspace before the
//! checkout; its cache volumes are mounted in the helper to be seeded (`cache_volumes`).

use std::path::Path;
use std::time::Duration;

use bollard::Docker;
use bollard::models::ContainerCreateBody;

use super::volumes::{ensure_volumes, helper_labels, upload, volume_mounts};
use crate::engines::FillReport;
use crate::job::{JobRecord, Limits, RuntimeKind, random_hex};
use crate::runtime::RuntimeError;
use crate::runtime::docker::{
    API_TIMEOUT, CONTAINER_GIT_DIR, CONTAINER_OBJECTS, agent_user, call, create_named,
    hardened_host_config, inspect_named, job_container, remove_labelled_container, start_named,
};
use crate::store::PaddockHome;

/// Deadline of one step of the fill in the helper (an index-pack, a checkout of a large tree).
const STEP_TIMEOUT: Duration = Duration::from_secs(900);

/// Runs `script` as root in the helper `name`; its exit code and output (capped at 64 KiB).
pub(crate) async fn run(
    docker: &Docker,
    name: &str,
    script: &str,
) -> Result<(i64, String), RuntimeError> {
    let (ended, exec, text) =
        crate::runtime::docker::exec::exec_collect(docker, name, script, STEP_TIMEOUT, 64 << 10)
            .await?;
    if !ended {
        return Err(RuntimeError::DockerTimeout {
            action: "fill the job's volumes",
            target: name.to_string(),
            after: STEP_TIMEOUT,
        });
    }
    let inspect = call(
        "inspect exec",
        name,
        API_TIMEOUT,
        docker.inspect_exec(&exec),
    )
    .await?;
    Ok((inspect.exit_code.unwrap_or(-1), text))
}

/// A tar of one file, `name`, holding `bytes`.
fn tar_of_file(name: &str, bytes: &[u8]) -> Result<Vec<u8>, std::io::Error> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o600);
    builder.append_data(&mut header, name, bytes)?;
    builder.into_inner()
}

/// A tar of the directory `dir`'s contents.
fn tar_of_dir(dir: &Path) -> Result<Vec<u8>, std::io::Error> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    builder.append_dir_all(".", dir)?;
    builder.into_inner()
}

/// The name of the fill helper a remote pool slot keeps waiting beside its container.
pub(crate) fn slot_helper(container: &str) -> String {
    format!("{container}-fill")
}

/// A fill helper for the volumes of the container `container` (root, with only the
/// capabilities to hand files to the agent, every volume writable, no network), sleeping for
/// `sleep` (seconds, or `infinity` for a pool slot's, which waits for its claim).
pub(crate) fn helper_body(
    home: &PaddockHome,
    (limits, repo_key): (&Limits, &str),
    container: &str,
    labels: std::collections::HashMap<String, String>,
    sleep: &str,
) -> ContainerCreateBody {
    let mut mounts = volume_mounts(home, container, &limits.workspace_dir, repo_key);
    for mount in &mut mounts {
        mount.read_only = Some(false);
    }
    let mut host_config = hardened_host_config(limits, RuntimeKind::Docker, mounts);
    host_config.cap_add = Some(vec!["CHOWN".into(), "DAC_OVERRIDE".into(), "FOWNER".into()]);
    ContainerCreateBody {
        image: Some(limits.image.clone()),
        user: Some("0:0".into()),
        entrypoint: Some(vec!["sleep".into()]),
        cmd: Some(vec![sleep.into()]),
        labels: Some(labels),
        host_config: Some(host_config),
        ..Default::default()
    }
}

/// Fills a remote job's volumes (see the module docs) with `tip` checked out and the git dir
/// staged at `staged_git`; returns what the pack held. A warm job's slot has its helper
/// waiting already (made with the slot, so the claim skips a container's create and start);
/// without one (a cold job, or a slot whose helper went away) a helper is made now.
pub(crate) async fn fill(
    daemon: &crate::runtime::docker::Daemon,
    home: &PaddockHome,
    record: &JobRecord,
    staged_git: &Path,
    tip: &str,
) -> Result<FillReport, RuntimeError> {
    let docker = daemon.connect()?;
    let mut waiting = None;
    if let Some(slot) = record.pool_slot() {
        let name = slot_helper(&job_container(record));
        if let Ok(Some(status)) = inspect_named(&docker, home, &name, slot).await
            && status.running
        {
            waiting = Some((name, slot.to_string()));
        }
    }
    if waiting.is_none() {
        ensure_volumes(&docker, home, record).await?;
    }
    // A job with caches never claims a slot (`claim_remote`), so a waiting helper has every
    // volume its fill needs.
    let caches = crate::runtime::docker::cache_volumes::plan(daemon, &docker, home, record).await?;
    let (name, label, result) = match waiting {
        Some((name, label)) if caches.is_empty() => {
            let result = fill_in(&docker, &name, home, record, staged_git, tip, &caches).await;
            (name, label, result)
        }
        _ => {
            let name = format!("{}-fill-{}", job_container(record), random_hex(6));
            let mut body = helper_body(
                home,
                (&record.limits, &record.repo_key),
                &job_container(record),
                helper_labels(home, record.id.as_str()),
                "3600",
            );
            if let Some(host_config) = body.host_config.as_mut() {
                host_config.mounts.get_or_insert_with(Vec::new).extend(
                    crate::runtime::docker::cache_volumes::helper_mounts(&caches),
                );
            }
            create_named(daemon, &docker, &name, body).await?;
            let result = async {
                start_named(&docker, &name).await?;
                fill_in(&docker, &name, home, record, staged_git, tip, &caches).await
            }
            .await;
            (name, record.id.to_string(), result)
        }
    };
    if result.is_ok() {
        crate::runtime::docker::cache_volumes::mark_used(daemon, home, &caches);
    }
    // Gone before the job is ready: nothing of the job's runs beside a root helper.
    if let Err(error) = remove_labelled_container(daemon, home, &name, &label).await {
        tracing::warn!(container = %name, %error, "failed to remove a fill helper");
    }
    result
}

async fn fill_in(
    docker: &Docker,
    name: &str,
    home: &PaddockHome,
    record: &JobRecord,
    staged_git: &Path,
    tip: &str,
    caches: &[crate::runtime::docker::cache_volumes::Planned],
) -> Result<FillReport, RuntimeError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RuntimeError::Io { path, source }
    };
    let (_, held) = run(
        docker,
        name,
        &format!("cat {CONTAINER_OBJECTS}/paddock-commits 2>/dev/null; true"),
    )
    .await?;
    let haves: Vec<String> = held.lines().map(|l| l.trim().to_string()).collect();
    let pack_path = home.job_dir(&record.id).join("fill.pack");
    let objects =
        crate::git::remote::pack_for_engine(&record.git_common_dir, tip, &haves, &pack_path)
            .await
            .map_err(|e| RuntimeError::Io {
                path: pack_path.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
    let pack = std::fs::read(&pack_path).map_err(io(&pack_path))?;
    let _ = std::fs::remove_file(&pack_path);
    let bytes = pack.len() as u64;
    let incoming = format!("incoming-{}.pack", random_hex(8));
    let pack_tar = tar_of_file(&incoming, &pack).map_err(io(&pack_path))?;
    drop(pack);
    upload(docker, name, CONTAINER_OBJECTS, pack_tar).await?;
    let git_tar = tar_of_dir(staged_git).map_err(io(staged_git))?;
    upload(docker, name, CONTAINER_GIT_DIR, git_tar).await?;
    let workspace = &record.limits.workspace_dir;
    // The `copy` files (checked and staged by the engine): unpacked before the checkout,
    // at paths the commit does not track, and given to the agent with the rest below.
    let copies = crate::engines::staged_copies(&home.job_dir(&record.id));
    match std::fs::read(&copies) {
        Ok(tar) => upload(docker, name, workspace, tar).await?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&copies)(e)),
    }
    let (uid, gid) = agent_user(record.limits.uid);
    let caches = crate::runtime::docker::cache_volumes::script(caches, uid, gid);
    let script = format!(
        r#"set -eu
C={CONTAINER_OBJECTS}; P="$C/{incoming}"; B={tip}; W='{workspace}'; G={CONTAINER_GIT_DIR}
[ -f "$C/HEAD" ] || git init -q --bare "$C"
git --git-dir="$C" index-pack --stdin <"$P" >/dev/null
rm -f "$P"
(
  flock 9
  printf '%s\n' "$B" >>"$C/shallow"; sort -u -o "$C/shallow" "$C/shallow"
  grep -qx "$B" "$C/paddock-commits" 2>/dev/null || printf '%s\n' "$B" >>"$C/paddock-commits"
) 9>"$C/.lock"
cp "$C/shallow" "$G/shallow"
cd "$W"
GIT_DIR="$G" GIT_WORK_TREE="$W" git -c safe.directory='*' -c core.hooksPath=/dev/null \
  -c checkout.workers=0 read-tree --reset -u HEAD
printf 'gitdir: %s\n' "$G" >"$W/.git"
{caches}chown -R {uid}:{gid} "$W" "$G" /paddock/outbox
"#
    );
    let (code, output) = run(docker, name, &script).await?;
    if code != 0 {
        return Err(RuntimeError::Docker {
            action: "fill the job's volumes",
            target: name.to_string(),
            message: format!("exit {code}: {}", output.trim()),
        });
    }
    Ok(FillReport { bytes, objects })
}
