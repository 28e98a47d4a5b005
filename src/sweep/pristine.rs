//! The sweep's part of copy-on-write checkouts: pristine checkouts no job uses any more
//! (no record names them) and unused for `sweep.pristine_max_age`, and partial ones a killed
//! create left. Each is removed under its own lock (held by a create while it makes one and
//! names it in its record), after looking at the records again.

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
            match pristines.remove(&found.dir) {
                Ok(()) => report.removed("pristine", name, reason),
                Err(error) => report.error("pristine", name, reason, error),
            }
        }
    }
}
