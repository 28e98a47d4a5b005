"""Every operation of paddock's API, once: what each method of `Client` and `AsyncClient`
sends (a `Call`) and what its answer is parsed into. The two clients only carry the calls
out, so a sync and an async method can never differ in what they ask.

`ROUTES` names the method for each route of the OpenAPI document (docs/openapi.yaml);
tests/test_surface.py walks the document and fails on a route without one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pydantic

from . import errors, models

# (HTTP method, route of the OpenAPI document) -> the clients' method that calls it.
ROUTES: dict[tuple[str, str], str] = {
    ("GET", "/healthz"): "health",
    ("GET", "/metrics"): "metrics",
    ("POST", "/v1/jobs"): "create",
    ("GET", "/v1/jobs"): "list",
    ("GET", "/v1/admission"): "admission",
    ("GET", "/v1/jobs/{id}"): "show",
    ("DELETE", "/v1/jobs/{id}"): "remove",
    ("POST", "/v1/jobs/{id}/exec"): "exec",
    ("GET", "/v1/jobs/{id}/execs"): "execs",
    ("GET", "/v1/jobs/{id}/execs/{exec}"): "exec_info",
    ("GET", "/v1/jobs/{id}/execs/{exec}/output"): "exec_output",
    ("GET", "/v1/jobs/{id}/diff"): "diff",
    ("GET", "/v1/jobs/{id}/log"): "log",
    ("GET", "/v1/jobs/{id}/logs"): "logs",
    ("POST", "/v1/jobs/{id}/stop"): "stop",
    ("POST", "/v1/jobs/{id}/pause"): "pause",
    ("POST", "/v1/jobs/{id}/resume"): "resume",
    ("POST", "/v1/jobs/{id}/checkpoints"): "checkpoint",
    ("GET", "/v1/jobs/{id}/checkpoints"): "checkpoints",
    ("DELETE", "/v1/jobs/{id}/checkpoints/{name}"): "remove_checkpoint",
    ("POST", "/v1/jobs/{id}/restore"): "restore",
    ("POST", "/v1/jobs/{id}/fork"): "fork",
    ("POST", "/v1/jobs/{id}/network"): "set_network",
    ("GET", "/v1/jobs/{id}/files"): "read_file",
    ("PUT", "/v1/jobs/{id}/files"): "write_file",
    ("POST", "/v1/jobs/{id}/merge"): "merge",
    ("POST", "/v1/jobs/{id}/apply"): "apply",
    ("POST", "/v1/jobs/{id}/push"): "push",
    ("GET", "/v1/conflicts"): "conflicts",
    ("POST", "/v1/sweep"): "sweep",
    ("POST", "/v1/dashboard"): "dashboard",
    ("GET", "/v1/events"): "events",
}

# Routes of another protocol than this SDK's: MCP's Streamable HTTP transport, for the
# official MCP SDK (tests/test_mcp_http.py drives it).
PROTOCOLS: dict[tuple[str, str], str] = {
    ("POST", "/mcp"): "MCP",
    ("GET", "/mcp"): "MCP",
    ("DELETE", "/mcp"): "MCP",
}

# Routes reached by more than one method (a file's bytes, a listing, a directory's tar).
ALSO: dict[str, tuple[str, str]] = {
    "list_files": ("GET", "/v1/jobs/{id}/files"),
    "read_tar": ("GET", "/v1/jobs/{id}/files"),
    "write_tar": ("PUT", "/v1/jobs/{id}/files"),
    "read_file_to": ("GET", "/v1/jobs/{id}/files"),
}


@dataclass
class Call:
    """One request and how its answer is read: `parse` takes the decoded JSON (or the
    text, with `text`)."""

    method: str
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    parse: Any = None
    text: bool = False
    idempotency_key: str | None = None

    @property
    def mutating(self) -> bool:
        # The daemon takes an Idempotency-Key on every POST and DELETE.
        return self.method in ("POST", "DELETE")


def job_path(job: str, *rest: str) -> str:
    parts = [quote(job, safe="")] + [quote(p, safe="") for p in rest]
    return "/v1/jobs/" + "/".join(parts)


def _query(**values: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else value
    return out


def _model(cls: Any) -> Any:
    return cls.model_validate


def _list_of(cls: Any) -> Any:
    return lambda items: [cls.model_validate(item) for item in items]


def _body(cls: Any, fields: dict[str, Any]) -> dict[str, Any]:
    """`fields` checked against the request's model, as the daemon wants them; what does
    not fit is the daemon's own error (`invalid_input`), raised before anything is sent."""
    try:
        checked = cls.model_validate(fields)
    except pydantic.ValidationError as error:
        raise errors.InvalidInput("invalid_input", f"{cls.__name__}: {error}") from error
    return checked.model_dump(mode="json", exclude_none=True, by_alias=True)


def _key(fields: dict[str, Any]) -> str | None:
    return fields.pop("idempotency_key", None)


# --- The JSON operations: each returns a Call. -------------------------------------------


def health() -> Call:
    """Whether the daemon answers: `{"ok": true}`."""
    return Call("GET", "/healthz")


def metrics() -> Call:
    """The daemon's Prometheus metrics, as OpenMetrics text."""
    return Call("GET", "/metrics", text=True)


def create(repo: str, *, idempotency_key: str | None = None, **fields: Any) -> Call:
    """Create a job of the repository at `repo` (an absolute path); the other fields are
    CreateRequest's (`runtime`, `image`, `task`, `memory`, `network`, `allow`, ...)."""
    body = _body(models.CreateRequest, {"repo": repo, **fields})
    return Call("POST", "/v1/jobs", json=body, parse=_model(models.Job), idempotency_key=idempotency_key)


def list(repo: str | None = None) -> Call:  # noqa: A001 - the operation's name
    """Every job (of `repo`, if given)."""
    return Call("GET", "/v1/jobs", params=_query(repo=repo), parse=_list_of(models.Job))


def admission() -> Call:
    """The host budget, what holds it and who waits."""
    return Call("GET", "/v1/admission", parse=_model(models.Admission))


def show(job: str) -> Call:
    """The job with its changes."""
    return Call("GET", job_path(job), parse=_model(models.JobDetails))


def remove(
    job: str,
    *,
    delete_branch: bool | None = None,
    keep_branch: bool | None = None,
    branch_policy: str | None = None,
    force: bool | None = None,
    idempotency_key: str | None = None,
) -> Call:
    """Remove the job as `paddock rm` does (uncommitted work is saved first)."""
    params = _query(
        delete_branch=delete_branch, keep_branch=keep_branch, branch_policy=branch_policy, force=force
    )
    return Call(
        "DELETE", job_path(job), params=params, parse=_model(models.RemoveReport),
        idempotency_key=idempotency_key,
    )


def execs(job: str) -> Call:
    """The job's execs, oldest first."""
    return Call("GET", job_path(job, "execs"), parse=_list_of(models.ExecInfo))


def exec_info(job: str, exec_id: str) -> Call:
    """One exec, running or finished."""
    return Call("GET", job_path(job, "execs", exec_id), parse=_model(models.ExecInfo))


def diff(job: str, *, stat: bool | None = None) -> Call:
    """The job's changes against its base: `{"id", "stat", "diff", "outside_history"}`."""
    return Call("GET", job_path(job, "diff"), params=_query(stat=stat))


def log(job: str) -> Call:
    """The commits on the job's branch since its base."""
    return Call("GET", job_path(job, "log"), parse=_list_of(models.Commit))


def logs(job: str) -> Call:
    """The job's output log: `{"id", "output", "lossy"}`."""
    return Call("GET", job_path(job, "logs"))


def stop(job: str, *, grace: str | None = None, idempotency_key: str | None = None) -> Call:
    """Stop what runs in the job: `{"id", "stopped"}`."""
    return Call("POST", job_path(job, "stop"), json=_query(grace=grace), idempotency_key=idempotency_key)


def pause(job: str, *, idempotency_key: str | None = None) -> Call:
    """Freeze every process of the job."""
    return Call("POST", job_path(job, "pause"), parse=_model(models.PauseAnswer), idempotency_key=idempotency_key)


def resume(job: str, *, idempotency_key: str | None = None) -> Call:
    """Thaw a paused job."""
    return Call("POST", job_path(job, "resume"), parse=_model(models.PauseAnswer), idempotency_key=idempotency_key)


def checkpoint(job: str, *, idempotency_key: str | None = None, **fields: Any) -> Call:
    """Save the job's state as a checkpoint (`name`, optional)."""
    body = _body(models.CheckpointRequest, fields)
    return Call(
        "POST", job_path(job, "checkpoints"), json=body, parse=_model(models.Checkpoint),
        idempotency_key=idempotency_key,
    )


def checkpoints(job: str) -> Call:
    """The job's checkpoints, oldest first."""
    return Call("GET", job_path(job, "checkpoints"), parse=_model(models.CheckpointList))


def remove_checkpoint(job: str, name: str, *, idempotency_key: str | None = None) -> Call:
    """Remove a checkpoint; one already gone answers `removed: false`."""
    return Call(
        "DELETE", job_path(job, "checkpoints", name), parse=_model(models.CheckpointRemoved),
        idempotency_key=idempotency_key,
    )


def restore(job: str, checkpoint: str, *, idempotency_key: str | None = None, **fields: Any) -> Call:
    """Put the job's workspace back to a checkpoint (`branch=True` moves the branch too)."""
    body = _body(models.RestoreRequest, {"checkpoint": checkpoint, **fields})
    return Call(
        "POST", job_path(job, "restore"), json=body, parse=_model(models.RestoreAnswer),
        idempotency_key=idempotency_key,
    )


def fork(job: str, *, idempotency_key: str | None = None, **fields: Any) -> Call:
    """New jobs from a checkpoint of the job (`from_`, `count`, `task`, `no_wait`)."""
    if "from_" in fields:
        fields["from"] = fields.pop("from_")
    body = _body(models.ForkRequest, fields)
    return Call(
        "POST", job_path(job, "fork"), json=body, parse=_model(models.ForkAnswer),
        idempotency_key=idempotency_key,
    )


def set_network(
    job: str,
    *,
    allow: Any = None,
    deny: Any = None,
    network: str | None = None,
    idempotency_key: str | None = None,
) -> Call:
    """Change a running allowlist job's allow-list, from its next connection."""
    body = _query(allow=allow, deny=deny, network=network)
    return Call("POST", job_path(job, "network"), json=body, parse=_model(models.Job), idempotency_key=idempotency_key)


def list_files(job: str, path: str = "", *, user: str | None = None) -> Call:
    """A directory of the job: its entries."""
    params = _query(path=path, list=True, user=user)
    return Call("GET", job_path(job, "files"), params=params, parse=_model(models.FileList))


def merge(job: str, *, idempotency_key: str | None = None, **fields: Any) -> Call:
    """Land the job's branch on a branch of the repository (`into`, `strategy`, ...)."""
    body = _body(models.MergeRequest, fields)
    return Call("POST", job_path(job, "merge"), json=body, parse=_model(models.MergeReport), idempotency_key=idempotency_key)


def apply(job: str, *, idempotency_key: str | None = None) -> Call:
    """Apply the job's changes to the repository's checkout, staged, not committed."""
    return Call("POST", job_path(job, "apply"), parse=_model(models.ApplyReport), idempotency_key=idempotency_key)


def push(job: str, *, idempotency_key: str | None = None, **fields: Any) -> Call:
    """Push exactly the job's branch to a remote of the repository (`remote`, ...)."""
    body = _body(models.PushRequest, fields)
    return Call("POST", job_path(job, "push"), json=body, parse=_model(models.PushReport), idempotency_key=idempotency_key)


def conflicts(jobs: Any = None, *, base: str | None = None, repo: str | None = None) -> Call:
    """Which jobs merge cleanly into their base and which conflict with each other."""
    listed = ",".join(jobs) if jobs is not None and not isinstance(jobs, str) else jobs
    return Call(
        "GET", "/v1/conflicts", params=_query(jobs=listed, base=base, repo=repo),
        parse=_model(models.ConflictsReport),
    )


def sweep(*, dry_run: bool | None = None, idempotency_key: str | None = None) -> Call:
    """Sweep now with the daemon's settings."""
    return Call(
        "POST", "/v1/sweep", params=_query(dry_run=dry_run), parse=_model(models.SweepReport),
        idempotency_key=idempotency_key,
    )


# The operations both clients define from the builders above, by name.
SIMPLE = {
    builder.__name__: builder
    for builder in (
        health, metrics, create, list, admission, show, remove, execs, exec_info, diff, log,
        logs, stop, pause, resume, checkpoint, checkpoints, remove_checkpoint, restore, fork,
        set_network, list_files, merge, apply, push, conflicts, sweep,
    )
}


def exec_body(
    cmd: Any,
    *,
    timeout: str | None = None,
    env: dict[str, str] | None = None,
    workdir: str | None = None,
    user: str | None = None,
    no_wait: bool | None = None,
    resume: bool | None = None,
) -> dict[str, Any]:
    """An ExecRequest without its stdin, checked against the model."""
    argv = [cmd] if isinstance(cmd, str) else [str(part) for part in cmd]
    fields = {
        "cmd": argv, "timeout": timeout, "env": env, "workdir": workdir, "user": user,
        "no_wait": no_wait, "resume": resume,
    }
    return _body(models.ExecRequest, {k: v for k, v in fields.items() if v is not None})


# Inline stdin up to this size; above it the body streams (application/x-paddock-exec-stdin).
INLINE_STDIN = 1 << 20


def file_params(path: str, *, user: str | None = None, max: int | None = None, tar: bool = False) -> dict[str, Any]:  # noqa: A002
    return _query(path=path, user=user, max=max, tar=True if tar else None)
