//! Who an exec runs as (`exec --user`): the job's agent (the default), root, or a numeric
//! uid and gid. Only names paddock itself knows are taken: `agent` and `root`. A user name
//! of the image (`www-data`) would need the image's `/etc/passwd`, read from a filesystem
//! the job controls, so it is refused rather than resolved host-side.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The identity an exec's command runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExecUser {
    /// The job's own uid and gid (`limits.uid`): what every exec ran as before `--user`.
    #[default]
    Agent,
    /// uid 0 and gid 0, without capabilities: it owns the image's system files, so it can
    /// install packages where the root is writable, and has no power over the agent's.
    Root,
    /// A numeric uid and gid (the gid defaults to the uid).
    Id { uid: u32, gid: u32 },
}

impl ExecUser {
    /// The uid and gid, given the agent's.
    pub fn ids(self, agent: (u32, u32)) -> (u32, u32) {
        match self {
            ExecUser::Agent => agent,
            ExecUser::Root => (0, 0),
            ExecUser::Id { uid, gid } => (uid, gid),
        }
    }

    /// Whether these ids are other than the agent's (then the runtime must contain them).
    pub fn is_other(self, agent: (u32, u32)) -> bool {
        self.ids(agent) != agent
    }
}

/// The uid and gid of paddock's resident exec server inside a job's sandbox (issue 46):
/// no exec runs as it (an exec as that uid could signal the server), so it is refused as
/// a `--user`, and the server refuses it too.
pub const EXEC_SERVER_ID: u32 = 2_147_483_646;

/// Why a `--user` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown user `{0}`: give `agent`, `root` or a numeric UID[:GID]")]
pub struct UnknownUser(pub String);

impl std::str::FromStr for ExecUser {
    type Err = UnknownUser;

    fn from_str(text: &str) -> Result<ExecUser, UnknownUser> {
        let unknown = || UnknownUser(text.to_string());
        let id = |part: &str| {
            // Digits only: no sign, no space, nothing `u32::from_str` would forgive.
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(unknown());
            }
            part.parse::<u32>().map_err(|_| unknown())
        };
        match text {
            "agent" => Ok(ExecUser::Agent),
            "root" => Ok(ExecUser::Root),
            _ => {
                let (uid, gid) = match text.split_once(':') {
                    Some((uid, gid)) => (id(uid)?, id(gid)?),
                    None => {
                        let uid = id(text)?;
                        (uid, uid)
                    }
                };
                // `-1` of the kernel's calls ("leave unchanged"): never an identity; nor
                // the exec server's own.
                if [uid, gid]
                    .iter()
                    .any(|id| *id == u32::MAX || *id == EXEC_SERVER_ID)
                {
                    return Err(unknown());
                }
                Ok(ExecUser::Id { uid, gid })
            }
        }
    }
}

impl std::fmt::Display for ExecUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecUser::Agent => f.write_str("agent"),
            ExecUser::Root => f.write_str("root"),
            ExecUser::Id { uid, gid } => write!(f, "{uid}:{gid}"),
        }
    }
}

impl Serialize for ExecUser {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ExecUser {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<ExecUser, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::ExecUser;

    #[test]
    fn users_parse_and_print_back() {
        for (text, user) in [
            ("agent", ExecUser::Agent),
            ("root", ExecUser::Root),
            (
                "1001",
                ExecUser::Id {
                    uid: 1001,
                    gid: 1001,
                },
            ),
            ("0:5", ExecUser::Id { uid: 0, gid: 5 }),
        ] {
            assert_eq!(text.parse::<ExecUser>(), Ok(user), "{text}");
        }
        assert_eq!(ExecUser::Id { uid: 7, gid: 8 }.to_string(), "7:8");
        for bad in [
            "",
            "www-data",
            "Root",
            "+1",
            "-1",
            " 1",
            "1:",
            ":1",
            "1:2:3",
            "4294967295",
            "4294967296",
            "2147483646",
            "1000:2147483646",
            "1:x",
        ] {
            assert!(bad.parse::<ExecUser>().is_err(), "{bad:?} was taken");
        }
        assert_eq!(ExecUser::Root.ids((1000, 1000)), (0, 0));
        assert!(
            !ExecUser::Id {
                uid: 1000,
                gid: 1000
            }
            .is_other((1000, 1000))
        );
        assert!(ExecUser::Root.is_other((1000, 1000)));
    }
}
