//! Issue 44, part 2: `exec --user` and `rootfs: writable`. Where the runtime's kernel
//! contains root (gVisor, the microVM), root inside installs a `.deb` the test builds into
//! the job's own writable root, and the next job has no such package; root there has only
//! what adding users and installing packages need (gVisor: CHOWN, DAC_OVERRIDE and FOWNER,
//! through paddock's `root-caps`; the microVM: none), the agent none, and what root leaves
//! in the job's host mounts is the agent's on the host again, setuid bits gone, its
//! background process ended. runc and the process runtime refuse
//! another user (and a writable root at create, leaving nothing), with the runtimes that
//! allow it named.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::fixtures::{
    FixtureRepo, TestHome, docker_available, microvm_available, test_image, text,
};
use serde_json::Value;

const WRITABLE_ROOT: &str = "profiles:\n  default:\n    rootfs: writable\n";

/// A `.deb` of one file (`/usr/share/paddock-probe/hello`), built with `dpkg-deb`.
fn probe_deb(dir: &Path) -> PathBuf {
    let pkg = dir.join("pkg");
    std::fs::create_dir_all(pkg.join("DEBIAN")).unwrap();
    std::fs::create_dir_all(pkg.join("usr/share/paddock-probe")).unwrap();
    std::fs::write(
        pkg.join("DEBIAN/control"),
        "Package: paddock-probe\nVersion: 1.0\nArchitecture: all\nMaintainer: paddock <t@localhost>\nDescription: a test package\n",
    )
    .unwrap();
    std::fs::write(pkg.join("usr/share/paddock-probe/hello"), "installed\n").unwrap();
    let deb = dir.join("paddock-probe.deb");
    let built = Command::new("dpkg-deb")
        .args(["--root-owner-group", "-b"])
        .arg(&pkg)
        .arg(&deb)
        .output()
        .unwrap();
    assert!(built.status.success(), "dpkg-deb: {built:?}");
    deb
}

fn exec_as(home: &TestHome, id: &str, user: &str, script: &str) -> Value {
    home.json(&[
        "exec", "--json", "--user", user, id, "--", "sh", "-c", script,
    ])
}

/// Every file under `dir` on the host: its path, owner and mode.
fn owners(dir: &Path) -> Vec<(PathBuf, u32, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).unwrap().flatten() {
            let path = entry.path();
            if path.file_name().is_some_and(|n| n == ".git") {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            out.push((path.clone(), meta.uid(), meta.mode()));
            if meta.is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

/// The file API as root (`cat -u`, `cp -u`) has root's permissions inside the sandbox, no
/// more: it reads and writes root's files of the writable root, which the agent's file API
/// cannot. In the agent's workspace root without capabilities (the microVM) writes nothing;
/// gVisor's root (DAC_OVERRIDE) may, and what it writes is the agent's on the host.
fn files_as_root(home: &TestHome, id: &str, root_overrides: bool) {
    let made = exec_as(
        home,
        id,
        "root",
        "echo only-root > /etc/paddock-only-root && chmod 0600 /etc/paddock-only-root",
    );
    assert_eq!(made["exit_code"], 0, "{made}");
    let as_agent = home.run(&["cat", id, "/etc/paddock-only-root"]);
    assert!(!as_agent.status.success(), "{as_agent:?}");
    let said = String::from_utf8_lossy(&as_agent.stderr).to_lowercase();
    assert!(said.contains("permission"), "{said}");
    let as_root = home.run(&["cat", "--user", "root", id, "/etc/paddock-only-root"]);
    assert!(as_root.status.success(), "{as_root:?}");
    assert_eq!(as_root.stdout, b"only-root\n");
    let local = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(local.path(), "from cp\n").unwrap();
    let local = local.path().to_str().unwrap();
    let agent_cp = home.run(&["cp", local, &format!("{id}:/etc/paddock-by-cp")]);
    assert!(
        !agent_cp.status.success(),
        "the agent cannot write /etc: {agent_cp:?}"
    );
    home.ok(&[
        "cp",
        "-u",
        "root",
        local,
        &format!("{id}:/etc/paddock-by-cp"),
    ]);
    let owner = exec_as(
        home,
        id,
        "agent",
        "find /etc/paddock-by-cp -printf '%U\\n'; cat /etc/paddock-by-cp",
    );
    assert_eq!(text(&owner, "stdout"), "0\nfrom cp\n", "{owner}");
    let into_workspace = home.run(&["cp", "-u", "root", local, &format!("{id}:by-root.txt")]);
    // (`ls -l` meets gVisor 2022's statx gap; `find` stats as it can.)
    let listed = text(
        &exec_as(
            home,
            id,
            "agent",
            "find /workspace -maxdepth 1 -name 'by-root*' -printf '%f %U\\n'",
        ),
        "stdout",
    );
    if root_overrides {
        assert!(into_workspace.status.success(), "{into_workspace:?}");
        let owner = listed.strip_prefix("by-root.txt ").map(str::trim);
        assert!(owner.is_some(), "{listed}");
        assert_ne!(owner, Some("0"), "root's file stays root's: {listed}");
        home.ok(&["exec", id, "--", "rm", "by-root.txt"]);
    } else {
        // The workspace is the agent's, 0755: root without capabilities cannot write it.
        assert!(!into_workspace.status.success(), "{into_workspace:?}");
        assert!(!listed.contains("by-root"), "{listed}");
    }
}

/// The job's root installs a package in its writable root; the next job has none of it.
fn installs_and_forgets(home: &TestHome, repo: &FixtureRepo, runtime: &str, deb: &Path) {
    let image = test_image();
    let job = home.create(repo, &["--runtime", runtime, "--image", &image]);
    let id = text(&job, "id");
    home.ok(&["cp", deb.to_str().unwrap(), &format!("{id}:probe.deb")]);
    let who = exec_as(
        home,
        &id,
        "root",
        "id -u; grep -E 'Cap(Eff|Prm|Bnd)' /proc/self/status",
    );
    assert_eq!(who["exit_code"], 0, "{who}");
    let said = text(&who, "stdout");
    assert!(said.starts_with("0\n"), "{said}");
    // gVisor's root: CHOWN (bit 0), DAC_OVERRIDE (1) and FOWNER (3) in every set, the
    // bounding one included, so nothing it runs gains another; the microVM's root: none.
    let root_overrides = runtime == "runsc";
    if root_overrides {
        assert_eq!(said.matches("000000000000000b").count(), 3, "root: {said}");
    } else {
        assert!(said.contains("CapEff:\t0000000000000000"), "root: {said}");
    }
    // The agent: none, whatever the runtime.
    let agent = exec_as(
        home,
        &id,
        "agent",
        "grep -E 'Cap(Eff|Prm)' /proc/self/status",
    );
    let agent = text(&agent, "stdout");
    assert_eq!(agent.matches("0000000000000000").count(), 2, "{agent}");
    let agent_try = home.run(&["exec", &id, "--", "dpkg", "-i", "probe.deb"]);
    assert!(
        !agent_try.status.success(),
        "the agent cannot install: {agent_try:?}"
    );
    let installed = exec_as(
        home,
        &id,
        "root",
        "dpkg -i probe.deb && cat /usr/share/paddock-probe/hello",
    );
    assert_eq!(installed["exit_code"], 0, "{installed}");
    assert!(
        text(&installed, "stdout").ends_with("installed\n"),
        "{installed}"
    );
    files_as_root(home, &id, root_overrides);
    let next = home.create(repo, &["--runtime", runtime, "--image", &image]);
    let next_id = text(&next, "id");
    let gone = home.run(&[
        "exec",
        &next_id,
        "--",
        "sh",
        "-c",
        "dpkg -s paddock-probe >/dev/null 2>&1 || test -e /usr/share/paddock-probe/hello",
    ]);
    assert!(
        !gone.status.success(),
        "the next job has no such package: {gone:?}"
    );
    for job in [&id, &next_id] {
        home.ok(&["rm", job, "--force"]);
    }
}

#[test]
fn gvisor_root_installs_a_package_in_its_own_root_and_leaves_the_host_the_agents() {
    let test = "gvisor_root_installs_a_package_in_its_own_root_and_leaves_the_host_the_agents";
    if !docker_available(test) {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let deb = probe_deb(scratch.path());
    let repo = FixtureRepo::new();
    let home = TestHome::new().with_config(WRITABLE_ROOT);
    installs_and_forgets(&home, &repo, "runsc", &deb);

    // Contained: root writes nothing of the job's host mounts the agent could not.
    let image = test_image();
    let job = home.create(&repo, &["--runtime", "runsc", "--image", &image]);
    let id = text(&job, "id");
    let worktree = PathBuf::from(text(&job, "worktree"));
    let agent_uid = std::fs::metadata(&worktree).unwrap().uid();
    let other = home.create(&repo, &["--runtime", "runsc", "--image", &image]);
    let other_worktree = PathBuf::from(text(&other, "worktree"));
    std::fs::write(other_worktree.join("theirs.txt"), "another job's\n").unwrap();
    // Where each may write: every directory of the job's own mounts, three levels deep.
    let probe = "for d in $(find /workspace /paddock/git /paddock/outbox /paddock-objects -maxdepth 3 -type d 2>/dev/null); do \
                 if touch \"$d/.w$$\" 2>/dev/null; then echo \"$d\"; rm -f \"$d/.w$$\"; fi; done | sort";
    let agent_may = text(&exec_as(&home, &id, "agent", probe), "stdout");
    let root_may = text(&exec_as(&home, &id, "root", probe), "stdout");
    for dir in root_may.lines() {
        assert!(
            agent_may.lines().any(|d| d == dir),
            "root wrote {dir}, which the agent cannot (agent: {agent_may})"
        );
    }
    // Nor reads what the agent cannot.
    let reads = "find /workspace /paddock/git /paddock/outbox /paddock-objects -maxdepth 4 -readable 2>/dev/null | sort";
    let agent_reads = text(&exec_as(&home, &id, "agent", reads), "stdout");
    let root_reads = text(&exec_as(&home, &id, "root", reads), "stdout");
    for path in root_reads.lines() {
        assert!(
            agent_reads.lines().any(|p| p == path),
            "root read {path}, which the agent cannot"
        );
    }
    // The user's repository and the other job: not written, not even seen.
    let attack = exec_as(
        &home,
        &id,
        "root",
        &format!(
            "touch /paddock-objects/x 2>/dev/null && echo wrote-objects; \
             test -e {0}/theirs.txt && echo sees-other; \
             touch {1}/x 2>/dev/null && echo wrote-repo; \
             echo /tmp/x.so > /etc/ld.so.preload 2>/dev/null && echo wrote-preload; \
             cp /bin/true /.paddock-tools/exec/paddock 2>/dev/null && echo replaced-paddock; \
             true",
            other_worktree.display(),
            repo.path().display()
        ),
    );
    assert_eq!(text(&attack, "stdout"), "", "{attack}");
    // A directory the agent opened to everyone: root's files there are the agent's again
    // once the command ends, setuid bit cleared, and its background process is gone.
    home.sh(&id, "mkdir -p open && chmod 0777 open");
    let planted = exec_as(
        &home,
        &id,
        "root",
        "cp /bin/true open/suid && chmod 4755 open/suid && mkdir open/d && echo x > open/d/f \
         && chmod 2775 open/d && (sleep 600 &) && echo planted",
    );
    assert_eq!(text(&planted, "stdout"), "planted\n", "{planted}");
    for (path, uid, mode) in owners(&worktree) {
        assert_eq!(
            uid,
            agent_uid,
            "{} is uid {uid} on the host",
            path.display()
        );
        assert_eq!(mode & 0o6000, 0, "{} keeps mode {mode:o}", path.display());
    }
    let left = home.sh(
        &id,
        "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done",
    );
    assert!(
        !left.contains("sleep 600"),
        "root's process lives on: {left}"
    );
    // The agent can remove all of it, and so can paddock.
    home.sh(&id, "rm -rf open");
    assert!(!worktree.join("open").exists());
    std::fs::set_permissions(&worktree, std::fs::Permissions::from_mode(0o755)).unwrap();
    for job in [&id, &text(&other, "id")] {
        home.ok(&["rm", job, "--force"]);
    }
}

#[test]
fn runc_and_process_jobs_refuse_another_user_and_a_writable_root() {
    let test = "runc_and_process_jobs_refuse_another_user_and_a_writable_root";
    if !docker_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let image = test_image();
    for runtime in ["docker", "process"] {
        let job = home.create(&repo, &["--runtime", runtime, "--image", &image]);
        let id = text(&job, "id");
        for user in ["root", "0", "1234:5"] {
            let refused = home.run(&["exec", "--user", user, &id, "--", "touch", "ran"]);
            assert_eq!(
                refused.status.code(),
                Some(125),
                "{runtime} {user}: {refused:?}"
            );
            let said = String::from_utf8_lossy(&refused.stderr);
            assert!(
                said.contains("runs only the agent's own user") && said.contains("runsc"),
                "{said}"
            );
        }
        assert!(!PathBuf::from(text(&job, "worktree")).join("ran").exists());
        // The agent's own uid is no other user (a container's; a process job's agent is
        // whoever runs paddock).
        if runtime == "docker" {
            let agent = text(
                &home.json(&["exec", "--json", &id, "--", "id", "-u"]),
                "stdout",
            );
            let same = home.json(&["exec", "--json", "--user", agent.trim(), &id, "--", "true"]);
            assert_eq!(same["exit_code"], 0, "{same}");
        }
        // The file API as another user: refused alike, before anything is read or written.
        let cat = home.run(&["cat", "--user", "root", &id, "README.md"]);
        assert!(!cat.status.success(), "{runtime}: {cat:?}");
        assert!(cat.stdout.is_empty(), "{runtime}: nothing read");
        let local = tempfile::NamedTempFile::new().unwrap();
        let local = local.path().to_str().unwrap();
        let cp = home.run(&["cp", "-u", "0", local, &format!("{id}:by-root")]);
        let said = String::from_utf8_lossy(&cp.stderr);
        assert!(
            !cp.status.success() && said.contains("runs only the agent's own user"),
            "{runtime}: {cp:?}"
        );
        assert!(
            !PathBuf::from(text(&job, "worktree"))
                .join("by-root")
                .exists()
        );
        let unknown = home.run(&["exec", "--user", "www-data", &id, "--", "true"]);
        assert_eq!(unknown.status.code(), Some(2), "{unknown:?}");
        home.ok(&["rm", &id, "--force"]);
    }
    let home = home.with_config(WRITABLE_ROOT);
    let before = repo.branches();
    let refused = home.run(&[
        "create",
        "--repo",
        repo.path().to_str().unwrap(),
        "--runtime",
        "docker",
        "--image",
        &image,
    ]);
    assert!(!refused.status.success(), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("rootfs: writable") && said.contains("runsc"),
        "{said}"
    );
    assert_eq!(repo.branches(), before, "no branch left");
    assert_eq!(home.job_records(), 0, "no record left");
    assert!(home.docker_objects().is_empty(), "no container left");
}

#[test]
fn microvm_root_installs_a_package_in_its_own_root_and_the_next_job_has_none() {
    let test = "microvm_root_installs_a_package_in_its_own_root_and_the_next_job_has_none";
    if !microvm_available(test) {
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let deb = probe_deb(scratch.path());
    let repo = FixtureRepo::new();
    let home = TestHome::new().with_config(WRITABLE_ROOT);
    let _cleanup = crate::microvm::KillVms(home.root());
    installs_and_forgets(&home, &repo, "microvm", &deb);
}
