//! The daemon client: [`Operations`] over a running `paddock serve`'s HTTP API on this
//! install's socket. When the daemon answers, the CLI's job commands go through it (so its
//! events, metrics and create bound see them); otherwise the CLI uses the engine itself.
//! Both end in the same `Paddock` methods, so the results are the same.
//! `PADDOCK_NO_DAEMON=1` forces the engine.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::config::BranchPolicy;
use crate::error::Error;
use crate::ops::Operations;
use crate::output::OutputSink;
use crate::store::PaddockHome;
use crate::wire::{
    AdmissionView, ApplyReport, CheckpointList, CheckpointRemoved, CheckpointRequest,
    CheckpointView, CommitInfo, ConflictsQuery, ConflictsReport, CreateRequest, Event, EventQuery,
    ExecInfo, ExecOptions, ExecResult, ExecUser, FileBytes, FileList, FileReader, FileWritten,
    ForkAnswer, ForkRequest, JobDetails, JobDiff, JobView, MergeReport, MergeRequest,
    NetworkChange, PauseAnswer, PushReport, PushRequest, RemoveOptions, RemoveReport,
    RestoreAnswer, RestoreRequest,
};

mod streams;
use streams::SseParser;

/// The body of `POST /v1/jobs` for `request` as this process would run it: the CLI's
/// environment overrides folded in, and the repository as an absolute path (the daemon has
/// its own environment and working directory). A CLI without a daemon hashes the same body
/// for its idempotency key, so a key names one job whichever way the create went.
pub fn create_body(mut request: CreateRequest) -> Value {
    env_overrides(&mut request);
    request.repo = std::fs::canonicalize(&request.repo).unwrap_or(request.repo);
    serde_json::to_value(&request).expect("a create request serializes")
}

/// A connection target: the daemon's Unix socket.
pub struct DaemonClient {
    socket: PathBuf,
    /// Sent as `Idempotency-Key` with every mutating request (the CLI's `--idempotency-key`).
    idempotency_key: Option<String>,
}

fn failed(message: impl Into<String>) -> Error {
    Error::Daemon {
        kind: crate::ErrorKind::Internal,
        message: message.into(),
    }
}

impl DaemonClient {
    /// The daemon of this install, if one answers on its socket.
    pub async fn connect(home: &PaddockHome) -> Option<DaemonClient> {
        if std::env::var("PADDOCK_NO_DAEMON").as_deref() == Ok("1") {
            return None;
        }
        let socket = home.root().join("paddock.sock");
        if !socket.exists() {
            return None;
        }
        let probe = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            tokio::net::UnixStream::connect(&socket),
        )
        .await;
        matches!(probe, Ok(Ok(_))).then_some(DaemonClient {
            socket,
            idempotency_key: None,
        })
    }

    /// Sends `key` as the `Idempotency-Key` of every POST and DELETE.
    pub fn with_idempotency_key(mut self, key: Option<String>) -> DaemonClient {
        self.idempotency_key = key;
        self
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        accept: &str,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Error> {
        self.send_json(method, path, body, accept, None).await
    }

    /// A JSON request; `waiter` is sent as `X-Paddock-Waiter` (the tag a create or exec that
    /// waits for room is found by in `GET /v1/admission`).
    async fn send_json(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        accept: &str,
        waiter: Option<&str>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Error> {
        let payload = body
            .map(std::string::ToString::to_string)
            .unwrap_or_default();
        let body = (Bytes::from(payload), "application/json");
        self.send_request(method, path, body, accept, waiter).await
    }

    /// A request whose body is `body.0` of content type `body.1` (a file's raw bytes).
    async fn send_request(
        &self,
        method: Method,
        path: &str,
        body: (Bytes, &str),
        accept: &str,
        waiter: Option<&str>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Error> {
        let full = Full::new(body.0)
            .map_err(|never| match never {})
            .boxed_unsync();
        self.send_body(method, path, (full, body.1), accept, waiter)
            .await
    }

    /// A request whose body streams (an exec's standard input after its options).
    async fn send_body(
        &self,
        method: Method,
        path: &str,
        body: (UnsyncBoxBody<Bytes, std::io::Error>, &str),
        accept: &str,
        waiter: Option<&str>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Error> {
        let stream = tokio::net::UnixStream::connect(&self.socket)
            .await
            .map_err(|e| {
                failed(format!(
                    "cannot reach the daemon at `{}`: {e}",
                    self.socket.display()
                ))
            })?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| failed(e.to_string()))?;
        tokio::spawn(connection);
        let keyed = matches!(method, Method::POST | Method::DELETE);
        let mut request = Request::builder();
        if let (true, Some(key)) = (keyed, &self.idempotency_key) {
            request = request.header("idempotency-key", key);
        }
        if let Some(waiter) = waiter {
            request = request.header(crate::wire::WAITER_HEADER, waiter);
        }
        let request = request
            .method(method)
            .uri(path)
            .header("host", "paddock")
            .header("content-type", body.1)
            .header("accept", accept)
            .body(body.0)
            .map_err(|e| failed(e.to_string()))?;
        sender
            .send_request(request)
            .await
            .map_err(|e| failed(e.to_string()))
    }

    /// One JSON request; an error body becomes [`Error::Daemon`].
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<T, Error> {
        self.call_waiting(method, path, body, None).await
    }

    /// [`call`](Self::call) with the caller's waiter tag (see [`DaemonClient::send_json`]).
    async fn call_waiting<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        waiter: Option<&str>,
    ) -> Result<T, Error> {
        let response = self
            .send_json(method, path, body, "application/json", waiter)
            .await?;
        let ok = response.status().is_success();
        let bytes = read_body(response).await?;
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| failed(format!("the daemon sent invalid JSON: {e}")))?;
        if !ok {
            return Err(daemon_error(&value));
        }
        serde_json::from_value(value)
            .map_err(|e| failed(format!("unexpected answer from the daemon: {e}")))
    }
}

async fn read_body(response: hyper::Response<hyper::body::Incoming>) -> Result<Bytes, Error> {
    Ok(response
        .into_body()
        .collect()
        .await
        .map_err(|e| failed(e.to_string()))?
        .to_bytes())
}

fn daemon_error(value: &Value) -> Error {
    Error::Daemon {
        kind: crate::ErrorKind::from_code(value["error"]["code"].as_str().unwrap_or("internal")),
        message: value["error"]["message"]
            .as_str()
            .unwrap_or("the daemon failed without a message")
            .to_string(),
    }
}

/// The profile settings of this process's `PADDOCK_*` variables, which the daemon would not
/// see: sent as fields, where they rank as they would here (above the repo file).
fn env_overrides(layer: &mut CreateRequest) {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    macro_rules! fill {
        ($field:ident, $var:literal) => {
            if layer.$field.is_none() {
                layer.$field = var($var).and_then(|v| v.parse().ok());
            }
        };
    }
    fill!(image, "PADDOCK_IMAGE");
    fill!(runtime, "PADDOCK_RUNTIME");
    fill!(memory, "PADDOCK_MEMORY");
    fill!(cpus, "PADDOCK_CPUS");
    fill!(pids, "PADDOCK_PIDS");
    fill!(network, "PADDOCK_NETWORK");
    fill!(timeout, "PADDOCK_TIMEOUT");
}

fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Operations for DaemonClient {
    async fn create(&self, request: CreateRequest) -> Result<(JobView, Option<String>), Error> {
        let waiter = request.waiter.clone();
        let body = create_body(request);
        let mut value: Value = self
            .call_waiting(Method::POST, "/v1/jobs", Some(&body), waiter.as_deref())
            .await?;
        let warning = value
            .as_object_mut()
            .and_then(|o| o.remove("warning"))
            .and_then(|w| w.as_str().map(str::to_string));
        let view = serde_json::from_value(value)
            .map_err(|e| failed(format!("unexpected answer from the daemon: {e}")))?;
        Ok((view, warning))
    }

    async fn admission(&self) -> Result<AdmissionView, Error> {
        self.call(Method::GET, "/v1/admission", None).await
    }

    async fn list(&self, repo: Option<&Path>) -> Result<Vec<JobView>, Error> {
        let path = match repo {
            Some(repo) => {
                let repo = std::fs::canonicalize(repo).unwrap_or(repo.to_path_buf());
                format!("/v1/jobs?repo={}", encode(&repo.display().to_string()))
            }
            None => "/v1/jobs".to_string(),
        };
        self.call(Method::GET, &path, None).await
    }

    async fn view(&self, id: &str) -> Result<JobView, Error> {
        Ok(self.show(id).await?.view)
    }

    async fn show(&self, id: &str) -> Result<JobDetails, Error> {
        self.call(Method::GET, &format!("/v1/jobs/{}", encode(id)), None)
            .await
    }

    async fn diff(&self, id: &str, stat: bool) -> Result<JobDiff, Error> {
        self.call(
            Method::GET,
            &format!("/v1/jobs/{}/diff?stat={stat}", encode(id)),
            None,
        )
        .await
    }

    async fn log(&self, id: &str) -> Result<Vec<CommitInfo>, Error> {
        self.call(Method::GET, &format!("/v1/jobs/{}/log", encode(id)), None)
            .await
    }

    async fn exec(
        &self,
        id: &str,
        options: ExecOptions,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecResult, Error> {
        let body = serde_json::to_value(&options).expect("exec options serialize");
        let path = format!("/v1/jobs/{}/exec", encode(id));
        let stdin = options.stdin_stream.take();
        self.exec_streamed(&path, &body, stdin, options.waiter.as_deref(), sink)
            .await
    }

    async fn remove(&self, id: &str, options: RemoveOptions) -> Result<RemoveReport, Error> {
        let policy = match options.branch_policy {
            BranchPolicy::Delete => "&delete_branch=true",
            BranchPolicy::Keep => "&keep_branch=true",
            BranchPolicy::DeleteIfNoCommits => "",
            BranchPolicy::DeleteIfMerged => "&branch_policy=delete-if-merged",
        };
        let path = format!("/v1/jobs/{}?force={}{policy}", encode(id), options.force);
        self.call(Method::DELETE, &path, None).await
    }

    async fn conflicts(&self, query: ConflictsQuery) -> Result<ConflictsReport, Error> {
        let mut path = format!("/v1/conflicts?jobs={}", encode(&query.jobs.join(",")));
        if let Some(base) = &query.base {
            path.push_str(&format!("&base={}", encode(base)));
        }
        if let Some(repo) = &query.repo {
            let repo = std::fs::canonicalize(repo).unwrap_or(repo.clone());
            path.push_str(&format!("&repo={}", encode(&repo.display().to_string())));
        }
        self.call(Method::GET, &path, None).await
    }

    async fn merge(&self, id: &str, request: MergeRequest) -> Result<MergeReport, Error> {
        let body = serde_json::to_value(&request).expect("a merge request serializes");
        let path = format!("/v1/jobs/{}/merge", encode(id));
        self.call(Method::POST, &path, Some(&body)).await
    }

    async fn push(&self, id: &str, request: PushRequest) -> Result<PushReport, Error> {
        let body = serde_json::to_value(&request).expect("a push request serializes");
        let path = format!("/v1/jobs/{}/push", encode(id));
        self.call(Method::POST, &path, Some(&body)).await
    }

    async fn apply(&self, id: &str) -> Result<ApplyReport, Error> {
        let path = format!("/v1/jobs/{}/apply", encode(id));
        self.call(Method::POST, &path, Some(&Value::Null)).await
    }

    async fn set_network(&self, id: &str, change: NetworkChange) -> Result<JobView, Error> {
        let body = serde_json::to_value(&change).expect("a network change serializes");
        self.call(
            Method::POST,
            &format!("/v1/jobs/{}/network", encode(id)),
            Some(&body),
        )
        .await
    }

    async fn events(
        &self,
        query: EventQuery,
        sink: &mut (dyn FnMut(Event) -> bool + Send),
    ) -> Result<(), Error> {
        let mut parser = SseParser::default();
        // A followed stream ends after the daemon's deadline: reconnect after the last id.
        loop {
            let mut path = format!("/v1/events?follow={}", query.follow);
            if let Some(since) = parser.last_id.or(query.since) {
                path.push_str(&format!("&since={since}"));
            }
            if let Some(job) = &query.job {
                path.push_str(&format!("&job={}", encode(job)));
            }
            let mut outcome = Ok(true);
            self.stream(&path, "text/event-stream", &mut |bytes| {
                for data in parser.feed(bytes) {
                    match serde_json::from_str::<Event>(&data) {
                        Ok(event) => {
                            if !sink(event) {
                                outcome = Ok(false);
                                return false;
                            }
                        }
                        Err(e) => {
                            outcome = Err(failed(format!("bad event from the daemon: {e}")));
                            return false;
                        }
                    }
                }
                true
            })
            .await?;
            if !outcome? || !query.follow {
                return Ok(());
            }
            // Never a tight loop against a daemon that ends streams at once.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    async fn execs(&self, id: &str) -> Result<Vec<ExecInfo>, Error> {
        self.call(Method::GET, &format!("/v1/jobs/{}/execs", encode(id)), None)
            .await
    }

    async fn exec_info(&self, id: &str, exec: &str) -> Result<ExecInfo, Error> {
        let path = format!("/v1/jobs/{}/execs/{}", encode(id), encode(exec));
        self.call(Method::GET, &path, None).await
    }

    async fn exec_output(
        &self,
        id: &str,
        exec: &str,
        offset: u64,
        follow: bool,
        sink: &mut (dyn FnMut(&[u8]) + Send),
    ) -> Result<u64, Error> {
        let path = format!(
            "/v1/jobs/{}/execs/{}/output?offset={offset}&follow={follow}",
            encode(id),
            encode(exec)
        );
        let mut next = offset;
        self.stream(&path, "application/x-ndjson", &mut |bytes| {
            next += bytes.len() as u64;
            sink(bytes);
            true
        })
        .await?;
        Ok(next)
    }

    async fn stop(&self, id: &str, grace: Option<std::time::Duration>) -> Result<bool, Error> {
        let body = serde_json::json!({
            "grace": grace.map(|g| crate::units::HumanDuration(g).to_string()),
        });
        let value: Value = self
            .call(
                Method::POST,
                &format!("/v1/jobs/{}/stop", encode(id)),
                Some(&body),
            )
            .await?;
        Ok(value["stopped"].as_bool().unwrap_or(false))
    }

    async fn pause(&self, id: &str) -> Result<PauseAnswer, Error> {
        let route = format!("/v1/jobs/{}/pause", encode(id));
        self.call(Method::POST, &route, None::<&Value>).await
    }

    async fn resume(&self, id: &str) -> Result<PauseAnswer, Error> {
        let route = format!("/v1/jobs/{}/resume", encode(id));
        self.call(Method::POST, &route, None::<&Value>).await
    }

    async fn checkpoint(
        &self,
        id: &str,
        request: CheckpointRequest,
    ) -> Result<CheckpointView, Error> {
        let route = format!("/v1/jobs/{}/checkpoints", encode(id));
        let body = serde_json::to_value(&request).expect("requests serialize");
        self.call(Method::POST, &route, Some(&body)).await
    }

    async fn checkpoints(&self, id: &str) -> Result<CheckpointList, Error> {
        let route = format!("/v1/jobs/{}/checkpoints", encode(id));
        self.call(Method::GET, &route, None::<&Value>).await
    }

    async fn checkpoint_remove(&self, id: &str, name: &str) -> Result<CheckpointRemoved, Error> {
        let route = format!("/v1/jobs/{}/checkpoints/{}", encode(id), encode(name));
        self.call(Method::DELETE, &route, None::<&Value>).await
    }

    async fn restore(&self, id: &str, request: RestoreRequest) -> Result<RestoreAnswer, Error> {
        let route = format!("/v1/jobs/{}/restore", encode(id));
        let body = serde_json::to_value(&request).expect("requests serialize");
        self.call(Method::POST, &route, Some(&body)).await
    }

    async fn fork(&self, id: &str, request: ForkRequest) -> Result<ForkAnswer, Error> {
        let route = format!("/v1/jobs/{}/fork", encode(id));
        let body = serde_json::to_value(&request).expect("requests serialize");
        self.call_waiting(Method::POST, &route, Some(&body), request.waiter.as_deref())
            .await
    }

    async fn read_file(
        &self,
        id: &str,
        path: &str,
        user: ExecUser,
        limit: Option<u64>,
    ) -> Result<FileBytes, Error> {
        let mut route = files_route(id, path, user);
        if let Some(limit) = limit {
            route.push_str(&format!("&max={limit}"));
        }
        self.read_file_streamed(&route).await
    }

    async fn write_file(
        &self,
        id: &str,
        path: &str,
        bytes: FileBytes,
        user: ExecUser,
    ) -> Result<FileWritten, Error> {
        let route = files_route(id, path, user);
        self.write_file_streamed(&route, bytes).await
    }

    async fn read_tar(&self, id: &str, path: &str, user: ExecUser) -> Result<FileReader, Error> {
        let route = format!("{}&tar=true", files_route(id, path, user));
        self.read_tar_streamed(&route).await
    }

    async fn write_tar(
        &self,
        id: &str,
        path: &str,
        tar: FileReader,
        user: ExecUser,
    ) -> Result<FileWritten, Error> {
        let route = format!("{}&tar=true", files_route(id, path, user));
        self.write_tar_streamed(&route, tar).await
    }

    async fn list_files(&self, id: &str, path: &str, user: ExecUser) -> Result<FileList, Error> {
        let route = format!("{}&list=true", files_route(id, path, user));
        self.call(Method::GET, &route, None).await
    }
}

/// `/v1/jobs/{id}/files?path=P`, with `&user=U` for another user than the agent.
fn files_route(id: &str, path: &str, user: ExecUser) -> String {
    let mut route = format!("/v1/jobs/{}/files?path={}", encode(id), encode(path));
    if user != ExecUser::Agent {
        route.push_str(&format!("&user={}", encode(&user.to_string())));
    }
    route
}

/// The daemon's error of a response that is not a success (its JSON body), read whole.
async fn refusal(response: hyper::Response<hyper::body::Incoming>) -> Error {
    match read_body(response).await {
        Ok(bytes) => daemon_error(&serde_json::from_slice(&bytes).unwrap_or(Value::Null)),
        Err(error) => error,
    }
}
