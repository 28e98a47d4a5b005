use super::*;
use crate::units::{ByteSize, Cpus};

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn precedence_env_over_repo_over_user_over_default() {
    let dir = tempfile::tempdir().unwrap();
    let user = write(
        dir.path(),
        "user.yaml",
        &format!(
            "profiles:\n  default:\n    memory: 1g\n    cpus: 1\n    pids: 100\ntrust: [{:?}]\n",
            dir.path()
        ),
    );
    // A trusted repository's file ranks above the user's (`trust` below: an untrusted one
    // may only narrow).
    write(
        dir.path(),
        REPO_CONFIG_FILE,
        "profiles:\n  default:\n    memory: 3g\n    cpus: 0.5\n",
    );
    let vars = env(&[
        ("PADDOCK_CONFIG", user.to_str().unwrap()),
        ("PADDOCK_CPUS", "4"),
    ]);
    let config = Config::load(Some(dir.path()), &vars).unwrap();
    let (_, profile) = config.select_profile(None, "agent", None).unwrap();
    assert_eq!(profile.pids.value, 100);
    assert!(matches!(profile.pids.source, Source::UserFile(_)));
    assert_eq!(profile.memory.value, ByteSize(3 << 30));
    assert!(matches!(profile.memory.source, Source::RepoFile(_)));
    assert_eq!(profile.cpus.value, Cpus(4.0));
    assert_eq!(profile.cpus.source, Source::Env("PADDOCK_CPUS".into()));
    assert_eq!(profile.image.source, Source::Default);
}

#[test]
fn unknown_key_names_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "c.yaml",
        "profiles:\n  default:\n    memroy: 1g\n",
    );
    let vars = env(&[("PADDOCK_CONFIG", path.to_str().unwrap())]);
    let err = Config::load(None, &vars).unwrap_err().to_string();
    assert!(err.contains("c.yaml"), "{err}");
    assert!(err.contains("memroy"), "{err}");
    assert!(err.contains("memory"), "lists allowed keys: {err}");
}

#[test]
fn bad_value_names_key_and_allowed_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "c.yaml", "profiles:\n  big:\n    memory: 12q\n");
    let vars = env(&[("PADDOCK_CONFIG", path.to_str().unwrap())]);
    let err = Config::load(None, &vars).unwrap_err().to_string();
    assert!(err.contains("profiles.big.memory"), "{err}");
    assert!(err.contains("512m"), "{err}");
}

#[test]
fn routing_exact_before_glob_then_default() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "c.yaml",
        "default_profile: small\nprofiles:\n  small: {}\n  big: {}\n  gpu: {}\n\
         routing:\n  agents:\n    'claude*': big\n    claude-exact: gpu\n  tasks:\n    'FR-*': gpu\n",
    );
    let vars = env(&[("PADDOCK_CONFIG", path.to_str().unwrap())]);
    let config = Config::load(None, &vars).unwrap();
    let pick = |agent, task| config.select_profile(None, agent, task).unwrap().0;
    assert_eq!(pick("claude-exact", None), "gpu");
    assert_eq!(pick("claude-2", None), "big");
    assert_eq!(pick("codex", None), "small");
    assert_eq!(pick("codex", Some("FR-12")), "gpu");
    assert_eq!(
        config.select_profile(Some("big"), "codex", None).unwrap().0,
        "big"
    );
    assert!(config.select_profile(Some("nope"), "codex", None).is_err());
}

#[test]
fn route_to_missing_profile_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "c.yaml", "routing:\n  agents:\n    x: ghost\n");
    let vars = env(&[("PADDOCK_CONFIG", path.to_str().unwrap())]);
    let err = Config::load(None, &vars).unwrap_err().to_string();
    assert!(err.contains("routing.agents.x"), "{err}");
    assert!(err.contains("ghost"), "{err}");
}

#[test]
fn branch_template_placeholders_are_checked() {
    assert!(check_branch_template("agent/{agent}/{task}").is_ok());
    assert!(check_branch_template("x/{user}").is_err());
    assert!(check_branch_template("x/{agent").is_err());
}

#[test]
fn copy_and_setup_stack_top_level_then_profile() {
    let dir = tempfile::tempdir().unwrap();
    let user = write(
        dir.path(),
        "user.yaml",
        &format!(
            "copy: [.npmrc]\nsetup_timeout: 20m\ntrust: [{:?}]\n",
            dir.path()
        ),
    );
    write(
        dir.path(),
        REPO_CONFIG_FILE,
        "copy: [.env, config/]\nsetup: [npm ci]\nprofiles:\n  big:\n    copy: [secrets]\n    setup: [npm run build]\n    setup_optional: true\n    setup_timeout: 1m\n",
    );
    let vars = env(&[("PADDOCK_CONFIG", user.to_str().unwrap())]);
    let config = Config::load(Some(dir.path()), &vars).unwrap();
    // The repo file's top-level `copy` replaces the user file's, as every key does.
    let default = config.job_setup("default");
    assert_eq!(default.copy, vec![".env", "config"]);
    assert_eq!(default.commands, vec!["npm ci"]);
    assert!(!default.optional);
    assert_eq!(default.timeout, Some(std::time::Duration::from_secs(1200)));
    let big = config.job_setup("big");
    assert_eq!(big.copy, vec![".env", "config", "secrets"]);
    assert_eq!(big.commands, vec!["npm ci", "npm run build"]);
    assert!(big.optional);
    assert_eq!(big.timeout, Some(std::time::Duration::from_secs(60)));
    let rows = config.rows();
    assert!(
        rows.iter()
            .any(|(k, v, _)| k == "profiles.big.setup_optional" && v == "true")
    );
    assert!(rows.iter().any(|(k, v, _)| k == "setup" && v == "npm ci"));

    write(
        dir.path(),
        REPO_CONFIG_FILE,
        "profiles:\n  x:\n    copy: [a/../../b]\n",
    );
    let error = Config::load(Some(dir.path()), &vars)
        .unwrap_err()
        .to_string();
    assert!(error.contains("profiles.x.copy[0]"), "{error}");
    write(dir.path(), REPO_CONFIG_FILE, "setup: [\"  \"]\n");
    let error = Config::load(Some(dir.path()), &vars)
        .unwrap_err()
        .to_string();
    assert!(error.contains("setup[0]"), "{error}");
}

#[test]
fn a_disk_limit_comes_from_a_layer_with_its_source_and_is_unset_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let user = write(
        dir.path(),
        "user.yaml",
        "profiles:\n  big:\n    disk: 10g\n",
    );
    write(
        dir.path(),
        REPO_CONFIG_FILE,
        "profiles:\n  big:\n    disk: 200m\n",
    );
    let vars = env(&[("PADDOCK_CONFIG", user.to_str().unwrap())]);
    let config = Config::load(Some(dir.path()), &vars).unwrap();
    let (_, default) = config.select_profile(None, "agent", None).unwrap();
    assert_eq!(default.disk, None);
    let (_, big) = config.select_profile(Some("big"), "agent", None).unwrap();
    let disk = big.disk.expect("the repo file sets it");
    assert_eq!(disk.value, ByteSize(200 << 20));
    assert!(matches!(disk.source, Source::RepoFile(_)));
    let rows = config.rows();
    assert!(rows.iter().any(|(k, v, s)| k == "profiles.big.disk"
        && v == "200m"
        && matches!(s, Source::RepoFile(_))));
    assert!(
        rows.iter()
            .any(|(k, v, s)| k == "profiles.default.disk" && v == "none" && *s == Source::Default)
    );
    write(
        dir.path(),
        REPO_CONFIG_FILE,
        "profiles:\n  big:\n    disk: lots\n",
    );
    let error = Config::load(Some(dir.path()), &vars)
        .unwrap_err()
        .to_string();
    assert!(error.contains("disk"), "{error}");
}

/// `reserve` stacks per part like the limits; a reserve nobody set is cut down to the
/// limits, one a layer set above a limit is refused, naming both sources.
#[test]
fn a_reserve_is_layered_cut_to_the_limits_or_refused_above_them() {
    let dir = tempfile::tempdir().unwrap();
    let user = write(
        dir.path(),
        "user.yaml",
        "profiles:\n  default:\n    reserve: {cpus: 0.5}\n  small:\n    memory: 128m\n    cpus: 0.05\n",
    );
    let vars = env(&[("PADDOCK_CONFIG", user.to_str().unwrap())]);
    let config = Config::load(None, &vars).unwrap();
    let (_, profile) = config.select_profile(None, "agent", None).unwrap();
    assert_eq!(
        profile.reserve().unwrap(),
        Reserve {
            cpus: Cpus(0.5),
            memory: ByteSize(256 << 20)
        }
    );
    assert!(matches!(profile.reserve_cpus.source, Source::UserFile(_)));
    assert_eq!(profile.reserve_memory.source, Source::Default);
    let (_, small) = config.select_profile(Some("small"), "agent", None).unwrap();
    assert_eq!(
        small.reserve().unwrap(),
        Reserve {
            cpus: Cpus(0.05),
            memory: ByteSize(128 << 20)
        },
        "the default reserve is cut down to small limits"
    );
    let mut over = profile.clone();
    over.apply(
        &ProfileLayer {
            cpus: Some(Cpus(0.25)),
            ..ProfileLayer::default()
        },
        &Source::Flag("cpus".into()),
    );
    let err = over.reserve().unwrap_err().to_string();
    assert!(
        err.contains("reserve.cpus") && err.contains("0.5 CPUs") && err.contains("limit 0.25"),
        "{err}"
    );
    assert!(
        err.contains("user.yaml") && err.contains("flag --cpus"),
        "{err}"
    );
    let bad = write(
        dir.path(),
        "bad.yaml",
        "profiles:\n  default:\n    reserve: {cpu: 1}\n",
    );
    let vars = env(&[("PADDOCK_CONFIG", bad.to_str().unwrap())]);
    let err = Config::load(None, &vars).unwrap_err().to_string();
    assert!(err.contains("cpu"), "{err}");
}

#[test]
fn secrets_come_from_the_user_file_only() {
    let dir = tempfile::tempdir().unwrap();
    let user = write(
        dir.path(),
        "user.yaml",
        "secrets:\n  gh:\n    command: [gh, auth, token]\n    hosts: [api.github.com]\negress:\n  upstream_ca: /roots.pem\nprofiles:\n  default:\n    secrets: [gh]\n",
    );
    let vars = env(&[("PADDOCK_CONFIG", user.to_str().unwrap())]);
    let config = Config::load(Some(dir.path()), &vars).unwrap();
    assert!(config.secrets.contains_key("gh"));
    assert_eq!(config.egress.upstream_ca, Some(PathBuf::from("/roots.pem")));
    let (_, profile) = config.select_profile(None, "agent", None).unwrap();
    assert_eq!(profile.secrets.value, vec!["gh".to_string()]);
    assert!(
        profile
            .rows()
            .iter()
            .any(|(key, value, _)| key == "secrets" && value == "gh")
    );
    for repo_file in [
        "secrets:\n  gh:\n    env: HOME\n    hosts: [evil.example]\n",
        "egress:\n  upstream_ca: /evil.pem\n",
        "profiles:\n  default:\n    secrets: [gh]\n",
    ] {
        write(dir.path(), REPO_CONFIG_FILE, repo_file);
        let error = Config::load(Some(dir.path()), &vars)
            .unwrap_err()
            .to_string();
        assert!(error.contains("user config file"), "{error}");
    }
}
