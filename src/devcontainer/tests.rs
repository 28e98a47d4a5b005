use super::*;

const FILE: &str = ".devcontainer/devcontainer.json";

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
    assert_eq!(
        report.setup,
        vec!["echo one", r"'touch' 'it'\''s'", "'echo' 'a'", "echo b"]
    );
    assert!(report.ignored.iter().any(|i| i.contains("db:5432")));
}

#[test]
fn hardening_fields_are_ignored_and_named() {
    let text = r#"{"image": "x", "privileged": true, "capAdd": ["SYS_ADMIN"],
        "securityOpt": ["seccomp=unconfined"], "runArgs": ["--network=host"], "init": false,
        "mounts": ["source=/,target=/host,type=bind", {"type": "volume", "source": "v", "target": "/v"}],
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
