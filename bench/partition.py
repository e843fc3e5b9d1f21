#!/usr/bin/env python3
"""Network partitions of a simulated host (`torus up --netns`, root): how long from `torus node cut NAME` until the
head reports the host DEAD and its slice DEGRADED, and from `torus node heal NAME` until the host is ALIVE again
(registered as a new incarnation) and its slice READY. The head's default node timeout (3 s) unless --node-timeout-ms.

Polls the head's JSON view of the cluster (GET /api/v0/cluster) every 20 ms;
the times include that polling. Everything lives in a temporary TORUS_TEMP_DIR.

Usage: sudo /usr/bin/python3 bench/partition.py [--trials 10] [--node-timeout-ms 3000]
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TORUS_BIN_DIR", os.path.join(REPO, "build", "bin"))
SPEC = os.path.join(REPO, "tests", "integration", "specs", "two_v6e.yaml")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--node-timeout-ms", type=int, default=3000)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench-partition-")
    env = dict(os.environ, TORUS_TEMP_DIR=root)

    def torus(*argv):
        return subprocess.run([os.path.join(BIN, "torus"), *argv], env=env, check=True, capture_output=True,
                              text=True)

    torus("up", "--netns", SPEC, "--port", "0", "--dashboard-port", "0", "--node-timeout-ms",
          str(args.node_timeout_ms))
    session = os.path.realpath(os.path.join(root, "session_latest"))
    address = open(os.path.join(session, "dashboard_address")).read().strip()
    token = open(os.path.join(session, "token")).read().strip()

    def states(host, slice_name):
        request = urllib.request.Request(f"http://{address}/api/v0/cluster",
                                         headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            view = json.loads(response.read())
        node = next(n["state"] for n in view["nodes"] if n["node_id"] == host)
        group = next(s["state"] for s in view["slices"] if s["name"] == slice_name)
        return node, group

    def until(host, slice_name, wanted):
        t0 = time.perf_counter()
        while states(host, slice_name) != wanted:
            time.sleep(0.02)
        return time.perf_counter() - t0

    cut, healed = [], []
    try:
        for i in range(args.trials):
            host = f"v6e-{i % 2}-w{i % 4}"
            slice_name = host.rsplit("-w", 1)[0]
            t0 = time.perf_counter()
            torus("node", "cut", host)
            until(host, slice_name, ("DEAD", "DEGRADED"))
            cut.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            torus("node", "heal", host)
            until(host, slice_name, ("ALIVE", "READY"))
            healed.append(time.perf_counter() - t0)
            print(f"trial {i + 1}: {host} DEAD after {cut[-1] * 1e3:.0f} ms, back after {healed[-1] * 1e3:.0f} ms",
                  flush=True)
    finally:
        subprocess.run([os.path.join(BIN, "torus"), "down"], env=env, capture_output=True)
    print(f"\n| node timeout | trials | cut to DEAD + DEGRADED p50 / max | heal to ALIVE + READY p50 / max |\n"
          f"|---:|---:|---:|---:|\n| {args.node_timeout_ms} ms | {len(cut)} | "
          f"{statistics.median(cut) * 1e3:,.0f} / {max(cut) * 1e3:,.0f} ms | "
          f"{statistics.median(healed) * 1e3:,.0f} / {max(healed) * 1e3:,.0f} ms |")


if __name__ == "__main__":
    main()
