//! Ports against the real daemon: a server the test starts inside each job is reached from
//! the host on the loopback address paddock chose, whatever the job's network. Fails when
//! Docker is absent unless PADDOCK_SKIP_DOCKER_TESTS=1.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::fixtures::{FixtureRepo, TestHome, bridge_gateway, docker_available, text};

/// Starts, detached inside the job, a server on port 3000 (all the job's addresses) that
/// answers every connection with `hello from <job>`.
pub(crate) fn serve_hello(home: &TestHome, id: &str) {
    let script = format!(
        r#"setsid -f perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(LocalAddr => "0.0.0.0", LocalPort => 3000, Listen => 5, ReuseAddr => 1) or die "listen: $!"; while ($c = $s->accept) {{ print $c "HTTP/1.0 200 OK\r\n\r\nhello from {id}\n"; close $c }}' >/dev/null 2>&1 </dev/null"#
    );
    home.ok(&["exec", id, "--", "sh", "-c", &script]);
}

/// What `address` answers, retried while the server inside starts (a loaded machine can
/// take long to start perl in a container).
pub(crate) fn fetch(address: &str, job: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = TcpStream::connect(address).and_then(|mut stream| {
            stream.set_read_timeout(Some(Duration::from_secs(5)))?;
            stream.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer)?;
            Ok(answer)
        });
        match answer {
            Ok(answer) if answer.contains("hello") => return answer,
            _ if Instant::now() > deadline => {
                let containers = std::process::Command::new("docker")
                    .args([
                        "ps",
                        "-a",
                        "--filter",
                        &format!("name={job}"),
                        "--format",
                        "{{.Names}} {{.Status}} {{.Ports}}",
                    ])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
                panic!("{address} of {job} never answered: {answer:?}; containers: {containers:?}")
            }
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

#[test]
fn jobs_serve_the_same_port_on_different_host_ports_whatever_their_network() {
    if !docker_available("jobs_serve_the_same_port_on_different_host_ports_whatever_their_network")
    {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let mut addresses = Vec::new();
    for network in ["none", "open", "allowlist"] {
        let job = home.create_docker(&repo, &["--network", network, "--port", "3000"]);
        let id = text(&job, "id");
        assert_eq!(job["limits"]["network"], network, "{job}");
        assert_eq!(job["ports"][0]["port"], 3000, "{job}");
        assert_eq!(job["ports"][0]["host_ip"], "127.0.0.1", "{job}");
        let address = home.ok(&["port", &id, "3000"]).trim().to_string();
        let host_port = job["ports"][0]["host_port"].as_u64().unwrap();
        assert_eq!(address, format!("127.0.0.1:{host_port}"));
        let listed = home.json(&["ls", "--json"]);
        let listed = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == id.as_str())
            .unwrap()
            .clone();
        assert_eq!(listed["ports"], job["ports"], "{listed}");
        serve_hello(&home, &id);
        let answer = fetch(&address, &id);
        assert!(answer.contains(&format!("hello from {id}")), "{answer}");
        addresses.push((id, address));
    }
    let mut distinct: Vec<&String> = addresses.iter().map(|(_, a)| a).collect();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "{addresses:?}");

    // The network-none job still reaches nothing (here: a listener of this test on the
    // host's bridge address, which an open job reaches): its only neighbour is its relay.
    let gateway = bridge_gateway();
    let listener = std::net::TcpListener::bind((gateway.as_str(), 0)).unwrap();
    let probe_target = format!("{gateway}/{}", listener.local_addr().unwrap().port());
    let probe_script = format!(
        "timeout 3 bash -c 'exec 3<>/dev/tcp/{probe_target}' && echo reached || echo unreachable"
    );
    let (open_job, _) = &addresses[1];
    let reached = home.run(&["exec", open_job, "--", "bash", "-c", &probe_script]);
    assert_eq!(String::from_utf8_lossy(&reached.stdout).trim(), "reached");
    let (none_job, none_address) = &addresses[0];
    let probe = home.run(&["exec", none_job, "--", "bash", "-c", &probe_script]);
    assert_eq!(String::from_utf8_lossy(&probe.stdout).trim(), "unreachable");

    // Another container on Docker's bridge (the open job) cannot use the none job's relay,
    // which serves the host only.
    let none_view = home.json(&["show", none_job, "--json"]);
    let sidecar = format!(
        "{}-egress",
        none_view["job"]["container_name"].as_str().unwrap()
    );
    let out = std::process::Command::new("docker")
        .args([
            "inspect",
            "-f",
            "{{.NetworkSettings.Networks.bridge.IPAddress}}",
            &sidecar,
        ])
        .output()
        .unwrap();
    let sidecar_ip = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(!sidecar_ip.is_empty(), "{out:?}");
    let stranger = home.run(&[
        "exec",
        open_job,
        "--",
        "bash",
        "-c",
        &format!("timeout 5 bash -c 'exec 3<>/dev/tcp/{sidecar_ip}/41000; printf \"GET / HTTP/1.0\\r\\n\\r\\n\" >&3; cat <&3' || true"),
    ]);
    let stranger = String::from_utf8_lossy(&stranger.stdout);
    assert!(
        !stranger.contains("hello"),
        "a bridge neighbour reached the job: {stranger}"
    );

    // A stopped job keeps its address and serves again once it runs.
    home.ok(&["stop", none_job]);
    serve_hello(&home, none_job);
    assert!(fetch(none_address, none_job).contains(none_job.as_str()));
    let shown = home.ok(&["show", none_job]);
    assert!(
        shown.contains(&format!("port      3000 -> {none_address}")),
        "{shown}"
    );
}

#[test]
fn ports_are_refused_where_they_cannot_be_served() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let out = home.run(&[
        "create",
        "--repo",
        repo.path().to_str().unwrap(),
        "--runtime",
        "process",
        "--port",
        "3000",
    ]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot serve port 3000"), "{stderr}");
    assert_eq!(home.job_records(), 0);
    let job = home.create(&repo, &["--runtime", "process"]);
    let out = home.run(&["port", &text(&job, "id"), "3000"]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
}
