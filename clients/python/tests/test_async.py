"""The asyncio client against the same daemon: the same operations, awaited."""

from __future__ import annotations

import asyncio
import os

import pytest

import paddock
from paddock import errors


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.mark.parametrize("over", ["socket", "tcp"])
def test_async_jobs_exec_files_and_errors(env, job_fields, over):
    async def scenario():
        if over == "socket":
            client = paddock.AsyncClient()
        else:
            client = paddock.AsyncClient(url=env["SDK_TEST_URL"], token_file=env["SDK_TEST_TOKEN_FILE"])
        async with client:
            jobs = await asyncio.gather(
                *(client.create(env["SDK_TEST_REPO"], task=f"async-{n}", **job_fields) for n in range(3))
            )
            try:
                chunks: list[bytes] = []
                results = await asyncio.gather(
                    *(
                        client.exec(j.id, ["sh", "-c", f"echo {n}"], on_output=lambda s, d: chunks.append(d))
                        for n, j in enumerate(jobs)
                    )
                )
                assert [r.stdout for r in results] == ["0\n", "1\n", "2\n"]
                assert sorted(chunks) == [b"0\n", b"1\n", b"2\n"]
                big = bytes(range(256)) * 8192
                await client.write_file(jobs[0].id, "blob", big)
                assert await client.read_file(jobs[0].id, "blob") == big
                piped = await client.exec(jobs[0].id, ["wc", "-c"], stdin=big)
                assert piped.stdout.strip() == str(len(big))
                listed = await client.list()
                assert {j.id for j in jobs} <= {j.id for j in listed}
                with pytest.raises(errors.NotFound):
                    await client.show("no-such-job")
                events = [e async for e in client.events(since=0, job=jobs[0].id, follow=False)]
                assert events and events[0].type.value == "job.created"
            finally:
                await asyncio.gather(*(client.remove(j.id, force=True) for j in jobs))

    run(scenario())


def test_a_request_without_the_token_is_refused(env):
    async def scenario():
        async with paddock.AsyncClient(url=env["SDK_TEST_URL"], token="wrong") as client:
            with pytest.raises(errors.Unauthorized) as refused:
                await client.list()
            assert refused.value.status == 401

    run(scenario())


def test_a_refused_request_with_a_body_ends_its_connection_and_the_client_goes_on(env):
    import httpx

    url = env["SDK_TEST_URL"]
    # The daemon refuses before reading the body: it says it closes the connection.
    refused = httpx.post(f"{url}/v1/jobs", json={"repo": "/nowhere"}, headers={"Authorization": "Bearer wrong"})
    assert refused.status_code == 401 and refused.headers.get("connection") == "close"
    bodiless = httpx.get(f"{url}/v1/jobs", headers={"Authorization": "Bearer wrong"})
    assert bodiless.status_code == 401 and bodiless.headers.get("connection") != "close"
    # One client, one connection: a refused write, then the next call on it works.
    with paddock.Client(url=url, token_file=env["SDK_TEST_TOKEN_FILE"]) as client:
        job = client.create(env["SDK_TEST_REPO"], runtime="docker", image=os.environ.get("SDK_TEST_IMAGE") or None)
        try:
            client.write_file(job.id, "locked.txt", b"x")
            client.exec(job.id, ["chmod", "0444", "locked.txt"])
            for _ in range(3):
                with pytest.raises(errors.PermissionDenied):
                    client.write_file(job.id, "locked.txt", b"y" * (1 << 20))
                assert client.exec(job.id, ["true"]).exit_code == 0
        finally:
            client.remove(job.id, force=True)
