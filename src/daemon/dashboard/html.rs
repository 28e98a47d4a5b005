//! The dashboard's HTML, built as plain strings: the page frame, the job table, the sweep
//! report and small pieces. Every value that comes from a job (ids, branches, commands,
//! output, diffs) goes through [`esc`]; nothing here reads state, it renders `wire` types.

use std::fmt::Write;

use chrono::{DateTime, Utc};

use crate::runtime::SandboxStatus;
use crate::sweep::SweepReport;
use crate::units::{format_age, format_size};
use crate::wire::JobView;

/// Escapes text for HTML element content and quoted attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes a URL path segment (job ids are already plain, but never trust that here).
pub fn seg(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect()
}

/// A whole page: `title`, the navigation, `body`. `live` adds the script that keeps it fresh
/// (the page reads fully without it).
pub fn page(title: &str, body: &str, live: bool) -> String {
    let script = if live {
        r#"<script src="/assets/dashboard.js" defer></script>"#
    } else {
        ""
    };
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · paddock</title>
<link rel="stylesheet" href="/assets/dashboard.css">{script}</head>
<body><header><a class="brand" href="/">paddock</a><nav><a href="/">jobs</a><a href="/sweep">sweep</a></nav><span id="live" class="live" hidden>live</span></header>
<main>{body}</main></body></html>"#,
        title = esc(title),
    )
}

/// A hidden form field carrying the session's CSRF token.
pub fn csrf_field(csrf: &str) -> String {
    format!(r#"<input type="hidden" name="csrf" value="{}">"#, esc(csrf))
}

fn ago(now: DateTime<Utc>, then: DateTime<Utc>) -> String {
    format_age(now - then)
}

/// A job's row in the table, with what its runtime says of its sandbox now.
pub struct JobRow {
    pub view: JobView,
    pub sandbox: Option<SandboxStatus>,
    /// Commits on the branch beyond the base, and on the base since the job branched.
    pub ahead_behind: Option<(usize, usize)>,
}

/// The job table (the fragment `/fragments/jobs` re-serves).
pub fn job_table(rows: &[JobRow], now: DateTime<Utc>) -> String {
    if rows.is_empty() {
        return r#"<p class="empty" id="no-jobs">No jobs. Create one with <code>paddock create</code>.</p>"#.into();
    }
    let mut out = String::from(
        r#"<table class="jobs" id="jobs-table"><thead><tr><th>id</th><th>agent</th><th>task</th><th>branch</th><th>state</th><th>runtime</th><th>container</th><th>cpu now / limit</th><th>memory now / limit</th><th>age</th><th>idle</th><th>ahead / behind</th><th>base</th></tr></thead><tbody>"#,
    );
    for row in rows {
        let view = &row.view;
        let id = view.id.to_string();
        let state = view.state.to_string();
        let (container, cpu, memory) = match &row.sandbox {
            Some(s) => (
                match &s.health {
                    Some(health) => format!("{} ({})", s.status, health),
                    None => s.status.clone(),
                },
                s.cpu_percent.map_or("—".into(), |p| format!("{p:.0}%")),
                s.memory_bytes.map_or("—".into(), format_size),
            ),
            None => ("—".into(), "—".into(), "—".into()),
        };
        let idle = if view.state.to_string() == "running" {
            "busy".to_string()
        } else {
            ago(now, view.last_activity_at)
        };
        // Against the job's base branch now: what `paddock conflicts` would say of it alone.
        let merge = match (view.merged, view.conflicts) {
            (Some(true), _) => "merged",
            (_, Some(true)) => "conflicts",
            (_, Some(false)) => "clean",
            _ => "—",
        };
        let ahead = row
            .ahead_behind
            .map_or("—".into(), |(a, b)| format!("{a} / {b}"));
        let _ = write!(
            out,
            r#"<tr data-job="{id_attr}" data-state="{state_attr}"><td><a href="/jobs/{id_url}">{id_html}</a></td><td>{agent}</td><td>{task}</td><td><code>{branch}</code></td><td><span class="state state-{state_attr}">{state_html}</span></td><td>{runtime}</td><td class="container">{container}</td><td>{cpu} / {cpus}</td><td>{memory} / {limit}</td><td>{age}</td><td>{idle}</td><td>{ahead}</td><td class="merge merge-{merge}">{merge}</td></tr>"#,
            id_attr = esc(&id),
            id_url = seg(&id),
            id_html = esc(&id),
            state_attr = esc(&state),
            state_html = esc(&state),
            agent = esc(&view.agent),
            task = esc(view.task.as_deref().unwrap_or("—")),
            branch = esc(&view.branch),
            runtime = esc(&view.runtime),
            container = esc(&container),
            cpus = view.limits.cpus,
            limit = view.limits.memory,
            age = ago(now, view.created_at),
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// The jobs page around the table.
pub fn jobs_page(table: &str) -> String {
    page(
        "jobs",
        &format!(
            r#"<h1>Jobs</h1><div id="jobs" data-fragment="/fragments/jobs">{table}</div>
<p class="hint">Live while JavaScript runs (the event stream); otherwise reload to refresh.</p>"#
        ),
        true,
    )
}

/// The sweep page: the dry run's report and the form that runs the sweep, or what a sweep
/// did.
pub fn sweep_page(report: &SweepReport, csrf: &str) -> String {
    let mut body = String::new();
    if report.dry_run {
        body.push_str("<h1>Sweep (dry run)</h1><p>Nothing was removed yet. A sweep removes what is listed under <em>would remove</em>, saving uncommitted work as <code>refs/paddock/wip/&lt;job&gt;</code> in paddock's wip store first.</p>");
    } else {
        body.push_str("<h1>Sweep done</h1>");
    }
    let removed_title = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    for (title, items) in [
        (removed_title, &report.removed),
        ("kept", &report.kept),
        ("errors", &report.errors),
    ] {
        let _ = write!(body, "<h2>{title} ({})</h2>", items.len());
        if items.is_empty() {
            continue;
        }
        body.push_str(r#"<table class="sweep"><thead><tr><th>kind</th><th>name</th><th>reason</th><th>error</th></tr></thead><tbody>"#);
        for item in items.iter() {
            let _ = write!(
                body,
                "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
                esc(&item.kind),
                esc(&item.name),
                esc(&item.reason),
                esc(item.error.as_deref().unwrap_or(""))
            );
        }
        body.push_str("</tbody></table>");
    }
    if report.dry_run {
        let _ = write!(
            body,
            r#"<form method="post" action="/sweep">{}<button type="submit" class="danger">Sweep now</button></form>"#,
            csrf_field(csrf)
        );
    }
    page("sweep", &body, false)
}

/// An error page (the engine's message).
pub fn error_page(status: u16, message: &str) -> String {
    page(
        "error",
        &format!(
            r#"<h1>Error {status}</h1><p class="error">{}</p><p><a href="/">back to the jobs</a></p>"#,
            esc(message)
        ),
        false,
    )
}

/// A unified diff as per-file sections, each line classed (`add`, `del`, `hunk`, `meta`)
/// for colour.
pub fn diff(patch: &str) -> String {
    if patch.trim().is_empty() {
        return r#"<p class="empty" id="no-diff">No changes against the base.</p>"#.into();
    }
    let mut out = String::from(r#"<div class="diff" id="diff">"#);
    let mut open = false;
    for line in patch.lines() {
        if let Some(rest) = line.strip_prefix("diff --git ") {
            if open {
                out.push_str("</pre></details>");
            }
            let name = rest.rsplit_once(" b/").map_or(rest, |(_, b)| b).to_string();
            let _ = write!(
                out,
                r#"<details open class="file"><summary><code>{}</code></summary><pre>"#,
                esc(&name)
            );
            open = true;
            continue;
        }
        if !open {
            out.push_str(r#"<details open class="file"><summary>changes</summary><pre>"#);
            open = true;
        }
        let class = if line.starts_with("+++") || line.starts_with("---") {
            "meta"
        } else if line.starts_with('+') {
            "add"
        } else if line.starts_with('-') {
            "del"
        } else if line.starts_with("@@") {
            "hunk"
        } else if line.starts_with(' ') {
            "ctx"
        } else {
            "meta"
        };
        let _ = writeln!(out, r#"<span class="{class}">{}</span>"#, esc(line));
    }
    if open {
        out.push_str("</pre></details>");
    }
    out.push_str("</div>");
    out
}
