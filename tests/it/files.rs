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
        // No cap on a transfer: 17 MiB goes whole; a read limit the caller sets refuses a
        // larger file by name, with HTTP's own status, before a byte moves.
        let big = vec![b'x'; 16 * 1024 * 1024 + 1];
        let (status, body) = http_bytes(
            &daemon.socket,
            "PUT",
            &format!("/v1/jobs/{id}/files?path=big"),
            &big,
        );
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert_eq!(
            std::fs::read(Path::new(&worktree).join("big")).unwrap(),
            big
        );
        let (status, body) = http_bytes(
            &daemon.socket,
            "GET",
            &format!("/v1/jobs/{id}/files?path=big&max=1048576"),
            b"",
        );
        assert_eq!(status, 413, "{}", String::from_utf8_lossy(&body));
        let error: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(error["error"]["code"], "too_large");
        daemon.stop();

        let output = home.run(&["cat", &id, "big", "--max", "1m"]);
        assert_eq!(output.status.code(), Some(4));
        assert!(output.stdout.is_empty(), "nothing written");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("16777217 bytes, over the limit of 1048576 bytes"),
            "{stderr}"
        );
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

/// 50 MiB of every byte value (a xorshift stream), written to `dir`: its path and bytes.
fn fifty_mib(dir: &Path) -> (std::path::PathBuf, Vec<u8>) {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut bytes = Vec::with_capacity(50 << 20);
    while bytes.len() < 50 << 20 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    let path = dir.join("fifty.bin");
    std::fs::write(&path, &bytes).unwrap();
    (path, bytes)
}

/// A `PUT` that announces `announced` bytes, sends `sent` of them and hangs up.
fn cut_put(socket: &Path, path: &str, announced: usize, sent: &[u8]) {
    let mut stream = UnixStream::connect(socket).unwrap();
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: paddock\r\nContent-Type: application/octet-stream\r\nContent-Length: {announced}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(sent).unwrap();
    stream.shutdown(std::net::Shutdown::Both).unwrap();
}

/// Issue 44, part 3: transfers of any size. 50 MiB goes into a job and comes back byte for
/// byte through the CLI (engine and daemon) and the API, to the workspace and to the
/// sandbox's own `/tmp`; a transfer cut midway leaves no file under the target's name (nor
/// its temporary file), and a replaced file stays whole when the new one is cut.
#[test]
#[expect(
    clippy::too_many_lines,
    reason = "one end-to-end scenario, read top to bottom"
)]
fn fifty_mib_streams_both_ways_and_a_cut_transfer_leaves_nothing() {
    let test = "fifty_mib_streams_both_ways_and_a_cut_transfer_leaves_nothing";
    if !docker_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create_docker(&repo, &[]);
    let id = text(&job, "id");
    let worktree = std::path::PathBuf::from(text(&job, "worktree"));
    let (local, bytes) = fifty_mib(home.dir.path());
    let back = home.dir.path().join("back.bin");
    for target in ["big.bin", "/tmp/big.bin"] {
        // The CLI on the engine.
        let written = home.json(&[
            "cp",
            "--json",
            local.to_str().unwrap(),
            &format!("{id}:{target}"),
        ]);
        assert_eq!(written["size"], 50 << 20, "{written}");
        home.ok(&["cp", &format!("{id}:{target}"), back.to_str().unwrap()]);
        assert!(
            std::fs::read(&back).unwrap() == bytes,
            "{target} came back whole"
        );
        let out = home
            .cmd(&["cat", &id, target])
            .stdout(Stdio::piped())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(out.stdout == bytes, "cat {target}: byte for byte");
        // Through stdin, a pipe of unknown size.
        let mut piped = home
            .cmd(&["cp", "-", &format!("{id}:{target}.piped")])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        piped.stdin.take().unwrap().write_all(&bytes).unwrap();
        assert!(piped.wait().unwrap().success());
        let sum = home.sh(
            &id,
            &format!("sha256sum < {target}.piped; sha256sum < {target}"),
        );
        let mut sums = sum.lines();
        assert_eq!(sums.next(), sums.next(), "{sum}");
    }
    assert!(std::fs::read(worktree.join("big.bin")).unwrap() == bytes);
    assert!(
        !Path::new("/tmp/big.bin").exists() || std::fs::read("/tmp/big.bin").unwrap() != bytes,
        "the sandbox's /tmp is not the host's"
    );

    // The API, and the CLI through the daemon.
    let daemon = Daemon::start_with_runtime(&home, &[], "docker");
    for target in ["api.bin", "/tmp/api.bin"] {
        let (status, body) = http_bytes(
            &daemon.socket,
            "PUT",
            &format!("/v1/jobs/{id}/files?path={target}"),
            &bytes,
        );
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let (status, body) = http_bytes(
            &daemon.socket,
            "GET",
            &format!("/v1/jobs/{id}/files?path={target}"),
            b"",
        );
        assert_eq!(status, 200);
        assert!(body == bytes, "GET {target}: byte for byte");
        let _ = std::fs::remove_file(&back);
        home.ok(&["cp", &format!("{id}:{target}"), back.to_str().unwrap()]);
        assert!(std::fs::read(&back).unwrap() == bytes, "daemon cp {target}");
    }
    // Cut midway: nothing under the name, the old file whole, no temporary file left.
    home.sh(&id, "echo old > kept.txt && echo old > /tmp/kept.txt");
    for (target, kept) in [("cut.bin", "kept.txt"), ("/tmp/cut.bin", "/tmp/kept.txt")] {
        for name in [target, kept] {
            cut_put(
                &daemon.socket,
                &format!("/v1/jobs/{id}/files?path={name}"),
                bytes.len(),
                &bytes[..1 << 20],
            );
        }
        let dir = Path::new(target)
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| ".".to_string(), |p| p.display().to_string());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let left = home.sh(
                &id,
                &format!("ls -a {dir} | grep -c paddock-put || true; test -e {target} && echo there || true; cat {kept}"),
            );
            if left == "0\nold\n" {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "after a cut transfer to {target}: {left:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
    daemon.stop();
    home.ok(&["rm", &id, "--force"]);
}

/// Issue 44, part 3: directories as tar (`cp -r`), through the job's sandbox both ways, on
/// the engine and through the daemon: a tree with an executable and a link goes in whole;
/// out of the job only files and directories come, none of the agent's links (to `/etc`,
/// to `/`) and nothing outside the new local directory; a process job refuses (exit 9).
#[test]
fn directories_go_as_tar_through_the_sandbox_and_links_never_come_out() {
    let test = "directories_go_as_tar_through_the_sandbox_and_links_never_come_out";
    if !docker_available(test) {
        return;
    }
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create_docker(&repo, &[]);
    let id = text(&job, "id");
    let local = home.dir.path().join("tree");
    std::fs::create_dir_all(local.join("a/b")).unwrap();
    std::fs::write(local.join("a/one.txt"), "one\n").unwrap();
    std::fs::write(local.join("a/b/run.sh"), "#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(
        local.join("a/b/run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::os::unix::fs::symlink("one.txt", local.join("a/link")).unwrap();
    for (via_daemon, dir) in [(false, "engine"), (true, "/tmp/daemon")] {
        let daemon = via_daemon.then(|| Daemon::start_with_runtime(&home, &[], "docker"));
        let written = home.json(&[
            "cp",
            "-r",
            "--json",
            local.to_str().unwrap(),
            &format!("{id}:{dir}"),
        ]);
        assert_eq!(written["created"], true, "{written}");
        let inside = home.sh(
            &id,
            &format!("cd {dir} && find . | sort && stat -c %a a/b/run.sh && sh a/b/run.sh && readlink a/link && cat a/link"),
        );
        assert_eq!(
            inside,
            ".\n./a\n./a/b\n./a/b/run.sh\n./a/link\n./a/one.txt\n755\nran\none.txt\none\n"
        );
        home.sh(
            &id,
            &format!("ln -s /etc {dir}/etc && ln -s / {dir}/a/root"),
        );
        let out = home.dir.path().join(format!("out-{via_daemon}"));
        let copied = home.run(&["cp", "-r", &format!("{id}:{dir}"), out.to_str().unwrap()]);
        assert!(copied.status.success(), "{copied:?}");
        assert!(
            String::from_utf8_lossy(&copied.stderr).contains("skipped 3 links"),
            "{copied:?}"
        );
        assert_eq!(
            std::fs::read_to_string(out.join("a/one.txt")).unwrap(),
            "one\n"
        );
        let mode = std::fs::metadata(out.join("a/b/run.sh"))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o755
        );
        for link in ["etc", "a/root", "a/link"] {
            assert!(
                std::fs::symlink_metadata(out.join(link)).is_err(),
                "{link} came out of the job"
            );
        }
        // A directory that is not there, out and in: refused, nothing made.
        let missing = home.dir.path().join(format!("missing-{via_daemon}"));
        let refused = home.run(&[
            "cp",
            "-r",
            &format!("{id}:{dir}/nope"),
            missing.to_str().unwrap(),
        ]);
        assert_eq!(refused.status.code(), Some(5), "{refused:?}");
        assert!(!missing.exists());
        if let Some(daemon) = daemon {
            daemon.stop();
        }
    }
    let leftovers: Vec<_> = std::fs::read_dir(home.dir.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.contains("paddock-part"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    home.ok(&["rm", &id, "--force"]);

    let job = home.create(&repo, &["--runtime", "process"]);
    let id = text(&job, "id");
    let refused = home.run(&["cp", "-r", local.to_str().unwrap(), &format!("{id}:tree")]);
    assert_eq!(refused.status.code(), Some(9), "{refused:?}");
    assert!(
        !std::path::PathBuf::from(text(&job, "worktree"))
            .join("tree")
            .exists()
    );
    home.ok(&["rm", &id, "--force"]);
}

/// The daemon's activity watcher never follows a link the agent plants in its worktree
/// (to `/`): it watches the worktrees and nothing they name, and stops cleanly. Before,
/// it walked into the host's whole tree (its `/proc` among it) and failed at shutdown.
#[test]
fn the_daemons_watcher_follows_no_link_of_a_worktree() {
    let repo = FixtureRepo::new();
    let home = TestHome::new();
    let job = home.create(&repo, &["--runtime", "process"]);
    let id = text(&job, "id");
    home.sh(&id, "ln -s / root && ln -s /etc etc && mkdir -p deep/er");
    let daemon = Daemon::start_with_runtime(&home, &[], "process");
    // Activity after the start too: a new directory is watched as it comes.
    home.sh(&id, "mkdir -p more && ln -s / more/root && echo x > more/f");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let watches: usize = std::fs::read_dir(format!("/proc/{}/fdinfo", daemon.pid()))
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .map(|info| {
            info.lines()
                .filter(|l| l.starts_with("inotify wd:"))
                .count()
        })
        .sum();
    assert!(
        watches < 200,
        "the daemon watches {watches} directories: it followed a link out of the worktree"
    );
    daemon.stop();
    home.ok(&["rm", &id, "--force"]);
}
