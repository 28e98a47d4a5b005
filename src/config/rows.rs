//! `config show`: every effective value as a `(key, value, source)` row.

use super::{AdmissionSettings, Config, Source, cache_names, show_rows};

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
        for (key, value, source) in show_rows::rows(
            &top.copy,
            &top.commands,
            top.optional.as_ref(),
            top.timeout.as_ref(),
        )
        .into_iter()
        .chain(show_rows::network_rows(
            top.network.as_ref(),
            top.allow.as_ref(),
        )) {
            rows.push((key, value, source.clone()));
        }
        rows.extend(self.sweep_rows());
        rows.extend(self.admission_rows());
        rows.extend(super::trust::config_rows(self));

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

impl Config {
    /// The `admission:` settings of the user file; unset ones show what they default to
    /// (which depends on the host, so as a rule rather than a number).
    fn admission_rows(&self) -> Vec<(String, String, Source)> {
        let set = &self.admission;
        let source = |is_set: bool| match (&self.user_file, is_set) {
            (Some(path), true) => Source::UserFile(path.clone()),
            _ => Source::Default,
        };
        let row = |key: &str, value: Option<String>, default: String| {
            let source = source(value.is_some());
            (format!("admission.{key}"), value.unwrap_or(default), source)
        };
        vec![
            row(
                "memory",
                set.memory.map(|m| m.to_string()),
                format!(
                    "{}% of the host's memory",
                    AdmissionSettings::DEFAULT_MEMORY_SHARE * 100.0
                ),
            ),
            row(
                "cpus",
                set.cpus.map(|c| c.to_string()),
                format!("{} per host core", AdmissionSettings::DEFAULT_CPUS_PER_CORE),
            ),
            row(
                "max_jobs",
                set.max_jobs.map(|n| n.to_string()),
                "none".into(),
            ),
            row(
                "max_running_execs",
                set.max_running_execs.map(|n| n.to_string()),
                format!(
                    "{} per host core",
                    AdmissionSettings::DEFAULT_EXECS_PER_CORE
                ),
            ),
            row(
                "max_wait",
                set.max_wait.map(|d| d.to_string()),
                AdmissionSettings::DEFAULT_MAX_WAIT.to_string(),
            ),
        ]
    }
}

impl Config {
    /// The `sweep:` settings as rows.
    fn sweep_rows(&self) -> Vec<(String, String, Source)> {
        let mut rows = Vec::new();
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
            (
                "paused_max_age",
                sweep
                    .paused_max_age
                    .value
                    .map_or_else(|| "off".into(), |d| d.to_string()),
                &sweep.paused_max_age.source,
            ),
        ] {
            rows.push((format!("sweep.{key}"), value, source.clone()));
        }
        rows
    }
}
