"""bench/vs_ray.py at the tiny size (one repetition, 1% of the counts): every case runs under Ray and under torus and
the table has a row for each with a number on both sides, so the benchmark cannot rot. (Its figures at this size
mean nothing; bench/RESULTS.md has the real run.)"""

import re
import subprocess
import sys

from conftest import REPO


def test_every_case_runs_under_both_systems():
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "vs_ray.py"), "--reps", "1", "--scale", "0.01",
                           "--num-cpus", "2"], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and not line.startswith("| case")]
    cases = [row.split(" | ")[0][2:] for row in rows]
    assert cases == ["init to first task result (s)", "sync task round trip (ms)", "async tasks (per s)",
                     "tasks with a 1 MiB argument (per s)", "task with a 100 MiB argument (ms)",
                     "task tree of depth 4 (ms)", "result consumed by another task (per s)",
                     "create 1 actors to all ready (s)", "sync actor call (ms)", "actor calls, 1 actor (per s)",
                     "async actor, calls in flight (per s)", "actor calls, 1 caller to 4 actors (per s)",
                     "actor calls, 4 actors to 4 actors (per s)", "put + get of a 256 MiB array (ms)",
                     "small puts (per s)", "wait over 100 ready refs (ms)",
                     "placement group of 1 bundle: create, ready, remove (ms)",
                     "placement group of 16 bundles: create, ready, remove (ms)"], proc.stdout
    number = r"[0-9][0-9.,e+]*"
    for row in rows:
        assert re.fullmatch(rf"\| .+ \| {number} \({number}–{number}\) \| {number} \({number}–{number}\) \| "
                            rf"{number}x \|", row), row
