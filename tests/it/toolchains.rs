//! Issue 47: the default agent image runs what agents write. In a default job (runc, the
//! image `paddock image build` makes): a Python venv with pip, Node.js and npm, make and a C
//! compiler building a hello world, curl, jq and ripgrep, with the read-only root
//! filesystem and the agent's uid as ever; `doctor` lists the image's toolchains.

use crate::fixtures::{FixtureRepo, TestHome, docker_available, test_image, text};

#[test]
fn a_default_job_runs_python_node_make_cc_curl_jq_and_rg() {
    let test = "a_default_job_runs_python_node_make_cc_curl_jq_and_rg";
    if !docker_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let image = test_image();
    let job = home.create(&repo, &["--runtime", "docker", "--image", &image]);
    let id = text(&job, "id");
    // /tmp is noexec in a job: the venv and the compiled program live in the workspace.
    let script = r#"set -e
        python3 -m venv v && v/bin/pip --version
        node -e 'process.stdout.write("node ok\n")'
        npm --version
        make --version | head -n 1
        printf '#include <stdio.h>\nint main(void){puts("hello from cc");return 0;}\n' > hello.c
        cc -o hello hello.c && ./hello
        curl --version | head -n 1
        echo '{"a": [1, 2]}' | jq -c '.a'
        echo needle | rg needle
        id -u
        if touch /usr/local/paddock-probe 2>/dev/null; then echo root-writable; fi
    "#;
    let ran = home.json(&["exec", "--json", &id, "--", "sh", "-c", script]);
    assert_eq!(ran["exit_code"], 0, "{ran}");
    let out = text(&ran, "stdout");
    for expected in [
        "pip ",
        "node ok",
        "GNU Make",
        "hello from cc",
        "curl ",
        "[1,2]",
        "needle",
    ] {
        assert!(out.contains(expected), "no `{expected}` in: {out}");
    }
    assert!(out.lines().any(|l| l == "1000"), "the agent's uid: {out}");
    assert!(
        !out.contains("root-writable"),
        "the root filesystem stays read-only: {out}"
    );
    home.ok(&["rm", &id, "--force"]);

    // doctor names what the configured image carries.
    let home = home.with_config(&format!("profiles:\n  default:\n    image: {image}\n"));
    let doctor = home.run(&["doctor"]);
    let said = String::from_utf8_lossy(&doctor.stdout);
    let row = said
        .lines()
        .find(|l| l.contains("toolchains"))
        .unwrap_or_else(|| panic!("no toolchains row: {said}"));
    assert!(row.starts_with("ok"), "{row}");
    for tool in [
        "python3 3.",
        "node ",
        "make ",
        "gcc ",
        "curl ",
        "jq ",
        "rg ",
    ] {
        assert!(row.contains(tool), "no `{tool}` in: {row}");
    }
}
