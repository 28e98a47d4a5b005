//! Live output of commands run in a job: which stream a chunk came from and where it goes.
//! At the bottom of the module graph, so runtimes, the sync, job records (their setup
//! results) and front ends share it.

use serde::{Deserialize, Serialize};

/// Which stream a chunk of output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    Stdout,
    Stderr,
}

/// Receives output as it arrives (the terminal, an HTTP stream), besides the capped copy
/// kept for the result.
pub trait OutputSink: Send {
    fn write(&mut self, stream: StreamKind, bytes: &[u8]);

    /// The exec got its id (`x-...`), before any output: where its output stays readable.
    fn started(&mut self, _exec: &str) {}
}

/// A sink that drops everything (`--json`, where only the result is printed).
pub struct Discard;

impl OutputSink for Discard {
    fn write(&mut self, _: StreamKind, _: &[u8]) {}
}

/// What one exec did. The JSON shape is part of paddock's stable output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecResult {
    pub exit_code: i64,
    pub stdout: String,
    pub stderr: String,
    pub duration_ms: u64,
    pub timed_out: bool,
    /// True when either stream was longer than the cap and was cut in the middle.
    pub truncated: bool,
    pub oom_killed: bool,
    /// Set when the command ran but its work could not be brought into the user's
    /// repository afterwards (the job's branch there stayed where it was).
    #[serde(default)]
    pub sync_error: Option<String>,
    /// The exec's id (`x-...`), under which its output and result stay readable.
    #[serde(default)]
    pub exec_id: Option<String>,
    /// Present when the kept stdout is not UTF-8: its exact bytes, base64 (`stdout` then
    /// shows U+FFFD where a byte was not text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_base64: Option<String>,
    /// The same for stderr.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_base64: Option<String>,
    /// Where and under what limits the command ran; set by the engine's exec (absent in
    /// results recorded before it existed, and in a setup command's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Box<ExecMeta>>,
}

/// What an exec ran on: the runtime, image, paddock's version, the checkout kind and the
/// limits in force for it. Built in one place (the engine's exec) from the job's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecMeta {
    /// `runc`, `runsc` or `process` (later runtimes add their names).
    pub runtime: String,
    /// The job's image; null for the process runtime.
    pub image: Option<String>,
    /// The id (`sha256:...`) of the image the job's container runs; null for the process
    /// runtime, or when the daemon did not say.
    pub image_id: Option<String>,
    /// How the command was started: `exec-server` (the job container's resident exec
    /// server, opt-in with `PADDOCK_EXEC_PATH=exec-server`), `docker-exec` (Docker's exec:
    /// the default, an older container, a remote engine, the server unavailable),
    /// `guest-agent` (a microVM's),
    /// `process`. Absent in results recorded before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec_path: Option<String>,
    pub paddock_version: String,
    /// `worktree` or `overlay`.
    pub checkout: String,
    pub limits: ExecLimits,
}

/// The limits an exec ran under, as the job's record holds them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecLimits {
    pub cpus: String,
    pub memory: String,
    pub pids: u32,
    /// The job's disk limit; null without one.
    pub disk: Option<String>,
    /// `none`, `allowlist` or `open`.
    pub network: String,
    /// The allow-list's entries (empty unless `network` is `allowlist`).
    pub allow: Vec<String>,
}

/// One chunk of a command's output as a JSON line's object: `{"stream", "data"}`, plus
/// `"base64"` with the exact bytes when they are not UTF-8 (a chunk may also end inside a
/// character), so `data`'s U+FFFD replacements hide nothing.
pub fn output_line(stream: StreamKind, bytes: &[u8]) -> serde_json::Value {
    let name = match stream {
        StreamKind::Stdout => "stdout",
        StreamKind::Stderr => "stderr",
    };
    match std::str::from_utf8(bytes) {
        Ok(text) => serde_json::json!({"stream": name, "data": text}),
        Err(_) => {
            use base64::Engine as _;
            serde_json::json!({
                "stream": name,
                "data": String::from_utf8_lossy(bytes),
                "base64": base64::engine::general_purpose::STANDARD.encode(bytes),
            })
        }
    }
}
