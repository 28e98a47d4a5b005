//! The file API on a job of a remote engine (`cat`, `cp`, MCP's `file_list`): through the
//! engine's archive API, with the local file API's rules: no link followed anywhere in a
//! path, only regular files, writes owned by the agent and never into `.git`.

use serde_json::json;

use super::{available, create_on, engine, home_with};
use crate::fixtures::FixtureRepo;
use crate::mcp::McpClient;

#[test]
fn the_file_api_reads_writes_and_lists_a_remote_job_and_follows_no_link() {
    if !available("the_file_api_reads_writes_and_lists_a_remote_job_and_follows_no_link") {
        return;
    }
    let engine = engine();
    let repo = FixtureRepo::new();
    let home = home_with(engine);
    let id = create_on(&home, engine, &repo, &["--task", "files"]);

    let read = home.ok(&["cat", &id, "src/lib.rs"]);
    assert!(read.contains("pub fn answer"), "{read}");

    // A write makes its missing directories, and the agent owns and can change the file.
    let local = home.dir.path().join("notes.md");
    std::fs::write(&local, "# from the host\n").expect("write");
    let target = format!("{id}:docs/new/notes.md");
    home.ok(&["cp", local.to_str().expect("utf-8"), &target]);
    let inside = home.sh(
        &id,
        "stat -c '%u %a' docs/new docs/new/notes.md && cat docs/new/notes.md && echo more >> docs/new/notes.md",
    );
    assert!(
        inside.starts_with("1000 755\n1000 644\n# from the host\n"),
        "{inside}"
    );
    assert_eq!(
        home.ok(&["cat", &id, "/workspace/docs/new/notes.md"]),
        "# from the host\nmore\n"
    );

    // Links the agent made: refused as a whole path and as a part of one, either way.
    home.sh(
        &id,
        "ln -s /etc etc-link && ln -s src/lib.rs lib-link && mkdir -p real && ln -s ../real up-link",
    );
    for path in ["lib-link", "etc-link/passwd", "up-link/x"] {
        let refused = home.run(&["cat", &id, path]);
        assert!(!refused.status.success(), "cat {path}: {refused:?}");
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(said.contains("link"), "cat {path}: {said}");
    }
    let refused = home.run(&[
        "cp",
        local.to_str().expect("utf-8"),
        &format!("{id}:etc-link/x"),
    ]);
    assert!(!refused.status.success(), "{refused:?}");
    let refused = home.run(&[
        "cp",
        local.to_str().expect("utf-8"),
        &format!("{id}:.git/config"),
    ]);
    assert!(!refused.status.success(), "{refused:?}");
    let missing = home.run(&["cat", &id, "nope.txt"]);
    assert!(!missing.status.success(), "{missing:?}");

    // A listing shows links as links, with their targets.
    let mut mcp = McpClient::start(&home, &["--all-jobs"]);
    let list = mcp.ok("file_list", &json!({"job": id, "path": ""}));
    let entries = list["entries"].as_array().expect("entries");
    let entry = |name: &str| {
        entries
            .iter()
            .find(|e| e["name"] == name)
            .unwrap_or_else(|| panic!("no {name} in {list}"))
            .clone()
    };
    assert_eq!(entry("src")["kind"], "dir", "{list}");
    assert_eq!(entry("lib-link")["kind"], "symlink", "{list}");
    assert_eq!(entry("lib-link")["target"], "src/lib.rs", "{list}");
    assert_eq!(entry("etc-link")["target"], "/etc", "{list}");
    drop(mcp);

    // As the sandbox would answer (issue 44): a file the agent made read-only, or one it
    // cannot read, is refused though the engine's archive API acts as root; a path outside
    // the workspace is the remote container's own.
    home.ok(&[
        "exec",
        &id,
        "--",
        "sh",
        "-c",
        "echo keep > ro.txt && chmod 0444 ro.txt && echo x > wo.txt && chmod 0200 wo.txt",
    ]);
    let refused = home.run(&[
        "cp",
        local.to_str().expect("utf-8"),
        &format!("{id}:ro.txt"),
    ]);
    assert_eq!(refused.status.code(), Some(13), "{refused:?}");
    assert_eq!(home.run(&["cat", &id, "wo.txt"]).status.code(), Some(13));
    let hostname = home.ok(&["cat", &id, "/etc/hostname"]);
    assert_eq!(
        hostname,
        home.ok(&["exec", &id, "--", "cat", "/etc/hostname"])
    );
    home.ok(&[
        "cp",
        local.to_str().expect("utf-8"),
        &format!("{id}:/tmp/in.txt"),
    ]);
    assert_eq!(
        home.ok(&["cat", &id, "/tmp/in.txt"]),
        std::fs::read_to_string(&local).expect("the local file")
    );
    home.ok(&["rm", &id, "--force"]);
}
