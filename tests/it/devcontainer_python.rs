//! examples/devcontainer-python as a user would use it: a Python repository whose
//! devcontainer.json builds its toolchain (Debian's `python3` on the local base
//! image) and runs its tests before the agent's first command. The agent then works in
//! Python with no paddock-specific file, and its commit reaches the user's repository.
//! The image is cached by its content, so runs after the first build nothing. Fails when
//! Docker is absent unless PADDOCK_SKIP_DOCKER_TESTS=1.

use std::path::Path;

use crate::fixtures::{FixtureRepo, TestHome, docker_available, text};

/// A repository holding every file of examples/devcontainer-python; committed.
fn python_repo() -> FixtureRepo {
    let repo = FixtureRepo::new();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/devcontainer-python");
    for name in [
        ".devcontainer/devcontainer.json",
        ".devcontainer/Dockerfile",
        "stats.py",
        "test_stats.py",
        "README.md",
    ] {
        let text = std::fs::read_to_string(example.join(name)).expect("example file");
        repo.write(name, &text);
    }
    repo.commit_all("a python repository");
    repo
}

#[test]
fn a_python_repository_gets_its_toolchain_from_devcontainer_json() {
    if !docker_available("a_python_repository_gets_its_toolchain_from_devcontainer_json") {
        return;
    }
    let repo = python_repo();
    // The build installs from Debian's mirror: the user's profile opens the build's network
    // (a repository's build has none by default).
    let home = TestHome::new()
        .with_config("profiles:\n  default:\n    build_network: open\n")
        .allowing_images(&["paddock-base:*"]);
    let job = home.create(&repo, &["--runtime", "docker", "--task", "py"]);
    let id = text(&job, "id");
    let branch = text(&job, "branch");
    let image = text(&job["devcontainer"], "image");
    assert!(image.starts_with("paddock-devc:"), "{job}");
    assert_eq!(job["limits"]["image"], image.as_str(), "{job}");

    // The postCreateCommand ran the repository's tests in the built toolchain.
    let setup = home.sh(&id, "cat .setup-tests.log");
    assert!(setup.contains("OK"), "{setup}");
    let python = home.sh(
        &id,
        "python3 -c 'import sys; print(sys.version_info[0])'; id -u",
    );
    assert_eq!(
        python.trim(),
        "3\n1000",
        "python3 on PATH, run as the agent's uid"
    );

    // The agent's work, in Python, comes back as a commit on the job's branch.
    home.sh(
        &id,
        "printf '\\n\\ndef median(values):\\n    ordered = sorted(values)\\n    middle = len(ordered) // 2\\n    if len(ordered) %% 2:\\n        return ordered[middle]\\n    return (ordered[middle - 1] + ordered[middle]) / 2\\n' >> stats.py \
         && printf 'import unittest\\n\\nfrom stats import median\\n\\n\\nclass MedianTest(unittest.TestCase):\\n    def test_median(self):\\n        self.assertEqual(median([3, 1, 2]), 2)\\n        self.assertEqual(median([4, 1, 2, 3]), 2.5)\\n' > test_median.py \
         && python3 -m unittest -q 2>&1 | tail -1 \
         && git add stats.py test_median.py && git commit -qm 'stats: median'",
    );
    let subject = repo.git(&["log", "-1", "--format=%s", &branch]);
    assert_eq!(subject.trim(), "stats: median");
    let files = repo.git(&["show", "--name-only", "--format=", &branch]);
    assert_eq!(files.trim(), "stats.py\ntest_median.py");
    home.ok(&["rm", &id, "--force"]);
}
