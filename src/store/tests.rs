//! The state root's defaults.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::default_root;

fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

#[test]
fn root_keeps_its_state_in_var_lib_unless_told() {
    let home = env(&[("HOME", "/root"), ("XDG_DATA_HOME", "/root/.data")]);
    assert_eq!(
        default_root(&home, true),
        Some(PathBuf::from("/var/lib/paddock"))
    );
    let told = env(&[("HOME", "/root"), ("PADDOCK_HOME", "/srv/p")]);
    assert_eq!(default_root(&told, true), Some(PathBuf::from("/srv/p")));
}

#[test]
fn a_user_keeps_its_state_in_its_data_dir() {
    let home = env(&[("HOME", "/home/u")]);
    assert_eq!(
        default_root(&home, false),
        Some(PathBuf::from("/home/u/.local/share/paddock"))
    );
    let xdg = env(&[("HOME", "/home/u"), ("XDG_DATA_HOME", "/home/u/data")]);
    assert_eq!(
        default_root(&xdg, false),
        Some(PathBuf::from("/home/u/data/paddock"))
    );
    // A relative XDG_DATA_HOME is invalid by the spec and ignored.
    let relative = env(&[("HOME", "/home/u"), ("XDG_DATA_HOME", "data")]);
    assert_eq!(
        default_root(&relative, false),
        Some(PathBuf::from("/home/u/.local/share/paddock"))
    );
    assert_eq!(default_root(&env(&[]), false), None);
}

#[test]
fn the_store_reads_only_plain_records_of_valid_ids() {
    let tmp = tempfile::tempdir().expect("tmp");
    let home = super::PaddockHome::open_at(tmp.path()).expect("home");
    let store = home.store();
    for bad in ["a/../b", "../jobs/b", "a/git/evil", "a\0", &"a".repeat(300)] {
        assert!(
            matches!(store.load(bad), Err(super::StoreError::InvalidId(_))),
            "{bad:?}"
        );
    }
    // A link where a record would be is never followed, even to a file.
    let target = tmp.path().join("elsewhere.json");
    std::fs::write(&target, "{}").expect("write");
    std::os::unix::fs::symlink(&target, home.jobs_dir().join("linked.json")).expect("link");
    assert!(matches!(
        store.load("linked"),
        Err(super::StoreError::NotAFile { .. })
    ));
    std::fs::create_dir(home.jobs_dir().join("dir.json")).expect("mkdir");
    assert!(matches!(
        store.load("dir"),
        Err(super::StoreError::NotAFile { .. })
    ));
    // New jobs' dirs are under work/, apart from the records.
    let id = crate::job::JobId::parse("fresh").expect("an id");
    assert_eq!(home.job_dir(&id), home.work_dir().join("fresh"));
    let old = crate::job::JobId::parse("older").expect("an id");
    std::fs::create_dir(home.jobs_dir().join("older")).expect("mkdir");
    assert_eq!(home.job_dir(&old), home.jobs_dir().join("older"));
}
