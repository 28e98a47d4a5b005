//! The shared pristine checkout of overlay jobs, attacked from inside under runc and gVisor:
//! after an agent rewrote, chmodded, linked and deleted every file it sees, the pristine tree
//! is unchanged byte for byte and owner for owner, and the next job of the commit is clean.
//! Split from `hostile.rs`. They fail when Docker is absent unless
//! PADDOCK_SKIP_DOCKER_TESTS=1.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::fixtures::{FixtureRepo, TestHome, docker_available, text};
use crate::hostile::create_on;

/// Every file under `root` with its bytes, owner, group and mode (links as their target).
fn tree_state(root: &Path) -> BTreeMap<PathBuf, (Vec<u8>, u32, u32, u32)> {
    let mut files = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let bytes = if meta.is_file() {
                std::fs::read(&path).unwrap()
            } else if meta.file_type().is_symlink() {
                std::fs::read_link(&path)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes()
            } else {
                stack.push(path.clone());
                Vec::new()
            };
            let relative = path.strip_prefix(root).unwrap().to_path_buf();
            files.insert(relative, (bytes, meta.uid(), meta.gid(), meta.mode()));
        }
    }
    files
}

/// `checkout: overlay` shares one pristine checkout between the jobs of a commit: an agent
/// that deletes, rewrites, chmods and links everything it sees, and goes looking for the
/// lower layer's path, changes only its own upper dir; the pristine tree stays byte for byte
/// and owner for owner, and the next job on the commit gets the commit's files.
fn attack_the_pristine_checkout(runtime: &str, test: &str) {
    if !docker_available(test) || !crate::fixtures::overlay_available(test) {
        return;
    }
    let repo = FixtureRepo::with_files(50, 100);
    let home = TestHome::new().env("PADDOCK_CHECKOUT", "overlay");
    let first = create_on(&home, &repo, runtime, "attacker");
    let pristine_root = home.root().join("pristine");
    let before = tree_state(&pristine_root);
    assert!(before.len() > 50, "a pristine checkout exists: {before:?}");
    let id = text(&first, "id");
    let attack = r#"
        cd /workspace
        lower=$(sed -n 's/.*lowerdir=\([^,]*\).*/\1/p' /proc/self/mountinfo | head -1)
        echo "lower: $lower"
        if [ -n "$lower" ] && [ -e "$lower" ]; then echo REACHED; fi
        for f in $(git ls-files); do echo owned > "$f" 2>/dev/null; chmod 777 "$f" 2>/dev/null; done
        ln -sf /etc/passwd linked
        index="$(git rev-parse --git-dir)/index"
        printf wreck >> "$index" 2>/dev/null && echo INDEX-WRITTEN
        chmod 666 "$index" 2>/dev/null && echo INDEX-CHMOD
        umount /workspace 2>/dev/null && echo UNMOUNTED
        mount -o remount,rw /workspace 2>/dev/null && echo REMOUNTED
        find . -path ./.git -prune -o -type f -print | head -5 | xargs rm -f
        rm -rf d* 2>/dev/null
        git add -A && git commit -qm wreck && echo committed
    "#;
    let out = home.ok(&["exec", &id, "--", "sh", "-c", attack]);
    assert!(
        !out.contains("REACHED"),
        "the lower layer is reachable: {out}"
    );
    assert!(
        !out.contains("UNMOUNTED") && !out.contains("REMOUNTED"),
        "{out}"
    );
    assert!(out.contains("committed"), "{out}");
    let after = tree_state(&pristine_root);
    let changed: Vec<_> = after
        .keys()
        .chain(before.keys())
        .filter(|k| after.get(*k) != before.get(*k))
        .collect();
    assert!(
        changed.is_empty(),
        "the attack changed the pristine checkout (bytes, owner or mode): {changed:?}"
    );
    // The next job on the same commit sees the commit, not the attacker's work.
    let second = create_on(&home, &repo, runtime, "victim");
    let second_id = text(&second, "id");
    let status = home.ok(&["exec", &second_id, "--", "git", "status", "--porcelain"]);
    assert_eq!(status.trim(), "", "the second job's checkout is not clean");
    let listed = home.ok(&["exec", &second_id, "--", "sh", "-c", "git ls-files | wc -l"]);
    assert_eq!(
        listed.trim(),
        repo.git(&["ls-files"]).lines().count().to_string()
    );
    let wrecked = home.ok(&[
        "exec",
        &second_id,
        "--",
        "sh",
        "-c",
        "grep -rl owned . | grep -v '^./.git' | wc -l",
    ]);
    assert_eq!(
        wrecked.trim(),
        "0",
        "the attacker's writes reached another job"
    );
    home.ok(&["rm", &id, "--delete-branch"]);
    home.ok(&["rm", &second_id]);
    assert_eq!(home.mounts(), Vec::<String>::new(), "rm left a mount");
}

#[test]
fn a_hostile_agent_under_runc_cannot_change_the_shared_pristine_checkout() {
    attack_the_pristine_checkout(
        "docker",
        "a_hostile_agent_under_runc_cannot_change_the_shared_pristine_checkout",
    );
}

#[test]
fn a_hostile_agent_under_gvisor_cannot_change_the_shared_pristine_checkout() {
    attack_the_pristine_checkout(
        "runsc",
        "a_hostile_agent_under_gvisor_cannot_change_the_shared_pristine_checkout",
    );
}
