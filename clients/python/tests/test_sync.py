"""The sync client against a real daemon, over its socket and its TCP listener."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import uuid

import pytest

import paddock
from paddock import errors, models


def test_a_job_end_to_end(client, env, job_fields):
    job = client.create(env["SDK_TEST_REPO"], task=f"sdk-{uuid.uuid4().hex[:8]}", **job_fields)
    assert isinstance(job, models.Job) and job.id
    try:
        assert job.id in [j.id for j in client.list()]
        seen: list[tuple[str, bytes]] = []
        result = client.exec(
            job.id, ["sh", "-c", "cat; echo err >&2"], stdin="a line\n", on_output=lambda s, d: seen.append((s, d))
        )
        assert result.exit_code == 0
        assert result.stdout == "a line\n" and result.stderr == "err\n"
        assert b"".join(d for s, d in seen if s == "stdout") == b"a line\n"
        info = client.exec_info(job.id, result.exec_id)
        assert info.id == result.exec_id
        out = b"".join(d for s, d in client.exec_output(job.id, result.exec_id) if s == "stdout")
        assert out == b"a line\n"
        # A commit, then the branch's log and diff.
        commit = client.exec(
            job.id,
            ["sh", "-c", "echo sdk > sdk.txt && git add sdk.txt && git commit -qm 'from the sdk'"],
        )
        assert commit.exit_code == 0, commit
        assert [c.summary for c in client.log(job.id)] == ["from the sdk"]
        assert "sdk.txt" in client.diff(job.id)["diff"]
        shown = client.show(job.id)
        assert shown.changes.commits_ahead == 1
    finally:
        removed = client.remove(job.id)
    assert removed.branch_kept is True


def test_stdin_of_any_size_and_files_both_ways(env, job_fields):
    with paddock.Client() as client:
        job = client.create(env["SDK_TEST_REPO"], **job_fields)
        try:
            big = os.urandom(8 << 20)
            result = client.exec(job.id, ["sha256sum"], stdin=big)
            assert result.stdout.split()[0] == hashlib.sha256(big).hexdigest()
            streamed = client.exec(job.id, ["wc", "-c"], stdin=io.BytesIO(b"x" * 1000))
            assert streamed.stdout.strip() == "1000"
            written = client.write_file(job.id, "data/blob.bin", big)
            assert (written.size, written.created) == (len(big), True)
            assert client.read_file(job.id, "data/blob.bin") == big
            with pytest.raises(errors.TooLarge) as refused:
                client.read_file(job.id, "data/blob.bin", max=1024)
            assert refused.value.code == "too_large" and refused.value.status == 413
            names = [e.name for e in client.list_files(job.id, "data").entries]
            assert names == ["blob.bin"]
            # A directory as a tar, in and out.
            tree = io.BytesIO()
            with tarfile.open(fileobj=tree, mode="w") as tar:
                info = tarfile.TarInfo("a/b.txt")
                info.size = 3
                tar.addfile(info, io.BytesIO(b"abc"))
            client.write_tar(job.id, "tree", tree.getvalue())
            back = io.BytesIO()
            client.read_tar(job.id, "tree", back)
            back.seek(0)
            with tarfile.open(fileobj=back) as tar:
                assert tar.extractfile("./a/b.txt").read() == b"abc"
            with pytest.raises(errors.NotFound):
                client.read_file(job.id, "no/such/file")
        finally:
            client.remove(job.id, force=True)


def test_idempotency_keys_and_errors(env, job_fields):
    with paddock.Client() as client:
        key = f"sdk-test-{os.getpid()}"
        first = client.create(env["SDK_TEST_REPO"], idempotency_key=key, **job_fields)
        again = client.create(env["SDK_TEST_REPO"], idempotency_key=key, **job_fields)
        try:
            assert again.id == first.id, "the same key answers the same job"
            with pytest.raises(errors.IdempotencyMismatch):
                client.create(env["SDK_TEST_REPO"], idempotency_key=key, task="another")
            with pytest.raises(errors.NotFound) as missing:
                client.show("no-such-job")
            assert missing.value.code == "not_found"
            # Refused by the SDK before anything is sent (the document's pattern)...
            with pytest.raises(errors.InvalidInput) as local:
                client.exec(first.id, ["true"], user="www-data")
            assert local.value.status == 0
            # ...and by the daemon, where it alone knows (root on a runc job).
            if job_fields["runtime"] in ("docker", "process"):
                with pytest.raises(errors.InvalidInput) as remote:
                    client.exec(first.id, ["true"], user="root")
                assert remote.value.status == 400 and "runsc" in remote.value.message
        finally:
            client.remove(first.id, force=True)


def test_checkpoints_fork_and_events_with_resume(env, job_fields):
    with paddock.Client() as client:
        job = client.create(env["SDK_TEST_REPO"], **job_fields)
        forks: list[str] = []
        try:
            client.exec(job.id, ["sh", "-c", "echo v1 > state.txt"])
            saved = client.checkpoint(job.id, name="v1")
            assert saved.name == "v1"
            client.exec(job.id, ["sh", "-c", "echo v2 > state.txt"])
            restored = client.restore(job.id, "v1")
            assert restored.checkpoint == "v1"
            assert client.read_file(job.id, "state.txt") == b"v1\n"
            answer = client.fork(job.id, from_="v1", count=2)
            forks = [j.id for j in answer.jobs]
            assert len(forks) == 2
            for fork in forks:
                assert client.read_file(fork, "state.txt") == b"v1\n"
            assert [c.name for c in client.checkpoints(job.id).checkpoints] == ["v1"]
            # Every event of this job so far, then a resume from the middle gives the rest.
            seen = list(client.events(since=0, job=job.id, follow=False))
            types = [e.type.value for e in seen]
            assert "job.created" in types and "job.checkpointed" in types, types
            middle = seen[len(seen) // 2].id
            rest = list(client.events(since=middle, job=job.id, follow=False))
            assert [e.id for e in rest] == [e.id for e in seen if e.id > middle]
            assert client.remove_checkpoint(job.id, "v1").removed is True
        finally:
            for fork in forks:
                client.remove(fork, force=True, delete_branch=True)
            client.remove(job.id, force=True)


def test_the_rest_of_the_surface_answers(env):
    with paddock.Client() as client:
        assert client.health() == {"ok": True}
        assert "paddock_jobs" in client.metrics()
        assert client.admission() is not None
        report = client.sweep(dry_run=True)
        assert isinstance(report, models.SweepReport)
        conflicts = client.conflicts(repo=env["SDK_TEST_REPO"])
        assert isinstance(conflicts, models.ConflictsReport)
