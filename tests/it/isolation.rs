//! A job's container is isolated and limited, under runc and gVisor: what Docker was asked
//! for (no privilege, no capability, a read-only root, network none, `no-new-privileges`, no
//! host namespace or host mount) and what the agent sees from inside; the memory, pids and
//! CPU limits hold. `check_isolated_and_limited` is shared with the devcontainer tests (a
//! job whose file asks for privileges gets the same checks). They fail when Docker is absent
//! unless PADDOCK_SKIP_DOCKER_TESTS=1.

use std::process::Command;

use crate::docker::{docker, exec, sh};
use crate::fixtures::{FixtureRepo, TestHome, container_of, docker_available, text};
use serde_json::Value;

#[test]
fn the_container_is_isolated_and_limited() {
    crate::fixtures::each_checkout(|| {
        if docker_available("the_container_is_isolated_and_limited") {
            isolated_and_limited("docker");
        }
    });
}

/// The same isolation and limits under gVisor: runsc is registered with cgroups, so memory,
/// pids and CPU hold there too.
#[test]
fn the_gvisor_container_is_isolated_and_limited() {
    crate::fixtures::each_checkout(|| {
        if docker_available("the_gvisor_container_is_isolated_and_limited") {
            isolated_and_limited("runsc");
        }
    });
}

/// The limits [`check_isolated_and_limited`] checks: flags of `create`.
pub(crate) const LIMIT_FLAGS: [&str; 6] = ["--memory", "64m", "--pids", "64", "--cpus", "0.5"];

fn isolated_and_limited(runtime: &str) {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let image = crate::fixtures::test_image();
    let mut flags = vec!["--runtime", runtime, "--image", &image, "--task", "iso"];
    flags.extend(LIMIT_FLAGS);
    let job = home.create(&repo, &flags);
    check_isolated_and_limited(&home, &job, runtime);
}

/// The isolation and limits every container job has, checked from inside `job` (made on
/// `runtime` with [`LIMIT_FLAGS`]) and in what the engine says of its container: not root,
/// no capabilities, no new privileges, seccomp, a read-only root, no host file, no engine
/// socket, no network, memory, pids and CPU held. Removes the job.
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
pub(crate) fn check_isolated_and_limited(home: &TestHome, job: &Value, runtime: &str) {
    assert_eq!(job["runtime"], runtime, "{job}");
    let id = text(job, "id");
    let image = text(&job["limits"], "image");

    // What the engine was asked for: nothing a job file could loosen.
    let inspect = docker(&[
        "inspect",
        "--format",
        "{{.HostConfig.Privileged}}|{{.HostConfig.CapAdd}}|{{.HostConfig.CapDrop}}|{{.HostConfig.ReadonlyRootfs}}|{{.HostConfig.NetworkMode}}|{{.HostConfig.SecurityOpt}}|{{.HostConfig.PidMode}}|{{.HostConfig.IpcMode}}|{{range .Mounts}}{{.Source}} {{end}}",
        &container_of(job),
    ]);
    let parts: Vec<&str> = inspect.split('|').collect();
    assert_eq!(
        parts[..5],
        ["false", "[]", "[ALL]", "true", "none"],
        "{inspect}"
    );
    assert!(parts[5].contains("no-new-privileges"), "{inspect}");
    assert!(!parts[5].contains("unconfined"), "{inspect}");
    assert!(
        !parts[6].contains("host") && !parts[7].contains("host"),
        "{inspect}"
    );
    for source in parts[8].split_whitespace() {
        assert!(
            source != "/" && !source.ends_with("docker.sock") && source != "/etc",
            "a host path is mounted: {inspect}"
        );
    }
    // The same from inside: no capability, no new privileges, a seccomp filter (gVisor is
    // its own kernel: it shows neither, and filters the sandbox's own calls outside the
    // job's view), no engine socket, no way to mount.
    let result = sh(
        home,
        &id,
        "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; ls /var/run/docker.sock /run/docker.sock /host 2>/dev/null; mount -t tmpfs x /mnt 2>/dev/null && echo mounted; echo end",
    );
    let out = result["stdout"].as_str().unwrap();
    assert!(out.contains("CapEff:\t0000000000000000"), "{result}");
    assert!(out.contains("CapBnd:\t0000000000000000"), "{result}");
    if runtime == "docker" {
        assert!(out.contains("NoNewPrivs:\t1"), "{result}");
        assert!(out.contains("Seccomp:\t2"), "{result}");
    }
    assert!(
        !out.contains("docker.sock") && !out.contains("mounted"),
        "{result}"
    );
    assert!(out.trim_end().ends_with("end"), "{result}");

    // Not root.
    let result = sh(home, &id, "id -u");
    assert_ne!(result["stdout"].as_str().unwrap().trim(), "0", "{result}");
    // The result says what it ran on and under (issue 28): the OCI runtime, the image and
    // its id as the daemon has it, the limits given above.
    let meta = &result["meta"];
    let oci = if runtime == "docker" { "runc" } else { "runsc" };
    assert_eq!(meta["runtime"], oci, "{result}");
    assert_eq!(meta["image"], image.as_str(), "{result}");
    // The id of the image the container runs: a tag can move meanwhile (another job of the
    // same devcontainer.json building its content tag again at the same moment).
    let image_id = docker(&["inspect", "--format", "{{.Image}}", &container_of(job)]);
    assert_eq!(meta["image_id"], image_id.trim(), "{result}");
    let tagged = docker(&[
        "image",
        "inspect",
        "--format",
        "{{.RepoTags}}",
        image_id.trim(),
    ]);
    assert!(tagged.contains(&image) || tagged.trim() == "[]", "{tagged}");
    assert_eq!(meta["limits"]["cpus"], "0.5", "{result}");
    assert_eq!(meta["limits"]["pids"], 64, "{result}");
    assert_eq!(meta["limits"]["memory"], "64m", "{result}");
    assert_eq!(meta["limits"]["network"], "none", "{result}");

    // A file outside the mounts is not there.
    let marker = format!("/root/paddock-marker-{id}");
    std::fs::write(&marker, "secret").unwrap();
    let result = sh(home, &id, &format!("cat {marker}"));
    std::fs::remove_file(&marker).unwrap();
    assert_ne!(result["exit_code"], 0, "{result}");
    assert!(!result["stdout"].as_str().unwrap().contains("secret"));

    // No network: only loopback, and a listener on the host's loopback is unreachable.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let probe = format!("echo > /dev/tcp/127.0.0.1/{port}");
    let on_host = Command::new("bash").args(["-c", &probe]).status().unwrap();
    assert!(
        on_host.success(),
        "the probe reaches the listener from the host"
    );
    // (gVisor has no /sys/class/net; /proc/net/dev lists the same interfaces.)
    let result = sh(
        home,
        &id,
        &format!(
            "ls /sys/class/net 2>/dev/null || awk 'NR>2 {{ sub(\":\", \"\", $1); print $1 }}' /proc/net/dev; bash -c '{probe}'"
        ),
    );
    assert_eq!(result["stdout"].as_str().unwrap().trim(), "lo", "{result}");
    assert_ne!(result["exit_code"], 0, "{result}");

    // The root filesystem is read-only; /tmp and HOME are writable.
    let result = sh(home, &id, "touch /usr/paddock-x");
    assert_ne!(result["exit_code"], 0, "{result}");
    let result = sh(home, &id, "touch /tmp/x \"$HOME/x\"");
    assert_eq!(result["exit_code"], 0, "{result}");

    // Memory: beyond the limit is an OOM kill, reported as such.
    let (result, _) = exec(
        home,
        &id,
        &[],
        &["sh", "-c", "head -c 600000000 /dev/zero | tail > /dev/null"],
    );
    assert_eq!(result["exit_code"], 137, "{result}");
    if runtime == "runsc" && result["oom_killed"] == false {
        // Under gVisor the kernel's OOM killer ends the whole sandbox, and Docker 20.10
        // sometimes loses that OOM event (seen 2 in about 6 runs on 2026-12-07, after
        // paddock's 6 s of asking again): then paddock says the sandbox stopped under
        // the command, never that the command exited on its own.
        let stderr = result["stderr"].as_str().unwrap_or_default();
        assert!(
            stderr.contains("the sandbox stopped during the command"),
            "{result}"
        );
    } else {
        assert_eq!(result["oom_killed"], true, "{result}");
    }
    // Exit 137 alone (a SIGKILL) is not OOM.
    let result = sh(home, &id, "kill -9 $$");
    assert_eq!(result["exit_code"], 137, "{result}");
    assert_eq!(result["oom_killed"], false, "{result}");

    // A fork bomb hits the pids limit (forks fail inside the container, the host is fine)
    // and the job still answers afterwards. Under gVisor the bomb exhausts the sandbox's
    // own limits (its host tasks under the pids limit, or its memory), which stops the whole
    // sandbox (exit 137, said in stderr); the host is fine and the next exec starts it again.
    let (result, _) = exec(
        home,
        &id,
        &["--timeout", "3s"],
        &["sh", "-c", "f() { f | f & }; f; sleep 100"],
    );
    assert!(
        result["stderr"].as_str().unwrap().contains("fork")
            || result["timed_out"] == true
            || (runtime == "runsc"
                && result["exit_code"] == 137
                && result["stderr"]
                    .as_str()
                    .unwrap()
                    .contains("[paddock: the sandbox")),
        "the bomb never hit the limit: {result}"
    );
    let answered = (0..15).any(|_| {
        // Needs forks, as the CPU check below does: the bomb's last processes may still be
        // dying and holding the pids.
        let (result, _) = exec(
            home,
            &id,
            &["--timeout", "5s"],
            &["sh", "-c", "a=$(echo al)$(echo ive); echo $a"],
        );
        let ok = result["stdout"].as_str().unwrap_or_default().trim() == "alive";
        if !ok {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        ok
    });
    assert!(answered, "the job did not answer after the fork bomb");
    // The bomb's stragglers (reparented to the container's init) can keep the pids near the
    // limit for a while under load, and the CPU check below forks on every loop: a stop
    // ends every process of the job, and the next exec starts it afresh.
    home.ok(&["stop", &id]);
    // Started again before the CPU check reads the container's cgroup (gone while stopped).
    sh(home, &id, "true");

    // CPU: a 2-second busy loop under --cpus 0.5 gets about half a CPU (cgroup accounting;
    // gVisor shows no cgroup files inside, so there the host's account of the container).
    let share = if runtime == "runsc" {
        let container = docker(&["inspect", "--format", "{{.Id}}", &container_of(job)]);
        let usage_file = format!(
            "/sys/fs/cgroup/cpuacct/docker/{}/cpuacct.usage",
            container.trim()
        );
        let usage = || -> f64 {
            std::fs::read_to_string(&usage_file)
                .unwrap_or_else(|e| panic!("{usage_file}: {e}"))
                .trim()
                .parse()
                .unwrap()
        };
        let (before, started) = (usage(), std::time::Instant::now());
        sh(
            home,
            &id,
            "t0=$(date +%s%N); while [ $(( $(date +%s%N) - t0 )) -lt 2000000000 ]; do :; done",
        );
        (usage() - before) / started.elapsed().as_nanos() as f64
    } else {
        let result = sh(
            home,
            &id,
            "u=/sys/fs/cgroup/cpuacct/cpuacct.usage; [ -r $u ] || u=/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage; \
             a=$(cat $u); t0=$(date +%s%N); while [ $(( $(date +%s%N) - t0 )) -lt 2000000000 ]; do :; done; \
             b=$(cat $u); t1=$(date +%s%N); echo $((b - a)) $((t1 - t0))",
        );
        let numbers: Vec<f64> = result["stdout"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        assert_eq!(numbers.len(), 2, "cpu time and wall time: {result}");
        numbers[0] / numbers[1]
    };
    // The limit is the upper bound (without it a busy loop gets a whole CPU, 1.0). The lower
    // bound only says the loop ran: tests running beside this one on 2 cores take CPU from it
    // (a CI run saw 0.33 while another build ran, and 0.07 with eight tests at once), so
    // the limit itself is also read where the kernel keeps it: the container's CFS quota,
    // half of each period.
    assert!(
        (0.02..=0.65).contains(&share),
        "CPU share {share:.2} with --cpus 0.5 ({runtime})"
    );
    let container = docker(&["inspect", "--format", "{{.Id}}", &container_of(job)]);
    let cgroup = format!("/sys/fs/cgroup/cpu/docker/{}", container.trim());
    let read = |file: &str| -> i64 {
        let path = format!("{cgroup}/{file}");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{path}: {e}"))
    };
    let (quota, period) = (read("cpu.cfs_quota_us"), read("cpu.cfs_period_us"));
    assert!(
        quota > 0 && quota * 2 == period,
        "CFS quota {quota} of period {period} with --cpus 0.5 ({runtime})"
    );
    home.ok(&["rm", &id]);
}
