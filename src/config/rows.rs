//! `config show`: every effective value as a `(key, value, source)` row.

use super::{Config, Source, cache_names, setup};

impl Config {
    /// Every effective setting as `(key, value, source)`, for `paddock config show`.
    pub fn rows(&self) -> Vec<(String, String, Source)> {
        let mut rows = vec![
            (
                "default_profile".to_string(),
                self.default_profile.value.clone(),
                self.default_profile.source.clone(),
            ),
            (
                "branch_template".to_string(),
                self.branch_template.value.clone(),
                self.branch_template.source.clone(),
            ),
        ];
        if let Some(base) = &self.base {
            rows.push(("base".into(), base.value.clone(), base.source.clone()));
        }
        if let Some(forced) = &self.forced_profile {
            rows.push((
                "profile".into(),
                forced.value.clone(),
                forced.source.clone(),
            ));
        }
        for (name, profile) in &self.profiles {
            for (key, value, source) in profile.rows() {
                rows.push((format!("profiles.{name}.{key}"), value, source.clone()));
            }
        }
        if !self.caches.value.is_empty() {
            rows.push((
                "caches".into(),
                cache_names(&self.caches.value),
                self.caches.source.clone(),
            ));
        }
        let top = &self.setup;
        for (key, value, source) in setup::rows(
            &top.copy,
            &top.commands,
            top.optional.as_ref(),
            top.timeout.as_ref(),
        )
        .into_iter()
        .chain(setup::network_rows(
            top.network.as_ref(),
            top.allow.as_ref(),
        )) {
            rows.push((key, value, source.clone()));
        }
        let sweep = &self.sweep;
        let max_age = sweep.max_age.value.map(|d| d.to_string());
        for (key, value, source) in [
            ("idle", sweep.idle.value.to_string(), &sweep.idle.source),
            (
                "keep_finished",
                sweep.keep_finished.value.to_string(),
                &sweep.keep_finished.source,
            ),
            (
                "max_age",
                max_age.unwrap_or_else(|| "off".into()),
                &sweep.max_age.source,
            ),
            (
                "branch_policy",
                sweep.branch_policy.value.to_string(),
                &sweep.branch_policy.source,
            ),
            (
                "interval",
                sweep.interval.value.to_string(),
                &sweep.interval.source,
            ),
            (
                "merged",
                sweep.merged.value.to_string(),
                &sweep.merged.source,
            ),
            (
                "pristine_max_age",
                sweep.pristine_max_age.value.to_string(),
                &sweep.pristine_max_age.source,
            ),
        ] {
            rows.push((format!("sweep.{key}"), value, source.clone()));
        }

        for (kind, routes) in [
            ("agents", &self.routing.agents),
            ("tasks", &self.routing.tasks),
        ] {
            for route in routes.values() {
                rows.push((
                    format!("routing.{kind}.{}", route.pattern),
                    route.profile.clone(),
                    route.source.clone(),
                ));
            }
        }
        rows
    }
}
