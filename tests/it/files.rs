//! The file API (`paddock cp`, `paddock cat`, `GET/PUT /v1/jobs/{id}/files`): binary round
//! trips through the CLI (with and without a daemon) and HTTP, and every way out of the
//! workspace refused with nothing outside read or written: `..`, absolute paths elsewhere,
//! symlinks and hard links the agent made, the `.git` link, files over the cap.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Stdio;

use crate::api::Daemon;
use crate::fixtures::{FixtureRepo, TestHome, docker_available, text};
use serde_json::Value;

/// Every byte value, twice, then a few in reverse: any text or line-ending translation
/// changes it.
fn all_bytes() -> Vec<u8> {
    let mut bytes: Vec<u8> = (0..=255u8).chain(0..=255u8).collect();
    bytes.extend((0..=255u8).rev().take(17));
    bytes
}

/// One raw HTTP/1.1 request with a binary body; returns the status and the body's bytes.
fn http_bytes(socket: &Path, method: &str, path: &str, body: &[u8]) -> (u16, Vec<u8>) {
    let mut stream = UnixStream::connect(socket).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: paddock\r\nConnection: close\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut body = response[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        let mut out = Vec::new();
        let mut rest = &body[..];
        while let Some(end) = rest.windows(2).position(|w| w == b"\r\n") {
            let size = usize::from_str_radix(std::str::from_utf8(&rest[..end]).unwrap().trim(), 16)
                .unwrap();
            if size == 0 {
                break;
            }
            out.extend_from_slice(&rest[end + 2..end + 2 + size]);
            rest = &rest[end + 2 + size + 2..];
        }
        body = out;
    }
    (status, body)
}

fn cp_stdin(home: &TestHome, target: &str, bytes: &[u8]) -> std::process::Output {
    let mut child = home
        .cmd(&["cp", "-", target])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn binary_files_round_trip_through_cp_cat_and_http() {
    crate::fixtures::each_checkout(|| {
        let repo = FixtureRepo::new();
        let home = TestHome::new();
        let job = home.create(&repo, &["--runtime", "process"]);
        let (id, worktree) = (text(&job, "id"), text(&job, "worktree"));
        let bytes = all_bytes();
        let local = home.dir.path().join("all.bin");
        std::fs::write(&local, &bytes).unwrap();

        // In by cp (missing directories made), out by cp and by cat: the same bytes.
        let written = home.json(&[
            "cp",
            local.to_str().unwrap(),
            &format!("{id}:/workspace/data/all.bin"),
            "--json",
        ]);
        assert_eq!(written["path"], "data/all.bin");
        assert_eq!(written["size"], bytes.len());
        assert_eq!(written["created"], true);
        assert_eq!(
            std::fs::read(Path::new(&worktree).join("data/all.bin")).unwrap(),
            bytes
        );
        let back = home.dir.path().join("back.bin");
        home.ok(&["cp", &format!("{id}:data/all.bin"), back.to_str().unwrap()]);
        assert_eq!(std::fs::read(&back).unwrap(), bytes);
        let cat = home.run(&["cat", &id, "data/all.bin"]);
        assert!(cat.status.success());
        assert_eq!(cat.stdout, bytes);
        // The agent sees what was written.
        let listed = home.sh(&id, "od -An -tx1 data/all.bin | tr -d ' \\n' | head -c 20");
        assert_eq!(listed, "00010203040506070809");

        // From stdin into a directory target (`dir/` takes no name from `-`: refused), replacing.
        let output = cp_stdin(&home, &format!("{id}:data/all.bin"), &bytes[..100]);
        assert!(output.status.success(), "{output:?}");
        assert_eq!(
            std::fs::read(Path::new(&worktree).join("data/all.bin")).unwrap(),
            &bytes[..100]
        );

        // Through the daemon: the CLI goes through the client, and raw HTTP too.
        let daemon = Daemon::start(&home, &[]);
        let output = cp_stdin(&home, &format!("{id}:via-daemon.bin"), &bytes);
        assert!(output.status.success(), "{output:?}");
        assert_eq!(home.run(&["cat", &id, "via-daemon.bin"]).stdout, bytes);
        let route = format!("/v1/jobs/{id}/files?path=%2Fworkspace%2Fhttp%2Fx.bin");
        let (status, body) = http_bytes(&daemon.socket, "PUT", &route, &bytes);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["path"], "http/x.bin");
        assert_eq!(answer["size"], bytes.len());
        let (status, body) = http_bytes(&daemon.socket, "GET", &route, b"");
        assert_eq!(status, 200);
        assert_eq!(body, bytes);
        assert_eq!(
            std::fs::read(Path::new(&worktree).join("http/x.bin")).unwrap(),
            bytes
        );
        let (status, body) = http_bytes(
            &daemon.socket,
            "GET",
            &format!("/v1/jobs/{id}/files?path=http&list=true"),
            b"",
        );
        assert_eq!(status, 200);
        let list: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(list["path"], "http");
        assert_eq!(list["entries"][0]["name"], "x.bin");
        assert_eq!(list["entries"][0]["kind"], "file");
        assert_eq!(list["entries"][0]["size"], bytes.len());
        // Past the cap: a clear error naming it, and HTTP's own status.
        let big = vec![b'x'; 16 * 1024 * 1024 + 1];
        let (status, body) = http_bytes(
            &daemon.socket,
            "PUT",
            &format!("/v1/jobs/{id}/files?path=big"),
            &big,
        );
        assert_eq!(status, 413, "{}", String::from_utf8_lossy(&body));
        let error: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(error["error"]["code"], "too_large");
        assert!(!Path::new(&worktree).join("big").exists());
        daemon.stop();

        let local_big = home.dir.path().join("big.bin");
        std::fs::write(&local_big, &big).unwrap();
        let output = home.run(&["cp", local_big.to_str().unwrap(), &format!("{id}:big")]);
        assert_eq!(output.status.code(), Some(4));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("16777217 bytes, over the file API's cap of 16777216 bytes"),
            "{stderr}"
        );
        assert!(!Path::new(&worktree).join("big").exists());
    });
}

#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn paths_out_of_the_workspace_are_refused_and_nothing_outside_changes() {
    crate::fixtures::each_checkout(|| {
        let repo = FixtureRepo::new();
        let home = TestHome::new();
        let job = home.create(&repo, &["--runtime", "process"]);
        let (id, worktree) = (text(&job, "id"), text(&job, "worktree"));
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret.txt");
        std::fs::write(&secret, "SECRET-OUTSIDE-42\n").unwrap();
        let secret_path = secret.display().to_string();
        let outside_dir = outside.path().display().to_string();
        // The agent plants links out: to the host's /etc/passwd, to a file and a directory
        // outside, up the tree, a hard link to the outside file, and a dangling link where a
        // write would create a file outside. (An overlay checkout is a filesystem of its own: no
        // hard link reaches out of it, so there the agent links a file of its own, whose two
        // names are refused all the same.)
        home.sh(
            &id,
            &format!(
                "ln -s /etc/passwd passwd && ln -s {secret_path} secret && ln -s {outside_dir} out \
                 && ln -s .. up && mkdir -p sub && ln -s ../../.. sub/climb \
                 && {{ ln {secret_path} hard 2>/dev/null || {{ echo mine > own && ln own hard; }}; }} \
                 && ln -s {outside_dir}/created dangling"
            ),
        );
        let before_passwd = std::fs::read("/etc/passwd").unwrap();

        for path in [
            "../x",
            "sub/../../x",
            "/etc/passwd",
            "passwd",
            "secret",
            "out/secret.txt",
            "up/x",
            "sub/climb/etc/passwd",
            "hard",
            &format!("{}/../x", worktree),
        ] {
            let output = home.run(&["cat", &id, path]);
            assert_eq!(output.status.code(), Some(9), "cat {path}: {output:?}");
            assert!(output.stdout.is_empty(), "cat {path} printed {output:?}");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(
                !stderr.contains("SECRET") && !stderr.contains("root:"),
                "{stderr}"
            );
            let out = home.dir.path().join("copied");
            let output = home.run(&["cp", &format!("{id}:{path}"), out.to_str().unwrap()]);
            assert_eq!(output.status.code(), Some(9), "cp out {path}: {output:?}");
            assert!(!out.exists());
        }
        let message = String::from_utf8_lossy(&home.run(&["cat", &id, "../x"]).stderr).into_owned();
        assert!(
            message.contains("path escapes the workspace: `../x`"),
            "{message}"
        );
        let message =
            String::from_utf8_lossy(&home.run(&["cat", &id, "passwd"]).stderr).into_owned();
        assert!(message.contains("symbolic link"), "{message}");

        let payload = home.dir.path().join("payload");
        std::fs::write(&payload, "OVERWRITTEN").unwrap();
        for path in [
            "../escape.txt",
            "/etc/paddock-escape",
            &format!("{outside_dir}/written.txt"),
            "secret",
            "out/secret.txt",
            "out/new.txt",
            "dangling",
            "up/escape.txt",
            "sub/climb/tmp/escape.txt",
            "hard",
            ".git",
            ".git/config",
        ] {
            let output = home.run(&["cp", payload.to_str().unwrap(), &format!("{id}:{path}")]);
            assert_eq!(output.status.code(), Some(9), "cp in {path}: {output:?}");
        }
        assert_eq!(
            std::fs::read_to_string(&secret).unwrap(),
            "SECRET-OUTSIDE-42\n"
        );
        let mut names: Vec<String> = std::fs::read_dir(outside.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["secret.txt"]);
        assert_eq!(std::fs::read("/etc/passwd").unwrap(), before_passwd);
        assert!(!Path::new("/etc/paddock-escape").exists());
        let parent = Path::new(&worktree).parent().unwrap();
        assert!(!parent.join("escape.txt").exists());
        assert!(
            std::fs::read_to_string(Path::new(&worktree).join(".git"))
                .unwrap()
                .starts_with("gitdir:")
        );

        // A file inside named absolutely by the worktree's host path is fine, and the listing
        // shows the links with their targets (never followed).
        home.ok(&[
            "cp",
            payload.to_str().unwrap(),
            &format!("{id}:{worktree}/ok.txt"),
        ]);
        assert_eq!(home.ok(&["cat", &id, "ok.txt"]), "OVERWRITTEN");
        let root = home.run(&["cat", &id, "."]);
        assert_eq!(
            root.status.code(),
            Some(4),
            "a directory is not a file: {root:?}"
        );
    });
}

#[test]
fn a_container_agents_links_are_refused_and_new_files_are_the_agents() {
    crate::fixtures::each_checkout(|| {
        if !docker_available("a_container_agents_links_are_refused_and_new_files_are_the_agents") {
            return;
        }
        let repo = FixtureRepo::new();
        let home = TestHome::new();
        let job = home.create_docker(&repo, &[]);
        let (id, worktree) = (text(&job, "id"), text(&job, "worktree"));
        let outside = tempfile::tempdir().unwrap();
        let target = outside.path().join("host.txt");
        std::fs::write(&target, "HOST-FILE\n").unwrap();
        // Inside the container, links to host paths (the container has its own /etc/passwd;
        // on the host the link names the host's).
        home.sh(
            &id,
            &format!(
                "ln -s /etc/passwd /workspace/passwd && ln -s {} /workspace/host",
                target.display()
            ),
        );
        let output = home.run(&["cat", &id, "/workspace/passwd"]);
        assert_eq!(output.status.code(), Some(9), "{output:?}");
        assert!(output.stdout.is_empty());
        let payload = home.dir.path().join("payload");
        std::fs::write(&payload, "CHANGED").unwrap();
        let output = home.run(&[
            "cp",
            payload.to_str().unwrap(),
            &format!("{id}:/workspace/host"),
        ]);
        assert_eq!(output.status.code(), Some(9), "{output:?}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "HOST-FILE\n");

        // A new file and directory belong to whoever owns the checkout (the agent's uid when
        // paddock is root), so the agent can change them.
        home.ok(&[
            "cp",
            payload.to_str().unwrap(),
            &format!("{id}:/workspace/new/dir/f.txt"),
        ]);
        let owner = |p: &Path| std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(p).unwrap());
        let root_owner = owner(Path::new(&worktree));
        assert_eq!(
            owner(&Path::new(&worktree).join("new/dir/f.txt")),
            root_owner
        );
        assert_eq!(owner(&Path::new(&worktree).join("new")), root_owner);
        assert_eq!(
            home.sh(&id, "echo more >> new/dir/f.txt && cat new/dir/f.txt"),
            "CHANGEDmore\n"
        );
        home.ok(&["rm", &id, "--force"]);
    });
}

/// Issue 44, part 3: the file API answers as the job's sandbox would. In the workspace a
/// file the agent made read-only is not written and one it cannot read is not read (exit
/// 13, HTTP 403 `permission_denied`), though paddock as root could; outside the workspace
/// a path is the sandbox's own (`/etc/hostname` is the container's, `/tmp/x` is written
/// there and never on the host), read and written as the agent, whole or not at all.
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn as_the_sandbox_sees_it(runtime: &str, test: &str) {
    if !docker_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let image = crate::fixtures::test_image();
    let job = home.create(&repo, &["--runtime", runtime, "--image", &image]);
    let id = text(&job, "id");
    let worktree = std::path::PathBuf::from(text(&job, "worktree"));
    home.sh(
        &id,
        "echo keep > ro.txt && chmod 0444 ro.txt && echo hidden > wo.txt && chmod 0200 wo.txt \
         && mkdir shut && echo in > shut/f && chmod 0000 shut",
    );
    let payload = home.dir.path().join("payload");
    std::fs::write(&payload, "OVERWRITTEN").unwrap();
    let put =
        |target: &str| home.run(&["cp", payload.to_str().unwrap(), &format!("{id}:{target}")]);
    let refused = put("ro.txt");
    assert_eq!(refused.status.code(), Some(13), "{refused:?}");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("permission denied"));
    assert_eq!(home.sh(&id, "cat ro.txt"), "keep\n");
    for unreadable in ["wo.txt", "shut/f"] {
        let refused = home.run(&["cat", &id, unreadable]);
        assert_eq!(
            refused.status.code(),
            Some(13),
            "cat {unreadable}: {refused:?}"
        );
        assert!(refused.stdout.is_empty());
    }
    assert_eq!(put("shut/new.txt").status.code(), Some(13));
    home.sh(&id, "chmod 0755 shut");
    assert!(!worktree.join("shut/new.txt").exists());

    // Outside the workspace: the sandbox's files.
    let hostname = home.ok(&["cat", &id, "/etc/hostname"]);
    assert_eq!(hostname, home.sh(&id, "cat /etc/hostname"));
    assert_ne!(
        hostname,
        std::fs::read_to_string("/etc/hostname").unwrap_or_default()
    );
    let host_tmp = Path::new("/tmp/paddock-file-api-probe");
    let _ = std::fs::remove_file(host_tmp);
    let written = home.json(&[
        "cp",
        "--json",
        payload.to_str().unwrap(),
        &format!("{id}:{}", host_tmp.display()),
    ]);
    assert_eq!(written["created"], true, "{written}");
    assert_eq!(written["size"], 11, "{written}");
    assert_eq!(
        home.sh(&id, &format!("cat {}", host_tmp.display())),
        "OVERWRITTEN"
    );
    assert!(!host_tmp.exists(), "the host's /tmp is not the job's");
    assert_eq!(
        home.ok(&["cat", &id, &host_tmp.display().to_string()]),
        "OVERWRITTEN"
    );
    // The sandbox's rules: a read-only root, root's files, a directory, nothing there.
    assert_eq!(put("/etc/hostname-new").status.code(), Some(13));
    assert_eq!(
        home.run(&["cat", &id, "/etc/shadow"]).status.code(),
        Some(13)
    );
    assert_eq!(home.run(&["cat", &id, "/etc"]).status.code(), Some(4));
    assert_eq!(home.run(&["cat", &id, "/nope/x"]).status.code(), Some(5));
    home.sh(&id, "echo mine > /tmp/ro && chmod 0444 /tmp/ro");
    assert_eq!(put("/tmp/ro").status.code(), Some(13));
    assert_eq!(home.sh(&id, "cat /tmp/ro"), "mine\n");
    // Through the API too, and the listing is the sandbox's directory.
    let daemon = Daemon::start_with_runtime(&home, &[], "docker");
    let (status, body) = http_bytes(
        &daemon.socket,
        "GET",
        &format!("/v1/jobs/{id}/files?path=/etc/shadow"),
        b"",
    );
    assert_eq!(status, 403, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains("permission_denied"));
    let (status, body) = http_bytes(
        &daemon.socket,
        "PUT",
        &format!("/v1/jobs/{id}/files?path=/tmp/api.bin"),
        &all_bytes(),
    );
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let (status, body) = http_bytes(
        &daemon.socket,
        "GET",
        &format!("/v1/jobs/{id}/files?path=/tmp/api.bin"),
        b"",
    );
    assert_eq!((status, body), (200, all_bytes()));
    let (status, body) = http_bytes(
        &daemon.socket,
        "GET",
        &format!("/v1/jobs/{id}/files?path=/tmp&list=true"),
        b"",
    );
    assert_eq!(status, 200);
    let list: Value = serde_json::from_slice(&body).unwrap();
    let names: Vec<&str> = list["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(
        names.contains(&"api.bin") && names.contains(&"ro"),
        "{list}"
    );
    daemon.stop();
    home.ok(&["rm", &id, "--force"]);
}

#[test]
fn the_file_api_answers_as_a_runc_sandbox_would() {
    as_the_sandbox_sees_it("docker", "the_file_api_answers_as_a_runc_sandbox_would");
}

#[test]
fn the_file_api_answers_as_a_gvisor_sandbox_would() {
    as_the_sandbox_sees_it("runsc", "the_file_api_answers_as_a_gvisor_sandbox_would");
}
