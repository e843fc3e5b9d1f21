"""JaxTrainer on a simulated v6e 4x4 slice (4 hosts), under torus and under Ray on the same machine, alternating.

    .venv/bin/python bench/jax_trainer.py [--reps 3] [--steps 12]

The program is examples/train_jax.py, a Ray Train script, unchanged: Ray runs it as is; torus runs it with `ray`
resolved to torus (python/as_ray first on PYTHONPATH). Both clusters are those of the differential suite
(tests/compat/clusters.py): `torus up` of one v6e-16 slice, and `ray start` of a head plus 4 hosts with the
environment and TPU resources Ray reads on a GKE TPU pod. Each repetition measures, from outside:

- submit → first step: from the driver command's start to rank 0's first training step (the time it prints);
- fit wall: the driver command, start to exit, for an uninterrupted run;
- kill → resumed: rank 2's process is SIGKILLed right after the checkpoint of step 6 is reported; from the kill to
  rank 0's first step of the restarted gang (which resumes from that checkpoint).

Prints a table of medians (min–max) and the ratio Ray / torus; `--markdown` prints it for bench/RESULTS.md.
"""

import argparse
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "compat"))
import clusters  # noqa: E402 - the differential suite's simulated TPU clusters

VENV = REPO / ".venv" / "bin"
EXAMPLE = REPO / "examples" / "train_jax.py"
CLUSTER = {"accelerator": "v6e", "topology": "4x4", "slices": 1}
FIRST_STEP = re.compile(r"first step (\d+) at ([0-9.]+)")


def base_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_", "TORUS_")) and k != "PYTHONPATH"}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    return env


class Driver:
    """One run of the example; collects its output lines with the time each arrived."""

    def __init__(self, env, args, cwd):
        self.lines = []
        self.started = time.time()
        self.proc = subprocess.Popen([str(VENV / "python"), str(EXAMPLE), "--address", "auto", *args], env=env,
                                     cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, needle, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(needle in line for line in self.lines):
                return
            if self.proc.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.02)
        raise RuntimeError(f"no {needle!r} in the driver's output:\n{''.join(self.lines)[-4000:]}")

    def finish(self, timeout):
        code = self.proc.wait(timeout=timeout)
        ended = time.time()
        self.reader.join(timeout=10)
        if code != 0:
            raise RuntimeError(f"driver exited {code}:\n{''.join(self.lines)[-4000:]}")
        return ended

    def first_steps(self):
        return [(int(m.group(1)), float(m.group(2))) for m in map(FIRST_STEP.search, self.lines) if m]


def one_run(env, tmp, steps, name):
    storage = Path(tmp) / "runs"
    d = Driver(env, ["--storage-path", str(storage), "--name", name, "--steps", str(steps)], tmp)
    ended = d.finish(timeout=600)
    first = d.first_steps()[0][1]
    return {"first_step": first - d.started, "wall": ended - d.started}


def killed_run(env, tmp, steps, name):
    storage, pids = Path(tmp) / "runs", Path(tmp) / f"pids-{name}"
    pids.mkdir()
    d = Driver(env, ["--storage-path", str(storage), "--name", name, "--steps", str(steps), "--step-sleep", "0.3",
                     "--pid-dir", str(pids)], tmp)
    d.wait_for("checkpoint of step 6 reported", timeout=300)
    killed = time.time()
    os.kill(int((pids / "rank2.pid").read_text()), signal.SIGKILL)
    d.finish(timeout=600)
    resumed = [t for step, t in d.first_steps() if step > 1]
    if not resumed:
        raise RuntimeError(f"the gang did not resume:\n{''.join(d.lines)[-4000:]}")
    return {"resume": resumed[0] - killed}


def summary(values):
    return statistics.median(values), min(values), max(values)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    results = {"torus": [], "ray": []}
    with tempfile.TemporaryDirectory(prefix="bench-jax-") as root:
        root = Path(root)
        env = base_env()
        (root / "torus").mkdir()
        torus = clusters.TorusCluster(CLUSTER, root / "torus", REPO / "build" / "bin", env)
        (root / "ray").mkdir()
        ray = clusters.RayCluster(CLUSTER, root / "ray" / "t", VENV / "ray", env)
        try:
            torus_env = dict(env, **torus.harness_env())
            torus_env["PYTHONPATH"] = os.pathsep.join(
                [str(REPO / "python" / "as_ray"), str(REPO / "python"), str(REPO / "build" / "python")])
            ray_env = dict(env, **ray.harness_env())
            for rep in range(args.reps):
                for system, system_env in (("torus", torus_env), ("ray", ray_env)):
                    with tempfile.TemporaryDirectory(prefix=f"{system}-", dir=root) as tmp:
                        run = one_run(system_env, tmp, args.steps, f"plain-{rep}")
                        run.update(killed_run(system_env, tmp, args.steps, f"killed-{rep}"))
                    results[system].append(run)
                    print(f"rep {rep} {system}: " + ", ".join(f"{k} {v:.2f} s" for k, v in run.items()),
                          file=sys.stderr, flush=True)
        finally:
            ray.stop()
            torus.stop()
    rows = [("submit → first step (s)", "first_step"), ("fit wall, uninterrupted (s)", "wall"),
            ("worker killed → gang's first step again (s)", "resume")]
    header = "| measure | torus median (min–max) | Ray median (min–max) | Ray / torus |"
    print(header)
    print("|---|---:|---:|---:|")
    for label, key in rows:
        t = summary([r[key] for r in results["torus"]])
        r = summary([r[key] for r in results["ray"]])
        print(f"| {label} | {t[0]:.2f} ({t[1]:.2f}–{t[2]:.2f}) | {r[0]:.2f} ({r[1]:.2f}–{r[2]:.2f}) | "
              f"{r[0] / t[0]:.1f}x |")
    print(f"\n{args.reps} repetitions each, alternating; {platform.node()}: {os.cpu_count()} CPUs, "
          f"python {platform.python_version()}, {time.strftime('%Y-%m-%d')}")


if __name__ == "__main__":
    main()
