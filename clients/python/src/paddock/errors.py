"""paddock's errors as exceptions: one class per kind of answer, each carrying the
daemon's error `code`, its `message`, the HTTP `status` and, where the daemon gave them,
`retry_after` (seconds) and `pointer` (where work in progress can be followed)."""

from __future__ import annotations

from typing import Any


class PaddockError(Exception):
    """An error answer of `paddock serve` (`{"error": {"code", "message"}}`), or a
    failure to reach it (`code` "unreachable", `status` 0)."""

    def __init__(
        self,
        code: str,
        message: str,
        status: int = 0,
        *,
        retry_after: float | None = None,
        pointer: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.code = code
        self.message = message
        self.status = status
        self.retry_after = retry_after
        self.pointer = pointer


class Unreachable(PaddockError):
    """The daemon could not be reached (no socket, refused, the connection broke)."""


class InvalidInput(PaddockError):
    """400 `invalid_input`: the request itself was wrong; nothing was done."""


class Unauthorized(PaddockError):
    """401: a TCP listener's request without the right token."""


class PermissionDenied(PaddockError):
    """403 `permission_denied`, `forbidden`: the job's user may not read or write that."""


class NotFound(PaddockError):
    """404 `not_found`: no such job, exec, checkpoint or file."""


class Conflict(PaddockError):
    """409 `conflict`, `refused`, `idempotency_in_progress`: not in the job's state."""


class TooLarge(PaddockError):
    """413 `too_large`: over a limit (a file over the read's `max`, a body)."""


class SetupFailed(PaddockError):
    """422 `setup_failed`: a create's setup command failed (nothing was kept)."""


class IdempotencyMismatch(PaddockError):
    """422 `idempotency_mismatch`: the key was used for another request."""


class QueueFull(PaddockError):
    """429 `queue_full`: no room in the host budget (see `retry_after`)."""


class Internal(PaddockError):
    """500 `git_failed`, `internal`."""


class Unavailable(PaddockError):
    """503 `runtime_unavailable`: Docker or the engine is not there."""


class Timeout(PaddockError):
    """504 `timeout`: a deadline of the daemon's passed."""


_BY_CODE: dict[str, type[PaddockError]] = {
    "invalid_input": InvalidInput,
    "unsupported_media_type": InvalidInput,
    "method_not_allowed": InvalidInput,
    "unauthorized": Unauthorized,
    "forbidden": PermissionDenied,
    "permission_denied": PermissionDenied,
    "not_found": NotFound,
    "conflict": Conflict,
    "refused": Conflict,
    "idempotency_in_progress": Conflict,
    "too_large": TooLarge,
    "setup_failed": SetupFailed,
    "idempotency_mismatch": IdempotencyMismatch,
    "queue_full": QueueFull,
    "git_failed": Internal,
    "internal": Internal,
    "runtime_unavailable": Unavailable,
    "timeout": Timeout,
}


def from_answer(status: int, body: Any, retry_after: str | None = None) -> PaddockError:
    """The exception of an error answer: by its code, else by its status."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {"code": "", "message": f"HTTP {status}: {body!r}"[:500]}
    code = str(error.get("code", ""))
    cls = _BY_CODE.get(code, PaddockError)
    try:
        after = float(retry_after) if retry_after is not None else None
    except ValueError:
        after = None
    return cls(
        code,
        str(error.get("message", "")),
        status,
        retry_after=after,
        pointer=error.get("pointer"),
    )
