#!/usr/bin/env python3
"""The head's HTTP API under concurrent clients: job submissions (Ray Jobs REST API) from N threads, each keeping
its connection alive or opening one per request (as curl, or a client without a session, does).

Starts `torus start --head --no-local-node` in a temporary TORUS_TEMP_DIR; the jobs ask for a resource no node has,
so that they stay PENDING and the head's submission path alone is measured. Prints, per round, the submissions
acknowledged per second and every error by kind (a connection reset, a 5xx); then checks that every acknowledged
submission is listed.

Usage: /usr/bin/python3 bench/http_load.py [--rounds "16x1000:kept,64x300:fresh"]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TORUS_BIN_DIR", os.path.join(REPO, "build", "bin"))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from test_http_load import submit_all  # noqa: E402


def submit(address, token, clients, per_client, fresh, prefix):
    t0 = time.perf_counter()
    acked, errors = submit_all(address, token, prefix, fresh, clients, per_client)
    return acked, errors, time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", default="16x1000:kept,64x300:fresh",
                        help="CLIENTSxPER_CLIENT:kept|fresh, comma-separated")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench-http-load-")
    env = dict(os.environ, TORUS_TEMP_DIR=root)
    torus = os.path.join(BIN, "torus")
    subprocess.run([torus, "start", "--head", "--no-local-node", "--port", "0", "--dashboard-port", "0"], env=env,
                   check=True, capture_output=True)
    try:
        session = os.path.realpath(os.path.join(root, "session_latest"))
        address = open(os.path.join(session, "dashboard_address")).read().strip()
        token = open(os.path.join(session, "token")).read().strip()
        rows, all_acked = [], []
        for n, spec in enumerate(args.rounds.split(",")):
            shape, mode = spec.split(":")
            clients, per_client = map(int, shape.split("x"))
            acked, errors, seconds = submit(address, token, clients, per_client, mode == "fresh", f"r{n}")
            all_acked += acked
            rows.append((clients, per_client, mode, len(acked), seconds, errors))
        listed = json.loads(subprocess.run([torus, "job", "list", "--json"], env=env, check=True,
                                           capture_output=True, text=True).stdout)
        missing = set(all_acked) - {j["submission_id"] for j in listed}
    finally:
        subprocess.run([torus, "stop"], env=env, capture_output=True)
    print("| clients | each | connections | acknowledged | per s | errors |\n|---:|---:|---|---:|---:|---|")
    for clients, per_client, mode, acked, seconds, errors in rows:
        print(f"| {clients} | {per_client} | {'one per request' if mode == 'fresh' else 'kept alive'} | {acked:,} | "
              f"{acked / seconds:,.0f} | {dict(errors) or 'none'} |")
    print(f"\nacknowledged but not listed: {len(missing)}")


if __name__ == "__main__":
    main()
