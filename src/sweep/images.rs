//! Devcontainer images (`paddock-devc:<digest>` and the repository's build under it,
//! `...-base`): content-addressed, so they pile up as repositories change their
//! Dockerfiles. The sweep removes one when
//! - it carries paddock's image label and this install's home label (an image a user tagged
//!   `paddock-devc:*` by hand, or another install built, is never touched; an install that
//!   reuses another's image keeps it from removal only while its containers use it),
//! - no job of this install names it (its record's image: a stopped job's container is
//!   recreated from it),
//! - it was last used (by a create of this install, see `engine::devcontainer`) or, never
//!   used here, made more than [`UNUSED_FOR`] ago,
//!
//! and the engine agrees: the removal is never forced, so an image any container (of any
//! install, running or stopped) uses stays, and the sweep says why.

use std::time::Duration;

use super::{SweepOptions, SweepReport};
use crate::engine::Paddock;
use crate::engine::devcontainer::{IMAGE_REPO, last_used};
use crate::job::JobState;

/// A devcontainer image unused this long is removed.
pub const UNUSED_FOR: Duration = Duration::from_secs(7 * 24 * 3600);

impl Paddock {
    pub(super) async fn reap_devcontainer_images(
        &self,
        options: &SweepOptions,
        report: &mut SweepReport,
    ) {
        let Some(runtime) = self.runtimes().with_sandboxes().capabilities().images else {
            return;
        };
        let Ok(images) = runtime.labelled_images(IMAGE_REPO).await else {
            // No engine: no images to look at (the container checks report an engine that
            // jobs need).
            return;
        };
        let Ok((records, _)) = self.store().list() else {
            return;
        };
        // The job's image first, then the build under it (which the first one uses).
        let mut images = images;
        images.sort_by_key(|(tag, _)| tag.ends_with("-base"));
        for (tag, created) in images {
            let job_image = tag.strip_suffix("-base").unwrap_or(&tag);
            if let Some(user) = records
                .iter()
                .find(|r| r.state != JobState::Removed && r.limits.image == job_image)
            {
                report.kept("image", tag, format!("used by job {}", user.id));
                continue;
            }
            let used = last_used(self.home(), job_image).or(created);
            let unused = used.map(|at| super::age(options.now, at));
            if unused.is_none_or(|unused| unused <= UNUSED_FOR) {
                continue;
            }
            let reason = format!(
                "a devcontainer image no job uses, unused for {}",
                crate::units::HumanDuration(unused.unwrap_or_default())
            );
            if options.dry_run {
                report.removed("image", tag, reason);
                continue;
            }
            match runtime.remove_image(&tag).await {
                Ok(()) => report.removed("image", tag, reason),
                Err(error) => report.kept(
                    "image",
                    tag,
                    format!("{reason}; the engine keeps it: {error}"),
                ),
            }
        }
    }
}
