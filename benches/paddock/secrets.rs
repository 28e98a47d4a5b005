//! The egress proxy's cost for a secret host (issue 29): TLS terminated at the proxy, the
//! placeholder swapped for the value in the request and the value swapped back in the
//! response, against the same download without the proxy in the way.
//!
//! Under runc and then gVisor, two jobs of one install: an allowlist job holding a secret
//! (its requests go to a secret host: the proxy terminates TLS), the same job's requests to a
//! second server of the same kind that is only allowed (a plain CONNECT tunnel through the
//! same proxy), and an `open` job that reaches a third identical server directly. Every
//! request is `openssl s_client` inside the job, timed with bash's clock inside the container
//! (no `docker exec` in the timed span); paddock's side and each baseline alternate run by run
//! with `sync` before each. The servers are the test's own HTTPS servers on the bridge gateway
//! (fixtures/tls.rs), with a CA of the bench's own handed to the proxy as `upstream_ca`.

use std::process::Command;

use serde_json::Value;

use super::fixtures::tls::{https_server, https_server_of, test_tls};
use super::fixtures::{self, FixtureRepo, TestHome, bridge_gateway, test_image};
use super::{Row, median, run, settle};

/// Pairs per row: single requests vary by milliseconds here.
const PAIRS: usize = 15;

/// Runs one timed request inside `container` and returns its milliseconds. `via_proxy` sends
/// it through the job's proxy (`-proxy`); otherwise it connects straight to `target`.
fn request(container: &str, target: &str, via_proxy: bool, expect_bytes: usize) -> f64 {
    let proxy = if via_proxy {
        "-proxy $proxy_host:$proxy_port"
    } else {
        ""
    };
    // `$API` is the job's placeholder (empty in the open job): the secret host gets the real
    // value in its place, the others get the placeholder, as an agent's client would send it.
    let script = format!(
        "h=${{HTTPS_PROXY#http://}}; proxy_host=${{h%:*}}; proxy_port=${{h##*:}}; \
         t0=${{EPOCHREALTIME/./}}; \
         n=$(printf 'GET / HTTP/1.1\\r\\nHost: {target}\\r\\nAuthorization: Bearer %s\\r\\nConnection: close\\r\\n\\r\\n' \"$API\" \
           | openssl s_client -quiet {proxy} -connect {target} ${{SSL_CERT_FILE:+-CAfile \"$SSL_CERT_FILE\"}} 2>/dev/null | wc -c); \
         echo $(( ${{EPOCHREALTIME/./}} - t0 )) $n"
    );
    settle();
    let out = run(Command::new("docker").args(["exec", container, "bash", "-c", &script]));
    let mut words = out.split_whitespace();
    let micros: f64 = words.next().expect("a time").parse().expect("micros");
    let bytes: usize = words.next().expect("a count").parse().expect("bytes");
    if bytes < expect_bytes {
        // Again with openssl's own words, for the panic message.
        let again = Command::new("docker")
            .args(["exec", container, "bash", "-c"])
            .arg(script.replace("2>/dev/null | wc -c", "2>&1 | tail -c 2000"))
            .output()
            .expect("docker exec runs");
        panic!(
            "only {bytes} of at least {expect_bytes} bytes came back from {target}: {}",
            String::from_utf8_lossy(&again.stdout)
        );
    }
    micros / 1e3
}

/// Alternates `ours` and `theirs` `PAIRS` times (ours first on even runs).
fn pairs(mut ours: impl FnMut() -> f64, mut theirs: impl FnMut() -> f64) -> (Vec<f64>, Vec<f64>) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..PAIRS {
        if i % 2 == 0 {
            a.push(ours());
            b.push(theirs());
        } else {
            b.push(theirs());
            a.push(ours());
        }
    }
    (a, b)
}

/// The rows under runc, then under gVisor (whose netstack sits between the job and the proxy).
pub(super) fn secret_host_overhead(rows: &mut Vec<Row>) {
    for (runtime, label) in [("docker", "runc"), ("runsc", "gVisor")] {
        measure(runtime, label, rows);
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn measure(runtime: &str, label: &str, rows: &mut Vec<Row>) {
    let gateway = bridge_gateway();
    let (ca_pem, config) = test_tls(&gateway);
    let size = 10 << 20;
    let server = |size: usize| {
        let port = if size == 0 {
            https_server(&gateway, config.clone()).0
        } else {
            https_server_of(&gateway, config.clone(), size).0
        };
        format!("{gateway}:{port}")
    };
    let (secret_big, tunnel_big, direct_big) = (server(size), server(size), server(size));
    let (secret_small, tunnel_small, direct_small) = (server(0), server(0), server(0));
    let repo = FixtureRepo::with_files(10, 200);
    let home = TestHome::new().env("BENCH_SECRET_TOKEN", "tok-benchmark-0123456789");
    let ca_file = home.dir.path().join("upstream-ca.pem");
    std::fs::write(&ca_file, &ca_pem).expect("CA file");
    std::fs::write(
        home.dir.path().join("config/paddock/config.yaml"),
        format!(
            "admission:\n  memory: 1024g\n  cpus: 1000\n  max_running_execs: 1000\n\
             secrets:\n  api:\n    env: BENCH_SECRET_TOKEN\n    hosts: ['{secret_big}', '{secret_small}']\n\
             egress:\n  upstream_ca: {}\n",
            ca_file.display()
        ),
    )
    .expect("config");
    let image = test_image();
    let path = repo.path().display().to_string();
    let create = |extra: &[&str]| -> (String, String) {
        let mut args = vec![
            "create",
            "--repo",
            &path,
            "--runtime",
            runtime,
            "--image",
            &image,
            "--json",
        ];
        args.extend_from_slice(extra);
        let job: Value = serde_json::from_str(&run(&mut home.cmd(&args))).expect("create JSON");
        (
            job["id"].as_str().expect("id").to_string(),
            fixtures::container_of(&job),
        )
    };
    let (secret_job, secret_container) = create(&[
        "--task",
        "bench-secret",
        "--secret",
        "api",
        "--allow",
        &tunnel_big,
        "--allow",
        &tunnel_small,
    ]);
    let (open_job, open_container) = create(&["--task", "bench-open", "--network", "open"]);
    // One unmeasured request each way first: the proxy's upstream session and openssl's
    // pages are warm for both sides alike.
    request(&secret_container, &secret_small, true, 1);
    request(&secret_container, &tunnel_small, true, 1);
    request(&open_container, &direct_small, false, 1);

    let note = "inside one allowlist job holding the secret: openssl s_client through the proxy \
                to a secret host (TLS terminated, placeholder swapped) vs the same request \
                through the same proxy to an allowed host (plain CONNECT tunnel)";
    let note_direct = "the secret-host request as above vs the same request from an `open` job \
                       straight to an identical server (no proxy at all)";
    for (what, secret, tunnel, direct, bytes) in [
        (
            "10 MiB download",
            &secret_big,
            &tunnel_big,
            &direct_big,
            size,
        ),
        (
            "small request",
            &secret_small,
            &tunnel_small,
            &direct_small,
            1,
        ),
    ] {
        let (ours, tunnelled) = pairs(
            || request(&secret_container, secret, true, bytes),
            || request(&secret_container, tunnel, true, bytes),
        );
        let (ours_again, direct) = pairs(
            || request(&secret_container, secret, true, bytes),
            || request(&open_container, direct, false, bytes),
        );
        for (baseline_name, paddock, baseline, note) in [
            ("a plain tunnel", ours, tunnelled, note),
            ("direct (open network)", ours_again, direct, note_direct),
        ] {
            let (ratio, added) = (
                median(&paddock) / median(&baseline),
                median(&paddock) - median(&baseline),
            );
            let (target, met) = if bytes > 1 {
                ("≤ 1.5 × baseline".to_string(), ratio <= 1.5)
            } else {
                ("≤ +5 ms median".to_string(), added <= 5.0)
            };
            eprintln!(
                "{label}: secret host, {what} vs {baseline_name}: {ratio:.2}x, {added:+.1} ms"
            );
            rows.push(Row {
                name: format!("secret host (TLS terminated), {what}, vs {baseline_name}, {label}"),
                paddock,
                baseline: Some(baseline),
                unit: "ms",
                target,
                met,
                note: note.into(),
            });
        }
    }
    run(&mut home.cmd(&["rm", &secret_job, "--force"]));
    run(&mut home.cmd(&["rm", &open_job, "--force"]));
}
