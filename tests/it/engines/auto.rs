//! `--engine auto` with two engines whose budgets hold two jobs each: four jobs go two and
//! two, a fifth waits (or, with `--no-wait`, is refused with exit 10) until a job is removed,
//! then goes where the room is. While it waits, its terminal says what for.

use serde_json::Value;

use super::{Engine, available, engine};
use crate::fixtures::terminal::OnTerminal;
use crate::fixtures::{FixtureRepo, TestHome, test_image, text};

fn home_with_two(one: &Engine, two: &Engine) -> TestHome {
    let home = TestHome::new().env("PADDOCK_TEST_FORBID_HOST_BINDS", "1");
    std::fs::write(
        home.dir.path().join("config/paddock/config.yaml"),
        format!(
            "admission:\n  memory: 1024g\n  cpus: 1000\n  max_running_execs: 1000\nengines:\n{}    jobs: 2\n{}    jobs: 2\n",
            one.config_entry(),
            two.config_entry()
        ),
    )
    .expect("write the test's user config");
    home
}

fn engine_of(home: &TestHome, id: &str) -> String {
    let show: Value = home.json(&["show", id, "--json"]);
    text(&show["job"], "engine")
}

#[test]
fn auto_placement_fills_two_engines_two_and_two_and_the_fifth_waits() {
    if !available("auto_placement_fills_two_engines") {
        return;
    }
    let (one, two) = (engine(), Engine::start("eng3", 73));
    let home = home_with_two(one, &two);
    let repo = FixtureRepo::new();
    let image = test_image();
    let repo_path = repo.path().display().to_string();
    let args = |task: &str| -> Vec<String> {
        [
            "create", "--repo", &repo_path, "--engine", "auto", "--image", &image, "--task", task,
            "--json",
        ]
        .map(str::to_string)
        .to_vec()
    };
    let mut ids = Vec::new();
    for task in ["a1", "a2", "a3", "a4"] {
        let args = args(task);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ids.push(text(&home.json(&args), "id"));
    }
    let mut placed: Vec<String> = ids.iter().map(|id| engine_of(&home, id)).collect();
    placed.sort();
    assert_eq!(placed, ["eng1", "eng1", "eng3", "eng3"]);

    let mut refused = args("a5");
    refused.push("--no-wait".into());
    let refused: Vec<&str> = refused.iter().map(String::as_str).collect();
    let output = home.run(&refused);
    assert_eq!(output.status.code(), Some(10), "{output:?}");

    // The fifth waits, and says so on its terminal: what it waits for, its place, how long.
    let mut waiting = args("a5");
    waiting.pop(); // `--json`: a person's create
    waiting.extend(["--id".into(), "a5".into()]);
    let waiting: Vec<&str> = waiting.iter().map(String::as_str).collect();
    let mut fifth = OnTerminal::start(&home, &waiting);
    let line = fifth.wait_for("waiting for room");
    assert!(
        line.starts_with("paddock: waiting for room: no engine has room (")
            && line.contains("eng1 holds 2 of 2 jobs")
            && line.contains("eng3 holds 2 of 2 jobs")
            && line.ends_with("place 1 of 1; gives up after 30m; --no-wait fails at once"),
        "{line}"
    );
    let listed = home.run(&["ls"]);
    assert!(
        String::from_utf8_lossy(&listed.stderr).contains("waiting: 1 create, 0 execs"),
        "{listed:?}"
    );
    let freed = ids
        .iter()
        .find(|id| engine_of(&home, id) == "eng3")
        .expect("a job on eng3")
        .clone();
    home.ok(&["rm", &freed, "--force"]);
    let (code, lines) = fifth.finish();
    assert_eq!(code, Some(0), "{lines:?}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("waiting for room"))
            .count(),
        1,
        "one line while nothing changed: {lines:?}"
    );
    let fifth_id = "a5".to_string();
    assert_eq!(engine_of(&home, &fifth_id), "eng3");
    for id in ids.iter().filter(|id| **id != freed).chain([&fifth_id]) {
        home.ok(&["rm", id, "--force"]);
    }
}
