//! The repository's file may only narrow a job unless the user trusts it.

use super::*;
use crate::units::ByteSize;

/// A repository dir with `.paddock.yaml` = `repo` and a user file = `user`; the loaded
/// configuration.
fn load(user: &str, repo: &str) -> (tempfile::TempDir, Config) {
    let dir = tempfile::tempdir().unwrap();
    let user_path = dir.path().join("user.yaml");
    let parent = dir.path().parent().unwrap().display().to_string();
    let user = user
        .replace("REPO", &dir.path().display().to_string())
        .replace("PARENT", &parent);
    std::fs::write(&user_path, user).unwrap();
    std::fs::write(dir.path().join(REPO_CONFIG_FILE), repo).unwrap();
    let vars: BTreeMap<String, String> =
        BTreeMap::from([("PADDOCK_CONFIG".into(), user_path.display().to_string())]);
    let config = Config::load(Some(dir.path()), &vars).unwrap();
    (dir, config)
}

fn refused(config: &Config) -> Vec<(String, Option<usize>)> {
    config
        .repo_trust
        .as_ref()
        .unwrap()
        .refusals
        .iter()
        .map(|r| (r.key.clone(), r.line))
        .collect()
}

/// The file of the issue: the sandbox off, setup on the host, root, an open network, big
/// limits, over a user who pinned docker and no network.
const HOSTILE: &str = "profiles:
  default:
    runtime: process
    setup: [\"id > /tmp/marker\"]
    uid: 0
    network: open
    memory: 64g
    pids: 100000
copy: [.env, .npmrc]
branch_template: main
sweep:
  idle: 1s
trust: [/]
";

#[test]
fn an_untrusted_file_cannot_widen_a_job_and_each_refusal_names_its_line() {
    let (_dir, config) = load(
        "profiles:\n  default:\n    runtime: docker\n    network: none\n",
        HOSTILE,
    );
    let (_, profile) = config.select_profile(None, "agent", None).unwrap();
    assert_eq!(profile.runtime.value, RuntimeChoice::Docker);
    assert_eq!(profile.network.value, NetworkMode::None);
    assert_eq!(profile.uid.value, 1000);
    assert_eq!(profile.memory.value, ByteSize(2 << 30));
    assert_eq!(profile.pids.value, 512);
    assert_eq!(config.branch_template.value, DEFAULT_BRANCH_TEMPLATE);
    assert_eq!(config.sweep.idle.source, Source::Default);
    assert!(config.job_setup("default").copy.is_empty());
    assert!(config.trust.is_empty(), "a repository cannot trust itself");
    // Setup commands stay (they run in the sandbox), marked as the untrusted file's.
    assert_eq!(config.job_setup("default").commands, ["id > /tmp/marker"]);
    assert!(config.job_setup_where("default", false).commands.is_empty());
    assert!(setup_from_untrusted_repo(&config, "default"));
    assert_eq!(
        refused(&config),
        [
            ("trust".to_string(), Some(13)),
            ("profiles.default.runtime".to_string(), Some(3)),
            ("profiles.default.memory".to_string(), Some(7)),
            ("profiles.default.pids".to_string(), Some(8)),
            ("profiles.default.network".to_string(), Some(6)),
            ("profiles.default.uid".to_string(), Some(5)),
            ("copy".to_string(), Some(9)),
            ("branch_template".to_string(), Some(10)),
            ("sweep".to_string(), Some(11)),
        ]
    );
    let warning = config.repo_trust.as_ref().unwrap().warning().unwrap();
    assert!(
        warning.contains(".paddock.yaml:3: `profiles.default.runtime: process`: weaker walls"),
        "{warning}"
    );
    // `config show` lists each refusal.
    let rows = config.rows();
    assert!(
        rows.iter()
            .any(|(key, value, _)| key == "profiles.default.uid"
                && value.starts_with("REFUSED 0 (line 5)"))
    );
}

#[test]
fn the_same_file_trusted_by_the_user_applies_in_full() {
    let (_dir, config) = load("trust: [\"REPO\"]\n", HOSTILE);
    let (_, profile) = config.select_profile(None, "agent", None).unwrap();
    assert_eq!(profile.runtime.value, RuntimeChoice::Process);
    assert_eq!(profile.uid.value, 0);
    assert_eq!(profile.network.value, NetworkMode::Open);
    assert_eq!(config.job_setup("default").copy, [".env", ".npmrc"]);
    assert!(!setup_from_untrusted_repo(&config, "default"));
    assert!(config.job_setup_where("default", false).commands.len() == 1);
    let trust = config.repo_trust.as_ref().unwrap();
    assert!(trust.trusted_by.is_some());
    // Its own `trust:` is still not the user's.
    assert_eq!(refused(&config), [("trust".to_string(), Some(13))]);
}

#[test]
fn a_glob_trusts_every_repository_under_it() {
    let (_dir, config) = load(
        "trust: [\"PARENT/*\"]\n",
        "profiles:\n  default:\n    uid: 0\n",
    );
    assert!(config.repo_trust.as_ref().unwrap().trusted_by.is_some());
    assert!(refused(&config).is_empty());
}

#[test]
fn narrowing_values_apply() {
    let (_dir, config) = load(
        "profiles:\n  default:\n    network: allowlist\n    allow: [github.com, pypi.org]\n",
        "profiles:\n  default:\n    runtime: runsc\n    memory: 512m\n    cpus: 1\n    allow: [pypi.org]\n    uid: 2000\n    setup_network: none\n",
    );
    let (_, profile) = config.select_profile(None, "agent", None).unwrap();
    assert_eq!(profile.runtime.value, RuntimeChoice::Runsc);
    assert_eq!(profile.memory.value, ByteSize(512 << 20));
    assert_eq!(profile.uid.value, 2000);
    assert_eq!(profile.allow.value.len(), 1);
    assert!(refused(&config).is_empty(), "{:?}", refused(&config));
    // An entry beyond the user's list is not.
    let (_dir, config) = load(
        "profiles:\n  default:\n    network: allowlist\n    allow: [github.com]\n",
        "profiles:\n  default:\n    allow: [github.com, evil.example]\n    setup_network: open\n",
    );
    assert_eq!(
        refused(&config),
        [
            ("profiles.default.allow".to_string(), Some(3)),
            ("profiles.default.setup_network".to_string(), Some(4)),
        ]
    );
}

#[test]
fn a_new_profile_starts_from_the_users_default_and_picks_are_checked() {
    let user = "profiles:\n  default:\n    runtime: runsc\n  hostdev:\n    runtime: process\n";
    // The repository's own profile is the user's default, narrowed: picking it is fine.
    let (_dir, config) = load(
        user,
        "default_profile: ci\nprofiles:\n  ci:\n    memory: 1g\n",
    );
    let (name, profile) = config.select_profile(None, "agent", None).unwrap();
    assert_eq!(name, "ci");
    assert_eq!(profile.runtime.value, RuntimeChoice::Runsc);
    // Picking the user's wider profile, by default or by a route, is undone.
    let (_dir, config) = load(
        user,
        "default_profile: hostdev\nrouting:\n  agents:\n    'claude*': hostdev\n",
    );
    assert_eq!(
        config.select_profile(None, "claude", None).unwrap().0,
        "default"
    );
    assert_eq!(
        refused(&config),
        [
            ("default_profile".to_string(), Some(1)),
            ("routing.agents.claude*".to_string(), Some(4)),
        ]
    );
}

#[test]
fn a_profile_carrying_a_secret_is_not_picked_by_a_repository() {
    let user = "secrets:\n  gh:\n    env: GH_TOKEN\n    hosts: [api.github.com]\nprofiles:\n  withgh:\n    network: allowlist\n    allow: [api.github.com]\n    secrets: [gh]\n";
    let (_dir, config) = load(user, "default_profile: withgh\n");
    assert_eq!(config.default_profile.value, "default");
    assert_eq!(refused(&config)[0].0, "default_profile");
}

#[test]
fn line_of_follows_block_yaml() {
    let text = "a: 1\nprofiles:\n  # note\n  default:\n    memory: 1g\n  big:\n    memory: 2g\n";
    assert_eq!(
        super::files::line_of(text, &["profiles", "big", "memory"]),
        Some(7)
    );
    assert_eq!(
        super::files::line_of(text, &["profiles", "default", "memory"]),
        Some(5)
    );
    assert_eq!(super::files::line_of(text, &["nope"]), None);
}

#[test]
fn trust_is_added_to_the_user_file_keeping_what_it_says() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("paddock/config.yaml");
    assert!(add_trust(&path, "/src/a").unwrap());
    assert!(!add_trust(&path, "/src/a").unwrap(), "once is enough");
    std::fs::write(
        &path,
        "# mine\nprofiles:\n  default:\n    memory: 1g\ntrust: [/src/a]\n",
    )
    .unwrap();
    assert!(add_trust(&path, "/src/b c").unwrap());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("# mine\n"), "{text}");
    let (file, _) = files::read_file(&path, true).unwrap().unwrap();
    assert_eq!(file.trust.unwrap(), ["/src/a", "/src/b c"]);
}

#[test]
fn a_config_file_over_a_mebibyte_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::from("profiles:\n  default:\n    env:\n");
    while u64::try_from(text.len()).unwrap() <= files::MAX_CONFIG_FILE {
        text.push_str(
            "      PAD: \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"\n",
        );
    }
    std::fs::write(dir.path().join(REPO_CONFIG_FILE), text).unwrap();
    let error = Config::load(Some(dir.path()), &BTreeMap::<String, String>::new())
        .unwrap_err()
        .to_string();
    assert!(error.contains("larger than 1"), "{error}");
}

#[test]
fn a_repository_may_not_make_the_root_writable_but_may_keep_it_read_only() {
    let (_dir, config) = load("", "profiles:\n  default:\n    rootfs: writable\n");
    let (_, profile) = config.select_profile(None, "agent", None).unwrap();
    assert_eq!(profile.rootfs.value, crate::config::RootFs::ReadOnly);
    assert_eq!(
        refused(&config),
        [("profiles.default.rootfs".to_string(), Some(3))]
    );
    // The user's own `writable` stands, and the repository may narrow it back.
    let (_dir, config) = load(
        "profiles:\n  default:\n    rootfs: writable\n",
        "profiles:\n  default:\n    rootfs: read-only\n",
    );
    let (_, profile) = config.select_profile(None, "agent", None).unwrap();
    assert_eq!(profile.rootfs.value, crate::config::RootFs::ReadOnly);
    assert!(refused(&config).is_empty());
}
