//! `paddock mcp` as an MCP client sees it: JSON-RPC 2.0 over the stdio of the real binary.
//! Initialise, list tools with valid schemas, create a job, write files, commit through
//! `job_exec`, read the diff and files, remove the job; malformed messages get the proper
//! JSON-RPC errors and the server keeps serving; a second session cannot touch the first
//! session's job unless it runs with `--all-jobs`; a session creates jobs only in the
//! repositories it was started with, and never on another session's job's branch.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use crate::fixtures::{FixtureRepo, TestHome, docker_available, test_image};
use serde_json::{Value, json};

pub(crate) struct McpClient {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl McpClient {
    pub(crate) fn start(home: &TestHome, extra: &[&str]) -> McpClient {
        let (client, init) = McpClient::start_speaking(home, extra, "2025-06-18");
        assert_eq!(init["result"]["protocolVersion"], "2025-06-18", "{init}");
        client
    }

    /// A session whose client asks for protocol version `asked`; with `initialize`'s answer.
    pub(crate) fn start_speaking(
        home: &TestHome,
        extra: &[&str],
        asked: &str,
    ) -> (McpClient, Value) {
        let mut args = vec!["mcp"];
        args.extend_from_slice(extra);
        let mut child = home
            .cmd(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut client = McpClient {
            child,
            stdin: Some(stdin),
            stdout,
            next_id: 0,
        };
        let init = client.request(
            "initialize",
            &json!({
                "protocolVersion": asked,
                "capabilities": {},
                "clientInfo": {"name": "paddock-tests", "version": "1"},
            }),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "paddock");
        assert!(init["result"]["capabilities"]["tools"].is_object());
        // A notification: no answer (the next answer read is the next request's).
        client.send_line(
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string(),
        );
        (client, init)
    }

    fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn read(&mut self) -> Value {
        let mut line = String::new();
        assert!(
            self.stdout.read_line(&mut line).unwrap() > 0,
            "the server hung up"
        );
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// A raw line, and the one answer it gets.
    fn raw(&mut self, line: &str) -> Value {
        self.send_line(line);
        self.read()
    }

    fn request(&mut self, method: &str, params: &Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let answer = self.raw(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
        assert_eq!(answer["jsonrpc"], "2.0");
        assert_eq!(answer["id"], id, "{answer}");
        answer
    }

    /// `tools/call`; returns the result object (content, structuredContent, isError).
    pub(crate) fn call(&mut self, tool: &str, arguments: &Value) -> Value {
        let answer = self.request("tools/call", &json!({"name": tool, "arguments": arguments}));
        assert!(answer["error"].is_null(), "{tool}: {answer}");
        let result = answer["result"].clone();
        // The text content is the JSON of the structured content (or the error's message).
        let text = result["content"][0]["text"].as_str().unwrap();
        assert_eq!(result["content"][0]["type"], "text");
        if result["isError"] == false {
            assert_eq!(
                serde_json::from_str::<Value>(text).unwrap(),
                result["structuredContent"]
            );
        }
        result
    }

    /// A tool call that must succeed; returns its structured content.
    pub(crate) fn ok(&mut self, tool: &str, arguments: &Value) -> Value {
        let result = self.call(tool, arguments);
        assert_eq!(result["isError"], false, "{tool}: {result}");
        result["structuredContent"].clone()
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Checks `schema` is a JSON Schema for an object of named arguments.
fn check_schema(tool: &str, schema: &Value) {
    assert_eq!(schema["type"], "object", "{tool}: {schema}");
    let properties = schema["properties"]
        .as_object()
        .unwrap_or_else(|| panic!("{tool}: {schema}"));
    for (name, property) in properties {
        assert!(
            property.is_object()
                && (property.get("type").is_some()
                    || property.get("$ref").is_some()
                    || property.get("anyOf").is_some()),
            "{tool}.{name}: {property}"
        );
    }
    for required in schema["required"].as_array().into_iter().flatten() {
        assert!(
            properties.contains_key(required.as_str().unwrap()),
            "{tool}: {required}"
        );
    }
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn an_mcp_client_makes_a_job_writes_commits_diffs_and_removes_it() {
    if !docker_available("an_mcp_client_makes_a_job_writes_commits_diffs_and_removes_it") {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let repo_path = repo.path().display().to_string();
    let mut mcp = McpClient::start(&home, &["--repo", &repo_path]);

    let tools = mcp.request("tools/list", &json!({}));
    let tools = tools["result"]["tools"].as_array().unwrap().clone();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "job_create",
            "job_list",
            "job_show",
            "job_exec",
            "job_diff",
            "job_log",
            "job_stop",
            "job_pause",
            "job_resume",
            "job_checkpoint",
            "job_checkpoints",
            "job_restore",
            "job_fork",
            "job_remove",
            "job_push",
            "file_read",
            "file_write",
            "file_list"
        ]
    );
    for tool in &tools {
        let name = tool["name"].as_str().unwrap();
        assert!(tool["description"].as_str().is_some_and(|d| !d.is_empty()));
        check_schema(name, &tool["inputSchema"]);
    }
    let schema_of =
        |name: &str| tools.iter().find(|t| t["name"] == name).unwrap()["inputSchema"].clone();
    // Argument names follow the API, generated from the wire types.
    let create = schema_of("job_create");
    for field in [
        "repo", "base", "agent", "task", "id", "profile", "runtime", "memory", "cpus", "pids",
        "network", "timeout", "labels",
    ] {
        assert!(
            create["properties"][field].is_object(),
            "job_create.{field}"
        );
    }
    assert_eq!(
        schema_of("job_exec")["properties"]["command"]["type"],
        "array"
    );
    let required = schema_of("job_exec")["required"].clone();
    assert!(
        required.as_array().unwrap().len() == 2 && required.to_string().contains("\"command\""),
        "{required}"
    );
    let write = schema_of("file_write");
    assert!(
        write["properties"]["content"].is_object()
            && write["properties"]["content_base64"].is_object()
    );

    // A session's jobs run in containers, on branches of their own.
    for (arguments, needle) in [
        (
            json!({"repo": repo.path(), "runtime": "process", "task": "mcp-0"}),
            "process runtime",
        ),
        (
            json!({"repo": repo.path(), "reuse_branch": true, "task": "mcp-0"}),
            "reuse an existing branch",
        ),
    ] {
        let refused = mcp.call("job_create", &arguments);
        assert_eq!(refused["isError"], true, "{refused}");
        let message = refused["structuredContent"]["error"]["message"].to_string();
        assert!(message.contains(needle), "{message}");
    }
    assert_eq!(home.job_records(), 0);
    let job = mcp.ok(
        "job_create",
        &json!({"repo": repo.path(), "image": test_image(), "task": "mcp-1"}),
    );
    assert_eq!(job["runtime"], "docker", "{job}");
    let id = job["id"].as_str().unwrap().to_string();
    assert!(job["labels"]["mcp-session"].is_string(), "{job}");
    let written = mcp.ok(
        "file_write",
        &json!({"job": id, "path": "/workspace/src/notes.md", "content": "# notes from mcp\n"}),
    );
    assert_eq!(written["path"], "src/notes.md");
    assert_eq!(written["created"], true);
    let binary: Vec<u8> = (0..=255u8).collect();
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(&binary);
    mcp.ok(
        "file_write",
        &json!({"job": id, "path": "blob.bin", "content_base64": encoded}),
    );

    let result = mcp.ok(
        "job_exec",
        &json!({"job": id, "command": ["sh", "-c", "git add . && git commit -qm 'notes from mcp' && echo done"], "timeout": "2m"}),
    );
    assert_eq!(result["exit_code"], 0, "{result}");
    assert_eq!(result["stdout"], "done\n");
    // A text for the command's stdin (issue 44).
    let fed = mcp.ok(
        "job_exec",
        &json!({"job": id, "command": ["sh", "-c", "read -r a; read -r b; echo \"$b $a\""], "stdin": "one\ntwo\n"}),
    );
    assert_eq!(fed["stdout"], "two one\n", "{fed}");
    // What it ran on and under (issue 28).
    assert!(result["meta"]["runtime"].is_string(), "{result}");
    assert!(result["meta"]["limits"]["pids"].is_u64(), "{result}");
    let diff = mcp.ok("job_diff", &json!({"job": id}));
    let patch = diff["diff"].as_str().unwrap();
    assert!(
        patch.contains("src/notes.md") && patch.contains("+# notes from mcp"),
        "{patch}"
    );
    let log = mcp.ok("job_log", &json!({"job": id}));
    assert_eq!(log["commits"][0]["summary"], "notes from mcp", "{log}");
    let read = mcp.ok("file_read", &json!({"job": id, "path": "src/notes.md"}));
    assert_eq!(read["content"], "# notes from mcp\n");
    let read = mcp.ok(
        "file_read",
        &json!({"job": id, "path": "/workspace/blob.bin"}),
    );
    assert_eq!(read["content_base64"], encoded);
    assert!(read.get("content").is_none());
    let list = mcp.ok("file_list", &json!({"job": id, "path": "src"}));
    let entries: Vec<&str> = list["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        entries.contains(&"notes.md") && entries.contains(&"lib.rs"),
        "{list}"
    );
    let refused = mcp.call("file_read", &json!({"job": id, "path": "../../etc/passwd"}));
    assert_eq!(refused["isError"], true);
    assert_eq!(refused["structuredContent"]["error"]["code"], "refused");
    let jobs = mcp.ok("job_list", &json!({}));
    assert_eq!(jobs["jobs"][0]["id"], id);

    // Malformed messages: the proper errors, and the session goes on.
    let answer = mcp.raw("{\"jsonrpc\": \"2.0\", \"id\": 99, \"method\": ");
    assert_eq!(answer["error"]["code"], -32700, "{answer}");
    assert_eq!(answer["id"], Value::Null);
    let answer = mcp.raw(r#"{"jsonrpc": "2.0", "id": 100}"#);
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert_eq!(answer["id"], 100);
    let answer = mcp.raw(r#"{"jsonrpc": "1.0", "id": 101, "method": "ping"}"#);
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let answer = mcp.raw(r#"[{"jsonrpc": "2.0", "id": 102, "method": "ping"}]"#);
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    let answer = mcp.request("resources/list", &json!({}));
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    let answer = mcp.request(
        "tools/call",
        &json!({"name": "no_such_tool", "arguments": {}}),
    );
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let answer = mcp.request(
        "tools/call",
        &json!({"name": "job_exec", "arguments": {"job": id}}),
    );
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let answer = mcp.request(
        "tools/call",
        &json!({"name": "job_show", "arguments": {"job": id, "extra": 1}}),
    );
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let answer = mcp.request(
        "tools/call",
        &json!({"name": "file_write", "arguments": {"job": id, "path": "x"}}),
    );
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let answer = mcp.request("initialize", &json!({}));
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    assert_eq!(mcp.request("ping", &json!({}))["result"], json!({}));

    // Its own checkpoint, restored, and forked into a job of this session.
    let cp = mcp.ok("job_checkpoint", &json!({"job": id, "name": "mine"}));
    assert_eq!(cp["name"], "mine", "{cp}");
    let listed = mcp.ok("job_checkpoints", &json!({"job": id}));
    assert_eq!(listed["checkpoints"][0]["name"], "mine", "{listed}");
    mcp.ok("job_restore", &json!({"job": id, "checkpoint": "mine"}));
    let forked = mcp.ok("job_fork", &json!({"job": id, "from": "mine"}));
    let fork = forked["jobs"][0]["id"].as_str().unwrap().to_string();
    assert!(forked["jobs"][0]["labels"]["mcp-session"] == job["labels"]["mcp-session"]);
    mcp.ok("job_show", &json!({"job": fork}));
    mcp.ok("job_remove", &json!({"job": fork, "force": true}));

    // Another session sees none of it, and cannot touch it.
    let mut other = McpClient::start(&home, &[]);
    let stolen = other.call(
        "job_create",
        &json!({"repo": repo.path(), "image": test_image(), "from_checkpoint": format!("{id}:mine")}),
    );
    assert_eq!(
        stolen["structuredContent"]["error"]["code"], "refused",
        "another session's checkpoint: {stolen}"
    );
    assert_eq!(other.ok("job_list", &json!({}))["jobs"], json!([]));
    for (tool, arguments) in [
        ("job_show", json!({"job": id})),
        (
            "job_exec",
            json!({"job": id, "command": ["sh", "-c", "echo owned > pwned.txt"]}),
        ),
        ("file_read", json!({"job": id, "path": "src/notes.md"})),
        (
            "file_write",
            json!({"job": id, "path": "pwned.txt", "content": "x"}),
        ),
        ("file_list", json!({"job": id})),
        ("job_diff", json!({"job": id})),
        ("job_stop", json!({"job": id})),
        ("job_pause", json!({"job": id})),
        ("job_resume", json!({"job": id})),
        ("job_checkpoint", json!({"job": id, "name": "theirs"})),
        ("job_checkpoints", json!({"job": id})),
        ("job_restore", json!({"job": id, "checkpoint": "theirs"})),
        ("job_fork", json!({"job": id, "count": 2})),
        ("job_push", json!({"job": id})),
        ("job_remove", json!({"job": id, "force": true})),
    ] {
        let result = other.call(tool, &arguments);
        assert_eq!(result["isError"], true, "{tool}: {result}");
        assert_eq!(
            result["structuredContent"]["error"]["code"], "refused",
            "{tool}: {result}"
        );
    }
    let worktree = job["worktree"].as_str().unwrap();
    assert!(!std::path::Path::new(worktree).join("pwned.txt").exists());
    assert_eq!(
        home.json(&["show", &id, "--json"])["job"]["id"],
        id.as_str()
    );
    // With --all-jobs it may.
    let mut admin = McpClient::start(&home, &["--all-jobs"]);
    assert_eq!(
        admin.ok("job_show", &json!({"job": id}))["job"]["id"],
        id.as_str()
    );
    assert_eq!(
        admin.ok("job_list", &json!({}))["jobs"][0]["id"],
        id.as_str()
    );

    let removed = mcp.ok("job_remove", &json!({"job": id}));
    assert_eq!(removed["branch_kept"], true, "{removed}");
    assert!(
        repo.branches()
            .contains(&job["branch"].as_str().unwrap().to_string())
    );
    assert_eq!(home.job_records(), 0);
    let gone = mcp.call("job_show", &json!({"job": id}));
    assert_eq!(gone["isError"], true);
    assert_eq!(gone["structuredContent"]["error"]["code"], "not_found");

    // End of input ends the server cleanly.
    drop(mcp.stdin.take());
    let status = mcp.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_2025_11_25_client_gets_its_version_and_bad_arguments_as_tool_errors_older_ones_theirs() {
    let home = TestHome::new();
    let (mut client, init) = McpClient::start_speaking(&home, &[], "2025-11-25");
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    assert!(
        init["result"]["serverInfo"]["description"].is_string(),
        "{init}"
    );
    let tools = client.request("tools/list", &json!({}));
    let tools = tools["result"]["tools"].as_array().unwrap().clone();
    assert!(tools.len() > 5, "{tools:?}");
    for tool in &tools {
        // 2025-11-25's tool names: 1 to 128 of A-Z a-z 0-9 _ - .
        let name = tool["name"].as_str().unwrap();
        assert!(
            (1..=128).contains(&name.len())
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-.".contains(c)),
            "{name}"
        );
    }
    let listed = client.call("job_list", &json!({}));
    assert_eq!(listed["isError"], false, "{listed}");
    // Arguments that do not fit the schema: a tool execution error the model can read.
    let bad = client.call(
        "job_exec",
        &json!({"job": "some-job", "command": "not-an-array"}),
    );
    assert_eq!(bad["isError"], true, "{bad}");
    assert_eq!(
        bad["structuredContent"]["error"]["code"], "invalid_input",
        "{bad}"
    );
    assert!(
        bad["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("job_exec"),
        "{bad}"
    );
    // An unknown tool stays a protocol error.
    let unknown = client.request(
        "tools/call",
        &json!({"name": "no_such_tool", "arguments": {}}),
    );
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    drop(client);

    // A 2025-06-18 client keeps its version and its -32602 for bad arguments.
    let mut older = McpClient::start(&home, &[]);
    let answer = older.request(
        "tools/call",
        &json!({"name": "job_exec", "arguments": {"job": "some-job", "command": "not-an-array"}}),
    );
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    drop(older);
    for (asked, agreed) in [("2024-11-05", "2024-11-05"), ("2099-01-01", "2025-11-25")] {
        let (_client, init) = McpClient::start_speaking(&home, &[], asked);
        assert_eq!(init["result"]["protocolVersion"], agreed, "{init}");
    }
}

/// Issue 40, item 5: a session stays in its lane. It creates jobs only in the repositories
/// named at its start (`--repo`), and never based on the branch of a job it did not create
/// (which would hand it that job's work); its own job's branch is a fine base.
#[test]
fn a_session_creates_only_in_its_repositories_and_never_on_another_sessions_branch() {
    if !docker_available(
        "a_session_creates_only_in_its_repositories_and_never_on_another_sessions_branch",
    ) {
        return;
    }
    let (mine, theirs) = (FixtureRepo::new(), FixtureRepo::new());
    let home = TestHome::new();
    let (mine_path, theirs_path) = (
        mine.path().display().to_string(),
        theirs.path().display().to_string(),
    );
    let image = test_image();
    let create = |client: &mut McpClient, repo: &str, task: &str, base: Option<&str>| {
        let mut arguments =
            json!({"repo": repo, "task": task, "image": image, "runtime": "docker"});
        if let Some(base) = base {
            arguments["base"] = json!(base);
        }
        client.call("job_create", &arguments)
    };
    let refused = |result: &Value, says: &str| {
        assert_eq!(result["isError"], true, "{result}");
        assert_eq!(
            result["structuredContent"]["error"]["code"], "refused",
            "{result}"
        );
        assert!(result.to_string().contains(says), "{says}: {result}");
    };
    let mut session = McpClient::start(&home, &["--repo", &mine_path]);
    let mut other = McpClient::start(&home, &["--repo", &mine_path, "--repo", &theirs_path]);

    // A repository the session was not started with.
    refused(
        &create(&mut session, &theirs_path, "out", None),
        "serves only the repositories",
    );
    // Another session's job's branch as the base, by name or with a suffix.
    let foreign = other.ok(
        "job_create",
        &json!({"repo": mine_path, "task": "foreign", "image": image, "runtime": "docker"}),
    );
    let branch = foreign["branch"].as_str().unwrap().to_string();
    for base in [branch.clone(), format!("refs/heads/{branch}~0")] {
        refused(
            &create(&mut session, &mine_path, "steal", Some(&base)),
            "did not create",
        );
    }
    // Its own repository and its own job's branch are fine.
    let own = session.ok(
        "job_create",
        &json!({"repo": mine_path, "task": "own", "image": image, "runtime": "docker"}),
    );
    let own_branch = own["branch"].as_str().unwrap();
    let next = create(&mut session, &mine_path, "next", Some(own_branch));
    assert_eq!(next["isError"], false, "{next}");
    // With --all-jobs, the lane is the user's to draw.
    let mut admin = McpClient::start(&home, &["--all-jobs"]);
    let based = create(&mut admin, &mine_path, "admin", Some(&branch));
    assert_eq!(based["isError"], false, "{based}");
    let elsewhere = create(&mut admin, &theirs_path, "admin2", None);
    assert_eq!(elsewhere["isError"], false, "{elsewhere}");
    for id in [
        &foreign["id"],
        &own["id"],
        &next["structuredContent"]["id"],
        &based["structuredContent"]["id"],
        &elsewhere["structuredContent"]["id"],
    ] {
        home.ok(&["rm", id.as_str().unwrap(), "--force"]);
    }
}
