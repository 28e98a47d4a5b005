//! The microVM runtime against real QEMU: a job's commands run under a kernel of their own,
//! git inside commits to the job's branch, limits hold inside the VM, the network is closed,
//! and removing the job leaves no QEMU or virtiofsd behind. Under the emulator (TCG, on
//! hosts whose KVM cannot boot a stock kernel) each boot takes seconds, so one VM serves
//! several checks. `PADDOCK_SKIP_MICROVM_TESTS=1` skips them and says so.

use std::path::Path;

use crate::fixtures::{FixtureRepo, TestHome, microvm_available, test_image, text};
use serde_json::Value;

fn exec(home: &TestHome, id: &str, flags: &[&str], script: &str) -> Value {
    let mut args = vec!["exec", id, "--json"];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    let output = home.run(&args);
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "exec {script:?} printed no result ({e}): {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

/// Live (not zombie) QEMU and virtiofsd processes whose command line names `root`.
pub(crate) fn vm_processes(root: &Path) -> Vec<String> {
    let needle = root.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            let state = stat.rsplit(')').next()?.trim_start().chars().next()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (state != 'Z'
                && cmdline.contains(&needle)
                && (cmdline.contains("qemu-system") || cmdline.contains("virtiofsd")))
            .then_some(cmdline)
        })
        .collect()
}

/// The state letter (`/proc/PID/stat`: `S`, `R`, `T` for stopped) of each QEMU of the
/// install at `root`.
fn qemu_states(root: &Path) -> Vec<char> {
    let needle = root.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if !cmdline.contains(&needle) || !cmdline.contains("qemu-system") {
                return None;
            }
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            stat.rsplit(')').next()?.trim_start().chars().next()
        })
        .collect()
}

/// Ends the VMs of a test's install when the test fails half-way (a passing test has
/// removed them and checked that nothing was left).
pub(crate) struct KillVms(pub(crate) std::path::PathBuf);

impl Drop for KillVms {
    fn drop(&mut self) {
        let needle = self.0.display().to_string();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(&needle)
                && let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>()
            {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status();
            }
        }
    }
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn a_microvm_job_runs_under_its_own_kernel_commits_holds_its_limits_and_leaves_nothing() {
    if !microvm_available("a_microvm_job_runs_under_its_own_kernel") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let _cleanup = KillVms(home.root());
    let image = test_image();
    let job = home.create(
        &repo,
        &[
            "--runtime",
            "microvm",
            "--image",
            &image,
            "--memory",
            "256m",
            "--cpus",
            "1",
            "--pids",
            "64",
            "--task",
            "vm",
        ],
    );
    assert_eq!(job["runtime"], "microvm", "{job}");
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    assert!(!vm_processes(&home.root()).is_empty(), "the VM runs");

    // A kernel of its own.
    let host_kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let inside = exec(&home, &id, &[], "uname -r; nproc; cat /proc/net/dev; id -u");
    assert_eq!(inside["exit_code"], 0, "{inside}");
    let stdout = text(&inside, "stdout");
    let mut lines = stdout.lines();
    let guest_kernel = lines.next().unwrap();
    assert_ne!(guest_kernel.trim(), host_kernel.trim(), "{inside}");
    // --cpus 1: one vCPU.
    assert_eq!(lines.next(), Some("1"), "{inside}");
    // network none: no interface but loopback.
    let interfaces: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.split_once(':').map(|(name, _)| name.trim()))
        .filter(|name| !name.is_empty() && !name.contains(' ') && !name.contains('|'))
        .filter(|name| name.chars().all(|c| c.is_ascii_alphanumeric()))
        .collect();
    assert_eq!(interfaces, vec!["lo"], "{inside}");
    assert_ne!(
        stdout.lines().last(),
        Some("0"),
        "commands do not run as root: {inside}"
    );

    // git inside: the commit reaches the job's branch in the user's repository.
    let committed = exec(
        &home,
        &id,
        &[],
        "echo vm > vm.txt && git add vm.txt && git commit -q -m 'from the vm' && git log -1 --format=%s",
    );
    assert_eq!(committed["exit_code"], 0, "{committed}");
    assert_eq!(
        repo.git(&["log", "-1", "--format=%s", &branch]),
        "from the vm"
    );

    // stdin (issue 44): bytes that are not text reach the command intact, in stdin frames;
    // a command that reads none of a large input ends at once (the guest agent never
    // blocks on it, so the exec's signals still get through).
    let input = home.dir.path().join("vm-stdin.bin");
    let bytes: Vec<u8> = (0..8u32 << 20)
        .map(|i| i.wrapping_mul(2_654_435_761).to_le_bytes()[2])
        .collect();
    std::fs::write(&input, &bytes).unwrap();
    let hash = |out: &[u8]| {
        String::from_utf8_lossy(out)
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string()
    };
    let want = hash(
        &std::process::Command::new("sha256sum")
            .arg(&input)
            .output()
            .unwrap()
            .stdout,
    );
    let fed = home
        .cmd(&["exec", "-i", &id, "--", "sha256sum"])
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    assert_eq!(
        hash(&fed.stdout),
        want,
        "{}",
        String::from_utf8_lossy(&fed.stderr)
    );
    let unread = home
        .cmd(&[
            "exec",
            "-i",
            &id,
            "--timeout",
            "60s",
            "--",
            "sh",
            "-c",
            "exit 4",
        ])
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    assert_eq!(unread.status.code(), Some(4));

    // What stays read-only in containers stays read-only here, even through the share.
    let protected = exec(
        &home,
        &id,
        &[],
        "for f in /paddock/git/config /paddock/git/hooks/pre-commit /paddock-objects/planted /workspace/.git; do \
           if echo x >> $f 2>/dev/null; then echo WROTE $f; fi; done; echo checked",
    );
    assert_eq!(text(&protected, "stdout").trim(), "checked", "{protected}");

    // A memory overrun is reported as OOM; the VM keeps answering.
    let hog = exec(&home, &id, &[], "head -c 600m /dev/zero | tail > /dev/null");
    assert_eq!(hog["oom_killed"], true, "{hog}");
    assert_eq!(hog["exit_code"], 137, "{hog}");

    // A fork bomb meets the pids limit and ends at its timeout; the VM keeps answering.
    let bomb = exec(
        &home,
        &id,
        &["--timeout", "8s"],
        "bomb() { bomb | bomb & }; bomb; sleep 30",
    );
    assert_eq!(bomb["timed_out"], true, "{bomb}");
    let after = exec(&home, &id, &[], "echo alive");
    assert_eq!(text(&after, "stdout").trim(), "alive", "{after}");

    // `pause` stops the VM's QEMU whole; `resume` lets it run on, the guest as it was.
    home.ok(&["pause", &id]);
    assert_eq!(qemu_states(&home.root()), ['T'], "QEMU is stopped");
    let refused = home.run(&["exec", &id, "--", "true"]);
    assert_eq!(refused.status.code(), Some(125), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("is paused"));
    home.ok(&["resume", &id]);
    assert!(!qemu_states(&home.root()).contains(&'T'), "QEMU runs again");
    let resumed = exec(&home, &id, &[], "echo resumed");
    assert_eq!(text(&resumed, "stdout").trim(), "resumed", "{resumed}");

    // A checkpoint is taken live (a frozen VM would run nothing to read it), restored inside
    // the guest through its shares, and forked into a VM of its own.
    exec(&home, &id, &[], "echo cp > cp.txt && ln -s cp.txt cp.link");
    let cp = home.json(&["checkpoint", &id, "--name", "vm", "--json"]);
    assert_eq!(cp["frozen"], false, "{cp}");
    exec(&home, &id, &[], "rm cp.txt cp.link; echo junk > junk.txt");
    home.ok(&["restore", &id, "vm"]);
    let probe = "cat cp.txt; readlink cp.link; test -e junk.txt && echo junk || echo clean";
    let back = exec(&home, &id, &[], probe);
    assert_eq!(text(&back, "stdout"), "cp\ncp.txt\nclean\n", "{back}");
    let forked = home.json(&["fork", &id, "--from", "vm", "--json"]);
    let fork = text(&forked["jobs"][0], "id");
    let there = exec(&home, &fork, &[], probe);
    assert_eq!(text(&there, "stdout"), "cp\ncp.txt\nclean\n", "{there}");
    home.ok(&["rm", &fork, "--force"]);

    // `shell` over the same channel: commands from stdin, the shell's exit code back.
    let mut shell = home
        .cmd(&["shell", &id])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = shell.stdin.take().unwrap();
        writeln!(
            stdin,
            "echo shell-in-$(uname -r) as $(id -u) in $PWD; exit 3"
        )
        .unwrap();
    }
    let shell = shell.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&shell.stdout);
    assert_eq!(
        shell.status.code(),
        Some(3),
        "{said}{}",
        String::from_utf8_lossy(&shell.stderr)
    );
    assert!(
        said.contains(&format!(
            "shell-in-{} as 1000 in /workspace",
            guest_kernel.trim()
        )),
        "{said}"
    );

    // `show` names the runtime; `rm` keeps the branch and leaves no process or file.
    let shown = home.json(&["show", &id, "--json"]);
    assert_eq!(shown["job"]["runtime"], "microvm", "{shown}");
    let job_dir = home.root().join("work").join(&id);
    assert!(job_dir.exists());
    home.ok(&["rm", &id]);
    assert!(!job_dir.exists(), "the job's files are gone");
    let left = vm_processes(&home.root());
    assert!(left.is_empty(), "left running: {left:?}");
    assert_eq!(
        repo.git(&["log", "-1", "--format=%s", &branch]),
        "from the vm"
    );
    let fsck = repo.git(&["fsck", "--full", "--strict"]);
    assert!(!fsck.contains("error"), "{fsck}");
}

#[test]
fn one_sweep_converges_after_kill_9_of_paddock_mid_create_and_of_a_vms_qemu() {
    if !microvm_available("one_sweep_converges_after_kill_9") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let _cleanup = KillVms(home.root());
    let image = test_image();
    let job = home.create(
        &repo,
        &["--runtime", "microvm", "--image", &image, "--id", "vm-kept"],
    );
    assert_eq!(job["runtime"], "microvm", "{job}");
    let kept_dir = home.root().join("work/vm-kept/vm");

    // kill -9 of the job's QEMU: its virtiofsd processes end with it, the job stays, and
    // its next exec boots a new VM.
    let qemu: Vec<String> = vm_processes(&kept_dir)
        .into_iter()
        .filter(|c| c.contains("qemu-system"))
        .collect();
    assert_eq!(qemu.len(), 1, "{qemu:?}");
    let qemu_pid = std::fs::read_to_string(kept_dir.join("qemu.pid")).unwrap();
    std::process::Command::new("kill")
        .args(["-9", qemu_pid.trim()])
        .status()
        .unwrap();

    // kill -9 of paddock mid-create, once the new job's VM has started.
    let repo_path = repo.path().display().to_string();
    let mut create = home
        .cmd(&[
            "create",
            "--repo",
            &repo_path,
            "--runtime",
            "microvm",
            "--image",
            &image,
            "--id",
            "vm-cut",
        ])
        .spawn()
        .unwrap();
    let cut_dir = home.root().join("work/vm-cut/vm");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while !vm_processes(&cut_dir)
        .iter()
        .any(|c| c.contains("qemu-system"))
    {
        assert!(std::time::Instant::now() < deadline, "the VM never started");
        assert!(create.try_wait().unwrap().is_none(), "create ended first");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    create.kill().unwrap();
    create.wait().unwrap();

    let report = home.json(&["sweep", "--json"]);
    let removed = report["removed"].to_string();
    assert!(removed.contains("vm-cut"), "{report}");
    assert!(
        vm_processes(&cut_dir).is_empty(),
        "{:?}",
        vm_processes(&cut_dir)
    );
    let left = vm_processes(&kept_dir);
    assert!(left.is_empty(), "a dead QEMU's virtiofsd stayed: {left:?}");
    let listed = home.json(&["ls", "--json"]).to_string();
    assert!(
        listed.contains("vm-kept") && !listed.contains("vm-cut"),
        "{listed}"
    );
    // A second sweep finds nothing more to do.
    let again = home.json(&["sweep", "--json"]);
    assert_eq!(again["removed"], serde_json::json!([]), "{again}");

    let alive = exec(&home, "vm-kept", &[], "echo alive");
    assert_eq!(text(&alive, "stdout").trim(), "alive", "{alive}");
    home.ok(&["rm", "vm-kept", "--force"]);
    let left = vm_processes(&home.root());
    assert!(left.is_empty(), "left running: {left:?}");
}

/// A listener on `address` answering every connection with `body` (HTTP/1.0).
fn http_listener(address: &str, body: &'static str) -> u16 {
    let listener = std::net::TcpListener::bind(address).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            use std::io::{Read, Write};
            let mut stream = stream;
            let mut buffer = [0u8; 1024];
            let _ = stream.read(&mut buffer);
            let _ = write!(
                stream,
                "HTTP/1.0 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn an_allowlist_microvm_reaches_its_listed_listener_and_nothing_else() {
    if !microvm_available("an_allowlist_microvm_reaches_its_listed_listener") {
        return;
    }
    let allowed = http_listener("127.0.0.1:0", "listed-listener");
    let other = http_listener("0.0.0.0:0", "other-listener");
    let host_ip = std::process::Command::new("hostname")
        .arg("-I")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .unwrap_or("192.0.2.1")
        .to_string();
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let _cleanup = KillVms(home.root());
    let image = test_image();
    let allow = format!("127.0.0.1:{allowed}");
    let job = home.create(
        &repo,
        &[
            "--runtime",
            "microvm",
            "--image",
            &image,
            "--allow",
            &allow,
            "--id",
            "vm-allow",
        ],
    );
    assert_eq!(job["runtime"], "microvm", "{job}");
    let script = format!(
        r#"req() {{ exec 3<>/dev/tcp/10.0.2.100/3128 || {{ echo NOPROXY; return; }}
  printf 'GET http://%s/ HTTP/1.0\r\nHost: %s\r\n\r\n' "$1" "$1" >&3
  timeout 10 cat <&3 | tr -d '\r' | tr '\n' ' ' | head -c 400; exec 3>&-; }}
echo "LISTED: $(req 127.0.0.1:{allowed})"
echo "OTHER: $(req 127.0.0.1:{other})"
echo "HOST: $(req {host_ip}:{other})"
echo "PROXY-VAR: $HTTP_PROXY"
for target in 10.0.2.2/{allowed} 10.0.2.2/{other} {host_ip}/{other} 10.0.2.3/53; do
  timeout 5 bash -c "exec 3<>/dev/tcp/$target" 2>/dev/null && echo "RAW-OPEN $target"
done
grep -c nameserver /etc/resolv.conf
echo done"#
    );
    let result = exec(
        &home,
        "vm-allow",
        &[],
        &format!("bash -c '{}'", script.replace('\'', "'\\''")),
    );
    let out = text(&result, "stdout");
    let line = |prefix: &str| {
        out.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_default()
            .to_string()
    };
    assert!(line("LISTED:").contains("listed-listener"), "{result}");
    assert!(!line("OTHER:").contains("other-listener"), "{result}");
    assert!(!line("HOST:").contains("other-listener"), "{result}");
    assert!(line("PROXY-VAR:").contains("10.0.2.100:3128"), "{result}");
    assert!(
        !out.contains("RAW-OPEN"),
        "a raw connection got out: {result}"
    );
    assert!(
        out.trim_end().ends_with("0\ndone"),
        "no DNS inside: {result}"
    );
    home.ok(&["rm", "vm-allow", "--force"]);
    assert!(vm_processes(&home.root()).is_empty());
}
