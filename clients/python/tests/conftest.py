"""The SDK's tests run against a real `paddock serve` that tests/it/python_sdk.rs starts
(the README's test command runs them): it sets PADDOCK_HOME (so `Client()` finds the
socket as the CLI does), the TCP listener's URL and token file, a repository and the
runtime and image jobs get. Without them the daemon tests fail, unless
SDK_TESTS_WITHOUT_DAEMON=1 (then they are skipped, and say so)."""

from __future__ import annotations

import os

import pytest

import paddock

NEEDED = ("PADDOCK_HOME", "SDK_TEST_URL", "SDK_TEST_TOKEN_FILE", "SDK_TEST_REPO")


@pytest.fixture(scope="session")
def env() -> dict[str, str]:
    missing = [name for name in NEEDED if not os.environ.get(name)]
    if missing:
        if os.environ.get("SDK_TESTS_WITHOUT_DAEMON") == "1":
            pytest.skip(f"no daemon to test against (SDK_TESTS_WITHOUT_DAEMON=1; missing {missing})")
        pytest.fail(f"the daemon tests need {missing} (tests/it/python_sdk.rs sets them)")
    return {name: os.environ[name] for name in NEEDED}


@pytest.fixture(scope="session")
def job_fields() -> dict[str, str]:
    fields = {"runtime": os.environ.get("SDK_TEST_RUNTIME", "docker")}
    if image := os.environ.get("SDK_TEST_IMAGE"):
        fields["image"] = image
    return fields


@pytest.fixture(params=["socket", "tcp"])
def client(request, env) -> paddock.Client:
    if request.param == "socket":
        made = paddock.Client()
    else:
        made = paddock.Client(url=env["SDK_TEST_URL"], token_file=env["SDK_TEST_TOKEN_FILE"])
    yield made
    made.close()
