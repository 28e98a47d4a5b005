use super::*;

const FILE: &str = ".devcontainer/devcontainer.json";

/// A repository at /home/u/shop whose jobs work in /workspace.
fn vars() -> Vars {
    Vars {
        local_workspace_folder: "/home/u/shop".into(),
        container_workspace_folder: "/workspace".into(),
        devcontainer_id: "abc".into(),
    }
}

fn parse(file: &str, text: &str) -> Result<DevcontainerReport, DevcontainerError> {
    super::parse(file, text, &vars())
}

#[test]
fn maps_the_supported_fields() {
    let text = r#"{
        // comment
        "name": "x",
        "build": {"dockerfile": "Dockerfile", "context": "..", "args": {"V": "1"}, "target": "dev"},
        "containerEnv": {"A": "1", "B": "2"},
        "remoteEnv": {"B": null, "C": "3"},
        "forwardPorts": [8080, "9000", "db:5432"],
        "appPort": 3000,
        "workspaceFolder": "/src",
        "onCreateCommand": "echo one",
        "postCreateCommand": ["touch", "it's"],
        "postStartCommand": {"b": "echo b", "a": ["echo", "a"]},
    }"#;
    let report = parse(FILE, text).expect("parses");
    assert_eq!(
        report.build,
        Some(BuildSpec {
            context: String::new(),
            dockerfile: ".devcontainer/Dockerfile".into(),
            args: BTreeMap::from([("V".into(), "1".into())]),
            target: Some("dev".into()),
        })
    );
    assert_eq!(
        report.env,
        BTreeMap::from([("A".into(), "1".into()), ("C".into(), "3".into())])
    );
    assert_eq!(report.ports, vec![8080, 9000, 3000]);
    assert_eq!(report.workspace_dir.as_deref(), Some("/src"));
    assert_eq!(report.setup, vec!["echo one", r"'touch' 'it'\''s'"]);
    assert_eq!(report.post_start, vec!["'echo' 'a'", "echo b"]);
    assert!(report.ignored.iter().any(|i| i.contains("db:5432")));
}

#[test]
fn hardening_fields_are_ignored_and_named() {
    let text = r#"{"image": "x", "privileged": true, "capAdd": ["SYS_ADMIN"],
        "securityOpt": ["seccomp=unconfined"], "runArgs": ["--network=host"], "init": false,
        "mounts": ["source=/,target=/host,type=bind", {"type": "volume", "source": "v", "target": "/v"}],
        "containerUser": "root",
        "features": {"ghcr.io/devcontainers/features/node:1": {}}, "remoteUser": "root"}"#;
    let report = parse(FILE, text).expect("parses");
    let ignored = report.ignored.join("\n");
    for key in [
        "privileged",
        "capAdd: SYS_ADMIN",
        "securityOpt",
        "runArgs",
        "init: false",
        "remoteUser",
        "containerUser: `root`",
        "only targets inside the workspace",
    ] {
        assert!(ignored.contains(key), "{key} in {ignored}");
    }
    assert!(ignored.contains("refused: bind mounts"));
    assert_eq!(report.unsupported.len(), 1);
    assert_eq!(report.base_image.as_deref(), Some("x"));
}

#[test]
fn errors_name_the_line() {
    let error = parse(
        FILE,
        "{\n  \"image\": \"x\",\n  \"forwardPorts\": [\"a\", true]\n}",
    )
    .unwrap_err();
    match error {
        DevcontainerError::Invalid { line, .. } => assert_eq!(line, 3),
        other => panic!("{other}"),
    }
    let error = parse(FILE, "{\n\n  \"image\" 1\n}").unwrap_err();
    assert!(error.to_string().contains("line 3"), "{error}");
}

#[test]
fn paths_stay_in_the_repository() {
    assert!(
        parse(
            FILE,
            r#"{"build": {"dockerfile": "Dockerfile", "context": "../.."}}"#
        )
        .is_err()
    );
    assert!(parse(FILE, r#"{"build": {"dockerfile": "/etc/Dockerfile"}}"#).is_err());
    assert!(parse(FILE, r#"{"name": "no image"}"#).is_err());
}

#[test]
fn host_requirements_are_read() {
    let report = parse(
        FILE,
        r#"{"image": "x", "hostRequirements": {"cpus": 4, "memory": "8gb"}}"#,
    )
    .expect("parses");
    assert_eq!(report.host_cpus, Some(4.0));
    assert_eq!(report.host_memory, Some(8 << 30));
    assert_eq!(bytes_of("512MB"), Some(512 << 20));
    assert_eq!(bytes_of("1024"), Some(1024));
    assert!(
        parse(
            FILE,
            r#"{"image": "x", "hostRequirements": {"memory": "lots"}}"#
        )
        .is_err()
    );
}

#[test]
fn named_volumes_become_caches_and_binds_are_refused() {
    let text = r#"{"image": "x", "workspaceFolder": "/work/${localWorkspaceFolderBasename}",
        "mounts": [
            "source=${localWorkspaceFolderBasename}-node_modules,target=${containerWorkspaceFolder}/node_modules,type=volume",
            {"type": "volume", "source": "cargo", "target": "/work/shop/target"},
            "type=bind,source=/var/run/docker.sock,target=/var/run/docker.sock",
            "source=/etc,target=/work/shop/etc,type=bind",
            "type=volume,target=/work/shop/anon",
            "type=tmpfs,target=/work/shop/t",
            "source=x,target=/work/shop/.git/hooks,type=volume"
        ]}"#;
    let report = parse(FILE, text).expect("parses");
    assert_eq!(report.workspace_dir.as_deref(), Some("/work/shop"));
    assert_eq!(
        report.volumes,
        vec![
            Volume {
                name: "devcontainer-shop-node_modules".into(),
                path: "node_modules".into()
            },
            Volume {
                name: "devcontainer-cargo".into(),
                path: "target".into()
            },
        ]
    );
    let ignored = report.ignored.join("\n");
    assert_eq!(
        ignored.matches("refused: bind mounts").count(),
        2,
        "{ignored}"
    );
    assert!(ignored.contains("anonymous"), "{ignored}");
    assert!(ignored.contains("type `tmpfs`"), "{ignored}");
    assert!(ignored.contains(".git/hooks"), "{ignored}");
}

#[test]
fn variables_are_substituted_and_the_host_env_never_read() {
    // HOME is set in the test's environment: its value must not come through.
    let text = r#"{"image": "img-${devcontainerId}",
        "containerEnv": {"HOME_ENV": "${localEnv:HOME}", "D": "${localEnv:NOPE:fallback}",
                         "W": "${containerWorkspaceFolder}|${containerWorkspaceFolderBasename}",
                         "L": "${localWorkspaceFolder}|${localWorkspaceFolderBasename}",
                         "TOOLS": "/opt/tools"},
        "remoteEnv": {"PATH": "${containerEnv:PATH}:${containerEnv:TOOLS}/bin", "U": "${unknown}"},
        "postCreateCommand": "echo ${containerEnv:TOOLS} ${containerEnv:X:-d}"}"#;
    let report = parse(FILE, text).expect("parses");
    assert_eq!(report.base_image.as_deref(), Some("img-abc"));
    assert_eq!(report.env["HOME_ENV"], "");
    assert_eq!(report.env["D"], "fallback");
    assert_eq!(report.env["W"], "/workspace|workspace");
    assert_eq!(report.env["L"], "/home/u/shop|shop");
    assert_eq!(report.env["U"], "${unknown}");
    // The file's containerEnv now, the image's later.
    assert_eq!(report.env["PATH"], "${containerEnv:PATH}:/opt/tools/bin");
    let image_env = BTreeMap::from([("PATH".to_string(), "/usr/bin".to_string())]);
    assert_eq!(
        container_env(&report.env["PATH"], &image_env),
        "/usr/bin:/opt/tools/bin"
    );
    assert_eq!(report.setup, vec!["echo ${TOOLS} ${X:--d}"]);
    let ignored = report.ignored.join("\n");
    assert!(ignored.contains("localEnv: HOME"), "{ignored}");
    assert!(ignored.contains("localEnv: NOPE"), "{ignored}");
}
