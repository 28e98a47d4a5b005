"""The example eval (examples/inspect_eval.py) runs end to end: one sample in a paddock
job, Inspect's mock model, the score read from the job's files."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("inspect_ai", reason="inspect_ai (pip install ./clients/python[inspect])")

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "inspect_eval.py"


def test_the_example_eval_scores_its_sample_in_a_paddock_job(env, job_fields, tmp_path):
    args = [sys.executable, str(EXAMPLE), "--runtime", job_fields["runtime"], "--log-dir", str(tmp_path)]
    if image := job_fields.get("image"):
        args += ["--image", image]
    # No --repo: the provider makes a scratch repository for the task.
    ran = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.strip().endswith("status success; accuracy 1.0"), ran.stdout
    assert list(tmp_path.glob("*.eval")), "Inspect wrote its log"
