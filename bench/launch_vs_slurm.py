#!/usr/bin/env python3
"""End to end launch, torus against Slurm in the same run: what a user waits for, from starting the command to its
exit, for

  - a gang of 16 workers of /bin/true, one per chip of a v6e 4x4 slice (`torus train --accelerator-type TPU-V6E
    --topology 4x4 --resources-per-worker '{"TPU": 1}' -- /bin/true`) against `srun -n16 true`;
  - a gang of 64, one per chip of four such slices (`--num-slices 4`), against `srun -n64 true`;
  - one job (`torus job submit -- true`) against `srun -n1 true`.

torus runs on a local cluster of bench/gang_cluster.yaml (4 v6e-16 slices, started here); Slurm on the one-node
cluster of bench/peer_slurm.sh (run that first, as root). The two alternate, command by command, and the table
gives p50 and p90 of each and the ratio of the p50s (torus / srun).

    /usr/bin/python3 bench/launch_vs_slurm.py [--repeats 10] [--no-slurm]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("TORUS_BIN_DIR", REPO / "build" / "bin"))

GANG = ["train", "--accelerator-type", "TPU-V6E", "--topology", "4x4", "--resources-per-worker", '{"TPU": 1}']
CASES = [
    ("gang of 16 x /bin/true (1 slice, per chip)", GANG + ["--name", "bench16", "--", "/bin/true"],
     ["-n16", "true"]),
    ("gang of 64 x /bin/true (4 slices, per chip)", GANG + ["--num-slices", "4", "--name", "bench64", "--",
                                                           "/bin/true"], ["-n64", "true"]),
    ("one job: true", ["job", "submit", "--", "true"], ["-n1", "true"]),
]


def timed(argv, env):
    """Seconds from starting argv to its exit; fails loudly if it does not exit 0."""
    t0 = time.perf_counter()
    result = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    if result.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {result.returncode}: {result.stderr.strip()}")
    return elapsed


def quantile(samples, q):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--no-slurm", action="store_true", help="measure torus alone")
    parser.add_argument("--tls", action="store_true", help="a torus cluster with TLS (torus up --tls)")
    args = parser.parse_args()
    srun = shutil.which("srun")
    if not args.no_slurm and (srun is None or subprocess.run(["sinfo", "-h"], capture_output=True).returncode != 0):
        sys.exit("Slurm is not running here: run bench/peer_slurm.sh (as root) first, or pass --no-slurm")
    root = Path(tempfile.mkdtemp(prefix="torus_bench_launch_"))
    env = dict(os.environ, TORUS_TEMP_DIR=str(root))
    torus = str(BIN / "torus")
    subprocess.run([torus, "up", str(REPO / "bench" / "gang_cluster.yaml"), "--port", "0", "--dashboard-port", "0"] +
                   (["--tls"] if args.tls else []), env=env, check=True, stdout=subprocess.DEVNULL)
    try:
        samples = {name: {"torus": [], "srun": []} for name, _, _ in CASES}
        for name, torus_args, srun_args in CASES:  # one of each first, not counted
            timed([torus, *torus_args], env)
            if not args.no_slurm:
                timed([srun, *srun_args], os.environ)
        for _ in range(args.repeats):
            for name, torus_args, srun_args in CASES:
                samples[name]["torus"].append(timed([torus, *torus_args], env))
                if not args.no_slurm:
                    samples[name]["srun"].append(timed([srun, *srun_args], os.environ))
    finally:
        subprocess.run([torus, "down"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'command start to exit (ms)':46s} {'n':>4s} {'torus p50':>10s} {'torus p90':>10s} "
          f"{'srun p50':>10s} {'srun p90':>10s} {'torus/srun':>11s}")
    for name, _, _ in CASES:
        t, s = samples[name]["torus"], samples[name]["srun"]
        t50, t90 = 1000 * statistics.median(t), 1000 * quantile(t, 0.9)
        if s:
            s50, s90 = 1000 * statistics.median(s), 1000 * quantile(s, 0.9)
            print(f"{name:46s} {len(t):4d} {t50:10.1f} {t90:10.1f} {s50:10.1f} {s90:10.1f} {t50 / s50:11.2f}")
        else:
            print(f"{name:46s} {len(t):4d} {t50:10.1f} {t90:10.1f} {'-':>10s} {'-':>10s} {'-':>11s}")


if __name__ == "__main__":
    main()
