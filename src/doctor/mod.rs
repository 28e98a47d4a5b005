//! `paddock doctor`: checks what paddock needs on this machine and says how to fix what is
//! missing. Each check is `ok`, `warn` or `fail`; only `fail` makes the command exit non-zero.

use std::path::Path;

use serde::Serialize;

use crate::config::Config;
use crate::runtime::{Runtime, Runtimes};
use crate::store::PaddockHome;
use crate::units::format_size;

mod access;
mod engines;
mod microvm;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
    /// What to do about a warn or fail.
    pub fix: Option<String>,
}

fn check(
    name: &'static str,
    status: Status,
    detail: impl Into<String>,
    fix: Option<&str>,
) -> Check {
    Check {
        name,
        status,
        detail: detail.into(),
        fix: fix.map(str::to_string),
    }
}

/// Runs every check. Docker checks are skipped (as warnings) when the daemon is unreachable,
/// since the process runtime still works.
/// `repo` is the common dir (`.git`) of the repository doctor runs in, if any.
pub async fn run(
    home: &PaddockHome,
    runtimes: &Runtimes,
    config: &Config,
    repo: Option<&Path>,
) -> Vec<Check> {
    let mut checks = vec![git_check().await];
    let profile = config.profiles.get(&config.default_profile.value);
    let image = profile.map_or_else(
        || crate::config::DEFAULT_IMAGE.to_string(),
        |p| p.image.value.clone(),
    );
    let uid = profile.map_or(1000, |p| p.uid.value);
    checks.extend(docker_checks(runtimes.with_sandboxes(), &image).await);
    if checks
        .iter()
        .any(|c| c.name == "docker" && c.status == Status::Ok)
    {
        checks.push(job_ranges_check(runtimes.with_sandboxes(), &image).await);
    }
    checks.extend(engines::engine_checks(runtimes, config, &image).await);
    checks.extend(engines::port_relay_check(home, runtimes));
    checks.push(state_root_check(home, &crate::env::ProcessEnv));
    checks.push(access::object_store_check(repo, uid));
    checks.push(disk_check(home));
    checks.push(admission_check(home, config));
    checks.push(trust_check(config));
    checks.push(legacy_jobs_check(home));
    checks.push(overlay_check());
    checks.push(disk_limit_check());
    checks.push(microvm::microvm_check(&crate::runtime::microvm::assets_dir(home)).await);
    checks.push(checkpoints_check(runtimes));
    checks.push(other_users_check());
    // The runtime `auto` falls back to, and what it does not isolate.
    checks.push(check(
        "process runtime",
        Status::Ok,
        runtimes.fallback().describe().isolation,
        None,
    ));
    checks
}

/// What each runtime gives of checkpoints and pause (issue 43): a checkpoint of a frozen
/// job, or one taken live, and whether `pause` can freeze it.
fn checkpoints_check(runtimes: &Runtimes) -> Check {
    let mut seen = std::collections::BTreeMap::new();
    for runtime in runtimes.all() {
        let what = match runtime.capabilities().freeze {
            Some(freeze) if freeze.reads_while_frozen() => "checkpoints of the frozen job; pause",
            Some(_) => "checkpoints taken live (a frozen VM runs nothing to read them); pause",
            None => "checkpoints between execs (nothing runs then); no pause",
        };
        seen.insert(runtime.describe().name, what);
    }
    let detail = seen
        .iter()
        .map(|(name, what)| format!("{name}: {what}"))
        .collect::<Vec<_>>()
        .join("; ");
    check("checkpoints", Status::Ok, detail, None)
}

/// Whether the job networks' range is unreachable from the host (`egress::ranges`); doctor
/// adds the route when it is missing, as paddock does before each job network.
async fn job_ranges_check(docker: &dyn Runtime, image: &str) -> Check {
    let range = crate::egress::ranges::job_range();
    let guarded = match docker.capabilities().network {
        Some(network) => network.guard_job_ranges(image).await,
        None => None,
    };
    match guarded {
        Some(Ok(added)) => check(
            "job ranges",
            Status::Ok,
            format!(
                "unreachable route present for {range}{}",
                if added { " (added now)" } else { "" }
            ),
            None,
        ),
        Some(Err(error)) => check(
            "job ranges",
            Status::Warn,
            format!("{error}; a removed job's address may be reachable through the default route"),
            Some(&format!("ip route replace unreachable {range}   (as root)")),
        ),
        None => check("job ranges", Status::Ok, "no job networks", None),
    }
}

/// Whether `checkout: overlay` works here, and with which driver. Only a warning when it
/// does not: `worktree` (the default) needs nothing.
fn overlay_check() -> Check {
    match crate::overlay::driver() {
        Ok(crate::overlay::Driver::Fuse) if !crate::overlay::fuse_shares() => check(
            "overlay checkout",
            Status::Warn,
            "`checkout: overlay` mounts with fuse-overlayfs, but only for the process runtime: `/etc/fuse.conf` has no `user_allow_other`, so a container cannot open the checkout",
            Some(
                "echo user_allow_other >> /etc/fuse.conf (as root), or keep `checkout: worktree` for container jobs",
            ),
        ),
        Ok(driver) => check(
            "overlay checkout",
            Status::Ok,
            match driver {
                crate::overlay::Driver::Kernel => {
                    format!("`checkout: overlay` mounts with {driver}")
                }
                crate::overlay::Driver::Fuse => format!(
                    "`checkout: overlay` mounts with {driver} (for runc and process jobs; gVisor cannot open a FUSE checkout)"
                ),
            },
            None,
        ),
        Err(error) => check(
            "overlay checkout",
            Status::Warn,
            format!("{error}; `--checkout overlay` is refused (worktree checkouts work)"),
            Some("as root, a kernel with overlayfs; otherwise apt-get install fuse-overlayfs"),
        ),
    }
}

/// Whether jobs can have a disk limit (`disk`, `--disk`) and container jobs a git disk
/// (`git_disk`), and by which mechanism. A warning when not: jobs without a limit work, but
/// nothing caps what they write on the host.
fn disk_limit_check() -> Check {
    let problem = match (crate::disk::available(), crate::overlay::driver()) {
        (Err(error), _) => Some(error.to_string()),
        (Ok(_), Err(error)) => Some(format!("a disk limit needs the overlay checkout: {error}")),
        (Ok(_), Ok(_)) => None,
    };
    match problem {
        None => check(
            "disk limit",
            Status::Ok,
            format!(
                "`disk` limits everything a job writes on the host (checkout changes, git dir, outbox) with a {}; a container job without one gets a git disk (`git_disk`, default {}) for its git dir and outbox",
                crate::disk::MECHANISM,
                crate::config::DEFAULT_GIT_DISK
            ),
            None,
        ),
        Some(problem) => check(
            "disk limit",
            Status::Warn,
            format!(
                "{problem}; `--disk` is refused, and nothing caps what a job writes to its git dir and outbox (jobs without a limit work)"
            ),
            Some(
                "run paddock as root on a kernel with loop devices, ext4 and overlayfs, with mkfs.ext4 (apt-get install e2fsprogs)",
            ),
        ),
    }
}

/// What `exec --user root|UID` needs: a runtime that contains root, and for gVisor on this
/// host the static busybox that settles that user's files (see `runtime::docker::users`).
fn other_users_check() -> Check {
    if crate::runtime::docker::other_users_helper() {
        check(
            "other users",
            Status::Ok,
            "`exec --user root|UID[:GID]` and `rootfs: writable` run in runsc jobs (with the host's static busybox) and microvm jobs; runc and process jobs refuse them",
            None,
        )
    } else {
        check(
            "other users",
            Status::Warn,
            "no static busybox at /bin/busybox: runsc jobs refuse `exec --user` (microvm jobs take it; runc and process jobs never do)",
            Some("apt-get install busybox-static, then create the runsc job again"),
        )
    }
}

/// The host budget and what holds it: jobs' reserves, busy exec slots, who waits. A warning
/// while something waits (a create or exec that waits is not broken, but someone waits).
fn admission_check(home: &PaddockHome, config: &Config) -> Check {
    let host = crate::admission::HostCapacity::read();
    let admission = match crate::admission::Admission::open(home, &config.admission, host) {
        Ok(admission) => admission,
        Err(error) => {
            return check(
                "admission",
                Status::Fail,
                format!("the admission queue cannot be opened: {error}"),
                Some("check that $PADDOCK_HOME is writable by this user"),
            );
        }
    };
    let records = home
        .store()
        .list()
        .map(|(records, _)| records)
        .unwrap_or_default();
    let view = admission.view(&records);
    let detail = format!(
        "{} (host: {} cores, {})",
        view.summary(),
        host.cores,
        format_size(host.memory)
    );
    if view.waiting.is_empty() {
        return check("admission", Status::Ok, detail, None);
    }
    check(
        "admission",
        Status::Warn,
        detail,
        Some(
            "remove jobs you no longer need (paddock ls, paddock rm), or raise `admission:` in the user config (paddock config show lists it)",
        ),
    )
}

/// The repositories whose `.paddock.yaml` may widen a job (`trust:`), and whether the one
/// doctor runs in is among them and what its file had refused.
fn trust_check(config: &Config) -> Check {
    let listed = if config.trust.is_empty() {
        "no repository is trusted: a repository's .paddock.yaml may only narrow a job".to_string()
    } else {
        format!("trusted repositories: {}", config.trust.join(", "))
    };
    match &config.repo_trust {
        Some(trust) if !trust.refusals.is_empty() => check(
            "repository trust",
            Status::Warn,
            format!(
                "{listed}; this repository's file is untrusted and {} of its values are refused: {}",
                trust.refusals.len(),
                trust
                    .refusals
                    .iter()
                    .map(|r| format!("`{}`", r.key))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some(
                "paddock config show lists why; `paddock trust REPO` if you wrote the file yourself",
            ),
        ),
        _ => check("repository trust", Status::Ok, listed, None),
    }
}

/// Jobs made before private git dirs share the user's git metadata with their container.
/// They are not run again; `paddock rm` removes them as before (saving uncommitted work).
fn legacy_jobs_check(home: &PaddockHome) -> Check {
    let legacy: Vec<String> = home
        .store()
        .list()
        .map(|(records, _)| records)
        .unwrap_or_default()
        .into_iter()
        .filter(super::job::JobRecord::is_legacy)
        .map(|r| r.id.to_string())
        .collect();
    if legacy.is_empty() {
        return check(
            "job layout",
            Status::Ok,
            "every job has a private git dir",
            None,
        );
    }
    check(
        "job layout",
        Status::Warn,
        format!(
            "{} job(s) made by an older paddock share the repository's git metadata with their container: {}",
            legacy.len(),
            legacy.join(", ")
        ),
        Some(&format!(
            "paddock rm {}   (uncommitted work is saved to refs/paddock/wip/<id> in paddock's wip store; the branch stays when it has commits), then create them again",
            legacy.join(" ")
        )),
    )
}

async fn git_check() -> Check {
    let output = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tokio::process::Command::new("git")
            .arg("--version")
            .output(),
    )
    .await;
    match output {
        Ok(Ok(out)) if out.status.success() => {
            let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let version: Vec<u32> = text
                .trim_start_matches("git version ")
                .split('.')
                .take(2)
                .filter_map(|p| p.parse().ok())
                .collect();
            if version.as_slice() >= [2, 38].as_slice() {
                check("git", Status::Ok, text, None)
            } else {
                check(
                    "git",
                    Status::Warn,
                    text,
                    Some("paddock is tested with git 2.38 or newer"),
                )
            }
        }
        _ => check(
            "git",
            Status::Fail,
            "git was not found",
            Some("install git (apt-get install git)"),
        ),
    }
}

async fn docker_checks(docker: &dyn Runtime, image: &str) -> Vec<Check> {
    let facts = match docker.capabilities().images {
        Some(images) => Some(images.engine_facts().await),
        None => None,
    };
    let facts = match facts {
        Some(Ok(facts)) => facts,
        Some(Err(e)) => {
            return vec![check(
                "docker",
                Status::Warn,
                e.to_string(),
                Some(
                    "start the Docker daemon (is the socket at /var/run/docker.sock?), or use --runtime process",
                ),
            )];
        }
        None => return Vec::new(),
    };
    let mut checks = vec![check(
        "docker",
        Status::Ok,
        format!("engine {} (API {})", facts.version, facts.api_version),
        None,
    )];
    match docker
        .check_ready(image, crate::config::NetworkMode::None)
        .await
    {
        Ok(()) => {
            checks.push(check(
                "image",
                Status::Ok,
                format!("{image} is present"),
                None,
            ));
            checks.push(toolchains_check(docker, image).await);
        }
        Err(e) => checks.push(check(
            "image",
            Status::Fail,
            e.to_string(),
            Some(&format!("paddock image build --tag {image}")),
        )),
    }
    let has_runsc = facts.oci_runtimes.iter().any(|r| r == "runsc");
    checks.push(check(
        "runtimes",
        if has_runsc { Status::Ok } else { Status::Warn },
        facts.oci_runtimes.join(", "),
        (!has_runsc).then_some(
            "for gVisor: apt-get install runsc, add it to /etc/docker/daemon.json (see docs/gvisor.md), reload dockerd",
        ),
    ));
    for (runtime, problem) in &facts.misconfigured {
        checks.push(check(
            "runtime args",
            Status::Fail,
            problem.clone(),
            Some(&format!(
                "edit the runtimeArgs of `{runtime}` in /etc/docker/daemon.json (see docs/gvisor.md), then pkill -HUP dockerd"
            )),
        ));
    }
    checks.push(if facts.unenforced_limits.is_empty() {
        check(
            "limits",
            Status::Ok,
            "memory, swap, cpu and pids limits are enforced",
            None,
        )
    } else {
        check(
            "limits",
            Status::Warn,
            format!(
                "not enforced by this daemon: {}",
                facts.unenforced_limits.join(", ")
            ),
            Some("enable the cgroup controllers (kernel command line or cgroup v2)"),
        )
    });
    checks.push(match &facts.no_build_cell {
        None => check(
            "builds",
            Status::Ok,
            "a repository's Dockerfile builds with the job's process, memory and CPU caps",
            None,
        ),
        Some(why) => check(
            "builds",
            Status::Warn,
            format!("a build's processes cannot be capped: {why}; untrusted repositories' Dockerfiles are not built"),
            Some("prebuild a devcontainer's image and name it with `image:`, or trust the repository (`paddock trust REPO`)"),
        ),
    });
    checks
}

/// The tools agents run in nearly every task, as the agent image lists them
/// (`/etc/paddock-toolchains`, written by Dockerfile.agent's build).
const TOOLCHAINS: [&str; 4] = ["python3", "node", "make", "curl"];

/// The tools Dockerfile.agent lists: only these are shown (the file is the image's, so
/// whatever else it holds never reaches the row).
const LISTED: [&str; 16] = [
    "python3", "pip3", "node", "npm", "make", "gcc", "g++", "curl", "wget", "jq", "rg", "unzip",
    "xz", "less", "ssh", "git",
];

/// What the image's toolchains are (name and version), read from the image without running
/// it: a warning when the everyday ones are missing, since agents' commands will fail.
async fn toolchains_check(docker: &dyn Runtime, image: &str) -> Check {
    let Some(images) = docker.capabilities().images else {
        return check(
            "toolchains",
            Status::Warn,
            "this runtime cannot read images",
            None,
        );
    };
    let listed = match images
        .image_file(image, "/etc/paddock-toolchains", 64 << 10)
        .await
    {
        Ok(Some(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        Ok(None) => {
            return check(
                "toolchains",
                Status::Warn,
                format!("{image} lists none (not built by `paddock image build`)"),
                Some("paddock image build (Python, Node.js, build tools), or a devcontainer.json"),
            );
        }
        Err(e) => return check("toolchains", Status::Warn, e.to_string(), None),
    };
    let tools = listed_tools(&listed);
    let shown = tools
        .iter()
        .map(|(tool, version)| format!("{tool} {version}"))
        .collect::<Vec<_>>()
        .join(", ");
    let missing: Vec<&str> = TOOLCHAINS
        .into_iter()
        .filter(|tool| !tools.iter().any(|(t, _)| t == tool))
        .collect();
    if missing.is_empty() {
        check("toolchains", Status::Ok, shown, None)
    } else {
        check(
            "toolchains",
            Status::Warn,
            format!("{image} lacks {} (has: {shown})", missing.join(", ")),
            Some("paddock image build without --minimal, or a devcontainer.json that brings them"),
        )
    }
}

/// The known tools of a toolchains file and their short versions; any other line is
/// dropped.
fn listed_tools(listed: &str) -> Vec<(String, String)> {
    listed
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .filter(|(tool, _)| LISTED.contains(tool))
        .map(|(tool, version)| (tool.to_string(), short_version(version)))
        .collect()
}

/// The version in a `--version` line: of each word, the digits and dots it starts with once
/// its leading letters go (`Python 3.11.2` → `3.11.2`, `v18.20.4`, `jq-1.6`,
/// `OpenSSH_9.2p1` → `9.2`, `12.2.0-14+deb12u1)` → `12.2.0`), the first with a dot, else
/// the first number (`less 590`), else the line itself, cut short.
fn short_version(line: &str) -> String {
    let numbers: Vec<&str> = line
        .split_whitespace()
        .map(|word| {
            let digits = word.trim_start_matches(|c: char| !c.is_ascii_digit());
            let end = digits
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(digits.len());
            digits[..end].trim_end_matches('.')
        })
        .filter(|number| !number.is_empty())
        .collect();
    numbers
        .iter()
        .find(|number| number.contains('.'))
        .or_else(|| numbers.first())
        .map_or_else(|| line.trim(), |n| *n)
        .chars()
        .take(40)
        .collect()
}

fn disk_check(home: &PaddockHome) -> Check {
    let Some(free) = crate::sys::free_space(home.root()) else {
        return check("disk", Status::Warn, "could not read free space", None);
    };
    let detail = format!("{} free under {}", format_size(free), home.root().display());
    if free < 2 << 30 {
        check(
            "disk",
            Status::Warn,
            detail,
            Some("free some space, or run `paddock sweep`"),
        )
    } else {
        check("disk", Status::Ok, detail, None)
    }
}

/// Where the state root is and why; a warning when a state root an older paddock used
/// (before root's moved to [`crate::store::SYSTEM_ROOT`]) still holds jobs.
fn state_root_check(home: &PaddockHome, env: &dyn crate::env::EnvLookup) -> Check {
    let root = home.root();
    let why = if env.var("PADDOCK_HOME").is_some() {
        "PADDOCK_HOME"
    } else if crate::sys::is_root() {
        "root's default"
    } else {
        "your user's default"
    };
    let detail = format!("{} ({why})", root.display());
    let older = crate::store::default_root(env, false).filter(|older| {
        crate::sys::is_root() && env.var("PADDOCK_HOME").is_none() && older != root
    });
    let jobs = older.as_ref().map_or(0, |older| {
        std::fs::read_dir(older.join("jobs")).map_or(0, |entries| {
            entries
                .filter_map(std::result::Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                .count()
        })
    });
    match older {
        Some(older) if jobs > 0 => check(
            "state root",
            Status::Warn,
            format!(
                "{detail}; {jobs} job(s) are still in `{}`, where paddock kept root's state before",
                older.display()
            ),
            Some(&format!(
                "PADDOCK_HOME={} paddock ls   (remove them there with `paddock rm`, or keep using that root by setting PADDOCK_HOME)",
                older.display()
            )),
        ),
        _ => check("state root", Status::Ok, detail, None),
    }
}

#[cfg(test)]
mod toolchain_tests {
    #[test]
    fn only_known_tools_and_short_versions_reach_the_row() {
        let hostile = format!(
            "python3\tPython 3.11.2\n\u{1b}]0;owned\u{7}\tx\nevil\t1.0\nnode\t{}\n",
            "v".repeat(5000)
        );
        let tools = super::listed_tools(&hostile);
        assert_eq!(tools[0], ("python3".to_string(), "3.11.2".to_string()));
        assert_eq!(tools.len(), 2, "{tools:?}");
        assert_eq!(tools[1].0, "node");
        assert!(tools[1].1.chars().count() <= 40, "{tools:?}");
    }

    #[test]
    fn a_version_line_gives_its_version() {
        for (line, version) in [
            ("Python 3.11.2", "3.11.2"),
            ("v18.20.4", "18.20.4"),
            ("jq-1.6", "1.6"),
            (
                "OpenSSH_9.2p1 Debian-2+deb12u10, OpenSSL 3.0.20 7 Apr 2026",
                "9.2",
            ),
            ("gcc (Debian 12.2.0-14+deb12u1) 12.2.0", "12.2.0"),
            ("less 590 (GNU regular expressions)", "590"),
            (
                "pip 23.0.1 from /usr/lib/python3/dist-packages/pip (python 3.11)",
                "23.0.1",
            ),
            ("unknown", "unknown"),
        ] {
            assert_eq!(super::short_version(line), version, "{line}");
        }
    }
}
