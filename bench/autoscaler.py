#!/usr/bin/env python3
"""What a user waits for when the TPU pool is empty: `torus slice reserve --wait` from start to exit on a local cluster
whose v6e 4x4 slices are launched by the autoscaler (local provider: simulated hosts started by `torus node
add-slice`), against the same command on a cluster whose slices already exist. Each round reserves, then removes
the group; on the autoscaled cluster the slices are then removed (idle timeout 1 s) before the next round, so every
round launches them afresh. Also times a gang run (`torus train ... -- /bin/true`, 4 workers) on an empty pool.

    /usr/bin/python3 bench/autoscaler.py [--repeats 5]
"""

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("TORUS_BIN_DIR", REPO / "build" / "bin"))

AUTOSCALED = """
head: {num_cpus: 4, memory: 8Gi}
node_types:
  - name: v6e
    tpu: {pod_type: v6e-16, topology: 4x4}
    max_slices: 2
    idle_timeout_s: 1
"""
STATIC = """
head: {num_cpus: 4, memory: 8Gi}
node_groups:
  - name: v6e
    tpu: {pod_type: v6e-16, topology: 4x4}
    slices: 2
"""
SLICE = ["--accelerator-type", "TPU-V6E", "--topology", "4x4"]


def torus(env, *args, timeout=180):
    return subprocess.run([str(BIN / "torus"), *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=timeout, check=True)


def autoscaler(env):
    session = Path(env["TORUS_TEMP_DIR"]) / "session_latest"
    address = (session / "dashboard_address").read_text().strip()
    request = urllib.request.Request(f"http://{address}/api/v0/autoscaler",
                                     headers={"Authorization": f"Bearer {(session / 'token').read_text().strip()}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def wait_empty(env):
    deadline = time.time() + 60
    while time.time() < deadline:
        if not autoscaler(env)["slices"] and not json.loads(torus(env, "status", "--json").stdout)["slices"]:
            return
        time.sleep(0.2)
    raise TimeoutError("the autoscaled slices were not removed")


def timed(env, *args):
    start = time.perf_counter()
    torus(env, *args)
    return (time.perf_counter() - start) * 1000


def measure(spec_text, repeats, autoscaled):
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TORUS_")}
        env["TORUS_TEMP_DIR"] = tmp
        spec = Path(tmp) / "spec.yaml"
        spec.write_text(spec_text)
        torus(env, "up", spec, "--port", "0", "--dashboard-port", "0")
        try:
            for slices in (1, 2):
                samples = []
                for i in range(repeats):
                    name = f"r{slices}-{i}"
                    samples.append(timed(env, "slice", "reserve", *SLICE, "--num-slices", slices, "--name", name,
                                         "--wait", "120"))
                    torus(env, "pg", "remove", name)
                    if autoscaled:
                        wait_empty(env)
                rows[f"slice reserve x{slices} --wait"] = samples
            samples = []
            for i in range(repeats):
                samples.append(timed(env, "train", *SLICE, "--name", f"t{i}", "--", "/bin/true"))
                if autoscaled:
                    wait_empty(env)
            rows["train (4 workers of /bin/true)"] = samples
        finally:
            torus(env, "down")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    empty = measure(AUTOSCALED, args.repeats, autoscaled=True)
    ready = measure(STATIC, args.repeats, autoscaled=False)
    print(f"| command (end to end, ms; {args.repeats} rounds) | empty pool: p50 | max | slices there: p50 | max |"
          " difference p50 |")
    print("|---|---:|---:|---:|---:|---:|")
    for row, samples in empty.items():
        there = ready[row]
        print(f"| `{row}` | {statistics.median(samples):.0f} | {max(samples):.0f} | {statistics.median(there):.0f} |"
              f" {max(there):.0f} | {statistics.median(samples) - statistics.median(there):.0f} |")


if __name__ == "__main__":
    main()
