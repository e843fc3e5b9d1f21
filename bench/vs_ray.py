"""torus against Ray on this machine, in one run: bench/vs_ray_cases.py (a Ray program) run under Ray 2.60 from
the development venv and under torus (`ray` resolved to torus), alternating, each with a local `ray.init(num_cpus=)`
of the same CPUs; prints a table of medians, spreads and ratios.

    .venv/bin/python bench/vs_ray.py [--reps 3] [--num-cpus 2] [--scale 1.0] [--cases a,b] [--markdown]

Each repetition is one fresh driver per system (init included), torus first, then Ray. For times, the ratio is
Ray / torus; for rates, torus / Ray: above 1 means torus is faster either way. `--scale 0.01 --reps 1` is the test
run's tiny size (tests/compat/test_bench_vs_ray.py), which only checks that every case runs under both.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
CASES = REPO / "bench" / "vs_ray_cases.py"


def system_env(system):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "TORUS_")) and k != "PYTHONPATH"}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    if system == "torus":
        env["PYTHONPATH"] = os.pathsep.join(str(REPO / p) for p in ("python/as_ray", "python", "build/python"))
    return env


def run_cases(system, args, timeout):
    argv = [str(VENV_PYTHON), str(CASES), "--num-cpus", str(args.num_cpus), "--scale", str(args.scale),
            "--cases", args.cases]
    proc = subprocess.run(argv, env=system_env(system), capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise RuntimeError(f"{system}: {CASES.name} exited {proc.returncode}\n{proc.stdout[-3000:]}\n"
                           f"{proc.stderr[-5000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def spread(values):
    return f"{statistics.median(values):,.3g} ({min(values):,.3g}–{max(values):,.3g})"


def table(results):
    rows = ["| case | torus median (min–max) | Ray median (min–max) | torus advantage |", "|---|---:|---:|---:|"]
    for case in results["torus"][0]:
        mine = [r[case] for r in results["torus"]]
        theirs = [r[case] for r in results["ray"]]
        rate = "(per s)" in case
        ratio = (statistics.median(mine) / statistics.median(theirs) if rate
                 else statistics.median(theirs) / statistics.median(mine))
        rows.append(f"| {case} | {spread(mine)} | {spread(theirs)} | {ratio:.2f}x |")
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--num-cpus", type=int, default=os.cpu_count())
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--cases", default="sync_task,async_tasks,task_args,task_tree,chained,actor_creation,"
                                           "actor_calls,actor_fanout,objects,placement_groups")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for one driver")
    parser.add_argument("--markdown", action="store_true", help="also print the machine line for RESULTS.md")
    args = parser.parse_args()
    if not VENV_PYTHON.exists():
        sys.exit(f"{VENV_PYTHON} is missing: scripts/setup.sh makes the development venv with Ray")
    results = {"torus": [], "ray": []}
    for rep in range(args.reps):
        for system in ("torus", "ray"):
            t0 = time.monotonic()
            results[system].append(run_cases(system, args, args.timeout))
            print(f"rep {rep} {system}: {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    print(table(results))
    if args.markdown:
        version = subprocess.run([str(VENV_PYTHON), "-c", "import ray; print(ray.__version__)"],
                                 env=system_env("ray"), capture_output=True, text=True).stdout.strip()
        print(f"\n{args.reps} repetitions, alternating; {platform.node()}: {os.cpu_count()} CPUs, "
              f"python {platform.python_version()}, Ray {version}, num_cpus {args.num_cpus}, scale {args.scale}; "
              f"{time.strftime('%Y-%m-%d')}")


if __name__ == "__main__":
    main()
