"""bench/cluster_size.py at the tiny size (one repetition, 1% of the counts): every case runs on a one-node cluster
and on the 16-agent local one, and the table has a row for each with a number on both sides, so the benchmark
cannot rot. (Its figures at this size mean nothing; bench/RESULTS.md has the real run.)"""

import re
import subprocess

from conftest import REPO


def test_every_case_runs_on_one_node_and_on_sixteen_agents():
    proc = subprocess.run(["/usr/bin/python3", str(REPO / "bench" / "cluster_size.py"), "--reps", "1", "--scale",
                           "0.01"], capture_output=True, text=True, timeout=400, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and not line.startswith("| case")]
    cases = [row.split(" | ")[0][2:] for row in rows]
    assert cases == ["init to first task result (s)", "sync task round trip (ms)", "async tasks (per s)",
                     "result consumed by another task (per s)", "sync actor call (ms)",
                     "actor calls, 1 actor (per s)", "async actor, calls in flight (per s)",
                     "actor calls, 1 caller to 4 actors (per s)", "actor calls, 4 actors to 4 actors (per s)"], \
        proc.stdout
    number = r"[0-9][0-9.,e+]*"
    for row in rows:
        assert re.fullmatch(rf"\| .+ \| {number} \({number}–{number}\) \| {number} \({number}–{number}\) \| "
                            rf"{number} \|", row), row
