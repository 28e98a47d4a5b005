//! The warm pool of the microVM runtime against real QEMU, the way people run it: root, no
//! `PADDOCK_HOME` (the default state root), the repository under a closed directory, and the
//! background refill a create asks for. `pool fill` boots a VM that waits; a create claims
//! it (its record says so) and is ready far sooner than a cold create; a commit made inside
//! reaches the branch; the claimed VM cannot see another job's files or write what stays
//! read-only, and the user's repository keeps every owner and mode; a sweep keeps a claimed
//! VM and reaps a waiting one whose QEMU was killed; `drain` and `rm` leave no QEMU or
//! virtiofsd. Each boot takes 10-60 s under the emulator. `PADDOCK_SKIP_MICROVM_TESTS=1`
//! skips it and says so.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::default_paths::{Machine, Who};
use crate::fixtures::{microvm_available, test_image, text};
use crate::microvm::{KillVms, vm_processes};

fn exec(machine: &Machine, id: &str, script: &str) -> Value {
    machine.json(&["exec", "--json", id, "--", "sh", "-c", script])
}

fn slots(machine: &Machine) -> Vec<Value> {
    machine
        .json(&["pool", "status", "--json"])
        .as_array()
        .expect("a list")
        .clone()
}

/// The slots of this test's profile (the default state root may hold other tests').
fn my_slots(machine: &Machine, profile: &str, state: &str) -> Vec<String> {
    slots(machine)
        .iter()
        .filter(|s| s["profile"] == profile && s["state"] == state)
        .map(|s| text(s, "id"))
        .collect()
}

fn slot_dir(machine: &Machine, slot: &str) -> PathBuf {
    machine.state_root().join("pool").join(slot)
}

/// A sweep of the default state root, which other tests on this machine may use at the
/// same time: an error about one of theirs fails the sweep's exit code, not this test; an
/// error naming one of `mine` does.
fn sweep(machine: &Machine, mine: &[&str]) -> Value {
    let output = machine.run(&["sweep", "--json"]);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "sweep printed no report ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let errors = report["errors"].to_string();
    for id in mine {
        assert!(!errors.contains(id), "the sweep failed on {id}: {report}");
    }
    report
}

fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "waited {within:?} for {what}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// On a failure half-way, removes what the test made in the shared default state root: its
/// jobs (with their claimed VMs), its profile's waiting VMs (a background refill's too), and
/// any process still naming one of its slots.
struct Cleanup<'a> {
    machine: &'a Machine,
    profile: String,
    jobs: std::cell::RefCell<Vec<String>>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let pool = self.machine.state_root().join("pool");
        let dirs: Vec<PathBuf> = std::fs::read_dir(&pool)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|dir| {
                std::fs::read_to_string(dir.join("slot.json"))
                    .is_ok_and(|t| t.contains(&format!("\"profile\": \"{}\"", self.profile)))
            })
            .collect();
        for job in self.jobs.borrow().iter() {
            self.machine.run(&["rm", "--force", job]);
        }
        self.machine
            .run(&["pool", "drain", "--profile", &self.profile]);
        drop(dirs.into_iter().map(KillVms).collect::<Vec<_>>());
    }
}

fn qemu_of(dir: &Path) -> Option<String> {
    vm_processes(dir)
        .into_iter()
        .find(|c| c.contains("qemu-system"))
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn a_warm_microvm_is_claimed_fast_commits_stays_isolated_and_leaves_nothing() {
    if !microvm_available("a_warm_microvm_is_claimed_fast") {
        return;
    }
    let machine = Machine::new(Who::Root);
    let profile = format!("vmpool{}", std::process::id());
    std::fs::write(
        machine.repo.join(".paddock.yaml"),
        format!(
            "profiles:\n  {profile}:\n    runtime: microvm\n    image: {}\n    memory: 256m\n    cpus: 1\n    pool: {{size: 1}}\n",
            test_image()
        ),
    )
    .expect("write the profile");
    // A pool is more than the user's profile gives: the repository's file must be trusted.
    machine.trust_repo();
    crate::fixtures::git(&machine.repo, &["add", "-A"]);
    crate::fixtures::git(
        &machine.repo,
        &["commit", "-q", "-m", "a pooled microVM profile"],
    );
    let before = machine.repo_modes();
    let main_before = machine.repo_git(&["rev-parse", "main"]);
    let mut guards = Vec::new();
    let cleanup = Cleanup {
        machine: &machine,
        profile: profile.clone(),
        jobs: std::cell::RefCell::default(),
    };

    // `pool fill` boots one VM, which waits with its agent ready.
    let filled = machine.json(&["pool", "fill", "--json", "--profile", &profile]);
    let started = filled["started"].as_array().expect("a list").clone();
    assert_eq!(started.len(), 1, "{filled}");
    let slot = started[0].as_str().expect("an id").to_string();
    guards.push(KillVms(slot_dir(&machine, &slot)));
    assert_eq!(my_slots(&machine, &profile, "ready"), vec![slot.clone()]);
    assert!(
        qemu_of(&slot_dir(&machine, &slot)).is_some(),
        "the slot's VM runs"
    );

    // A cold create of the same profile (other limits: no slot fits) for the comparison,
    // and a job whose files the warm one must not see.
    let clock = Instant::now();
    let cold = machine.json(&[
        "create",
        "--json",
        "--profile",
        &profile,
        "--task",
        "cold",
        "--memory",
        "300m",
    ]);
    let cold_time = clock.elapsed();
    assert_eq!(cold["pool"]["start"], "cold", "{cold}");
    assert!(
        text(&cold["pool"], "reason").contains("other CPU, memory or pids limits"),
        "{cold}"
    );
    let cold_id = text(&cold, "id");
    cleanup.jobs.borrow_mut().push(cold_id.clone());
    guards.push(KillVms(machine.state_root().join("work").join(&cold_id)));
    let planted = exec(
        &machine,
        &cold_id,
        "echo SECRET-OF-COLD > secret.txt && echo ok",
    );
    assert_eq!(planted["exit_code"], 0, "{planted}");

    // The warm create claims the waiting VM: ready far sooner than the cold one.
    let clock = Instant::now();
    let warm = machine.json(&["create", "--json", "--profile", &profile, "--task", "warm"]);
    let warm_time = clock.elapsed();
    assert_eq!(warm["pool"]["start"], "warm", "{warm}");
    assert_eq!(text(&warm["pool"], "slot"), slot, "{warm}");
    assert!(
        warm_time * 3 < cold_time,
        "warm {warm_time:?} vs cold {cold_time:?}"
    );
    let id = text(&warm, "id");
    cleanup.jobs.borrow_mut().push(id.clone());
    let branch = text(&warm, "branch");
    let shown = machine.json(&["show", "--json", &id]);
    assert_eq!(shown["job"]["pool"]["start"], "warm", "{shown}");
    assert!(
        !my_slots(&machine, &profile, "claimed").is_empty(),
        "the slot is the job's"
    );

    // A kernel of its own, the job's files in place, and a commit that reaches the branch.
    let host_kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("kernel");
    let work = exec(
        &machine,
        &id,
        "uname -r && echo vm > vm.txt && git add vm.txt && git commit -q -m 'from a warm vm' && git log -1 --format=%s",
    );
    assert_eq!(work["exit_code"], 0, "{work}");
    let out = text(&work, "stdout");
    assert_ne!(
        out.lines().next().map(str::trim),
        Some(host_kernel.trim()),
        "{work}"
    );
    assert!(out.trim_end().ends_with("from a warm vm"), "{work}");
    assert_eq!(
        machine.repo_git(&["log", "-1", "--format=%s", &branch]),
        "from a warm vm"
    );

    // Hardened as a cold VM: the slot's QEMU and virtiofsd are in the slot's host cgroup
    // (kept by the job), and the slot's writable share is served by the jailed virtiofsd
    // (as the unmapped guest-root id), which still saw the claim's mounts (the work above).
    let vm_dir = slot_dir(&machine, &slot).join("vm");
    let pids = crate::microvm_harden::vm_pids(&vm_dir);
    assert!(pids.len() >= 2, "qemu and virtiofsd: {pids:?}");
    let slot_cgroups = crate::microvm_harden::cgroup_dirs(pids[0]);
    for pid in &pids {
        let dirs = crate::microvm_harden::cgroup_dirs(*pid);
        assert_eq!(dirs, slot_cgroups, "pid {pid}");
        for dir in &dirs {
            assert!(dir.ends_with(format!("slot-{slot}")), "{}", dir.display());
        }
    }
    let jailed: Vec<u32> = pids
        .iter()
        .copied()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let c = String::from_utf8_lossy(&c);
                c.contains("virtiofsd") && c.contains("fs-pool.sock")
            })
        })
        .collect();
    assert!(!jailed.is_empty(), "the pool share's virtiofsd runs");
    for pid in &jailed {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().next())
            .expect("a Uid line");
        assert_eq!(uid, "2147483646", "virtiofsd {pid} is jailed: {status}");
    }

    // Root in the claimed guest (the test switch) plants nothing on the host through the
    // jailed share: the attack of `microvm_harden`, then its leftovers go again.
    let shown = machine.json(&["show", "--json", &id]);
    let worktree = PathBuf::from(text(&shown["job"], "worktree"));
    let dirs = vec![worktree, machine.state_root().join("work").join(&id)];
    let root_before = crate::microvm_harden::root_owned(&dirs);
    let attacked = machine.run_with(
        &[
            "exec",
            &id,
            "--json",
            "--",
            "sh",
            "-c",
            crate::microvm_harden::ATTACK,
        ],
        &[("PADDOCK_TEST_MICROVM_GUEST_ROOT", "1")],
    );
    let result: Value = serde_json::from_slice(&attacked.stdout).unwrap_or_else(|e| {
        panic!(
            "the attack printed no result ({e}): {}",
            String::from_utf8_lossy(&attacked.stderr)
        )
    });
    let said = text(&result, "stdout");
    assert!(
        said.starts_with("as 0\n") && said.contains("attacked"),
        "{result}"
    );
    let found = crate::microvm_harden::offences(&dirs, &root_before);
    assert!(
        found.is_empty(),
        "guest root left on the host:\n{}\n({said})",
        found.join("\n")
    );
    let cleaned = machine.run_with(
        &[
            "exec",
            &id,
            "--json",
            "--",
            "sh",
            "-c",
            "for d in /workspace /paddock/git /paddock/outbox; do cd $d 2>/dev/null || continue; \
             rm -rf by-root suid sgid agents stranger null loop fifo rootdir made-suid moved whiteout cap; done",
        ],
        &[("PADDOCK_TEST_MICROVM_GUEST_ROOT", "1")],
    );
    assert!(cleaned.status.success(), "{cleaned:?}");

    // Hostile: another job's files are nowhere, the slot's share is not reachable, and
    // what stays read-only in a cold job stays read-only here (on the host side too).
    let attack = exec(
        &machine,
        &id,
        "grep -rs SECRET-OF-COLD /workspace /paddock /paddock-objects /tmp /home /.paddock-pool && echo FOUND; \
         ls -A /.paddock-pool 2>/dev/null | grep -q . && echo POOL-VISIBLE; \
         for f in /paddock/git/config /paddock/git/hooks/pre-commit /paddock/git/info/exclude /paddock-objects/planted /workspace/.git; do \
           if echo x >> $f 2>/dev/null; then echo WROTE $f; fi; done; \
         git update-ref refs/heads/main HEAD 2>/dev/null; echo checked",
    );
    assert_eq!(text(&attack, "stdout").trim(), "checked", "{attack}");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let objects_point = slot_dir(&machine, &slot).join("mnt/objects");
    let objects_line = mounts
        .lines()
        .find(|l| l.split(' ').nth(4) == Some(objects_point.to_str().expect("utf-8")))
        .unwrap_or_else(|| panic!("no mount at {}: {mounts}", objects_point.display()));
    assert!(
        objects_line
            .split(' ')
            .nth(5)
            .is_some_and(|o| o.starts_with("ro")),
        "{objects_line}"
    );
    assert_eq!(
        machine.repo_git(&["rev-parse", "main"]),
        main_before,
        "main stays where it was"
    );

    // A sweep keeps the claimed VM (it is the job's), and the refill the create asked for
    // boots the next slot in the background.
    let swept = sweep(&machine, &[&slot, &id, &cold_id]);
    assert!(!swept["removed"].to_string().contains(&slot), "{swept}");
    assert!(qemu_of(&slot_dir(&machine, &slot)).is_some(), "{swept}");
    let alive = exec(&machine, &id, "echo alive");
    assert_eq!(text(&alive, "stdout").trim(), "alive", "{alive}");
    wait_for("the background refill", Duration::from_secs(300), || {
        !my_slots(&machine, &profile, "ready").is_empty()
    });
    let refilled = my_slots(&machine, &profile, "ready").remove(0);
    guards.push(KillVms(slot_dir(&machine, &refilled)));

    // kill -9 of a waiting slot's QEMU: one sweep removes the slot, its virtiofsd and its
    // host cgroup.
    let pid = std::fs::read_to_string(slot_dir(&machine, &refilled).join("vm/qemu.pid"))
        .expect("the slot's pid file");
    let refilled_cgroups = crate::microvm_harden::cgroup_dirs(pid.trim().parse().expect("a pid"));
    assert!(
        refilled_cgroups
            .iter()
            .all(|d| d.ends_with(format!("slot-{refilled}"))),
        "{refilled_cgroups:?}"
    );
    std::process::Command::new("kill")
        .args(["-9", pid.trim()])
        .status()
        .expect("kill runs");
    let swept = sweep(&machine, &[&refilled, &id, &cold_id]);
    assert!(swept["removed"].to_string().contains(&refilled), "{swept}");
    assert!(!slot_dir(&machine, &refilled).exists(), "{swept}");
    assert!(vm_processes(&slot_dir(&machine, &refilled)).is_empty());
    for dir in &refilled_cgroups {
        assert!(!dir.exists(), "{swept}: {}", dir.display());
    }

    // `pool drain` removes a waiting VM.
    let filled = machine.json(&["pool", "fill", "--json", "--profile", &profile]);
    let next = filled["started"][0].as_str().expect("a slot").to_string();
    guards.push(KillVms(slot_dir(&machine, &next)));
    let drained = machine.json(&["pool", "drain", "--json", "--profile", &profile]);
    assert!(drained["removed"].to_string().contains(&next), "{drained}");
    assert!(vm_processes(&slot_dir(&machine, &next)).is_empty());
    assert!(!slot_dir(&machine, &next).exists());

    // `rm` of the warm job ends its VM and frees its slot; the branch keeps the work.
    let removed = machine.json(&["rm", "--json", &id]);
    assert_eq!(removed["branch_kept"], true, "{removed}");
    assert!(vm_processes(&slot_dir(&machine, &slot)).is_empty());
    assert!(
        !slot_dir(&machine, &slot).exists(),
        "the slot went with its job"
    );
    for dir in &slot_cgroups {
        assert!(!dir.exists(), "the slot's cgroup went: {}", dir.display());
    }
    machine.json(&["rm", "--json", "--force", &cold_id]);
    assert!(vm_processes(&machine.state_root().join("work").join(&cold_id)).is_empty());
    assert_eq!(
        machine.repo_git(&["log", "-1", "--format=%s", &branch]),
        "from a warm vm"
    );
    assert_eq!(
        machine.repo_modes(),
        before,
        "no file of the repository changed"
    );
    drop(guards);
}
