"""The synchronous client of `paddock serve`, over its Unix socket or its TCP listener.

    from paddock import Client
    with Client() as paddock:               # the socket the CLI would use
        job = paddock.create("/path/to/repo", runtime="runsc")
        result = paddock.exec(job.id, ["make", "test"])

Every operation of the API is a method (their table: `paddock._ops.ROUTES`); each POST
and DELETE carries an idempotency key (`idempotency_key=` to choose it), so a call is sent
again after a broken connection without doing the work twice. Errors are
`paddock.errors.PaddockError`s carrying the daemon's code."""

from __future__ import annotations

import base64
import contextlib
import functools
import io
import json
import os
import time
from typing import Any, BinaryIO, Iterator

import httpx

from . import _core, _ops, models
from ._core import OutputCallback


class Client(_core.Connection):
    """A connection to one daemon; thread-safe (httpx's pool), a context manager.
    `Client(socket=None, *, url=None, token=None, token_file=None, timeout=...)`."""

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    # --- carrying out a Call --------------------------------------------------------------

    def _do(self, call: _ops.Call) -> Any:
        headers = _core.headers_of(call)
        # A GET is sent again once, a keyed POST or DELETE up to ATTEMPTS times, after a
        # connection that failed before the answer.
        attempts = _core.ATTEMPTS if call.mutating else 2
        for attempt in range(attempts):
            try:
                response = self._http.request(
                    call.method, call.path, params=call.params, json=call.json, headers=headers
                )
            except httpx.TransportError as error:
                if attempt + 1 < attempts and _core.retryable(error):
                    time.sleep(0.2 * (attempt + 1))
                    continue
                raise _core.unreachable(error, self.where) from error
            return _core.answer(call, response, response.content)
        raise AssertionError("unreachable")

    @contextlib.contextmanager
    def _stream(self, method: str, path: str, **kwargs: Any) -> Iterator[httpx.Response]:
        # A request whose body can be sent again is, once, when its connection turned out
        # closed before any answer (a pooled connection the server ended); a POST carries
        # its idempotency key, so the work is never done twice.
        attempts = 1 if "content" in kwargs else 2
        answered = False
        for attempt in range(attempts):
            try:
                with self._http.stream(method, path, **kwargs) as response:
                    answered = True
                    if response.status_code >= 400:
                        raise _core.failure(response, response.read())
                    yield response
                    return
            except httpx.TransportError as error:
                if answered or attempt + 1 >= attempts or not _core.retryable(error):
                    raise _core.unreachable(error, self.where) from error
                time.sleep(0.1)

    # --- the operations that stream -------------------------------------------------------

    def exec(
        self,
        job: str,
        cmd: Any,
        *,
        stdin: bytes | str | BinaryIO | None = None,
        on_output: OutputCallback | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> models.ExecResult:
        """Runs `cmd` (a list, or one string as one argument) in the job; its result.

        `stdin`: text or bytes (up to 1 MiB inline, larger streamed) or a binary file
        object (streamed). `on_output(stream, data)` gets stdout and stderr as they come
        (with a streamed stdin, once the command ends). `fields`: ExecRequest's `timeout`,
        `env`, `workdir`, `user`, `no_wait`, `resume`."""
        body = _ops.exec_body(cmd, **fields)
        path = _ops.job_path(job, "exec")
        streamed = stdin is not None and (
            not isinstance(stdin, (bytes, str)) or len(stdin) > _ops.INLINE_STDIN
        )
        if streamed:
            result = self._exec_streamed_stdin(path, body, stdin)
            _core.replay(result, on_output)
            return result
        if isinstance(stdin, str):
            body["stdin"] = stdin
        elif isinstance(stdin, bytes):
            body["stdin_base64"] = _b64(stdin)
        call = _ops.Call("POST", path, json=body, idempotency_key=idempotency_key)
        headers = _core.headers_of(call)
        headers["Accept"] = "application/x-ndjson"
        lines = _core.ExecLines(on_output)
        with self._stream("POST", path, json=body, headers=headers) as response:
            for raw in response.iter_lines():
                lines.line(raw.encode())
        return lines.finish()

    def _exec_streamed_stdin(self, path: str, body: dict[str, Any], stdin: Any) -> models.ExecResult:
        source = io.BytesIO(stdin.encode() if isinstance(stdin, str) else stdin) if isinstance(stdin, (bytes, str)) else stdin

        def content() -> Iterator[bytes]:
            yield json.dumps(body).encode() + b"\n"
            while chunk := source.read(1 << 16):
                yield chunk

        headers = {"Content-Type": "application/x-paddock-exec-stdin", "Accept": "application/json"}
        try:
            response = self._http.post(path, content=content(), headers=headers)
        except httpx.TransportError as error:
            raise _core.unreachable(error, self.where) from error
        return _core.answer(_ops.Call("POST", path, parse=models.ExecResult.model_validate), response, response.content)

    def exec_output(self, job: str, exec_id: str, *, offset: int = 0, follow: bool = False) -> Iterator[tuple[str, bytes]]:
        """The exec's output from a byte offset of its log: (stream, bytes) pairs."""
        params = {"offset": offset, "follow": "true" if follow else "false"}
        with self._stream("GET", _ops.job_path(job, "execs", exec_id, "output"), params=params) as response:
            for raw in response.iter_lines():
                if raw.strip() and (item := _core.output_bytes(json.loads(raw))) is not None:
                    yield item

    def read_file(self, job: str, path: str, *, user: str | None = None, max: int | None = None) -> bytes:  # noqa: A002
        """A file of the job, whole (see `read_file_to` for any size)."""
        sink = io.BytesIO()
        self.read_file_to(job, path, sink, user=user, max=max)
        return sink.getvalue()

    def read_file_to(self, job: str, path: str, dest: str | os.PathLike | BinaryIO, *, user: str | None = None, max: int | None = None) -> int:  # noqa: A002
        """Streams a file of the job into `dest` (a path or a binary file); its size. A
        path is written beside itself first and renamed when whole."""
        params = _ops.file_params(path, user=user, max=max)
        with self._stream("GET", _ops.job_path(job, "files"), params=params) as response:
            expected = int(response.headers.get("content-length", "-1"))
            written = _write_chunks(response.iter_bytes(), dest)
        if expected >= 0 and written != expected:
            raise _core.errors.Unreachable("unreachable", f"{path}: {written} of {expected} bytes came")
        return written

    def write_file(self, job: str, path: str, data: bytes | str | BinaryIO | os.PathLike, *, user: str | None = None) -> models.FileWritten:
        """Creates or replaces a file of the job, streamed, whole or not at all."""
        source, size, opened = _source(data)
        try:
            headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}

            def content() -> Iterator[bytes]:
                while chunk := source.read(1 << 16):
                    yield chunk

            try:
                response = self._http.put(
                    _ops.job_path(job, "files"), params=_ops.file_params(path, user=user),
                    content=content(), headers=headers,
                )
            except httpx.TransportError as error:
                raise _core.unreachable(error, self.where) from error
        finally:
            if opened:
                source.close()
        return _core.answer(_ops.Call("PUT", path, parse=models.FileWritten.model_validate), response, response.content)

    def read_tar(self, job: str, path: str, dest: BinaryIO, *, user: str | None = None) -> int:
        """A directory of the job as a tar, streamed into `dest`; its bytes."""
        params = _ops.file_params(path, user=user, tar=True)
        with self._stream("GET", _ops.job_path(job, "files"), params=params) as response:
            return _write_chunks(response.iter_bytes(), dest)

    def write_tar(self, job: str, path: str, tar: bytes | BinaryIO, *, user: str | None = None) -> models.FileWritten:
        """Unpacks a tar into a directory of the job, whole or not at all."""
        source = io.BytesIO(tar) if isinstance(tar, bytes) else tar

        def content() -> Iterator[bytes]:
            while chunk := source.read(1 << 16):
                yield chunk

        try:
            response = self._http.put(
                _ops.job_path(job, "files"), params=_ops.file_params(path, user=user, tar=True),
                content=content(), headers={"Content-Type": "application/x-tar"},
            )
        except httpx.TransportError as error:
            raise _core.unreachable(error, self.where) from error
        return _core.answer(_ops.Call("PUT", path, parse=models.FileWritten.model_validate), response, response.content)

    def events(self, *, since: int | None = None, job: str | None = None, follow: bool = True) -> Iterator[models.Event]:
        """The daemon's events after id `since` (without it, only new ones), resumed
        after a dropped stream from the last id seen."""
        parser = _core.EventParser(since)
        while True:
            params, headers = _core.events_request(parser.last_id, job, follow)
            try:
                with self._stream("GET", "/v1/events", params=params, headers=headers) as response:
                    for text in response.iter_lines():
                        if (event := parser.line(text)) is not None:
                            yield event
            except _core.errors.Unreachable:
                if not follow:
                    raise
            if not follow:
                return
            time.sleep(0.2)

    def dashboard(self, *, listen: str | None = None) -> tuple[dict[str, Any], Any]:
        """Opens a dashboard listener (socket only): its lease (`address`, `url`) and a
        closer; the listener lives until `closer()`."""
        body = {"listen": listen} if listen else {}
        context = self._stream("POST", "/v1/dashboard", json=body, headers=_core.headers_of(_ops.Call("POST", "/v1/dashboard")))
        response = context.__enter__()
        lines = response.iter_lines()
        lease = json.loads(next(line for line in lines if line.strip()))
        return lease, lambda: context.__exit__(None, None, None)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _source(data: Any) -> tuple[BinaryIO, int, bool]:
    """A write's bytes as a file object, its size, and whether it was opened here."""
    if isinstance(data, str):
        data = data.encode()
    if isinstance(data, bytes):
        return io.BytesIO(data), len(data), False
    if isinstance(data, os.PathLike):
        f = open(data, "rb")  # noqa: SIM115 - closed by the caller
        return f, os.fstat(f.fileno()).st_size, True
    return data, _core.file_size(data), False


def _write_chunks(chunks: Iterator[bytes], dest: Any) -> int:
    if isinstance(dest, (str, os.PathLike)):
        final = os.fspath(dest)
        part = os.path.join(os.path.dirname(final) or ".", f".{os.path.basename(final)}.paddock-part-{os.getpid()}")
        try:
            with open(part, "wb") as f:
                written = _write_chunks(chunks, f)
            os.replace(part, final)
        except BaseException:
            if os.path.exists(part):
                os.unlink(part)
            raise
        return written
    written = 0
    for chunk in chunks:
        dest.write(chunk)
        written += len(chunk)
    return written


def _sync(build: Any) -> Any:
    @functools.wraps(build)
    def method(self: Client, *args: Any, **kwargs: Any) -> Any:
        return self._do(build(*args, **kwargs))

    return method


for _name, _build in _ops.SIMPLE.items():
    setattr(Client, _name, _sync(_build))
