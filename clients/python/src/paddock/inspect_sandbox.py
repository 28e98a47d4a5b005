"""An Inspect AI sandbox provider: `sandbox="paddock"` runs each sample in a paddock job
(its own branch, checkout and sandbox), removed when the sample ends.

    @task
    def my_task():
        return Task(..., sandbox=("paddock", PaddockSandboxConfig(runtime="runsc")))

The sample's working directory is the job's workspace. `exec(user=...)` takes `root`, a
numeric UID[:GID] or a name of the job's own users (looked up inside the job, by the
job's `id`: paddock itself never reads a job's /etc/passwd), only in a runsc or microvm
job: a runc job raises `SandboxUserUnsupportedError` (its root would be the host's).
Output is collected as it streams, up to Inspect's limit, beyond paddock's 1 MiB kept in
a result."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from typing import Any, Literal, Union, overload

from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    SandboxUserUnsupportedError,
    sandboxenv,
)
from pydantic import BaseModel

from . import errors
from .aio import AsyncClient


class PaddockSandboxConfig(BaseModel, frozen=True):
    """What each sample's job is made of (every field optional)."""

    repo: str | None = None
    """The repository each job branches from; without it a scratch repository, made once
    per task (an empty commit)."""
    runtime: str | None = None
    """docker (runc), runsc, microvm or process (default: the daemon's)."""
    image: str | None = None
    profile: str | None = None
    """A profile of the user config (`rootfs: writable` for installing as root)."""
    memory: str | None = None
    cpus: str | None = None
    network: str | None = None
    allow: list[str] | None = None
    socket: str | None = None
    """paddock serve's socket (default: found as the CLI finds it)."""
    url: str | None = None
    token_file: str | None = None
    keep_branches: bool = False
    """Keep each sample's branch when it has commits (default: deleted with the job)."""


_SCRATCH: dict[str, str] = {}


def _scratch_repo(task_name: str) -> str:
    """A repository of one empty commit for a task without one (jobs need a branch)."""
    if task_name not in _SCRATCH:
        path = tempfile.mkdtemp(prefix="paddock-inspect-")
        git = ["git", "-C", path, "-c", "user.name=inspect", "-c", "user.email=inspect@localhost"]
        subprocess.run(["git", "init", "-q", "-b", "main", path], check=True)
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "inspect task"], check=True)
        _SCRATCH[task_name] = path
    return _SCRATCH[task_name]


def _config(config: SandboxEnvironmentConfigType | None) -> PaddockSandboxConfig:
    if config is None:
        return PaddockSandboxConfig()
    if isinstance(config, PaddockSandboxConfig):
        return config
    if isinstance(config, BaseModel):
        return PaddockSandboxConfig.model_validate(config.model_dump())
    raise ValueError(f"the paddock sandbox takes a PaddockSandboxConfig, not {config!r}")


def _client(config: PaddockSandboxConfig) -> AsyncClient:
    if config.url:
        return AsyncClient(url=config.url, token_file=config.token_file)
    return AsyncClient(config.socket)


def _seconds(timeout: int | None) -> str | None:
    return None if timeout is None else f"{max(int(timeout), 1)}s"


def _file_error(error: errors.PaddockError, file: str) -> Exception:
    """paddock's file errors as the exceptions Inspect's contract names."""
    said = f"{file}: {error.message}"
    if isinstance(error, errors.NotFound):
        return FileNotFoundError(said)
    if isinstance(error, errors.PermissionDenied):
        return PermissionError(said)
    if "directory" in error.message:
        return IsADirectoryError(said)
    return error


@sandboxenv(name="paddock")
class PaddockSandboxEnvironment(SandboxEnvironment):
    """One sample's paddock job."""

    def __init__(self, client: AsyncClient, job: str, workspace: str, config: PaddockSandboxConfig) -> None:
        super().__init__()
        self.client = client
        self.job = job
        self.workspace = workspace.rstrip("/") or "/"
        self.config = config
        self._users: dict[str, str] = {}

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return PaddockSandboxConfig(**config)

    @classmethod
    async def sample_init(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, metadata: dict[str, str]
    ) -> dict[str, SandboxEnvironment]:
        settings = _config(config)
        client = _client(settings)
        fields = {
            key: value
            for key, value in settings.model_dump().items()
            if key in ("runtime", "image", "profile", "memory", "cpus", "network", "allow") and value is not None
        }
        repo = settings.repo or _scratch_repo(task_name)
        job = await client.create(os.path.abspath(repo), agent="inspect", **fields)
        limits = getattr(job, "limits", None) or {}
        workspace = (limits.get("workspace_dir") if isinstance(limits, dict) else None) or "/workspace"
        return {"default": cls(client, job.id, workspace, settings)}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for environment in environments.values():
            if isinstance(environment, PaddockSandboxEnvironment):
                await environment.client.remove(
                    environment.job, force=True, delete_branch=not environment.config.keep_branches
                )
                await environment.client.aclose()

    @classmethod
    async def task_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool) -> None:
        # Every sample's job is gone by now: the task's scratch repository goes too.
        scratch = _SCRATCH.pop(task_name, None)
        if scratch and cleanup:
            shutil.rmtree(scratch, ignore_errors=True)

    def _path(self, file: str) -> str:
        return file if file.startswith("/") else f"{self.workspace}/{file}"

    async def _user(self, user: str | None) -> str | None:
        """`root`, a UID[:GID], or a name resolved inside the job to its ids."""
        if user is None or user in ("agent", "root") or user.replace(":", "").isdigit():
            return user
        if user not in self._users:
            script = 'id -u -- "$1" && id -g -- "$1"'
            found = await self.client.exec(self.job, ["sh", "-c", script, "sh", user])
            if found.exit_code != 0:
                return None
            uid, gid = found.stdout.split()
            self._users[user] = f"{uid}:{gid}"
        return self._users[user]

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,  # noqa: A002 - Inspect's name
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        ids = await self._user(user)
        if user is not None and ids is None:
            return ExecResult(False, 1, "", f"no such user: {user}\n")
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        out: dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        over = False

        def collect(stream: str, data: bytes) -> None:
            nonlocal over
            kept = out[stream]
            kept += data
            if len(kept) > limit:
                over = True
                del kept[: len(kept) - limit]  # the trailing portion, as the contract allows

        fields: dict[str, Any] = {"workdir": self._path(cwd) if cwd else None, "env": env, "timeout": _seconds(timeout)}
        if ids is not None and ids != "agent":
            fields["user"] = ids
        try:
            result = await self.client.exec(
                self.job, cmd, stdin=input, on_output=collect, **{k: v for k, v in fields.items() if v is not None}
            )
        except errors.InvalidInput as error:
            if user is not None and "user" in error.message:
                raise SandboxUserUnsupportedError(error.message) from error
            raise
        if result.timed_out:
            raise TimeoutError(f"{shlex.join(cmd)} timed out after {timeout} s")
        stdout = out["stdout"].decode("utf-8", "replace")
        stderr = out["stderr"].decode("utf-8", "replace")
        code = result.exit_code if result.exit_code is not None else 1
        if code == 126 and "permission denied" in stderr.lower():
            raise PermissionError(f"{cmd[0]}: {stderr.strip()}")
        if over:
            stdout = f"[the first part of the output, over {SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR}, was dropped]\n" + stdout
        return ExecResult(code == 0, code, stdout, stderr)

    async def write_file(self, file: str, contents: str | bytes) -> None:
        data = contents.encode("utf-8") if isinstance(contents, str) else contents
        try:
            await self.client.write_file(self.job, self._path(file), data)
        except errors.PaddockError as error:
            raise _file_error(error, file) from error

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> Union[str, bytes]:
        try:
            data = await self.client.read_file(
                self.job, self._path(file), max=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
            )
        except errors.TooLarge as error:
            raise OutputLimitExceededError(SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, None) from error
        except errors.PaddockError as error:
            raise _file_error(error, file) from error
        # Newlines as they are (`newline=""`): bytes decoded, never translated.
        return data.decode("utf-8") if text else data
