"""Inspect AI's entry point (pyproject.toml's `inspect_ai` group): importing it registers
the `paddock` sandbox provider."""

from .inspect_sandbox import PaddockSandboxEnvironment  # noqa: F401
