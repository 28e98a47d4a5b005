//! The job page: the job's fields, its actions (stop, remove with the wip-snapshot rule),
//! its execs with exit codes and durations, the last exec's output (followed live by the
//! script), its commits, its egress proxy's last decisions and its diff per file. Renders
//! `wire` types (and the proxy's log lines) only.

use std::fmt::Write;

use chrono::{DateTime, Utc};

use super::html::{JobRow, csrf_field, diff, esc, page, seg};
use crate::egress::proxy::Decision;
use crate::units::{format_age, format_size};
use crate::wire::{CommitInfo, ExecInfo, ExecState};

/// What the job page shows; each read that failed carries its message instead.
pub struct JobPage {
    pub row: JobRow,
    pub execs: Result<Vec<ExecInfo>, String>,
    /// The last exec's id, its output (stdout and stderr as written) and the offset after it.
    pub output: Option<(String, String, u64)>,
    pub commits: Result<Vec<CommitInfo>, String>,
    pub diff: Result<crate::wire::JobDiff, String>,
    /// The last decisions of the job's egress proxy (`allowlist` jobs).
    pub egress: Vec<Decision>,
    pub checkpoints: Result<Vec<crate::wire::CheckpointView>, String>,
    pub csrf: String,
}

pub fn render(job: &JobPage, now: DateTime<Utc>) -> String {
    let view = &job.row.view;
    let id = view.id.to_string();
    let mut body = String::new();
    let _ = write!(
        body,
        r#"<h1>Job <code id="job-id">{id}</code> <span class="state state-{state}" id="job-state">{state}</span></h1>"#,
        id = esc(&id),
        state = esc(&view.state.to_string()),
    );
    // Unknown first and plainly: what follows is as the host last saw the job.
    if let Some(error) = &view.sync_error {
        let _ = write!(
            body,
            r#"<p class="error" id="state-unknown"><strong>State unknown:</strong> the job's last sync failed ({}); its branch may have moved since, and what this page shows is as of the last good sync.</p>"#,
            esc(error)
        );
    }
    if let Some(since) = view.paused_at {
        let _ = write!(
            body,
            r#"<p class="note" id="paused"><strong>Paused</strong> {} ago: its processes are frozen and it takes no exec until <code>paddock resume {}</code>.</p>"#,
            format_age(now - since),
            esc(&id)
        );
    }
    body.push_str(&fields(&job.row, now));
    body.push_str(&actions(&id, &job.csrf, view.paused_at.is_some()));
    body.push_str(&super::checkpoints::section(
        &id,
        &job.csrf,
        &job.checkpoints,
    ));

    body.push_str("<h2>Execs</h2>");
    match &job.execs {
        Ok(execs) if execs.is_empty() => body.push_str(r#"<p class="empty">No execs yet.</p>"#),
        Ok(execs) => body.push_str(&exec_table(execs, now)),
        Err(message) => body.push_str(&error_note(message)),
    }

    body.push_str("<h2>Output of the last exec</h2>");
    match &job.output {
        Some((exec, text, offset)) => {
            let _ = write!(
                body,
                r#"<pre class="log" id="log" data-job="{job}" data-exec="{exec}" data-offset="{offset}">{text}</pre>"#,
                job = esc(&id),
                exec = esc(exec),
                text = esc(text),
            );
        }
        None => body.push_str(r#"<pre class="log" id="log"></pre>"#),
    }

    body.push_str("<h2>Commits</h2>");
    match &job.commits {
        Ok(commits) if commits.is_empty() => {
            body.push_str(r#"<p class="empty">No commits beyond the base.</p>"#);
        }
        Ok(commits) => {
            body.push_str(r#"<table class="commits" id="commits"><thead><tr><th>commit</th><th>summary</th><th>author</th><th>when</th></tr></thead><tbody>"#);
            for commit in commits {
                let _ = write!(
                    body,
                    "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{} ago</td></tr>",
                    esc(commit.sha.get(..12).unwrap_or(&commit.sha)),
                    esc(&commit.summary),
                    esc(&commit.author),
                    format_age(now - commit.time)
                );
            }
            body.push_str("</tbody></table>");
        }
        Err(message) => body.push_str(&error_note(message)),
    }

    if !job.egress.is_empty() {
        body.push_str(&egress_table(&job.egress, now));
    }

    body.push_str("<h2>Diff against the base</h2>");
    match &job.diff {
        Ok(patch) => {
            if let Some(outside) = &patch.outside_history {
                body.push_str(&error_note(&outside.sentence()));
            }
            body.push_str(&diff(&patch.diff));
        }
        Err(message) => body.push_str(&error_note(message)),
    }
    page(&format!("job {id}"), &body, true)
}

/// The proxy's last decisions, newest first: what the job tried to reach and the answer.
fn egress_table(decisions: &[Decision], now: DateTime<Utc>) -> String {
    let mut out = String::from(
        r#"<h2>Egress</h2><table class="egress" id="egress"><thead><tr><th>when</th><th>method</th><th>destination</th><th>decision</th><th>reason</th><th>bytes up / down</th></tr></thead><tbody>"#,
    );
    for decision in decisions.iter().rev() {
        let verdict = if decision.allowed {
            "allowed"
        } else {
            "refused"
        };
        let _ = write!(
            out,
            r#"<tr><td>{} ago</td><td>{}</td><td><code>{}:{}</code></td><td class="egress-{verdict}">{verdict}</td><td>{}</td><td>{} / {}</td></tr>"#,
            format_age(now - decision.at),
            esc(&decision.method),
            esc(&decision.host),
            decision.port,
            esc(&decision.reason),
            format_size(decision.bytes_up),
            format_size(decision.bytes_down),
        );
    }
    out.push_str("</tbody></table>");
    out
}

fn error_note(message: &str) -> String {
    format!(r#"<p class="error">{}</p>"#, esc(message))
}

fn fields(row: &JobRow, now: DateTime<Utc>) -> String {
    let view = &row.view;
    let mut items: Vec<(&str, String)> = vec![
        ("agent", view.agent.clone()),
        ("task", view.task.clone().unwrap_or_else(|| "—".into())),
        ("branch", view.branch.clone()),
        (
            "base",
            format!(
                "{} ({})",
                view.base,
                view.base_commit.get(..12).unwrap_or(&view.base_commit)
            ),
        ),
        ("repository", view.repo.display().to_string()),
        ("runtime", view.runtime.clone()),
        (
            "forked from",
            view.forked_from.as_ref().map_or_else(
                || "—".into(),
                |from| format!("job {}, checkpoint {}", from.job, from.checkpoint),
            ),
        ),
        ("profile", view.profile.clone()),
        (
            "limits",
            format!(
                "{} CPUs, {} memory, {} pids, network {}",
                view.limits.cpus, view.limits.memory, view.limits.pids, view.limits.network
            ),
        ),
        (
            "created",
            format!("{} ago", format_age(now - view.created_at)),
        ),
        (
            "last activity",
            format!("{} ago", format_age(now - view.last_activity_at)),
        ),
    ];
    if let Some(sandbox) = &row.sandbox {
        items.push(("container", sandbox.status.clone()));
    }
    if let Some((ahead, behind)) = row.ahead_behind {
        items.push((
            "ahead / behind",
            format!("{ahead} commit(s) ahead of the base, {behind} behind it"),
        ));
    }
    if let Some(code) = view.exit_code {
        items.push(("last exit code", code.to_string()));
    }
    if let Some(error) = &view.sync_error {
        items.push(("sync error", error.clone()));
    }
    for port in &view.ports {
        items.push((
            "port",
            serde_json::to_string(port).unwrap_or_else(|_| "?".into()),
        ));
    }
    let mut out = String::from(r#"<dl class="fields">"#);
    for (name, value) in items {
        let _ = write!(out, "<dt>{name}</dt><dd>{}</dd>", esc(&value));
    }
    out.push_str("</dl>");
    out
}

fn actions(id: &str, csrf: &str, paused: bool) -> String {
    let id_url = seg(id);
    // One of pause and resume, as the job is now.
    let (action, button, hint) = if paused {
        ("resume", "Resume", "thaws its processes.")
    } else {
        (
            "pause",
            "Pause",
            "freezes its processes in place (memory kept, no CPU, no exec) until resumed.",
        )
    };
    format!(
        r#"<section class="actions"><form method="post" action="/jobs/{id_url}/stop">{csrf}<button type="submit" id="stop">Stop</button> <span class="hint">stops what runs; the job stays (a running job becomes failed).</span></form>
<form method="post" action="/jobs/{id_url}/{action}">{csrf}<button type="submit" id="{action}">{button}</button> <span class="hint">{hint}</span></form>
<form method="post" action="/jobs/{id_url}/remove">{csrf}<label>branch <select name="branch"><option value="default">delete only without commits</option><option value="keep">keep</option><option value="delete">delete</option></select></label> <label><input type="checkbox" name="force" value="on"> force</label> <button type="submit" class="danger" id="remove">Remove</button>
<p class="hint">Before removing, paddock saves uncommitted work as <code>refs/paddock/wip/{id_html}</code> in its wip store of your repository (no job can read it; the answer says how to fetch it) and refuses to remove the job when that snapshot fails (unless forced). The branch is kept when it has commits, unless you choose to delete it.</p></form></section>"#,
        csrf = csrf_field(csrf),
        id_html = esc(id),
    )
}

fn exec_table(execs: &[ExecInfo], now: DateTime<Utc>) -> String {
    let mut out = String::from(
        r#"<table class="execs" id="execs"><thead><tr><th>exec</th><th>command</th><th>state</th><th>exit code</th><th>duration</th><th>ran on</th><th>started</th></tr></thead><tbody>"#,
    );
    for exec in execs.iter().rev() {
        let state = match exec.state {
            ExecState::Running => "running",
            ExecState::Finished => "finished",
            ExecState::Lost => "lost",
        };
        let exit = match (&exec.result, &exec.error) {
            (Some(result), _) if result.timed_out => format!("{} (timed out)", result.exit_code),
            (Some(result), _) => result.exit_code.to_string(),
            (None, Some(error)) => format!("error: {error}"),
            (None, None) => "—".into(),
        };
        let duration = exec.result.as_ref().map_or_else(
            || "—".to_string(),
            |r| {
                format!(
                    "{:.1}s",
                    std::time::Duration::from_millis(r.duration_ms).as_secs_f64()
                )
            },
        );
        // The exec's meta: where it ran and under which limits.
        let ran_on = exec
            .result
            .as_ref()
            .and_then(|r| r.meta.as_ref())
            .map_or_else(
                || "—".to_string(),
                |m| {
                    format!(
                        "{} · {} CPUs · {} · pids {} · network {}",
                        m.runtime, m.limits.cpus, m.limits.memory, m.limits.pids, m.limits.network
                    )
                },
            );
        let _ = write!(
            out,
            "<tr><td><code>{}</code></td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ago</td></tr>",
            esc(&exec.id),
            esc(&exec.command.join(" ")),
            state,
            esc(&exit),
            duration,
            esc(&ran_on),
            format_age(now - exec.started_at)
        );
    }
    out.push_str("</tbody></table>");
    out
}

/// The text of an exec's output log (NDJSON `{"stream", "data"}` lines), as written.
pub fn output_text(ndjson: &[u8]) -> String {
    let mut text = String::new();
    for line in ndjson.split(|b| *b == b'\n') {
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(line)
            && let Some(data) = value.get("data").and_then(|d| d.as_str())
        {
            text.push_str(data);
        }
    }
    text
}
