//! The CLI's road to a running daemon: when `paddock serve` answers on this install's socket,
//! job commands go through its HTTP API (so its events, metrics and create bound see them);
//! otherwise the CLI calls the library directly. Both roads end in the same `Paddock`
//! methods, so the results are the same. `PADDOCK_NO_DAEMON=1` forces the direct road.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::engine::Error;
use crate::runtime::exec::{ExecResult, OutputSink, StreamKind};
use crate::store::PaddockHome;

/// A connection target: the daemon's Unix socket.
pub struct DaemonClient {
    socket: PathBuf,
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
        matches!(probe, Ok(Ok(_))).then_some(DaemonClient { socket })
    }

    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        accept: &str,
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
        let payload = body.map(|b| b.to_string()).unwrap_or_default();
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "paddock")
            .header("content-type", "application/json")
            .header("accept", accept)
            .body(Full::new(Bytes::from(payload)))
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
        let response = self.send(method, path, body, "application/json").await?;
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

    /// An exec with output streamed as it comes (NDJSON), then the result.
    pub async fn exec(
        &self,
        path: &str,
        body: &Value,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecResult, Error> {
        let response = self
            .send(Method::POST, path, Some(body), "application/x-ndjson")
            .await?;
        if !response.status().is_success() {
            let bytes = read_body(response).await?;
            return Err(daemon_error(
                &serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            ));
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
                if let Some(stream) = value["stream"].as_str() {
                    let kind = if stream == "stderr" {
                        StreamKind::Stderr
                    } else {
                        StreamKind::Stdout
                    };
                    sink.write(kind, value["data"].as_str().unwrap_or_default().as_bytes());
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

/// Which way a CLI command goes: into the library, or through the daemon's API.
pub enum Road<'a> {
    Direct(&'a crate::engine::Paddock),
    Daemon(DaemonClient),
}

/// The profile settings of this process's `PADDOCK_*` variables, which the daemon would not
/// see: sent as fields, where they rank as they would here (above the repo file).
fn env_overrides(layer: &mut crate::config::ProfileLayer) {
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

impl Road<'_> {
    pub async fn create(
        &self,
        request: crate::engine::CreateRequest,
    ) -> Result<(crate::engine::JobView, Option<String>), Error> {
        match self {
            Road::Direct(paddock) => {
                let created = paddock.create(request).await?;
                Ok((
                    crate::engine::JobView::from(&created.record),
                    created.warning,
                ))
            }
            Road::Daemon(daemon) => {
                let mut layer = request.overrides.clone();
                env_overrides(&mut layer);
                // The daemon has its own working directory: send an absolute path.
                let repo = std::fs::canonicalize(&request.repo).unwrap_or(request.repo.clone());
                let text = |v: Option<String>| v.map(Value::String).unwrap_or(Value::Null);
                let body = serde_json::json!({
                    "repo": repo,
                    "base": request.base,
                    "agent": request.agent,
                    "task": request.task,
                    "id": request.id,
                    "profile": request.profile,
                    "reuse_branch": request.reuse_branch,
                    "runtime": text(layer.runtime.map(|v| v.to_string())),
                    "image": layer.image,
                    "memory": text(layer.memory.map(|v| v.to_string())),
                    "cpus": text(layer.cpus.map(|v| v.to_string())),
                    "pids": layer.pids,
                    "network": text(layer.network.map(|v| v.to_string())),
                    "timeout": text(layer.timeout.map(|v| v.to_string())),
                });
                let mut value: Value = daemon.call(Method::POST, "/v1/jobs", Some(&body)).await?;
                let warning = value
                    .as_object_mut()
                    .and_then(|o| o.remove("warning"))
                    .and_then(|w| w.as_str().map(str::to_string));
                let view = serde_json::from_value(value)
                    .map_err(|e| failed(format!("unexpected answer from the daemon: {e}")))?;
                Ok((view, warning))
            }
        }
    }

    pub async fn list(&self, repo: Option<&Path>) -> Result<Vec<crate::engine::JobView>, Error> {
        match self {
            Road::Direct(paddock) => Ok(paddock
                .list(repo)
                .await?
                .iter()
                .map(crate::engine::JobView::from)
                .collect()),
            Road::Daemon(daemon) => {
                let path = match repo {
                    Some(repo) => {
                        let repo = std::fs::canonicalize(repo).unwrap_or(repo.to_path_buf());
                        format!("/v1/jobs?repo={}", encode(&repo.display().to_string()))
                    }
                    None => "/v1/jobs".to_string(),
                };
                daemon.call(Method::GET, &path, None).await
            }
        }
    }

    pub async fn show(&self, id: &str) -> Result<crate::engine::JobDetails, Error> {
        match self {
            Road::Direct(paddock) => paddock.show(id).await,
            Road::Daemon(daemon) => {
                daemon
                    .call(Method::GET, &format!("/v1/jobs/{}", encode(id)), None)
                    .await
            }
        }
    }

    pub async fn diff(&self, id: &str, stat: bool) -> Result<String, Error> {
        match self {
            Road::Direct(paddock) => paddock.diff(id, stat).await,
            Road::Daemon(daemon) => {
                let value: Value = daemon
                    .call(
                        Method::GET,
                        &format!("/v1/jobs/{}/diff?stat={stat}", encode(id)),
                        None,
                    )
                    .await?;
                Ok(value["diff"].as_str().unwrap_or_default().to_string())
            }
        }
    }

    pub async fn log(&self, id: &str) -> Result<Vec<crate::git::CommitInfo>, Error> {
        match self {
            Road::Direct(paddock) => paddock.log(id).await,
            Road::Daemon(daemon) => {
                daemon
                    .call(Method::GET, &format!("/v1/jobs/{}/log", encode(id)), None)
                    .await
            }
        }
    }

    pub async fn exec(
        &self,
        id: &str,
        options: crate::engine::ExecOptions,
        sink: &mut dyn OutputSink,
    ) -> Result<ExecResult, Error> {
        match self {
            Road::Direct(paddock) => paddock.exec(id, options, sink).await,
            Road::Daemon(daemon) => {
                let body = serde_json::json!({
                    "cmd": options.cmd,
                    "timeout": options.timeout.map(|t| crate::units::HumanDuration(t).to_string()),
                    "env": options.env,
                    "workdir": options.workdir,
                });
                daemon
                    .exec(&format!("/v1/jobs/{}/exec", encode(id)), &body, sink)
                    .await
            }
        }
    }

    pub async fn remove(
        &self,
        id: &str,
        options: crate::engine::RemoveOptions,
    ) -> Result<crate::engine::RemoveReport, Error> {
        match self {
            Road::Direct(paddock) => paddock.remove(id, options).await,
            Road::Daemon(daemon) => {
                use crate::config::BranchPolicy;
                let policy = match options.branch_policy {
                    BranchPolicy::Delete => "&delete_branch=true",
                    BranchPolicy::Keep => "&keep_branch=true",
                    BranchPolicy::DeleteIfNoCommits => "",
                };
                let path = format!("/v1/jobs/{}?force={}{policy}", encode(id), options.force);
                daemon.call(Method::DELETE, &path, None).await
            }
        }
    }

    pub async fn stop(&self, id: &str, grace: Option<std::time::Duration>) -> Result<bool, Error> {
        match self {
            Road::Direct(paddock) => paddock.stop(id, grace).await,
            Road::Daemon(daemon) => {
                let body = serde_json::json!({
                    "grace": grace.map(|g| crate::units::HumanDuration(g).to_string()),
                });
                let value: Value = daemon
                    .call(
                        Method::POST,
                        &format!("/v1/jobs/{}/stop", encode(id)),
                        Some(&body),
                    )
                    .await?;
                Ok(value["stopped"].as_bool().unwrap_or(false))
            }
        }
    }

    /// `run`: create, exec, then remove as `rm` does (or keep), on either road.
    pub async fn run(
        &self,
        create: crate::engine::CreateRequest,
        exec: crate::engine::ExecOptions,
        keep: bool,
        sink: &mut dyn OutputSink,
    ) -> Result<(crate::engine::RunReport, Option<String>), Error> {
        if let Road::Direct(paddock) = self {
            return paddock.run(create, exec, keep, sink).await;
        }
        let (job, warning) = self.create(create).await?;
        let id = job.id.to_string();
        let result = self.exec(&id, exec, sink).await;
        let job = self.show(&id).await.map(|d| d.view).unwrap_or(job);
        let branch_kept = if keep {
            true
        } else {
            self.remove(&id, crate::engine::RemoveOptions::default())
                .await?
                .branch_kept
        };
        Ok((
            crate::engine::RunReport {
                job,
                result: result?,
                branch_kept,
            },
            warning,
        ))
    }
}
