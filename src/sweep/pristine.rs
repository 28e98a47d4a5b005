//! The sweep's part of copy-on-write checkouts: pristine checkouts no job uses any more
//! (no record names them) and unused for `sweep.pristine_max_age`, and partial ones a killed
//! create left. Each is removed under its own lock (held by a create while it makes one and
//! names it in its record), after looking at the records again. And job disks (`disk`)
//! still mounted with neither a record nor a checkout left.

use std::time::Duration;

use super::{SweepOptions, SweepReport};
use crate::engine::Paddock;
use crate::overlay::Pristines;

impl Paddock {
    pub(super) async fn reap_pristines(&self, options: &SweepOptions, report: &mut SweepReport) {
        let pristines = Pristines::of(self.home());
        for found in pristines.list() {
            let name = found.dir.display().to_string();
            let used = |records: &[crate::job::JobRecord]| {
                let complete = if found.partial {
                    Pristines::completed_name(&found.dir)
                } else {
                    found.dir.clone()
                };
                records
                    .iter()
                    .any(|r| r.pristine.as_deref() == Some(complete.as_path()))
            };
            let Ok((records, _)) = self.store().list() else {
                return;
            };
            if !found.partial && used(&records) {
                continue;
            }
            let idle = options
                .now
                .signed_duration_since(chrono::DateTime::<chrono::Utc>::from(found.used))
                .to_std()
                .unwrap_or_default();
            if !found.partial && idle <= options.pristine_max_age {
                report.kept(
                    "pristine",
                    name,
                    format!(
                        "unused, but used {} ago (pristine_max_age {})",
                        crate::units::format_age(
                            chrono::Duration::from_std(idle).unwrap_or_default()
                        ),
                        crate::units::HumanDuration(options.pristine_max_age)
                    ),
                );
                continue;
            }
            let reason = if found.partial {
                "partial pristine checkout left by a killed create"
            } else {
                "pristine checkout no job uses"
            };
            if options.dry_run {
                report.removed("pristine", name, reason);
                continue;
            }
            let lock_of = if found.partial {
                Pristines::completed_name(&found.dir)
            } else {
                found.dir.clone()
            };
            // Busy: a create is making or naming it right now.
            let Ok(_lock) = pristines.lock(&lock_of, Duration::ZERO).await else {
                report.kept("pristine", name, "a create holds its lock");
                continue;
            };
            let Ok((records, _)) = self.store().list() else {
                return;
            };
            if !found.partial && used(&records) {
                continue;
            }
            // A walk of a whole checkout: on a blocking thread, not the daemon's workers.
            let (remover, dir) = (pristines.clone(), found.dir.clone());
            let removed = tokio::task::spawn_blocking(move || remover.remove(&dir))
                .await
                .expect("removing a tree does not panic");
            match removed {
                Ok(()) => report.removed("pristine", name, reason),
                Err(error) => report.error("pristine", name, reason, error),
            }
        }
    }

    /// A job's disk mounted under `work/` (or `jobs/`, before that layout) with no record and no checkout (a removal
    /// interrupted between the two, a record deleted by hand): unmounted, its job dir
    /// removed. A create reserves its record before it makes a disk, and a removal unmounts
    /// the disk before it drops the record, so neither is in flight here. One whose checkout
    /// is still there is left to the orphan checkout's removal, which saves its work first.
    pub(super) async fn reap_orphan_disks(&self, options: &SweepOptions, report: &mut SweepReport) {
        let roots = self.home().job_dir_roots();
        let mounted = roots
            .iter()
            .flat_map(|root| crate::disk::mounted_job_dirs(root));
        for job_dir in mounted {
            let id = job_dir
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            if self.store().exists_str(&id) {
                continue;
            }
            let checkout = std::fs::read_dir(self.home().worktrees_dir())
                .into_iter()
                .flatten()
                .flatten()
                .any(|key| key.path().join(&id).exists());
            if checkout {
                report.kept("disk", id, "its checkout is still there");
                continue;
            }
            let reason = "job disk mounted with no job record";
            if options.dry_run {
                report.removed("disk", id, reason);
                continue;
            }
            // The job's upper dir is the agent's tree: removed on a blocking thread.
            let removed = match crate::disk::unmount(&job_dir) {
                Ok(()) => crate::tree::remove_tree_async(&job_dir)
                    .await
                    .map_err(|source| crate::error::Error::RemoveDir {
                        path: job_dir.clone(),
                        source,
                    }),
                Err(error) => Err(error.into()),
            };
            match removed {
                Ok(()) => report.removed("disk", id, reason),
                Err(error) => report.error("disk", id, reason, error),
            }
        }
    }
}
