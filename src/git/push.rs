//! `paddock push`: publishing exactly one job branch of the user's repository to one of its
//! remotes, with the user's own git credentials on the host.
//!
//! Invariants:
//! - Everything about where to push comes from the user's repository's config (its common
//!   dir's `config`, plus the user's global and system files): the remote must be one it
//!   names with a `url`, the destination is the branch's configured upstream on that remote
//!   or the same name. A job's private git dir (`work/<id>/git`, which the agent writes) is
//!   never opened here, so a `pushurl` or `remote.*` the agent planted there is never read.
//! - Exactly one explicit refspec, `<tip>:refs/heads/<dest>` (the branch's commit as the
//!   user's repository has it), is pushed: the remote's configured push refspecs,
//!   `push.followTags` and submodule recursion are off, so no other ref or tag leaves.
//! - Hooks never run (`core.hooksPath=/dev/null` from `GitCall` and `--no-verify`). The
//!   user's environment reaches git (HOME, SSH agent, credential helpers), unlike the inert
//!   reads: the credentials, `core.sshCommand` and `url.*.insteadOf` of the user's own config
//!   are the user's choice; the job never sees any of them.
//! - A rewrite of the remote branch needs `force_with_lease`, and even then only from the
//!   tip seen just before (`--force-with-lease=<ref>:<old>`): a push from elsewhere in
//!   between is never overwritten.
//!
//! It holds no repository lock: the only local write is git's own update of the
//! remote-tracking ref (a loose ref under its own lock file), and a slow network must not
//! stall the syncs of the repository's other jobs.

use std::time::Duration;

use super::{GitError, GitRepo, is_valid_branch_name};

/// How long a push (or the look at the remote's tip before it) may take.
const PUSH_TIMEOUT: Duration = Duration::from_secs(600);

/// Where a job's branch goes, as the user's config says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushTarget {
    /// The remote's name in the user's config.
    pub remote: String,
    /// The URL pushed to (`pushurl`, else `url`), with any password removed.
    pub url: String,
    /// The configured `pushurl` as written (it may hold a password: never shown).
    push_url: Option<String>,
    /// The configured `url` as written (the same).
    fetch_url: String,
    /// The branch on the remote (no `refs/heads/`).
    pub dest: String,
}

/// What a push did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pushed {
    /// The remote branch's tip before (None: it did not exist).
    pub old: Option<String>,
    /// The tip pushed.
    pub new: String,
    /// False when the remote already had it (nothing sent).
    pub updated: bool,
    /// The remote branch was rewritten (with the lease).
    pub forced: bool,
}

impl PushTarget {
    /// `error` without the configured URLs' passwords (in its command line or git's words).
    fn scrub(&self, error: GitError) -> GitError {
        let clean = |text: String| {
            [Some(&self.fetch_url), self.push_url.as_ref()]
                .into_iter()
                .flatten()
                .fold(text, |text, raw| {
                    text.replace(raw.as_str(), &redact_url(raw))
                })
        };
        match error {
            GitError::Command { args, dir, stderr } => GitError::Command {
                args: clean(args),
                dir,
                stderr: clean(stderr),
            },
            GitError::Timeout { args, dir, after } => GitError::Timeout {
                args: clean(args),
                dir,
                after,
            },
            other => other,
        }
    }
}

impl GitRepo {
    /// A config value of the user's repository (None when unset).
    async fn config_value(&self, key: &str) -> Result<Option<String>, GitError> {
        let (code, out) = self
            .call(&["config", "--get", "--"])
            .arg(key)
            .output(&[0, 1])
            .await?;
        let value = String::from_utf8_lossy(&out).trim_end().to_string();
        Ok((code == 0).then_some(value))
    }

    /// Where `branch` goes: `remote` (default: the branch's upstream remote, else `origin`),
    /// which must be a remote of the user's config, and the branch's upstream there or its
    /// own name.
    pub async fn push_target(
        &self,
        branch: &str,
        remote: Option<&str>,
    ) -> Result<PushTarget, GitError> {
        let upstream_remote = self
            .config_value(&format!("branch.{branch}.remote"))
            .await?;
        let remote = match remote {
            Some(remote) => remote.to_string(),
            None => upstream_remote
                .clone()
                .filter(|r| r != ".")
                .unwrap_or_else(|| "origin".to_string()),
        };
        let no_remote = || GitError::NoRemote {
            remote: remote.clone(),
            repo: self.root.clone(),
        };
        // A name git would read as an option, a URL or a path is never a configured remote.
        if remote.is_empty()
            || remote.starts_with('-')
            || remote.contains(':')
            || remote.chars().any(char::is_control)
        {
            return Err(no_remote());
        }
        let Some(url) = self.config_value(&format!("remote.{remote}.url")).await? else {
            return Err(no_remote());
        };
        let push_url = self
            .config_value(&format!("remote.{remote}.pushurl"))
            .await?;
        let dest = match self.config_value(&format!("branch.{branch}.merge")).await? {
            Some(merge) if upstream_remote.as_deref() == Some(remote.as_str()) => merge
                .strip_prefix("refs/heads/")
                .unwrap_or(&merge)
                .to_string(),
            _ => branch.to_string(),
        };
        if !is_valid_branch_name(&dest) {
            return Err(GitError::InvalidBranch { name: dest });
        }
        Ok(PushTarget {
            remote,
            url: redact_url(push_url.as_deref().unwrap_or(&url)),
            push_url,
            fetch_url: url,
            dest,
        })
    }

    /// The remote's tip of `refs/heads/<dest>` now (None: no such branch), read where the
    /// push goes: the `pushurl` when there is one (`ls-remote NAME` reads the fetch `url`).
    async fn remote_tip(&self, target: &PushTarget) -> Result<Option<String>, GitError> {
        let refname = format!("refs/heads/{}", target.dest);
        let listed = self
            .call(&["ls-remote", "--refs", "--"])
            .arg(target.push_url.as_deref().unwrap_or(&target.remote))
            .arg(&refname)
            .timeout(PUSH_TIMEOUT)
            .run()
            .await
            .map_err(|error| target.scrub(error))?;
        Ok(listed.lines().find_map(|line| {
            let (sha, name) = line.split_once('\t')?;
            (name == refname).then(|| sha.to_string())
        }))
    }

    /// Whether `old` is an ancestor of `new` here (false when `old` is not here at all: the
    /// remote has commits the user's repository never saw).
    async fn fast_forward(&self, old: &str, new: &str) -> Result<bool, GitError> {
        let (code, _) = self
            .call(&["merge-base", "--is-ancestor", old, new])
            .output(&[0, 1, 128])
            .await?;
        Ok(code == 0)
    }

    /// Pushes the job branch's commit `tip` to `target`'s branch; see the module docs.
    pub async fn push_branch(
        &self,
        target: &PushTarget,
        tip: &str,
        force_with_lease: bool,
    ) -> Result<Pushed, GitError> {
        let dest_ref = format!("refs/heads/{}", target.dest);
        let old = self.remote_tip(target).await?;
        if old.as_deref() == Some(tip) {
            return Ok(Pushed {
                old,
                new: tip.to_string(),
                updated: false,
                forced: false,
            });
        }
        let forced = match &old {
            Some(old) => !self.fast_forward(old, tip).await?,
            None => false,
        };
        if forced && !force_with_lease {
            return Err(GitError::NotFastForward {
                remote: target.remote.clone(),
                dest: target.dest.clone(),
                remote_tip: old.unwrap_or_default(),
            });
        }
        let mut push = self
            .call(&[
                "-c",
                "push.followTags=false",
                "-c",
                "push.recurseSubmodules=no",
                "-c",
                "push.autoSetupRemote=false",
                "push",
                "--porcelain",
                "--no-verify",
                "--no-follow-tags",
                "--recurse-submodules=no",
            ])
            .timeout(PUSH_TIMEOUT);
        // The lease always names the tip just seen (empty: must not exist), so the push never
        // replaces anything it did not look at, forced or not.
        push = push.arg(format!(
            "--force-with-lease={dest_ref}:{}",
            old.as_deref().unwrap_or("")
        ));
        // The commit itself, not the branch's name: a sync moving the branch meanwhile
        // cannot change what this push sends.
        push.arg("--")
            .arg(&target.remote)
            .arg(format!("{tip}:{dest_ref}"))
            .run()
            .await
            .map_err(|error| target.scrub(error))?;
        Ok(Pushed {
            old,
            new: tip.to_string(),
            updated: true,
            forced,
        })
    }
}

/// `url` without a password (or any user info of an `http(s)://` URL), for reports.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((user, host)) if scheme.starts_with("http") || user.contains(':') => {
            format!("{scheme}://{host}{path}")
        }
        _ => url.to_string(),
    }
}

/// The page that opens a pull (merge) request of `branch` for a github.com or gitlab.com
/// remote; None for any other host.
pub fn pull_request_url(url: &str, branch: &str) -> Option<String> {
    let url = redact_url(url);
    // `git@github.com:owner/repo.git`, `ssh://git@github.com/owner/repo`,
    // `https://github.com/owner/repo.git`.
    let (host, path) = match url.split_once("://") {
        Some((_, rest)) => {
            let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
            rest.split_once('/')?
        }
        None => {
            let rest = url.rsplit_once('@').map_or(url.as_str(), |(_, host)| host);
            rest.split_once(':')?
        }
    };
    let host = host.split(':').next()?.to_ascii_lowercase();
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    if path.split('/').filter(|p| !p.is_empty()).count() < 2 {
        return None;
    }
    match host.as_str() {
        "github.com" => Some(format!("https://github.com/{path}/pull/new/{branch}")),
        "gitlab.com" => Some(format!(
            "https://gitlab.com/{path}/-/merge_requests/new?merge_request%5Bsource_branch%5D={branch}"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_passwords() {
        assert_eq!(
            redact_url("https://bob:s3cret@example.com/r.git"),
            "https://example.com/r.git"
        );
        assert_eq!(
            redact_url("https://tok@example.com/r.git"),
            "https://example.com/r.git"
        );
        assert_eq!(
            redact_url("ssh://git@example.com/r.git"),
            "ssh://git@example.com/r.git"
        );
        assert_eq!(
            redact_url("git@github.com:o/r.git"),
            "git@github.com:o/r.git"
        );
        assert_eq!(redact_url("/srv/r.git"), "/srv/r.git");
    }

    #[test]
    fn pull_request_pages_for_github_and_gitlab() {
        for url in [
            "git@github.com:o/r.git",
            "ssh://git@github.com/o/r",
            "https://github.com/o/r.git",
            "https://x:y@GitHub.com/o/r/",
        ] {
            assert_eq!(
                pull_request_url(url, "agent/a").as_deref(),
                Some("https://github.com/o/r/pull/new/agent/a"),
                "{url}"
            );
        }
        assert_eq!(
            pull_request_url("git@gitlab.com:g/sub/r.git", "b").as_deref(),
            Some(
                "https://gitlab.com/g/sub/r/-/merge_requests/new?merge_request%5Bsource_branch%5D=b"
            )
        );
        assert_eq!(pull_request_url("https://example.com/o/r.git", "b"), None);
        assert_eq!(pull_request_url("/srv/r.git", "b"), None);
        assert_eq!(pull_request_url("https://github.com/o", "b"), None);
    }
}
