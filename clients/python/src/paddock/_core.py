"""What both clients share: where the daemon is, the headers of a call, reading an answer
into its model or its exception, and the decoders of the streamed answers (an exec's
NDJSON, the events' Server-Sent Events)."""

from __future__ import annotations

import base64
import json
import os
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import httpx

from . import errors, models
from ._ops import Call

# Connecting and each read: a create may wait in the admission queue, so reads are long.
DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=10.0)

# A call with an idempotency key is sent again after a broken connection (the daemon
# answers a repeat with the first answer), at most this many times in all.
ATTEMPTS = 3


def default_socket() -> str:
    """The socket of `paddock serve` as the CLI finds it: `$PADDOCK_HOME/paddock.sock`,
    else the default state root's (`/var/lib/paddock` as root, else
    `$XDG_DATA_HOME/paddock` or `~/.local/share/paddock`)."""
    home = os.environ.get("PADDOCK_HOME")
    if not home and os.geteuid() == 0:
        home = "/var/lib/paddock"
    if not home:
        data = os.environ.get("XDG_DATA_HOME")
        if not data or not os.path.isabs(data):
            data = os.path.expanduser("~/.local/share")
        home = os.path.join(data, "paddock")
    return os.path.join(home, "paddock.sock")


@dataclass
class Target:
    """Where the daemon is: a Unix socket, or a TCP URL with its bearer token."""

    base_url: str
    socket: str | None
    headers: dict[str, str]


def target(socket: str | None, url: str | None, token: str | None, token_file: str | None) -> Target:
    if url is not None:
        if socket is not None:
            raise ValueError("give a socket or a url, not both")
        if token is None and token_file is not None:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
        if not token:
            raise ValueError("a TCP listener needs its token (token= or token_file=)")
        return Target(url.rstrip("/"), None, {"Authorization": f"Bearer {token}"})
    return Target("http://paddock", socket or default_socket(), {})


class Connection:
    """Where a client's requests go, and its httpx client (`_HTTP` and `_TRANSPORT`: the
    sync or the async pair)."""

    _HTTP: Any = httpx.Client
    _TRANSPORT: Any = httpx.HTTPTransport

    def __init__(
        self,
        socket: str | None = None,
        *,
        url: str | None = None,
        token: str | None = None,
        token_file: str | None = None,
        timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
    ) -> None:
        self._target = target(socket, url, token, token_file)
        transport = self._TRANSPORT(uds=self._target.socket) if self._target.socket else None
        self._http = self._HTTP(
            base_url=self._target.base_url,
            transport=transport,
            headers=self._target.headers,
            timeout=timeout,
        )

    @property
    def where(self) -> str:
        """The socket's path or the listener's URL."""
        return self._target.socket or self._target.base_url


def headers_of(call: Call) -> dict[str, str]:
    headers = {"Accept": "application/json"}
    if call.mutating:
        headers["Idempotency-Key"] = call.idempotency_key or f"sdk-{uuid.uuid4()}"
    return headers


def failure(response: httpx.Response, body: bytes) -> errors.PaddockError:
    try:
        parsed: Any = json.loads(body) if body else None
    except ValueError:
        parsed = body[:500].decode("utf-8", "replace")
    return errors.from_answer(response.status_code, parsed, response.headers.get("retry-after"))


def retryable(error: httpx.TransportError) -> bool:
    """Whether the connection failed before the request could have been answered."""
    return isinstance(error, (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError))


def unreachable(error: Exception, where: str) -> errors.PaddockError:
    return errors.Unreachable("unreachable", f"paddock serve at {where}: {error}")


def answer(call: Call, response: httpx.Response, body: bytes) -> Any:
    if response.status_code >= 400:
        raise failure(response, body)
    if call.text:
        return body.decode("utf-8", "replace")
    value = json.loads(body) if body else None
    return call.parse(value) if call.parse is not None else value


OutputCallback = Callable[[str, bytes], None]


class ExecLines:
    """Reads an exec's NDJSON answer line by line: hands output to `on_output`, keeps the
    exec's id, and ends with its result (or raises its error)."""

    def __init__(self, on_output: OutputCallback | None) -> None:
        self.on_output = on_output
        self.exec_id: str | None = None
        self.result: models.ExecResult | None = None

    def line(self, raw: bytes) -> None:
        if not raw.strip():
            return
        item = json.loads(raw)
        if "exec" in item:
            self.exec_id = item["exec"]
        elif "stream" in item:
            data = base64.b64decode(item["base64"]) if "base64" in item else item["data"].encode()
            if self.on_output is not None:
                self.on_output(item["stream"], data)
        elif "result" in item:
            self.result = models.ExecResult.model_validate(item["result"])
        elif "error" in item:
            raise errors.from_answer(500, item)

    def finish(self) -> models.ExecResult:
        if self.result is None:
            raise errors.Unreachable("unreachable", f"the exec's answer ended before its result (exec {self.exec_id})")
        return self.result


def output_bytes(item: dict[str, Any]) -> tuple[str, bytes] | None:
    """One line of an exec's output log: (stream, bytes), or None for the end marker."""
    if "stream" not in item:
        return None
    data = base64.b64decode(item["base64"]) if "base64" in item else item["data"].encode()
    return item["stream"], data


def replay(result: models.ExecResult, on_output: OutputCallback | None) -> None:
    """The output kept in a result, to `on_output` (a streamed stdin answers whole)."""
    if on_output is None:
        return
    for stream in ("stdout", "stderr"):
        encoded = getattr(result, f"{stream}_base64")
        data = base64.b64decode(encoded) if encoded else (getattr(result, stream) or "").encode()
        if data:
            on_output(stream, data)


class EventParser:
    """Server-Sent Events into `Event`s; remembers the last id for resuming."""

    def __init__(self, since: int | None) -> None:
        self.last_id = since
        self._data: list[str] = []
        self._id: str | None = None

    def line(self, text: str) -> models.Event | None:
        if text == "":
            event = None
            if self._id is not None:
                self.last_id = int(self._id)
            if self._data:
                event = models.Event.model_validate_json("\n".join(self._data))
            self._data, self._id = [], None
            return event
        if text.startswith(":"):
            return None
        name, _, value = text.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        return None


def events_request(since: int | None, job: str | None, follow: bool) -> tuple[dict[str, Any], dict[str, str]]:
    params: dict[str, Any] = {"follow": "true" if follow else "false"}
    if job is not None:
        params["job"] = job
    headers = {"Accept": "text/event-stream"}
    if since is not None:
        headers["Last-Event-ID"] = str(since)
    return params, headers


def file_size(data: Any) -> int:
    """The size of a file object's rest (a PUT needs its Content-Length up front)."""
    try:
        here = data.tell()
        end = os.fstat(data.fileno()).st_size
        return end - here
    except (AttributeError, OSError, ValueError):
        pass
    here = data.tell()
    data.seek(0, os.SEEK_END)
    end = data.tell()
    data.seek(here)
    return end - here
