//! Everything the CLI prints, in one place: JSON, aligned tables, a job's details, exec
//! results and live output. Data goes to stdout; paddock's own words to stderr.

use std::io::Write;

use serde::Serialize;

use super::exit;
use crate::output::{OutputSink, StreamKind};
use crate::text::{line, path};
use crate::units::{format_age, format_size};
use crate::wire::{ExecResult, JobDetails, JobView};

/// Progress of long work on stderr: drawn only on a terminal and never under `--json`, so
/// scripts and logs see only the result.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
}

impl Progress {
    fn draw(json: bool, bar: impl FnOnce() -> indicatif::ProgressBar) -> Progress {
        use std::io::IsTerminal;
        let shown = !json && std::io::stderr().is_terminal();
        Progress {
            bar: shown.then(bar),
        }
    }

    /// A spinner with a changing message (an image build's current step).
    pub fn spinner(json: bool) -> Progress {
        Progress::draw(json, || {
            let bar = indicatif::ProgressBar::new_spinner();
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            bar
        })
    }

    /// A bar counting items (a sweep's jobs).
    pub fn bar(json: bool, what: &'static str) -> Progress {
        Progress::draw(json, || {
            let style = indicatif::ProgressStyle::with_template(&format!(
                "{{bar:30}} {{pos}}/{{len}} {what} {{msg}}"
            ))
            .expect("the template is valid");
            indicatif::ProgressBar::new(0).with_style(style)
        })
    }

    /// Whether anything is drawn (else the caller may print plain lines instead).
    pub fn shown(&self) -> bool {
        self.bar.is_some()
    }

    pub fn message(&self, message: &str) {
        if let Some(bar) = &self.bar {
            bar.set_message(message.to_string());
        }
    }

    pub fn position(&self, done: usize, total: usize) {
        if let Some(bar) = &self.bar {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        }
    }

    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// Prints a value as pretty JSON (the stable `--json` output).
pub fn print_json<T: Serialize + ?Sized>(value: &T) {
    let text = serde_json::to_string_pretty(value).expect("paddock's output types serialize");
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", super::say::json(&text));
}

/// Prints rows as aligned columns (two spaces apart, no borders, never wrapped: lines stay
/// one row each for `grep` and `awk`).
pub fn print_table(headers: &[&str], rows: &[Vec<String>]) {
    let mut table = comfy_table::Table::new();
    table
        .load_preset(comfy_table::presets::NOTHING)
        .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
        .set_header(headers.to_vec())
        // Cells carry agent text (branches, commands, labels, reasons): one line each, no
        // byte a terminal acts on.
        .add_rows(
            rows.iter()
                .map(|row| row.iter().map(|cell| crate::text::line(cell).into_owned())),
        );
    for column in table.column_iter_mut() {
        column.set_padding((0, 2));
    }
    super::say::out(&table.trim_fmt());
}

pub fn print_job_table(views: &[JobView]) {
    if views.is_empty() {
        say!("no jobs");
        return;
    }
    let now = chrono::Utc::now();
    let rows: Vec<Vec<String>> = views
        .iter()
        .map(|v| {
            vec![
                v.id.to_string(),
                match (v.queue_position, v.merged, &v.sync_error) {
                    _ if v.engine_status.as_deref() == Some("unreachable") => {
                        "unreachable".to_string()
                    }
                    (Some(place), _, _) => format!("{} #{place}", v.state),
                    // Its branch may have moved since the host last saw it.
                    (None, _, Some(_)) => format!("{} (sync failed)", v.state),
                    (None, Some(true), None) => format!("{} (merged)", v.state),
                    (None, _, None) => v.state.to_string(),
                },
                match &v.engine {
                    Some(engine) => format!("{}@{engine}", v.runtime),
                    None => v.runtime.clone(),
                },
                format_age(now - v.created_at),
                format_age(now - v.last_activity_at),
                v.branch.clone(),
            ]
        })
        .collect();
    print_table(&["ID", "STATE", "RUNTIME", "AGE", "IDLE", "BRANCH"], &rows);
}

#[expect(
    clippy::too_many_lines,
    reason = "`show`'s page, one section after another in the order it prints"
)]
pub fn print_details(details: &JobDetails) {
    let v = &details.view;
    let now = chrono::Utc::now();
    // Unknown first and plainly: nothing below may pass for the job's state now.
    let stale = details.changes_error.is_some();
    if let Some(error) = &details.changes_error {
        say!(
            "UNKNOWN   the job's changes could not be read now: {}",
            line(error)
        );
        if details.changes.is_some() {
            say!("          (the changes and merge verdict below may be incomplete or stale)");
        }
    }
    say!("job       {}", v.id);
    say!(
        "state     {} (created {} ago, last active {} ago)",
        v.state,
        format_age(now - v.created_at),
        format_age(now - v.last_activity_at)
    );
    if let Some(engine) = &v.engine {
        let status = v.engine_status.as_deref().unwrap_or("reachable");
        say!("engine    {engine} ({status}; the job's files live there)");
    }
    if let Some(place) = v.queue_position {
        say!("queue     #{place}: waits for room in the host budget");
    }
    if let Some(code) = v.exit_code {
        say!(
            "exit      {code}{}",
            if v.oom_killed {
                " (killed: out of memory)"
            } else {
                ""
            }
        );
    }
    say!("repo      {}", path(&v.repo.display().to_string()));
    say!(
        "branch    {} (base {} @ {})",
        line(&v.branch),
        line(&v.base),
        &v.base_commit[..v.base_commit.len().min(10)]
    );
    say!("worktree  {}", path(&v.worktree.display().to_string()));
    if let Some(from) = &v.forked_from {
        say!(
            "forked    from job {}, checkpoint {}",
            line(&from.job),
            line(&from.checkpoint)
        );
    }
    say!("profile   {}", v.profile);
    say!("runtime   {}", details.isolation);
    let limits = &v.limits;
    if !limits.image.is_empty() {
        // The id names what actually runs: a tag moves when the image is rebuilt.
        match &details.image_id {
            Some(id) => say!("image     {} ({})", line(&limits.image), line(short_id(id))),
            None => say!("image     {}", line(&limits.image)),
        }
    }
    let memory_cap = if limits.memory.0 == 0 {
        "no memory cap".to_string()
    } else {
        format!("{} memory", limits.memory)
    };
    say!(
        "limits    {} CPUs, {memory_cap}; reserves {} CPUs, {} of the host budget",
        limits.cpus,
        v.reserve.cpus,
        v.reserve.memory
    );
    if limits.network == crate::config::NetworkMode::Allowlist {
        let allow: Vec<String> = limits.allow.iter().map(ToString::to_string).collect();
        let allow = if allow.is_empty() {
            "nothing".to_string()
        } else {
            allow.join(", ")
        };
        say!("network   allowlist: {allow}");
    } else {
        say!("network   {}", limits.network);
    }
    for port in &v.ports {
        let relay = match v.port_relay.as_deref() {
            Some("running") => " (relayed through the engine)",
            Some(_) => " (relay not running: the next exec starts it)",
            None => "",
        };
        say!("port      {} -> {}{relay}", port.port, port.address());
    }
    // The file is the repository's (an agent's commits can change it): its text goes
    // through `line` like any agent-controlled text.
    if let Some(dc) = &v.devcontainer {
        let built = if dc.built { "built" } else { "reused" };
        say!(
            "environ   {} ({}: {built})",
            path(&dc.file),
            line(&dc.image)
        );
        say!("          read: {}", line(&dc.read.join(", ")));
        for volume in &dc.volumes {
            say!(
                "          volume: {} at {}",
                line(&volume.name),
                path(&volume.path)
            );
        }
        if !dc.post_start.is_empty() {
            say!(
                "          at each start: {}",
                line(&dc.post_start.join(" && "))
            );
        }
        for ignored in dc.ignored.iter().chain(&dc.unsupported) {
            say!("          ignored: {}", line(ignored));
        }
    }
    // A limit's disk holds everything the job writes; a git disk its git dir and outbox.
    for (label, disk) in [("disk     ", &v.disk), ("git disk ", &v.git_disk)] {
        let Some(disk) = disk else { continue };
        let limit = format_size(disk.limit_bytes);
        match (disk.used_bytes, disk.free_bytes) {
            (Some(used), Some(free)) => say!(
                "{label} {} of {limit} ({} free)",
                format_size(used),
                format_size(free)
            ),
            _ => say!("{label} limit {limit} (not mounted)"),
        }
    }
    if details.logs_bytes > 0 {
        say!(
            "logs      {} on the host (output log capped at 64 MiB, each exec's output at 64 MiB)",
            format_size(details.logs_bytes)
        );
    }
    if let Some(id) = &v.container_id {
        say!("container {}", &id[..id.len().min(12)]);
    }
    match &v.pool {
        Some(crate::job::PoolStart::Warm { slot }) => {
            say!("pool      warm start (slot {slot})");
        }
        Some(crate::job::PoolStart::Cold { reason }) => {
            say!("pool      cold start: {}", line(reason));
        }
        None => {}
    }
    if !v.copied.is_empty() {
        let copied: Vec<_> = v.copied.iter().map(|p| path(p)).collect();
        say!("copied    {}", copied.join(", "));
    }
    for (i, run) in v.setup.iter().enumerate() {
        let label = if i == 0 { "setup" } else { "" };
        let mark = if run.ok { "ok" } else { "FAILED" };
        let mut text = format!(
            "{label:<9} {mark:<6} {} ({}",
            line(&run.command),
            line(&run.outcome())
        );
        if let Some(result) = &run.result {
            text.push_str(&format!(", {}ms", result.duration_ms));
            if let Some(exec) = result.exec_id.as_ref().filter(|_| !run.ok) {
                text.push_str(&format!("; output: paddock execs {} {exec}", v.id));
            }
        }
        say!("{text})");
    }
    match (&details.changes, &details.changes_error) {
        (Some(changes), _) => {
            say!(
                "commits   {}{} ahead of base; {} file(s) committed, {} uncommitted (+{} -{})",
                if stale { "(stale) " } else { "" },
                changes.commits_ahead,
                changes.committed.len(),
                changes.uncommitted.len(),
                changes.insertions,
                changes.deletions
            );
            for change in &changes.committed {
                say!(
                    "  committed    {:<10} {}",
                    change.status,
                    path(&change.path)
                );
            }
            for change in &changes.uncommitted {
                say!(
                    "  uncommitted  {:<10} {}",
                    change.status,
                    path(&change.path)
                );
            }
        }
        (None, Some(_)) => say!("changes   unavailable (see UNKNOWN above)"),
        (None, None) => {}
    }
    if let Some(merge) = &details.merge {
        let verdict = if merge.merged {
            "merged".to_string()
        } else if merge.clean {
            "merges cleanly".to_string()
        } else {
            let files: Vec<String> = merge
                .conflicts
                .iter()
                .map(|c| format!("{} ({})", path(&c.path), c.kind))
                .collect();
            format!("conflicts: {}", files.join(", "))
        };
        let stale = if stale { " (stale)" } else { "" };
        say!("merge     into {}: {verdict}{stale}", line(&merge.base));
    }
    if let Some(outside) = &details.outside_history {
        say!("outside   {}", line(&outside.sentence()));
    }
}

/// Live output to the terminal: the command's stdout to ours, its stderr to ours.
pub struct Terminal;

impl OutputSink for Terminal {
    fn write(&mut self, stream: StreamKind, bytes: &[u8]) {
        let _ = match stream {
            StreamKind::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(bytes).and_then(|()| out.flush())
            }
            StreamKind::Stderr => std::io::stderr().lock().write_all(bytes),
        };
    }
}

/// paddock's own word on how a command ended, on stderr, when it was not a plain exit.
pub fn explain_result(result: &ExecResult) {
    if result.timed_out {
        tell!(
            "paddock: the command timed out after {}ms and was killed",
            result.duration_ms
        );
    }
    if result.oom_killed {
        tell!("paddock: the command was killed for running out of memory");
    }
    if result.truncated {
        tell!(
            "paddock: the output kept in the result was cut in the middle (cap 1 MiB per stream)"
        );
    }
}

/// The exit code of `exec`/`run`: the command's own, or 124 when it timed out.
pub fn command_exit_code(result: &ExecResult) -> i32 {
    if result.timed_out {
        exit::TIMED_OUT
    } else {
        i32::try_from(result.exit_code.clamp(0, 255)).unwrap_or(exit::INTERNAL)
    }
}

pub fn print_cache_table(entries: &[crate::cache::EntryInfo]) {
    let now = chrono::Utc::now();
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            // An engine's cache volume (`ENGINE:VOLUME`): its engine named, its size unknown.
            let engine = (!e.path.is_absolute())
                .then(|| e.path.to_str()?.split_once(':').map(|(engine, _)| engine))
                .flatten();
            vec![
                e.repo_key.clone(),
                match engine {
                    Some(engine) => format!("{} ({engine})", e.cache),
                    None => e.cache.clone(),
                },
                e.key.clone(),
                match engine {
                    Some(_) => "-".to_string(),
                    None => crate::units::format_size(e.size_bytes),
                },
                e.last_used_at
                    .map_or_else(|| "-".into(), |t| format!("{} ago", format_age(now - t))),
                e.jobs.join(","),
            ]
        })
        .collect();
    print_table(&["REPO", "CACHE", "KEY", "SIZE", "LAST USE", "JOBS"], &rows);
}

pub fn print_sweep(report: &crate::sweep::SweepReport) {
    let verb = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    let mut rows = Vec::new();
    for (action, items) in [
        (verb, &report.removed),
        ("kept", &report.kept),
        ("ERROR", &report.errors),
    ] {
        for item in items {
            let mut reason = item.reason.clone();
            if let Some(error) = &item.error {
                reason.push_str(&format!(": {error}"));
            }
            rows.push(vec![
                action.to_string(),
                item.kind.clone(),
                item.name.clone(),
                reason,
            ]);
        }
    }
    if rows.is_empty() {
        say!("nothing to sweep");
    } else {
        print_table(&["ACTION", "KIND", "NAME", "REASON"], &rows);
    }
    say!(
        "{} {verb}, {} kept, {} errors",
        report.removed.len(),
        report.kept.len(),
        report.errors.len()
    );
}

/// An image id as `docker images` shows it: 12 hex digits without `sha256:`.
fn short_id(id: &str) -> &str {
    let hex = id.strip_prefix("sha256:").unwrap_or(id);
    &hex[..hex.len().min(12)]
}
