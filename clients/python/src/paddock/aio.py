"""The asyncio client of `paddock serve`: `Client`'s methods, each a coroutine (the
streaming ones async iterators), over the same socket or TCP listener.

    from paddock import AsyncClient
    async with AsyncClient() as paddock:
        job = await paddock.create("/path/to/repo")
        result = await paddock.exec(job.id, ["make", "test"])
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import io
import json
import os
from typing import Any, AsyncIterator, BinaryIO

import httpx

from . import _core, _ops, models
from ._core import OutputCallback
from .client import _b64, _source


class AsyncClient(_core.Connection):
    """A connection to one daemon for asyncio code; an async context manager (the same
    arguments as `Client`)."""

    _HTTP = httpx.AsyncClient
    _TRANSPORT = httpx.AsyncHTTPTransport

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()

    async def _do(self, call: _ops.Call) -> Any:
        headers = _core.headers_of(call)
        # A GET is sent again once, a keyed POST or DELETE up to ATTEMPTS times, after a
        # connection that failed before the answer.
        attempts = _core.ATTEMPTS if call.mutating else 2
        for attempt in range(attempts):
            try:
                response = await self._http.request(
                    call.method, call.path, params=call.params, json=call.json, headers=headers
                )
            except httpx.TransportError as error:
                if attempt + 1 < attempts and _core.retryable(error):
                    await asyncio.sleep(0.2 * (attempt + 1))
                    continue
                raise _core.unreachable(error, self.where) from error
            return _core.answer(call, response, response.content)
        raise AssertionError("unreachable")

    @contextlib.asynccontextmanager
    async def _stream(self, method: str, path: str, **kwargs: Any) -> AsyncIterator[httpx.Response]:
        # As `Client._stream`: sent again once when the connection closed before an answer.
        attempts = 1 if "content" in kwargs else 2
        answered = False
        for attempt in range(attempts):
            try:
                async with self._http.stream(method, path, **kwargs) as response:
                    answered = True
                    if response.status_code >= 400:
                        raise _core.failure(response, await response.aread())
                    yield response
                    return
            except httpx.TransportError as error:
                if answered or attempt + 1 >= attempts or not _core.retryable(error):
                    raise _core.unreachable(error, self.where) from error
                await asyncio.sleep(0.1)

    async def exec(
        self,
        job: str,
        cmd: Any,
        *,
        stdin: bytes | str | BinaryIO | None = None,
        on_output: OutputCallback | None = None,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> models.ExecResult:
        """As `Client.exec`."""
        body = _ops.exec_body(cmd, **fields)
        path = _ops.job_path(job, "exec")
        streamed = stdin is not None and (
            not isinstance(stdin, (bytes, str)) or len(stdin) > _ops.INLINE_STDIN
        )
        if streamed:
            source = io.BytesIO(stdin.encode() if isinstance(stdin, str) else stdin) if isinstance(stdin, (bytes, str)) else stdin

            async def content() -> AsyncIterator[bytes]:
                yield json.dumps(body).encode() + b"\n"
                while chunk := source.read(1 << 16):
                    yield chunk

            headers = {"Content-Type": "application/x-paddock-exec-stdin", "Accept": "application/json"}
            try:
                response = await self._http.post(path, content=content(), headers=headers)
            except httpx.TransportError as error:
                raise _core.unreachable(error, self.where) from error
            result = _core.answer(_ops.Call("POST", path, parse=models.ExecResult.model_validate), response, response.content)
            _core.replay(result, on_output)
            return result
        if isinstance(stdin, str):
            body["stdin"] = stdin
        elif isinstance(stdin, bytes):
            body["stdin_base64"] = _b64(stdin)
        headers = _core.headers_of(_ops.Call("POST", path, idempotency_key=idempotency_key))
        headers["Accept"] = "application/x-ndjson"
        lines = _core.ExecLines(on_output)
        async with self._stream("POST", path, json=body, headers=headers) as response:
            async for raw in response.aiter_lines():
                lines.line(raw.encode())
        return lines.finish()

    async def exec_output(self, job: str, exec_id: str, *, offset: int = 0, follow: bool = False) -> AsyncIterator[tuple[str, bytes]]:
        """As `Client.exec_output`."""
        params = {"offset": offset, "follow": "true" if follow else "false"}
        async with self._stream("GET", _ops.job_path(job, "execs", exec_id, "output"), params=params) as response:
            async for raw in response.aiter_lines():
                if raw.strip() and (item := _core.output_bytes(json.loads(raw))) is not None:
                    yield item

    async def read_file(self, job: str, path: str, *, user: str | None = None, max: int | None = None) -> bytes:  # noqa: A002
        """As `Client.read_file`."""
        sink = io.BytesIO()
        await self.read_file_to(job, path, sink, user=user, max=max)
        return sink.getvalue()

    async def read_file_to(self, job: str, path: str, dest: str | os.PathLike | BinaryIO, *, user: str | None = None, max: int | None = None) -> int:  # noqa: A002
        """As `Client.read_file_to` (the local writes block briefly per chunk)."""
        params = _ops.file_params(path, user=user, max=max)
        final = os.fspath(dest) if isinstance(dest, (str, os.PathLike)) else None
        part = None
        if final is not None:
            part = os.path.join(os.path.dirname(final) or ".", f".{os.path.basename(final)}.paddock-part-{os.getpid()}")
            sink: Any = open(part, "wb")  # noqa: SIM115
        else:
            sink = dest
        written = 0
        try:
            async with self._stream("GET", _ops.job_path(job, "files"), params=params) as response:
                expected = int(response.headers.get("content-length", "-1"))
                async for chunk in response.aiter_bytes():
                    sink.write(chunk)
                    written += len(chunk)
            if expected >= 0 and written != expected:
                raise _core.errors.Unreachable("unreachable", f"{path}: {written} of {expected} bytes came")
            if part is not None:
                sink.close()
                os.replace(part, final)
                part = None
        finally:
            if part is not None:
                sink.close()
                os.unlink(part)
        return written

    async def write_file(self, job: str, path: str, data: bytes | str | BinaryIO | os.PathLike, *, user: str | None = None) -> models.FileWritten:
        """As `Client.write_file`."""
        source, size, opened = _source(data)

        async def content() -> AsyncIterator[bytes]:
            while chunk := source.read(1 << 16):
                yield chunk

        try:
            response = await self._http.put(
                _ops.job_path(job, "files"), params=_ops.file_params(path, user=user),
                content=content(), headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)},
            )
        except httpx.TransportError as error:
            raise _core.unreachable(error, self.where) from error
        finally:
            if opened:
                source.close()
        return _core.answer(_ops.Call("PUT", path, parse=models.FileWritten.model_validate), response, response.content)

    async def read_tar(self, job: str, path: str, dest: BinaryIO, *, user: str | None = None) -> int:
        """As `Client.read_tar`."""
        written = 0
        params = _ops.file_params(path, user=user, tar=True)
        async with self._stream("GET", _ops.job_path(job, "files"), params=params) as response:
            async for chunk in response.aiter_bytes():
                dest.write(chunk)
                written += len(chunk)
        return written

    async def write_tar(self, job: str, path: str, tar: bytes | BinaryIO, *, user: str | None = None) -> models.FileWritten:
        """As `Client.write_tar`."""
        source = io.BytesIO(tar) if isinstance(tar, bytes) else tar

        async def content() -> AsyncIterator[bytes]:
            while chunk := source.read(1 << 16):
                yield chunk

        try:
            response = await self._http.put(
                _ops.job_path(job, "files"), params=_ops.file_params(path, user=user, tar=True),
                content=content(), headers={"Content-Type": "application/x-tar"},
            )
        except httpx.TransportError as error:
            raise _core.unreachable(error, self.where) from error
        return _core.answer(_ops.Call("PUT", path, parse=models.FileWritten.model_validate), response, response.content)

    async def events(self, *, since: int | None = None, job: str | None = None, follow: bool = True) -> AsyncIterator[models.Event]:
        """As `Client.events`."""
        parser = _core.EventParser(since)
        while True:
            params, headers = _core.events_request(parser.last_id, job, follow)
            try:
                async with self._stream("GET", "/v1/events", params=params, headers=headers) as response:
                    async for text in response.aiter_lines():
                        if (event := parser.line(text)) is not None:
                            yield event
            except _core.errors.Unreachable:
                if not follow:
                    raise
            if not follow:
                return
            await asyncio.sleep(0.2)

    async def dashboard(self, *, listen: str | None = None) -> tuple[dict[str, Any], Any]:
        """As `Client.dashboard`; the closer is a coroutine function."""
        body = {"listen": listen} if listen else {}
        context = self._stream("POST", "/v1/dashboard", json=body, headers=_core.headers_of(_ops.Call("POST", "/v1/dashboard")))
        response = await context.__aenter__()
        lease = None
        async for line in response.aiter_lines():
            if line.strip():
                lease = json.loads(line)
                break

        async def close() -> None:
            with contextlib.suppress(Exception):
                await context.__aexit__(None, None, None)

        return lease, close


def _async(build: Any) -> Any:
    @functools.wraps(build)
    async def method(self: AsyncClient, *args: Any, **kwargs: Any) -> Any:
        return await self._do(build(*args, **kwargs))

    return method


for _name, _build in _ops.SIMPLE.items():
    setattr(AsyncClient, _name, _async(_build))
