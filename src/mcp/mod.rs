//! `paddock mcp`: the Model Context Protocol over stdio, so an agent (Claude Desktop, Claude
//! Code, any MCP client) can make jobs, run commands in them and read and write their files.
//!
//! The transport is the MCP stdio transport: one JSON-RPC 2.0 message per line on stdin and
//! stdout (stdout carries nothing else; logs go to stderr). The server answers `initialize`
//! (protocol version [`PROTOCOL_VERSION`], or the client's when it is one of
//! [`SUPPORTED_VERSIONS`]), `ping`, `tools/list` and `tools/call`, and ignores notifications.
//! Protocol errors are JSON-RPC errors (-32700 parse error, -32600 invalid request, -32601
//! unknown method, -32602 bad params: an unknown tool or arguments that do not fit its
//! schema); a tool that fails answers a result with `isError: true`. A bad message never ends
//! the session: the server answers it and reads the next line.
//!
//! The tools (`tools`) call only [`Operations`], so they work with and without a daemon, like
//! every command; an agent works only in the jobs its session created unless the server was
//! started with `--all-jobs`.

use serde_json::{Value, json};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt};

use crate::ops::Operations;

mod lanes;
mod session;
mod tools;

pub use session::{SESSION_LABEL, Session};

/// The protocol version this server speaks by default (the newest).
pub const PROTOCOL_VERSION: &str = "2025-11-25";
/// The versions this server speaks, newest first. What differs for a tools-only server:
/// from 2025-11-25, arguments that do not fit a tool's input schema are a tool execution
/// error (an `isError` result the model can correct from), not a JSON-RPC -32602; and
/// `serverInfo` carries a `description`.
pub const SUPPORTED_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// The first version that answers bad tool arguments with an `isError` result.
const INPUT_ERRORS_AS_RESULTS: &str = "2025-11-25";

/// A JSON-RPC error: its code and message.
#[derive(Debug)]
pub(crate) struct RpcError {
    code: i64,
    message: String,
    /// Arguments that do not fit a tool's schema (a tool execution error from 2025-11-25).
    tool_input: bool,
}

pub(crate) const PARSE_ERROR: i64 = -32700;
pub(crate) const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;

impl RpcError {
    pub(crate) fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            tool_input: false,
        }
    }

    /// Arguments that do not fit a tool's input schema.
    pub(crate) fn tool_input(message: impl Into<String>) -> RpcError {
        RpcError {
            tool_input: true,
            ..RpcError::new(INVALID_PARAMS, message)
        }
    }
}

fn response(id: &Value, outcome: Result<Value, RpcError>) -> Value {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": error.code, "message": error.message},
        }),
    }
}

/// Serves one session: reads messages from `input` until it ends, answers on `output`.
pub async fn serve(
    ops: &impl Operations,
    session: &Session,
    input: impl AsyncBufRead + Unpin,
    mut output: impl AsyncWrite + Unpin,
) -> std::io::Result<()> {
    let mut lines = input.lines();
    // The version `initialize` agreed on (dates compare as strings); none before it.
    let mut version: Option<&'static str> = None;
    while let Some(line) = lines.next_line().await? {
        if line.trim().is_empty() {
            continue;
        }
        if let Some(answer) = handle_message(ops, session, &mut version, &line).await {
            let mut text = answer.to_string();
            text.push('\n');
            output.write_all(text.as_bytes()).await?;
            output.flush().await?;
        }
    }
    Ok(())
}

/// The answer to one message, or none (a notification, or a response from the client):
/// the stdio transport's lines and the HTTP transport's bodies alike.
pub async fn handle_message(
    ops: &impl Operations,
    session: &Session,
    version: &mut Option<&'static str>,
    line: &str,
) -> Option<Value> {
    let message: Value = match serde_json::from_str(line) {
        Ok(message) => message,
        Err(error) => {
            let error = RpcError::new(PARSE_ERROR, format!("parse error: {error}"));
            return Some(response(&Value::Null, Err(error)));
        }
    };
    let Some(object) = message.as_object() else {
        // Batches were removed from the protocol in 2025-06-18.
        let error = RpcError::new(INVALID_REQUEST, "invalid request: expected one JSON object");
        return Some(response(&Value::Null, Err(error)));
    };
    let id = object.get("id").cloned();
    let id_ok = id
        .as_ref()
        .is_none_or(|id| id.is_string() || id.is_i64() || id.is_u64());
    let method = object.get("method").and_then(Value::as_str);
    if method.is_none() && (object.contains_key("result") || object.contains_key("error")) {
        return None; // a response to a request this server never sends
    }
    let (Some(method), true, Some("2.0")) =
        (method, id_ok, object.get("jsonrpc").and_then(Value::as_str))
    else {
        let error = RpcError::new(
            INVALID_REQUEST,
            "invalid request: needs \"jsonrpc\": \"2.0\", a string \"method\" and a string or integer \"id\"",
        );
        let id = id.filter(|_| id_ok).unwrap_or(Value::Null);
        return Some(response(&id, Err(error)));
    };
    let params = object.get("params").cloned().unwrap_or(Value::Null);
    if !(params.is_null() || params.is_object()) {
        let error = RpcError::new(INVALID_PARAMS, "params must be an object");
        return id.map(|id| response(&id, Err(error)));
    }
    // A notification (no id) gets no answer, whatever it is.
    let id = id?;
    let outcome = match method {
        "initialize" => initialize(&params).map(|(agreed, result)| {
            *version = Some(agreed);
            result
        }),
        "ping" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": tools::list()})),
        "tools/call" => match tools::call(ops, session, &params).await {
            // A client that never initialized gets the newest version's behaviour.
            Err(error)
                if error.tool_input
                    && version.unwrap_or(PROTOCOL_VERSION) >= INPUT_ERRORS_AS_RESULTS =>
            {
                Ok(tools::input_error(&error.message))
            }
            outcome => outcome,
        },
        other => Err(RpcError::new(
            METHOD_NOT_FOUND,
            format!("method not found: `{other}`"),
        )),
    };
    Some(response(&id, outcome))
}

/// The version agreed on (the client's when this server speaks it, else the newest) and the
/// answer.
fn initialize(params: &Value) -> Result<(&'static str, Value), RpcError> {
    let Some(asked) = params.get("protocolVersion").and_then(Value::as_str) else {
        return Err(RpcError::new(
            INVALID_PARAMS,
            "initialize needs params.protocolVersion (a string)",
        ));
    };
    let version = SUPPORTED_VERSIONS
        .into_iter()
        .find(|v| *v == asked)
        .unwrap_or(PROTOCOL_VERSION);
    let mut server_info = json!({
        "name": "paddock",
        "title": "paddock",
        "version": env!("CARGO_PKG_VERSION"),
    });
    if version >= "2025-11-25" {
        // Implementation.description, new in 2025-11-25.
        server_info["description"] =
            json!("Git branches, checkouts and sandboxes for coding agents' jobs");
    }
    Ok((
        version,
        json!({
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": false}},
            "serverInfo": server_info,
            "instructions": "paddock gives each task its own git branch, checkout and container. \
                Make a job with job_create (repo = the repository's path), work in it with \
                file_write/file_read/file_list and job_exec (command is an argv array; use \
                [\"sh\", \"-c\", \"...\"] for a shell line; commit with git inside the job), \
                review with job_diff/job_log, and end it with job_remove (the branch keeps \
                committed work). Paths are as the agent sees them (/workspace/...) or relative \
                to the workspace.",
        }),
    ))
}
