//! The API's streamed answers: an exec (run in its own task, so it outlives its client; its
//! id first), an exec's persisted output from an offset (following until it ends), and the
//! event stream (Server-Sent Events replayed from the persisted log, then live).

use std::convert::Infallible;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use tokio_stream::StreamExt;

use super::ids::JobIdPath;
use super::{ApiError, ApiJson, ApiResult, ApiState, EXEC_MARGIN, with_deadline};
use crate::engine::{EventQuery, ExecOptions};
use crate::output::{OutputSink, StreamKind};
use crate::wire::{ExecResult, STDIN_STREAM_TYPE};

/// An event stream ends after this; the client reconnects with `Last-Event-ID` and misses
/// nothing.
const EVENTS_DEADLINE: Duration = Duration::from_secs(3600);
/// The response header naming an exec's id.
const EXEC_HEADER: &str = "x-paddock-exec";

/// What the task running an exec tells the request: the exec's id, output lines, the end.
enum ExecMessage {
    Started(String),
    Line(String),
    Done(ApiResult<ExecResult>),
}

/// Passes the exec's id, and its output as NDJSON lines when the client streams.
struct ChannelSink {
    tx: tokio::sync::mpsc::UnboundedSender<ExecMessage>,
    lines: bool,
}

impl OutputSink for ChannelSink {
    fn write(&mut self, stream: StreamKind, bytes: &[u8]) {
        if !self.lines {
            return;
        }
        let line = crate::output::output_line(stream, bytes);
        let _ = self.tx.send(ExecMessage::Line(format!("{line}\n")));
    }

    fn started(&mut self, exec: &str) {
        let _ = self.tx.send(ExecMessage::Started(exec.to_string()));
    }
}

/// The exec's options: the JSON body, or with [`STDIN_STREAM_TYPE`] the body's first line,
/// the rest of the body then streaming to the command's stdin as it arrives (never held
/// whole: its size is bounded by what the command reads).
async fn exec_options(request: axum::extract::Request) -> ApiResult<ExecOptions> {
    use axum::extract::FromRequest as _;
    let streamed = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(STDIN_STREAM_TYPE));
    if !streamed {
        let ApiJson(options) = ApiJson::<ExecOptions>::from_request(request, &()).await?;
        return Ok(options);
    }
    let mut body = request.into_body().into_data_stream();
    let mut head = Vec::new();
    let rest = loop {
        let Some(chunk) = body.next().await else {
            return Err(ApiError::bad_request(
                "a streamed exec's body must start with its options as one JSON line",
            ));
        };
        let chunk = chunk.map_err(|e| ApiError::bad_request(format!("the body broke off: {e}")))?;
        if let Some(end) = chunk.iter().position(|b| *b == b'\n') {
            head.extend_from_slice(&chunk[..end]);
            break chunk.slice(end + 1..);
        }
        head.extend_from_slice(&chunk);
        if head.len() > super::BODY_LIMIT {
            return Err(ApiError::bad_request(
                "a streamed exec's options line is over 4 MiB",
            ));
        }
    };
    let mut options: ExecOptions = serde_json::from_slice(&head)
        .map_err(|e| ApiError::bad_request(format!("the exec's options line: {e}")))?;
    if options.stdin.is_some() || options.stdin_base64.is_some() {
        return Err(ApiError::bad_request(
            "a streamed exec's stdin is its body: its options take no `stdin` or `stdin_base64`",
        ));
    }
    let chunks = tokio_stream::once(Ok::<_, std::io::Error>(rest))
        .chain(body.map(|chunk| chunk.map_err(std::io::Error::other)));
    options.stdin_stream = crate::runtime::exec::ExecStdin::reader(Box::pin(
        tokio_util::io::StreamReader::new(chunks),
    ));
    Ok(options)
}

/// The exec's task ended without saying how (it panicked).
fn no_result() -> ApiError {
    ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        code: "internal",
        message: "the exec ended without a result".into(),
        retry_after: None,
    }
}

/// Runs the exec in its own task, so it goes on to its end (and its output stays readable
/// under its id) when the client goes away. Answers once the exec has its id: errors before
/// that get their status; the id is the `X-Paddock-Exec` header (and, streaming, the first
/// line).
pub(super) async fn exec_job(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
    request: axum::extract::Request,
) -> ApiResult<Response> {
    let headers = request.headers().clone();
    let mut options = exec_options(request).await?;
    options.waiter = super::waiter_tag(&headers);
    if options.cmd.is_empty() {
        return Err(ApiError::bad_request("`cmd` must name a program"));
    }
    let record = state.paddock.load(&id).map_err(ApiError::from)?;
    // The exec may first wait for an exec slot, for up to `admission.max_wait`.
    let slot_wait = state
        .paddock
        .admission()
        .map_or(Duration::ZERO, |admission| admission.budget().max_wait());
    let deadline = options.timeout.map_or(record.limits.timeout.0, |t| t.0)
        + record.limits.grace.0
        + EXEC_MARGIN
        + slot_wait;
    let streaming = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/x-ndjson"));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<ExecMessage>();
    let task_state = state.clone();
    tokio::spawn(async move {
        let started = Instant::now();
        let mut sink = ChannelSink {
            tx: tx.clone(),
            lines: streaming,
        };
        let result =
            with_deadline(deadline, task_state.paddock.exec(&id, options, &mut sink)).await;
        task_state.metrics.observe_exec(started.elapsed());
        let _ = tx.send(ExecMessage::Done(result));
    });
    let exec = match rx.recv().await {
        Some(ExecMessage::Started(exec)) => exec,
        Some(ExecMessage::Done(result)) => return Ok(axum::Json(result?).into_response()),
        Some(ExecMessage::Line(_)) | None => {
            return Err(no_result());
        }
    };
    let exec_header = HeaderValue::from_str(&exec).expect("exec ids are header-safe");
    if !streaming {
        while let Some(message) = rx.recv().await {
            if let ExecMessage::Done(result) = message {
                let mut response = axum::Json(result?).into_response();
                response.headers_mut().insert(EXEC_HEADER, exec_header);
                return Ok(response);
            }
        }
        return Err(no_result());
    }
    let first = format!("{}\n", json!({"exec": exec}));
    let rest =
        tokio_stream::wrappers::UnboundedReceiverStream::new(rx).map(|message| match message {
            ExecMessage::Line(line) => line,
            ExecMessage::Started(exec) => format!("{}\n", json!({"exec": exec})),
            ExecMessage::Done(Ok(result)) => format!("{}\n", json!({"result": result})),
            ExecMessage::Done(Err(error)) => format!(
                "{}\n",
                json!({"error": {"code": error.code, "message": error.message}})
            ),
        });
    let stream = tokio_stream::once(first)
        .chain(rest)
        .map(Ok::<_, Infallible>);
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .header(EXEC_HEADER, exec_header)
        .body(Body::from_stream(stream))
        .expect("a streaming response builds"))
}

pub(super) async fn list_execs(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
) -> ApiResult<Response> {
    Ok(axum::Json(state.paddock.execs(&id)?).into_response())
}

pub(super) async fn show_exec(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
    Path((_, exec)): Path<(String, String)>,
) -> ApiResult<Response> {
    Ok(axum::Json(state.paddock.exec_info(&id, &exec)?).into_response())
}

#[derive(Deserialize)]
pub(super) struct OutputQuery {
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    follow: bool,
}

/// An exec's output log from a byte offset, as NDJSON; following, until the exec ends.
pub(super) async fn exec_output(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
    Path((_, exec)): Path<(String, String)>,
    Query(query): Query<OutputQuery>,
) -> ApiResult<Response> {
    let output = state
        .paddock
        .exec_output_reader(&id, &exec, query.offset, query.follow)?;
    let stream = futures_util::stream::unfold(output, |mut output| async move {
        match output.next_chunk().await {
            Ok(Some(chunk)) => Some((Ok::<_, Infallible>(chunk), output)),
            Ok(None) => None,
            Err(error) => {
                tracing::warn!(%error, "exec output stream ended");
                None
            }
        }
    });
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, "application/x-ndjson")
        .header(
            EXEC_HEADER,
            HeaderValue::from_str(&exec).map_err(|_| ApiError::bad_request("bad exec id"))?,
        )
        .body(Body::from_stream(stream))
        .expect("a streaming response builds"))
}

#[derive(Deserialize)]
pub(super) struct EventsQuery {
    since: Option<u64>,
    job: Option<String>,
    follow: Option<bool>,
}

/// Server-Sent Events from the persisted log: after `Last-Event-ID` (which a reconnecting
/// client sends, so it wins over the URL's `since`) or `since`, then live; each event's SSE
/// id is its id.
pub(super) async fn events(
    State(state): State<ApiState>,
    headers: HeaderMap,
    Query(query): Query<EventsQuery>,
) -> ApiResult<Response> {
    let last_seen = match headers.get("last-event-id") {
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| ApiError::bad_request("Last-Event-ID must be an event id"))?,
        ),
        None => None,
    };
    let query = EventQuery {
        since: last_seen.or(query.since),
        job: match query.job {
            Some(job) => Some(super::ids::parse(&job)?.to_string()),
            None => None,
        },
        follow: query.follow.unwrap_or(true),
    };
    let feed = state.paddock.event_feed(&query, Some(EVENTS_DEADLINE))?;
    // Following, an id-only event first: where the stream starts, so a client that
    // reconnects before any event came (a quiet hour) resumes from there, not from "now".
    let start = query
        .follow
        .then(|| Ok::<_, Infallible>(SseEvent::default().id(feed.position().to_string())));
    let events = futures_util::stream::unfold(feed, |mut feed| async move {
        match feed.next().await {
            Ok(Some(event)) => {
                let data = serde_json::to_string(&event).expect("events serialize");
                let sse = SseEvent::default()
                    .event(event.kind.name())
                    .id(event.id.to_string())
                    .data(data);
                Some((Ok::<_, Infallible>(sse), feed))
            }
            Ok(None) => None,
            Err(error) => {
                tracing::warn!(%error, "event stream ended");
                None
            }
        }
    });
    let stream = futures_util::stream::iter(start).chain(events);
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// `GET /v1/jobs/{id}/logs`: `{"id", "output", "lossy"}` with the job's output log as the
/// string, written out chunk by chunk as it is read (constant memory, whatever the log's
/// size: the daemon never holds the log). Bytes that are not UTF-8 read as U+FFFD and
/// `lossy` is true; each exec's exact bytes stay in its own output (`.../execs/{exec}/output`,
/// lines with `base64`).
pub(super) async fn logs_job(
    State(state): State<ApiState>,
    JobIdPath(id): JobIdPath,
) -> ApiResult<Response> {
    let path = state.paddock.output_log(&id).map_err(ApiError::from)?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, Infallible>>(4);
    let head = format!("{{\"id\":{},\"output\":\"", json!(id.to_string()));
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let send = |text: String| tx.blocking_send(Ok(bytes::Bytes::from(text))).is_ok();
        if !send(head) {
            return;
        }
        let mut carry = Vec::new();
        let mut lossy = false;
        if let Ok(mut file) = std::fs::File::open(&path) {
            let mut buffer = vec![0; 64 << 10];
            while let Ok(read) = file.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                carry.extend_from_slice(&buffer[..read]);
                let keep = crate::text::incomplete_tail(&carry);
                let rest = carry.split_off(carry.len() - keep);
                lossy |= std::str::from_utf8(&carry).is_err();
                if !send(json_fragment(&carry)) {
                    return;
                }
                carry = rest;
            }
        }
        lossy |= std::str::from_utf8(&carry).is_err();
        let _ = send(format!("{}\",\"lossy\":{lossy}}}", json_fragment(&carry)));
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        Body::from_stream(stream),
    )
        .into_response())
}

/// `bytes` as the inside of a JSON string (lossy UTF-8, escaped, no quotes).
fn json_fragment(bytes: &[u8]) -> String {
    let quoted =
        serde_json::to_string(&String::from_utf8_lossy(bytes)).expect("a string serializes");
    quoted[1..quoted.len() - 1].to_string()
}
