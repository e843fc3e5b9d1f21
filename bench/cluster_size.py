"""Does the cluster's size tax the small-task path? The task and actor cases of bench/vs_ray_cases.py (a Ray program,
`ray` resolved to torus) on a one-node cluster (`torus start --head`) and on the README's 16-agent local cluster
(`torus up examples/clusters/local.yaml`), alternating, each on a fresh cluster; prints medians, spreads and the
16-agent figure against the one-node one.

    /usr/bin/python3 bench/cluster_size.py [--reps 3] [--scale 1.0] [--cases sync_task,async_tasks,chained,actor_calls,actor_fanout]

The ratio is how the 16-agent cluster does against one node: above 1 means it is faster, 0.8 means 20% slower
(times: one-node / 16-agent; rates: 16-agent / one-node). `--scale 0.01 --reps 1` is the test run's tiny size.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN_DIR = Path(os.environ.get("TORUS_BIN_DIR", REPO / "build" / "bin"))  # the build's binaries; its module beside
TORUS = BIN_DIR / "torus"
CASES = REPO / "bench" / "vs_ray_cases.py"
CLUSTERS = {
    "one node": ["start", "--head", "--port", "0", "--dashboard-port", "0"],
    "16 agents": ["up", str(REPO / "examples" / "clusters" / "local.yaml"), "--port", "0", "--dashboard-port", "0"],
}


def env_for(temp_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "TORUS_")) and k != "PYTHONPATH"}
    env["TORUS_TEMP_DIR"] = temp_dir
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python" / "as_ray"), str(REPO / "python"),
                                         str(BIN_DIR.parent / "python")])
    return env


def run_on(cluster, args):
    """One fresh cluster of kind `cluster`, the cases once against it, the cluster stopped."""
    temp_dir = tempfile.mkdtemp(prefix="bench-cluster-size-")
    env = env_for(temp_dir)
    subprocess.run([str(TORUS)] + CLUSTERS[cluster], env=env, check=True, capture_output=True, timeout=180)
    try:
        argv = ["/usr/bin/python3", str(CASES), "--address", "auto", "--scale", str(args.scale), "--cases",
                args.cases]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=args.timeout, cwd=REPO,
                              stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"{cluster}: {CASES.name} exited {proc.returncode}\n{proc.stdout[-3000:]}\n"
                               f"{proc.stderr[-5000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        subprocess.run([str(TORUS), "down"], env=env, capture_output=True, timeout=120)


def spread(values):
    return f"{statistics.median(values):,.3g} ({min(values):,.3g}–{max(values):,.3g})"


def table(results):
    one, many = results["one node"], results["16 agents"]
    rows = ["| case | one node median (min–max) | 16 agents median (min–max) | 16 agents / one node |",
            "|---|---:|---:|---:|"]
    for case in one[0]:
        a = statistics.median(r[case] for r in one)
        b = statistics.median(r[case] for r in many)
        ratio = b / a if "(per s)" in case else a / b
        rows.append(f"| {case} | {spread([r[case] for r in one])} | {spread([r[case] for r in many])} | "
                    f"{ratio:.2f} |")
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--cases", default="sync_task,async_tasks,chained,actor_calls,actor_fanout")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for one driver")
    args = parser.parse_args()
    if not TORUS.exists():
        sys.exit(f"{TORUS} is missing: build first (scripts/setup.sh)")
    results = {name: [] for name in CLUSTERS}
    for rep in range(args.reps):
        for cluster in CLUSTERS:
            t0 = time.monotonic()
            results[cluster].append(run_on(cluster, args))
            print(f"rep {rep} {cluster}: {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    print(table(results))
    print(f"\n{args.reps} repetitions, alternating; {platform.node()}: {os.cpu_count()} CPUs, "
          f"python {platform.python_version()}, scale {args.scale}; {time.strftime('%Y-%m-%d')}")


if __name__ == "__main__":
    main()
