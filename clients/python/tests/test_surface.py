"""What needs no daemon: every route of the API's document has a method on both clients,
the models are the generator's output for that document, the version is paddock's."""

from __future__ import annotations

import inspect
import pathlib
import re
import shutil
import subprocess
import tempfile

import yaml

import paddock
from paddock import _ops

ROOT = pathlib.Path(__file__).resolve().parents[3]
DOCUMENT = ROOT / "docs" / "openapi.yaml"
HERE = pathlib.Path(__file__).resolve().parents[1]


def routes_of_document() -> set[tuple[str, str]]:
    document = yaml.safe_load(DOCUMENT.read_text())
    verbs = {"get", "post", "put", "delete", "patch"}
    return {
        (verb.upper(), path)
        for path, item in document["paths"].items()
        for verb in item
        if verb in verbs
    }


def test_every_operation_of_the_document_is_a_method_of_both_clients():
    routes = routes_of_document()
    assert routes, "the document has routes"
    missing = sorted(routes - set(_ops.ROUTES) - set(_ops.PROTOCOLS))
    assert not missing, f"routes without a method: {missing}"
    stale = sorted((set(_ops.ROUTES) | set(_ops.PROTOCOLS)) - routes)
    assert not stale, f"methods of routes the document lacks: {stale}"
    names = set(_ops.ROUTES.values()) | set(_ops.ALSO)
    for name in names:
        for cls in (paddock.Client, paddock.AsyncClient):
            method = getattr(cls, name, None)
            assert callable(method), f"{cls.__name__}.{name}"
            assert method.__doc__, f"{cls.__name__}.{name} has no docstring"
        # One definition: the async method is a coroutine function or an async generator.
        async_method = getattr(paddock.AsyncClient, name)
        assert inspect.iscoroutinefunction(async_method) or inspect.isasyncgenfunction(async_method), name
    for name, route in _ops.ALSO.items():
        assert route in routes, (name, route)


def test_the_models_are_the_generators_output_for_the_document():
    generator = shutil.which("datamodel-codegen")
    assert generator, "datamodel-codegen (pyproject.toml's test extra) is installed"
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "models.py"
        subprocess.run([str(HERE / "generate_models.sh"), str(out)], check=True, capture_output=True)
        assert out.read_text() == (HERE / "src" / "paddock" / "models.py").read_text(), (
            "src/paddock/models.py is not docs/openapi.yaml's: run clients/python/generate_models.sh"
        )


def test_the_version_is_paddocks():
    cargo = (ROOT / "Cargo.toml").read_text()
    version = re.search(r'^version = "([^"]+)"', cargo, re.M).group(1)
    assert paddock.__version__ == version
    pyproject = (HERE / "pyproject.toml").read_text()
    assert f'version = "{version}"' in pyproject


def test_an_error_answer_is_its_exception_with_the_code():
    error = paddock.errors.from_answer(404, {"error": {"code": "not_found", "message": "no job `x`"}})
    assert isinstance(error, paddock.errors.NotFound)
    assert (error.code, error.status, error.message) == ("not_found", 404, "no job `x`")
    queue = paddock.errors.from_answer(429, {"error": {"code": "queue_full", "message": "m"}}, "3")
    assert isinstance(queue, paddock.errors.QueueFull) and queue.retry_after == 3.0
    odd = paddock.errors.from_answer(502, "<html>")
    assert type(odd) is paddock.PaddockError and odd.status == 502


def test_an_unreachable_daemon_is_an_error_not_a_hang(tmp_path):
    client = paddock.Client(socket=str(tmp_path / "none.sock"))
    try:
        client.health()
    except paddock.errors.Unreachable as error:
        assert "none.sock" in str(error)
    else:
        raise AssertionError("no daemon answered")
