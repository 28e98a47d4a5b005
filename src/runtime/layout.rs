//! The sandbox layout every runtime shares: where a job's git dir, borrowed objects and
//! outbox are as its commands see them, which uid owns its files, what its sandbox is
//! called, and the environment every job's commands get. A container and a VM mount the
//! same paths (a VM's shares mirror a container's mounts), so the layout lives here, not
//! in one runtime's folder; the process runtime runs on the host's own paths.

use std::path::PathBuf;
use std::time::Duration;

use crate::job::{JobId, JobRecord};
use crate::store::PaddockHome;

/// Where HOME is inside a sandbox (a tmpfs).
pub const SANDBOX_HOME: &str = "/home/agent";
/// Where the job's private git dir is inside its sandbox.
pub const SANDBOX_GIT_DIR: &str = "/paddock/git";
/// Where the repository's object store is inside a sandbox (the job git dir's alternates
/// name it).
pub const SANDBOX_OBJECTS: &str = "/paddock-objects";
/// Where the job's outbox is inside its sandbox.
pub const SANDBOX_OUTBOX: &str = "/paddock/outbox";

/// How a runtime's sandbox sees a job's files.
#[derive(Debug, Clone)]
pub enum SandboxLayout {
    /// Commands run on this host, in the job's own worktree and git dir, as paddock's user.
    Host,
    /// Commands run in a sandbox that mounts the job's files at the paths above, as the
    /// agent's uid ([`agent_user`]); `names` is the install's tag when each job's sandbox
    /// has a name of its own on the machine (a container's).
    Mounted { names: Option<String> },
}

impl SandboxLayout {
    /// A mounted layout whose sandboxes are named after the install at `home`.
    pub fn named(home: &PaddockHome) -> SandboxLayout {
        SandboxLayout::Mounted {
            names: Some(home.tag().to_string()),
        }
    }

    /// Who must own the files of a job's checkout when that is not paddock's own user: the
    /// agent's uid in a sandbox, when paddock is root.
    pub fn files_owner(&self, record: &JobRecord) -> Option<(u32, u32)> {
        match self {
            SandboxLayout::Host => None,
            SandboxLayout::Mounted { .. } => {
                let (uid, gid) = agent_user(record.limits.uid);
                (crate::sys::is_root() && uid != 0).then_some((uid, gid))
            }
        }
    }

    /// The job's git dir and work tree as commands in its sandbox see them.
    pub fn git_paths(&self, record: &JobRecord) -> Option<(PathBuf, PathBuf)> {
        match self {
            SandboxLayout::Host => Some((record.git_dir.clone()?, record.worktree.clone())),
            SandboxLayout::Mounted { .. } => {
                record.git_dir.as_ref()?;
                Some((
                    SANDBOX_GIT_DIR.into(),
                    record.limits.workspace_dir.clone().into(),
                ))
            }
        }
    }

    /// Where the repository's object store is as the sandbox sees it, when not at its host
    /// path (the job git dir's alternates then name this path).
    pub fn objects(&self) -> Option<PathBuf> {
        match self {
            SandboxLayout::Host => None,
            SandboxLayout::Mounted { .. } => Some(SANDBOX_OBJECTS.into()),
        }
    }

    /// Where the job's outbox is as the sandbox sees it, when the runtime can run paddock's
    /// snippet after an exec (see `ExecRequest::after`); `None` when it cannot.
    pub fn outbox(&self) -> Option<PathBuf> {
        match self {
            SandboxLayout::Host => None,
            SandboxLayout::Mounted { .. } => Some(SANDBOX_OUTBOX.into()),
        }
    }

    /// The name a new job's sandbox will have on the machine, recorded so the job finds it
    /// again; `None` for runtimes without named sandboxes.
    pub fn sandbox_name(&self, id: &JobId) -> Option<String> {
        match self {
            SandboxLayout::Mounted { names: Some(tag) } => Some(sandbox_name(tag, id)),
            _ => None,
        }
    }

    /// Whether the job's commands run in a sandbox that sees its files at paths of its own,
    /// as another uid when paddock is root, and syncs from inside.
    pub fn sandboxed(&self) -> bool {
        matches!(self, SandboxLayout::Mounted { .. })
    }
}

/// The name of a job's sandbox (its container): `paddock-<install>-<job>`. The one place it
/// is made; its network, egress sidecar and sync containers are named after it.
pub fn sandbox_name(install_tag: &str, id: &JobId) -> String {
    format!("paddock-{install_tag}-{id}")
}

/// The uid:gid the agent runs as: the host user's when paddock is not root, else the
/// profile's unprivileged uid.
pub fn agent_user(profile_uid: u32) -> (u32, u32) {
    let (uid, gid) = crate::sys::effective_ids();
    if uid == 0 {
        (profile_uid, profile_uid)
    } else {
        (uid, gid)
    }
}

/// What a job's commands learn about the job itself, the same in every runtime:
/// `PADDOCK_JOB_ID`, `PADDOCK_CPUS` (the CPU limit as a decimal; the host's count where the
/// runtime sets none, as the process runtime) and `PADDOCK_MEMORY_BYTES` (the memory limit
/// in bytes; absent when it is 0, which Docker takes as no limit). `sandboxed`: the
/// commands run in a sandbox of the job's own ([`SandboxLayout::sandboxed`]).
pub fn job_env(record: &JobRecord, sandboxed: bool) -> Vec<(String, String)> {
    let cpus = if sandboxed {
        record.limits.cpus.to_string()
    } else {
        std::thread::available_parallelism().map_or_else(|_| "1".into(), |n| n.to_string())
    };
    let mut env = vec![
        ("PADDOCK_JOB_ID".to_string(), record.id.to_string()),
        ("PADDOCK_CPUS".to_string(), cpus),
    ];
    if record.limits.memory.0 > 0 {
        env.push((
            "PADDOCK_MEMORY_BYTES".to_string(),
            record.limits.memory.0.to_string(),
        ));
    }
    env
}

/// `PADDOCK_DEADLINE` for an exec starting now with `timeout`: when paddock will stop the
/// command (RFC 3339, UTC, seconds). A job has no deadline of its own; each exec has one.
pub fn deadline_env(timeout: Duration) -> (String, String) {
    let deadline = chrono::Duration::from_std(timeout)
        .ok()
        .and_then(|timeout| chrono::Utc::now().checked_add_signed(timeout))
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MAX_UTC);
    (
        "PADDOCK_DEADLINE".to_string(),
        deadline.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    )
}

/// Git's identity and settings for the agent's commands, the same in every runtime: commits
/// carry `paddock agent (<job>)` unless `PADDOCK_GIT_AUTHOR_NAME`/`_EMAIL` are set where
/// paddock runs. In containers they are part of the container's environment, so even the
/// first exec has them.
pub fn agent_git_env(record: &JobRecord, sandboxed: bool) -> Vec<(String, String)> {
    let job = record.id.as_str();
    let name = std::env::var("PADDOCK_GIT_AUTHOR_NAME")
        .unwrap_or_else(|_| format!("paddock agent ({job})"));
    let email = std::env::var("PADDOCK_GIT_AUTHOR_EMAIL")
        .unwrap_or_else(|_| format!("{job}@paddock.invalid"));
    let mut env = vec![
        ("GIT_AUTHOR_NAME".to_string(), name.clone()),
        ("GIT_COMMITTER_NAME".to_string(), name),
        ("GIT_AUTHOR_EMAIL".to_string(), email.clone()),
        ("GIT_COMMITTER_EMAIL".to_string(), email),
    ];
    if sandboxed {
        // The borrowed object store belongs to another uid; git must not refuse the job's
        // own files for that either.
        for (key, value) in [
            ("GIT_CONFIG_COUNT", "1"),
            ("GIT_CONFIG_KEY_0", "safe.directory"),
            ("GIT_CONFIG_VALUE_0", "*"),
        ] {
            env.push((key.to_string(), value.to_string()));
        }
    }
    env
}
