//! Job networks never leave the host: an address of paddock's job range (198.18.0.0/15)
//! whose network is gone (a removed allowlist job's) is unreachable from the host and from
//! an `open` job, because paddock puts an `unreachable` route for the range in place before
//! it makes a job network (and `doctor` does when it is missing, as root and as a user).
//!
//! SAFETY: no test here may send a packet off this machine. Before any connection attempt,
//! each asserts that the host's routing table answers `unreachable` for the address (`ip
//! route get`); a missing route fails the test there, before anything is sent. The tests
//! delete the route first (as root; paddock must put it back), so they need root and
//! Docker; Docker cases skip with PADDOCK_SKIP_DOCKER_TESTS=1.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::fs::MetadataExt as _;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::fixtures::{FixtureRepo, TestHome, docker_available, test_image, text};

const RANGE: &str = "198.18.0.0/15";

/// The tests here delete the route: one at a time (a machine-wide lock, as each may run in a
/// process of its own), so none deletes it between another's safety gate and its connection.
fn one_at_a_time() -> crate::fixtures::serial::MachineLock {
    crate::fixtures::serial::machine_lock("net-ranges-route")
}

/// Removes the range's route, so that the test sees paddock put it back.
fn delete_route() {
    // Fails when there is none: fine.
    let _ = Command::new("ip").args(["route", "del", RANGE]).output();
    assert!(!route_present(), "the route is gone before the test");
}

fn route_present() -> bool {
    let out = Command::new("ip")
        .args(["-4", "route", "show", "exact", RANGE])
        .output()
        .expect("ip runs");
    String::from_utf8_lossy(&out.stdout).starts_with("unreachable ")
}

/// The safety gate: the kernel's own answer for `address` is `unreachable`. Panics (before
/// anything is sent) otherwise.
fn assert_unreachable(address: Ipv4Addr) {
    let out = Command::new("ip")
        .args(["-4", "route", "get", &address.to_string()])
        .output()
        .expect("ip runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("unreachable") || said.contains("No route to host"),
        "the host would route {address} somewhere (`ip route get`: {said}); not connecting"
    );
}

/// The address an allowlist job's proxy had: from its environment (`http://198.18.x.y:3128`).
fn proxy_address(home: &TestHome, id: &str) -> Ipv4Addr {
    let url = home.sh(id, "printf %s \"$HTTPS_PROXY\"");
    let host = url
        .trim_start_matches("http://")
        .split(':')
        .next()
        .unwrap_or_default();
    let address: Ipv4Addr = host.parse().expect("the proxy is an address");
    assert!(
        address.octets()[0] == 198 && matches!(address.octets()[1], 18 | 19),
        "{address}"
    );
    address
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

#[test]
fn a_removed_job_s_address_is_unreachable_from_the_host_and_from_an_open_job() {
    if !docker_available(
        "a_removed_job_s_address_is_unreachable_from_the_host_and_from_an_open_job",
    ) {
        return;
    }
    assert!(is_root(), "this test deletes a host route: it needs root");
    let _one = one_at_a_time();
    delete_route();
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    // An allowlist job: its network is made after paddock put the route back.
    let sealed = home.create_docker(&repo, &["--allow", "127.0.0.1:9"]);
    let sealed_id = text(&sealed, "id");
    assert!(
        route_present(),
        "paddock adds the route before a job network"
    );
    let gone = proxy_address(&home, &sealed_id);
    // A network that outlived the route (a reboot clears it): starting its job again puts
    // the route back.
    delete_route();
    home.ok(&["stop", &sealed_id]);
    assert_eq!(proxy_address(&home, &sealed_id), gone, "the same network");
    assert!(
        route_present(),
        "paddock adds the route before using a job network"
    );
    home.ok(&["rm", &sealed_id, "--force"]);
    assert!(
        home.docker_objects().is_empty(),
        "{:?}",
        home.docker_objects()
    );

    assert_unreachable(gone);
    // From the host: refused by the host's own table, at once.
    let started = Instant::now();
    let error = TcpStream::connect_timeout(&SocketAddr::from((gone, 3128)), Duration::from_secs(5))
        .expect_err("nothing answers at a removed job's address");
    let took = started.elapsed();
    assert_eq!(error.raw_os_error(), Some(113), "EHOSTUNREACH: {error}");
    assert!(took < Duration::from_secs(1), "{took:?}");

    // From an `open` job (forwarded through Docker's bridge): the host answers ICMP
    // host-unreachable, so the connect fails at once inside the job too.
    for runtime in ["docker", "runsc"] {
        let open = home.create(
            &repo,
            &[
                "--runtime",
                runtime,
                "--image",
                &test_image(),
                "--network",
                "open",
            ],
        );
        let open_id = text(&open, "id");
        assert_unreachable(gone);
        let out = home.run(&[
            "exec",
            &open_id,
            "--",
            "bash",
            "-c",
            &format!(
                "s=$(date +%s%N); (exec 3<>/dev/tcp/{gone}/3128) 2>&1; echo rc=$? ms=$((($(date +%s%N)-s)/1000000))"
            ),
        ]);
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(said.contains("No route to host"), "{runtime}: {said}");
        let ms: u64 = said
            .rsplit("ms=")
            .next()
            .and_then(|ms| ms.trim().parse().ok())
            .expect("the time");
        // runc: the first SYN's ICMP answer ends the connect. gVisor (host network) acts on
        // a later one, and the kernel sends at most about one a second to an address, so a
        // few seconds: still never past the host.
        let limit = if runtime == "docker" { 2000 } else { 10_000 };
        assert!(ms < limit, "{runtime}: the connect took {ms} ms: {said}");
        assert!(said.contains("rc=1"), "{runtime}: {said}");
        home.ok(&["rm", &open_id, "--force"]);
    }
}

#[test]
fn doctor_puts_the_route_back_as_root_and_as_a_user() {
    if !docker_available("doctor_puts_the_route_back_as_root_and_as_a_user") {
        return;
    }
    assert!(is_root(), "this test deletes a host route: it needs root");
    let _one = one_at_a_time();
    let row = |checks: &serde_json::Value| {
        checks
            .as_array()
            .expect("a list")
            .iter()
            .find(|c| c["name"] == "job ranges")
            .cloned()
            .unwrap_or_else(|| panic!("a `job ranges` row: {checks}"))
    };
    let home = TestHome::new();
    delete_route();
    let checks = home.json(&["doctor", "--json"]);
    let found = row(&checks);
    assert_eq!(found["status"], "ok", "{found}");
    assert!(text(&found, "detail").contains("(added now)"), "{found}");
    assert!(route_present());
    let again = row(&home.json(&["doctor", "--json"]));
    assert!(!text(&again, "detail").contains("added now"), "{again}");

    // A user in the docker group: through a short-lived container (NET_ADMIN, host network).
    const USER_UID: u32 = 4243;
    let user_home = crate::fixtures::closed_dir("paddock-ranges-");
    crate::fixtures::chown_trees(&[user_home.path()], USER_UID);
    let socket_group = std::fs::metadata("/var/run/docker.sock").map_or(USER_UID, |m| m.gid());
    delete_route();
    let out = Command::new("setpriv")
        .arg(format!("--reuid={USER_UID}"))
        .arg(format!("--regid={USER_UID}"))
        .arg(format!("--groups={socket_group}"))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_paddock"))
        .args(["doctor", "--json"])
        .current_dir(user_home.path())
        .env("HOME", user_home.path())
        .env("PADDOCK_HOME", user_home.path().join("state"))
        .env_remove("PADDOCK_CONFIG")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .output()
        .expect("setpriv runs");
    let checks: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "doctor as a user: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let found = row(&checks);
    assert_eq!(found["status"], "ok", "{found}");
    assert!(text(&found, "detail").contains("(added now)"), "{found}");
    assert!(route_present());
    // No helper container is left behind.
    let left = Command::new("docker")
        .args(["ps", "-aq", "--filter", "name=paddock-guard-ranges-"])
        .output()
        .expect("docker runs");
    assert_eq!(String::from_utf8_lossy(&left.stdout).trim(), "");
}
