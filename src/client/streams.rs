//! The daemon's streamed answers, read as they come: an exec's NDJSON (its id, its output,
//! then its result), a dashboard lease held open, a long GET passed on in chunks, a file's
//! bytes either way, and the Server-Sent Events of `/v1/events`.

use std::future::Future;

use http_body_util::BodyExt;
use hyper::Method;
use serde_json::Value;

use super::{DaemonClient, daemon_error, failed, refusal};
use crate::error::Error;
use crate::output::{OutputSink, StreamKind};
use crate::runtime::exec::StdinReader;
use crate::wire::{ExecResult, FileBytes, FileReader, FileWritten, STDIN_STREAM_TYPE};
use futures_util::StreamExt as _;

/// A request body of a size known up front (a file's PUT): hyper sends it with that
/// `Content-Length`, which the daemon checks the write against.
struct Sized<B> {
    inner: B,
    size: u64,
}

impl<B: hyper::body::Body + Unpin> hyper::body::Body for Sized<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.size)
    }
}

/// A response's body as a reader.
fn body_reader(response: hyper::Response<hyper::body::Incoming>) -> FileReader {
    use futures_util::TryStreamExt as _;
    let stream = response
        .into_body()
        .into_data_stream()
        .map_err(std::io::Error::other);
    Box::pin(tokio_util::io::StreamReader::new(stream))
}

/// A write's JSON answer, or the daemon's refusal.
async fn json_answer(
    response: hyper::Response<hyper::body::Incoming>,
) -> Result<FileWritten, Error> {
    if !response.status().is_success() {
        return Err(refusal(response).await);
    }
    let answer = response
        .into_body()
        .collect()
        .await
        .map_err(|e| failed(e.to_string()))?
        .to_bytes();
    serde_json::from_slice(&answer)
        .map_err(|e| failed(format!("unexpected answer from the daemon: {e}")))
}

impl DaemonClient {
    /// A GET whose success answer streams (a file, a tar); a refusal is the daemon's JSON.
    async fn get_streamed(
        &self,
        path: &str,
        accept: &str,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Error> {
        let empty = http_body_util::Full::new(bytes::Bytes::new())
            .map_err(|never| match never {})
            .boxed_unsync();
        let response = self
            .send_body(
                Method::GET,
                path,
                (empty, "application/octet-stream"),
                accept,
                None,
            )
            .await?;
        if !response.status().is_success() {
            return Err(refusal(response).await);
        }
        Ok(response)
    }

    /// `GET /v1/jobs/{id}/files`: the file's size from its `Content-Length`, then its
    /// bytes as they come (a body that ends short of that size is a cut transfer).
    pub(super) async fn read_file_streamed(&self, path: &str) -> Result<FileBytes, Error> {
        let response = self
            .get_streamed(path, "application/octet-stream, application/json")
            .await?;
        let size = response
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .ok_or_else(|| failed("the daemon sent a file without its size".to_string()))?;
        Ok(FileBytes {
            size,
            reader: body_reader(response),
        })
    }

    /// `GET ...files?tar=true`: a directory's tar as it comes.
    pub(super) async fn read_tar_streamed(&self, path: &str) -> Result<FileReader, Error> {
        let response = self
            .get_streamed(path, "application/x-tar, application/json")
            .await?;
        Ok(body_reader(response))
    }

    /// `PUT ...files?tar=true` of a tar as it is made (chunked: its size is known at its end).
    pub(super) async fn write_tar_streamed(
        &self,
        path: &str,
        tar: FileReader,
    ) -> Result<FileWritten, Error> {
        let frames =
            tokio_util::io::ReaderStream::new(tar).map(|chunk| chunk.map(hyper::body::Frame::data));
        let body = http_body_util::StreamBody::new(frames).boxed_unsync();
        let response = self
            .send_body(
                Method::PUT,
                path,
                (body, "application/x-tar"),
                "application/json",
                None,
            )
            .await?;
        json_answer(response).await
    }

    /// `PUT /v1/jobs/{id}/files` of `bytes`, streamed with its size.
    pub(super) async fn write_file_streamed(
        &self,
        path: &str,
        bytes: FileBytes,
    ) -> Result<FileWritten, Error> {
        let size = bytes.size;
        let reader = tokio::io::AsyncReadExt::take(bytes.reader, size);
        let frames = tokio_util::io::ReaderStream::new(reader)
            .map(|chunk| chunk.map(hyper::body::Frame::data));
        let body = Sized {
            inner: http_body_util::StreamBody::new(frames),
            size,
        }
        .boxed_unsync();
        let response = self
            .send_body(
                Method::PUT,
                path,
                (body, "application/octet-stream"),
                "application/json",
                None,
            )
            .await?;
        json_answer(response).await
    }

    /// An exec with output streamed as it comes (NDJSON), then the result.
    /// With `stdin`, the body is [`STDIN_STREAM_TYPE`]: the options' line, then the input
    /// as it is read (the answer streams back meanwhile).
    pub(super) async fn exec_streamed(
        &self,
        path: &str,
        body: &Value,
        stdin: Option<StdinReader>,
        waiter: Option<&str>,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecResult, Error> {
        let accept = "application/x-ndjson";
        let response = match stdin {
            None => {
                self.send_json(Method::POST, path, Some(body), accept, waiter)
                    .await?
            }
            Some(stdin) => {
                let first = bytes::Bytes::from(format!("{body}\n"));
                let rest = tokio_util::io::ReaderStream::new(stdin);
                let frames = futures_util::stream::once(async { Ok(first) })
                    .chain(rest)
                    .map(|chunk| chunk.map(hyper::body::Frame::data));
                let streamed = http_body_util::StreamBody::new(frames).boxed_unsync();
                self.send_body(
                    Method::POST,
                    path,
                    (streamed, STDIN_STREAM_TYPE),
                    accept,
                    waiter,
                )
                .await?
            }
        };
        if !response.status().is_success() {
            return Err(refusal(response).await);
        }
        let mut body = response.into_body();
        let mut pending = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| failed(format!("exec stream broke off: {e}")))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            pending.extend_from_slice(&data);
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let value: Value = serde_json::from_slice(&line)
                    .map_err(|e| failed(format!("bad exec stream line: {e}")))?;
                if let Some(exec) = value["exec"].as_str() {
                    sink.started(exec);
                } else if let Some(stream) = value["stream"].as_str() {
                    let kind = if stream == "stderr" {
                        StreamKind::Stderr
                    } else {
                        StreamKind::Stdout
                    };
                    // A chunk that is not UTF-8 has its exact bytes beside the text.
                    let exact = value["base64"].as_str().and_then(|encoded| {
                        use base64::Engine as _;
                        base64::engine::general_purpose::STANDARD
                            .decode(encoded)
                            .ok()
                    });
                    match exact {
                        Some(bytes) => sink.write(kind, &bytes),
                        None => {
                            sink.write(kind, value["data"].as_str().unwrap_or_default().as_bytes())
                        }
                    }
                } else if value.get("result").is_some() {
                    return serde_json::from_value(value["result"].clone())
                        .map_err(|e| failed(format!("bad exec result: {e}")));
                } else if value.get("error").is_some() {
                    return Err(daemon_error(&value));
                }
            }
        }
        Err(failed("the exec stream ended without a result"))
    }

    /// Asks the daemon for a dashboard listener (`POST /v1/dashboard`): the lease, once the
    /// first line comes, then `on_lease` runs and this waits until the daemon ends the lease
    /// (it stops) or `until` resolves; the listener closes when this returns.
    pub async fn dashboard(
        &self,
        request: &crate::wire::DashboardRequest,
        on_lease: impl FnOnce(&crate::wire::DashboardLease),
        until: impl Future<Output = ()>,
    ) -> Result<(), Error> {
        let body = serde_json::to_value(request).expect("a dashboard request serializes");
        let response = self
            .send(
                Method::POST,
                "/v1/dashboard",
                Some(&body),
                "application/x-ndjson",
            )
            .await?;
        if !response.status().is_success() {
            return Err(refusal(response).await);
        }
        let mut body = response.into_body();
        let mut pending = Vec::new();
        let lease = loop {
            let Some(frame) = body.frame().await else {
                return Err(failed("the daemon closed the dashboard before its address"));
            };
            let frame = frame.map_err(|e| failed(format!("the dashboard lease broke off: {e}")))?;
            if let Ok(data) = frame.into_data() {
                pending.extend_from_slice(&data);
            }
            if let Some(end) = pending.iter().position(|b| *b == b'\n') {
                break serde_json::from_slice::<crate::wire::DashboardLease>(&pending[..end])
                    .map_err(|e| failed(format!("bad dashboard lease: {e}")))?;
            }
        };
        on_lease(&lease);
        let held = async { while let Some(Ok(_)) = body.frame().await {} };
        tokio::select! {
            () = held => {}
            () = until => {}
        }
        Ok(())
    }

    /// A GET whose body is passed on in chunks as it comes (a stream that may be long).
    pub(super) async fn stream(
        &self,
        path: &str,
        accept: &str,
        chunk: &mut (dyn FnMut(&[u8]) -> bool + Send),
    ) -> Result<(), Error> {
        let response = self.send(Method::GET, path, None, accept).await?;
        if !response.status().is_success() {
            return Err(refusal(response).await);
        }
        let mut body = response.into_body();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| failed(format!("the stream broke off: {e}")))?;
            if let Ok(data) = frame.into_data()
                && !chunk(&data)
            {
                break;
            }
        }
        Ok(())
    }
}

/// Splits Server-Sent Events into their `data:` payloads (one event per blank line), and
/// keeps the last `id:` seen (where a reconnect resumes).
#[derive(Default)]
pub(super) struct SseParser {
    pending: Vec<u8>,
    data: String,
    pub(super) last_id: Option<u64>,
}

impl SseParser {
    /// Feeds bytes; returns the data of each event completed by them.
    pub(super) fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(bytes);
        let mut done = Vec::new();
        while let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty() {
                    done.push(std::mem::take(&mut self.data));
                }
            } else if let Some(id) = line.strip_prefix("id:") {
                self.last_id = id.trim().parse().ok().or(self.last_id);
            } else if let Some(data) = line.strip_prefix("data:") {
                if !self.data.is_empty() {
                    self.data.push('\n');
                }
                self.data.push_str(data.strip_prefix(' ').unwrap_or(data));
            }
        }
        done
    }
}
