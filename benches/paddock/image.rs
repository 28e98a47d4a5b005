//! The default agent image against the minimal one (issue 47), in one run: each image's
//! size, and the cold create of a runc job with each (`paddock create`, the container
//! started, then `rm`), interleaved run by run. `PADDOCK_BENCH_MINIMAL` names the minimal
//! image (default `paddock-agent:minimal`, made by `paddock image build --minimal --tag
//! paddock-agent:minimal`); the default image is the tests' (`PADDOCK_TEST_IMAGE`).

use super::*;

fn image_mib(tag: &str) -> f64 {
    let size = run(Command::new("docker").args(["image", "inspect", "--format", "{{.Size}}", tag]));
    size.trim().parse::<f64>().expect("docker prints a size") / f64::from(1u32 << 20)
}

fn cold_create(home: &TestHome, repo: &FixtureRepo, image: &str) -> f64 {
    settle();
    let path = repo.path().display().to_string();
    let started = Instant::now();
    let out = run(&mut home.cmd(&[
        "create",
        "--repo",
        &path,
        "--runtime",
        "docker",
        "--image",
        image,
        "--json",
    ]));
    let took = ms(started.elapsed());
    let job: Value = serde_json::from_str(&out).expect("create prints its job");
    run(&mut home.cmd(&["rm", job["id"].as_str().expect("an id"), "--force"]));
    took
}

pub(super) fn rows(repo: &FixtureRepo, rows: &mut Vec<Row>) {
    let full = test_image();
    let minimal =
        std::env::var("PADDOCK_BENCH_MINIMAL").unwrap_or_else(|_| "paddock-agent:minimal".into());
    let (full_mib, minimal_mib) = (image_mib(&full), image_mib(&minimal));
    rows.push(Row {
        name: format!("image size, {full} against {minimal}"),
        paddock: vec![full_mib],
        baseline: Some(vec![minimal_mib]),
        unit: "MiB",
        target: "reported".into(),
        met: true,
        note: "docker image inspect .Size: the default image's toolchains against --minimal".into(),
    });
    let home = TestHome::new();
    // One of each first: the page cache holds both images' layers, as on a host in use.
    cold_create(&home, repo, &full);
    cold_create(&home, repo, &minimal);
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    interleaved(
        &mut |_| ours.push(cold_create(&home, repo, &full)),
        &mut |_| theirs.push(cold_create(&home, repo, &minimal)),
    );
    rows.push(Row {
        name: format!("cold create, runc, {full} against {minimal}"),
        paddock: ours,
        baseline: Some(theirs),
        unit: "ms",
        target: "reported".into(),
        met: true,
        note: "paddock create --runtime docker (container started) with each image, interleaved"
            .into(),
    });
}
