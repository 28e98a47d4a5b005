#!/usr/bin/env python3
"""A one-sample Inspect AI eval whose sample runs in a paddock job (`sandbox="paddock"`),
with Inspect's mock model: the solver writes and runs a script in the job, the scorer reads
its answer back from the job's files. Prints the score and exits 0 when it is 1.

    pip install './clients/python[inspect]'
    python3 clients/python/examples/inspect_eval.py [--repo PATH] [--runtime runsc]
"""

import argparse
import sys

from inspect_ai import Task, eval, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import sandbox

from paddock.inspect_sandbox import PaddockSandboxConfig


@solver
def compute_in_the_job():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        await sandbox().write_file("answer.sh", "echo $((6 * 7)) > answer.txt\n")
        ran = await sandbox().exec(["sh", "answer.sh"])
        state.metadata["exit_code"] = ran.returncode
        return await generate(state)  # the mock model answers; the job's file is scored

    return solve


@scorer(metrics=[accuracy()])
def answer_in_the_job():
    async def score(state: TaskState, target: Target) -> Score:
        answer = (await sandbox().read_file("answer.txt")).strip()
        return Score(value=CORRECT if answer == target.text else INCORRECT, answer=answer)

    return score


@task
def six_times_seven(config: PaddockSandboxConfig | None = None):
    return Task(
        dataset=[Sample(input="What is six times seven?", target="42")],
        solver=compute_in_the_job(),
        scorer=answer_in_the_job(),
        sandbox=("paddock", config or PaddockSandboxConfig()),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", help="the repository the job branches from (default: a scratch one)")
    parser.add_argument("--runtime", help="docker, runsc, microvm or process (default: the daemon's)")
    parser.add_argument("--image", help="the agent image (default: the profile's)")
    parser.add_argument("--log-dir", default=None, help="where Inspect writes its log")
    args = parser.parse_args()
    config = PaddockSandboxConfig(repo=args.repo, runtime=args.runtime, image=args.image)
    # Inspect's mock model, its answer given with its usage (else it counts tokens with an
    # encoding it downloads, and this example needs no network).
    answer = ModelOutput.from_content(model="mockllm/model", content="The job wrote its answer.")
    answer.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    model = get_model("mockllm/model", custom_outputs=[answer])
    logs = eval(six_times_seven(config), model=model, log_dir=args.log_dir, display="none")
    log = logs[0]
    accuracy_value = log.results.scores[0].metrics["accuracy"].value if log.results else 0.0
    print(f"status {log.status}; accuracy {accuracy_value}")
    return 0 if log.status == "success" and accuracy_value == 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
