#!/usr/bin/env python3
"""Gang launch and restart latency on a local simulated cluster (bench/gang_cluster.yaml: 4 v6e-16 slices).

For gangs of 4 (one worker per host of one slice), 16 (one per chip of one slice) and 64 (one per chip of four
slices) it measures the time from submitting the run to every worker process running (each worker records its
start time first thing), and, for 16 workers, the time from a worker's death (kill -9) to every worker of the next
attempt running. Prints a table.

    /usr/bin/python3 bench/gang.py [--repeats 5] [--no-journal] [--tls off|on|both] [--rounds 1]

`--tls both` measures a plaintext cluster and one with TLS (`torus up --tls`: gRPC and HTTPS, node certificates)
alternately, `--rounds` times each, and prints both with the ratio of their medians.
"""

import argparse
import json
import os
import ssl
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("TORUS_BIN_DIR", REPO / "build" / "bin"))


class Head:
    def __init__(self, session):
        ca = session / "ca.crt"
        self.context = ssl.create_default_context(cafile=str(ca)) if ca.exists() else None
        scheme = "https://" if self.context else "http://"
        self.base = scheme + (session / "dashboard_address").read_text().strip()
        self.token = (session / "token").read_text().strip()

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", "Bearer " + self.token)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=30, context=self.context) as response:
            return json.loads(response.read())


def worker_command(marks):
    # First thing: record the start time; then idle until stopped.
    return ["/bin/sh", "-c", f'date +%s.%N > {marks}/start_${{TORUS_ATTEMPT}}_${{TORUS_RANK}}; echo $$ > {marks}/pid_${{TORUS_ATTEMPT}}_${{TORUS_RANK}}; exec sleep 600']


def wait_for(paths, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if all(p.exists() and p.stat().st_size > 0 for p in paths):
            return max(float(p.read_text()) for p in paths)
        time.sleep(0.002)
    raise TimeoutError(f"workers did not all start: {[str(p) for p in paths if not p.exists()]}")


def spec(n, marks, per_chip, slices, max_failures=0):
    scaling = {"use_tpu": True, "accelerator_type": "TPU-V6E", "topology": "4x4", "num_slices": slices}
    if per_chip:
        scaling["resources_per_worker"] = {"CPU": 0.1, "TPU": 1}
    return {"scaling_config": scaling, "run_config": {"max_failures": max_failures, "storage_path": str(marks)},
            "entrypoint": worker_command(marks)}


def stop(head, run_id):
    head.call("POST", f"/api/v0/runs/{run_id}/stop", {})
    deadline = time.time() + 10
    while time.time() < deadline:
        if head.call("GET", f"/api/v0/runs/{run_id}")["status"] == "STOPPED":
            break
        time.sleep(0.02)
    time.sleep(0.3)  # let the agents release the slices


def launch(head, root, n, per_chip, slices, repeats):
    samples = []
    for i in range(repeats):
        marks = Path(tempfile.mkdtemp(dir=root))
        t0 = time.time()
        run_id = head.call("POST", "/api/v0/runs", spec(n, marks, per_chip, slices))["run_id"]
        last = wait_for([marks / f"start_1_{r}" for r in range(n)])
        samples.append((last - t0) * 1000)
        stop(head, run_id)
    return samples


def restart(head, root, n, repeats):
    samples = []
    for i in range(repeats):
        marks = Path(tempfile.mkdtemp(dir=root))
        run_id = head.call("POST", "/api/v0/runs", spec(n, marks, True, 1, max_failures=100))["run_id"]
        wait_for([marks / f"start_1_{r}" for r in range(n)])
        time.sleep(0.2)
        pid = int((marks / "pid_1_3").read_text())
        t0 = time.time()
        os.kill(pid, signal.SIGKILL)
        last = wait_for([marks / f"start_2_{r}" for r in range(n)])
        samples.append((last - t0) * 1000)
        stop(head, run_id)
    return samples


def row(name, samples):
    samples = sorted(samples)
    p50 = statistics.median(samples)
    p99 = samples[min(len(samples) - 1, int(0.99 * (len(samples) - 1) + 0.5))]
    print(f"{name:44s} {len(samples):6d} {p50:10.1f} {p99:10.1f} {max(samples):10.1f}", flush=True)


MEASUREMENTS = ["launch 4 workers (1 slice, per host)", "launch 16 workers (1 slice, per chip)",
                "launch 64 workers (4 slices, per chip)", "restart 16 workers after kill -9 of one"]


def measure(args, tls):
    """Every measurement on a fresh cluster (with TLS or not): {name: samples}."""
    root = Path(tempfile.mkdtemp(prefix="torus_bench_gang_"))
    env = dict(os.environ, TORUS_TEMP_DIR=str(root))
    subprocess.run([str(BIN / "torus"), "up", str(REPO / "bench" / "gang_cluster.yaml"), "--port", "0",
                    "--dashboard-port", "0", "--serve-port", "-1"] + (["--no-journal"] if args.no_journal else []) +
                   (["--tls"] if tls else []), env=env, check=True, stdout=subprocess.DEVNULL)
    try:
        head = Head((root / "session_latest").resolve())
        return {MEASUREMENTS[0]: launch(head, root, 4, False, 1, args.repeats),
                MEASUREMENTS[1]: launch(head, root, 16, True, 1, args.repeats),
                MEASUREMENTS[2]: launch(head, root, 64, True, 4, args.repeats),
                MEASUREMENTS[3]: restart(head, root, 16, args.repeats)}
    finally:
        subprocess.run([str(BIN / "torus"), "down"], env=env, stdout=subprocess.DEVNULL)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-journal", action="store_true", help="the head keeps its state in memory only")
    parser.add_argument("--tls", choices=["off", "on", "both"], default="off")
    parser.add_argument("--rounds", type=int, default=1, help="with --tls both: alternations of off and on")
    args = parser.parse_args()
    if args.tls != "both":
        samples = measure(args, args.tls == "on")
        print(f"{'measurement (ms)':44s} {'n':>6s} {'p50':>10s} {'p99':>10s} {'max':>10s}")
        for name in MEASUREMENTS:
            row(name, samples[name])
        return 0
    off = {name: [] for name in MEASUREMENTS}
    on = {name: [] for name in MEASUREMENTS}
    for _ in range(args.rounds):
        for tls, into in ((False, off), (True, on)):
            for name, values in measure(args, tls).items():
                into[name] += values
    print(f"{'measurement (ms), p50':44s} {'n':>6s} {'plaintext':>10s} {'TLS':>10s} {'TLS/plain':>10s}")
    for name in MEASUREMENTS:
        a, b = statistics.median(off[name]), statistics.median(on[name])
        print(f"{name:44s} {len(off[name]):6d} {a:10.1f} {b:10.1f} {b / a:10.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
