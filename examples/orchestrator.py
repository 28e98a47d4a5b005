#!/usr/bin/env python3
"""Dispatch feature jobs to `paddock serve` with paddock's Python SDK (clients/python).

Each feature gets its own job (branch + worktree + container), runs a command that commits,
and is removed; the branch stays because it has a commit. Prints one JSON object per feature
and exits non-zero if any feature failed.

    pip install ./clients/python
    python3 examples/orchestrator.py --repo /path/to/repo [--socket PATH] [--jobs 5]
        [--runtime docker] [--image paddock-agent:latest]
"""
import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

try:
    import paddock
except ImportError:  # run from a checkout without installing the SDK
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python", "src"))
    import paddock


def run_feature(client, repo, n, runtime=None, image=None):
    fields = {"agent": "orchestrator", "task": f"feature-{n}"}
    if runtime:
        fields["runtime"] = runtime
    if image:
        fields["image"] = image
    job = client.create(repo, **fields)
    try:
        script = (
            f"echo 'feature {n}' > feature-{n}.txt && git add feature-{n}.txt "
            f"&& git commit -q -m 'feature {n}'"
        )
        result = client.exec(job.id, ["sh", "-c", script], timeout="2m")
        shown = client.show(job.id)
    finally:
        removed = client.remove(job.id)
    return {
        "feature": n,
        "job": job.id,
        "branch": job.branch,
        "runtime": job.runtime.value,
        "exit_code": result.exit_code,
        "commits_ahead": shown.changes.commits_ahead,
        "branch_kept": removed.branch_kept,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True, help="the repository to branch from")
    parser.add_argument("--socket", default=paddock.default_socket(), help="paddock serve's socket")
    parser.add_argument("--jobs", type=int, default=5, help="features to dispatch in parallel")
    parser.add_argument("--runtime", help="docker, runsc or process (default: the daemon's)")
    parser.add_argument("--image", help="the agent image (default: the profile's)")
    args = parser.parse_args()
    repo = os.path.abspath(args.repo)
    results, failed = [], False
    with paddock.Client(args.socket) as client, ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [
            pool.submit(run_feature, client, repo, n, args.runtime, args.image)
            for n in range(1, args.jobs + 1)
        ]
        for future in futures:
            try:
                results.append(future.result())
            except Exception as error:  # report every feature, then fail
                results.append({"error": str(error)})
                failed = True
    for result in results:
        print(json.dumps(result))
        if (result.get("exit_code") != 0 or not result.get("branch_kept")
                or result.get("commits_ahead") != 1):
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
