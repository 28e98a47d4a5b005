"""MCP over HTTP (`paddock serve`'s `/mcp`, the Streamable HTTP transport) driven by the
official MCP Python SDK, over the TCP listener with its token and over the socket:
initialize, create, write, exec with input, read, remove; another session's job refused;
a request without the token refused."""

from __future__ import annotations

import json
import os

import anyio
import pytest

mcp = pytest.importorskip("mcp", reason="the MCP Python SDK (pip install mcp)")
httpx2 = pytest.importorskip("httpx2", reason="the MCP SDK's HTTP client")

from mcp import ClientSession  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


def http_client(env, over):
    if over == "tcp":
        token = open(env["SDK_TEST_TOKEN_FILE"], encoding="utf-8").read().strip()
        return httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=300), f"{env['SDK_TEST_URL']}/mcp"
    socket = os.path.join(os.environ["PADDOCK_HOME"], "paddock.sock")
    return httpx2.AsyncClient(transport=httpx2.AsyncHTTPTransport(uds=socket), timeout=300), "http://localhost/mcp"


def answer(result):
    assert not result.is_error, result.content
    return json.loads(result.content[0].text)


@pytest.mark.parametrize("over", ["tcp", "socket"])
async def test_a_session_over_http_creates_writes_execs_reads_and_removes(env, job_fields, over):
    client, url = http_client(env, over)
    async with client, streamable_http_client(url, http_client=client) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.server_info.name == "paddock"
            assert init.protocol_version == "2025-11-25"
            tools = {tool.name for tool in (await session.list_tools()).tools}
            assert {"job_create", "job_exec", "file_write", "file_read", "job_remove"} <= tools
            fields = {"repo": env["SDK_TEST_REPO"], "runtime": job_fields["runtime"]}
            if "image" in job_fields:
                fields["image"] = job_fields["image"]
            job = answer(await session.call_tool("job_create", fields))["id"]
            try:
                answer(await session.call_tool("file_write", {"job": job, "path": "note.txt", "content": "from mcp\n"}))
                ran = answer(
                    await session.call_tool(
                        "job_exec", {"job": job, "command": ["sh", "-c", "cat note.txt; tr a-z A-Z"], "stdin": "shout\n"}
                    )
                )
                assert ran["exit_code"] == 0 and ran["stdout"] == "from mcp\nSHOUT\n", ran
                read_back = answer(await session.call_tool("file_read", {"job": job, "path": "note.txt"}))
                assert read_back["content"] == "from mcp\n"

                # Another session (another Mcp-Session-Id) cannot touch this session's job.
                other, other_url = http_client(env, over)
                async with other, streamable_http_client(other_url, http_client=other) as (r2, w2):
                    async with ClientSession(r2, w2) as intruder:
                        await intruder.initialize()
                        refused = await intruder.call_tool("job_exec", {"job": job, "command": ["true"]})
                        assert refused.is_error, refused
                        said = refused.content[0].text
                        assert "not created by this MCP session" in said, said
            finally:
                removed = answer(await session.call_tool("job_remove", {"job": job}))
            assert removed["id"] == job


async def test_without_the_token_or_the_session_the_transport_refuses(env):
    url = f"{env['SDK_TEST_URL']}/mcp"
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
    }
    headers = {"Accept": "application/json, text/event-stream"}
    # Its own connection: a refused POST's unread body may end the connection it came on.
    async with httpx2.AsyncClient(timeout=30) as client:
        no_token = await client.post(url, json=initialize, headers=headers)
        assert no_token.status_code == 401
    async with httpx2.AsyncClient(timeout=30) as client:
        token = open(env["SDK_TEST_TOKEN_FILE"], encoding="utf-8").read().strip()
        headers["Authorization"] = f"Bearer {token}"
        no_session = await client.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers)
        assert no_session.status_code == 400
        unknown = await client.post(
            url, json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, headers={**headers, "Mcp-Session-Id": "0" * 32}
        )
        assert unknown.status_code == 404
        foreign = await client.post(url, json=initialize, headers={**headers, "Origin": "http://evil.example"})
        assert foreign.status_code == 403
        opened = await client.post(url, json=initialize, headers=headers)
        assert opened.status_code == 200
        key = opened.headers["mcp-session-id"]
        assert len(key) == 32
        ended = await client.delete(url, headers={**headers, "Mcp-Session-Id": key})
        assert ended.status_code == 204
        gone = await client.post(
            url, json={"jsonrpc": "2.0", "id": 4, "method": "ping"}, headers={**headers, "Mcp-Session-Id": key}
        )
        assert gone.status_code == 404
