"""The README's first example runs as written, in a repository of the test's."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import tempfile

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_opens_with_an_example_that_runs_as_written(env):
    text = README.read_text()
    first = re.search(r"```python\n(.*?)```", text, re.S)
    assert first and text.index("```python") < text.index("\n## "), "the README opens with it"
    with tempfile.TemporaryDirectory() as tmp:
        repo = pathlib.Path(tmp) / "repo"
        subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
        (repo / "README").write_text("hi\n")
        git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run([*git, "add", "."], check=True)
        subprocess.run([*git, "commit", "-qm", "init"], check=True)
        ran = subprocess.run(
            [sys.executable, "-c", first.group(1)], cwd=repo, capture_output=True, text=True, timeout=300
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.splitlines() == ["0 b'hello\\n'", "agent/agent/hello-sdk kept"], ran.stdout
