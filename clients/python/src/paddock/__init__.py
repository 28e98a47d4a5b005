"""paddock's Python SDK: `Client` (sync) and `AsyncClient` (asyncio) for `paddock serve`,
typed models of its API (`paddock.models`, generated from docs/openapi.yaml), errors as
exceptions carrying the daemon's code (`paddock.errors`), and an Inspect AI sandbox
provider (`paddock.inspect`, `sandbox="paddock"`)."""

from . import errors, models
from ._core import default_socket
from .aio import AsyncClient
from .client import Client
from .errors import PaddockError

__version__ = "0.1.0"

__all__ = ["AsyncClient", "Client", "PaddockError", "default_socket", "errors", "models", "__version__"]
