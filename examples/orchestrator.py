#!/usr/bin/env python3
"""Dispatch feature jobs to `paddock serve` over its Unix socket, with the standard library only.

Each feature gets its own job (branch + worktree + container), runs a command that commits,
and is removed; the branch stays because it has a commit. Prints one JSON object per feature
and exits non-zero if any feature failed.

    python3 examples/orchestrator.py --repo /path/to/repo [--socket PATH] [--jobs 5]
        [--runtime docker] [--image paddock-agent:latest]
"""
import argparse
import http.client
import json
import os
import socket
import sys
from concurrent.futures import ThreadPoolExecutor


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket."""

    def __init__(self, path, timeout=600):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


def call(socket_path, method, path, body=None):
    conn = UnixHTTPConnection(socket_path)
    payload = None if body is None else json.dumps(body)
    conn.request(method, path, body=payload, headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    parsed = json.loads(data) if data else None
    if response.status >= 400:
        raise RuntimeError(f"{method} {path}: HTTP {response.status}: {parsed}")
    return parsed


def run_feature(socket_path, repo, n, runtime=None, image=None):
    body = {"repo": repo, "agent": "orchestrator", "task": f"feature-{n}"}
    if runtime:
        body["runtime"] = runtime
    if image:
        body["image"] = image
    job = call(socket_path, "POST", "/v1/jobs", body)
    job_id = job["id"]
    try:
        script = (
            f"echo 'feature {n}' > feature-{n}.txt && git add feature-{n}.txt "
            f"&& git commit -q -m 'feature {n}'"
        )
        result = call(socket_path, "POST", f"/v1/jobs/{job_id}/exec",
                      {"cmd": ["sh", "-c", script], "timeout": "2m"})
        shown = call(socket_path, "GET", f"/v1/jobs/{job_id}")
    finally:
        removed = call(socket_path, "DELETE", f"/v1/jobs/{job_id}")
    return {
        "feature": n,
        "job": job_id,
        "branch": job["branch"],
        "runtime": job["runtime"],
        "exit_code": result["exit_code"],
        "commits_ahead": shown["changes"]["commits_ahead"],
        "branch_kept": removed["branch_kept"],
    }


def default_socket():
    """The socket of `paddock serve` in paddock's default state root (README: where its
    state lives): $PADDOCK_HOME, else /var/lib/paddock as root, else
    $XDG_DATA_HOME/paddock or ~/.local/share/paddock."""
    home = os.environ.get("PADDOCK_HOME")
    if not home and os.geteuid() == 0:
        home = "/var/lib/paddock"
    if not home:
        data = os.environ.get("XDG_DATA_HOME")
        if not data or not os.path.isabs(data):
            data = os.path.expanduser("~/.local/share")
        home = os.path.join(data, "paddock")
    return os.path.join(home, "paddock.sock")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True, help="the repository to branch from")
    parser.add_argument("--socket", default=default_socket(), help="paddock serve's socket")
    parser.add_argument("--jobs", type=int, default=5, help="features to dispatch in parallel")
    parser.add_argument("--runtime", help="docker, runsc or process (default: the daemon's)")
    parser.add_argument("--image", help="the agent image (default: the profile's)")
    args = parser.parse_args()
    repo = os.path.abspath(args.repo)
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run_feature, args.socket, repo, n, args.runtime, args.image) for n in range(1, args.jobs + 1)]
        results, failed = [], False
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
