#!/usr/bin/env python3
"""Submit-to-running time of a job with a 50 MB working directory: first upload, and cached.

On a local cluster (`torus start --head`: the head and one agent), each sample is the time from the start of the
command (or the REST call) to the first instruction of the job's entrypoint (it records the time in a file):

  CLI  `torus job submit --no-wait -- CMD`                               no working directory (the baseline)
  CLI  `torus job submit --no-wait --working-dir DIR -- CMD`, DIR new     packs, uploads, the agent fetches and unpacks
  CLI  the same DIR again                                               the CLI remembers DIR's name (DIR unchanged for
                                                                        2 s or more); found on the head and the node
  CLI  the same DIR with a file touched                                 hashes DIR's files again; no upload
  REST POST /api/jobs/ without runtime_env                              (the baseline)
  REST POST with working_dir gcs://<package>, not yet on the node       the agent fetches and unpacks
  REST the same package again                                           cached on the node

DIR holds 50 MB: 40 files of 1 MB of random bytes (weights) and 10 MB of Python-like text in 100 files.

    /usr/bin/python3 bench/packages.py [--repeats 10] [--mb 50]
"""

import argparse
import hashlib
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(os.environ.get("TORUS_BIN_DIR", REPO / "build" / "bin"))


class Head:
    def __init__(self, session):
        self.base = "http://" + (session / "dashboard_address").read_text().strip()
        self.token = (session / "token").read_text().strip()

    def call(self, method, path, body=None, raw=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Authorization", "Bearer " + self.token)
        request.add_header("Content-Type", "application/zip" if raw is not None else "application/json")
        with urllib.request.urlopen(request, timeout=120) as response:
            return json.loads(response.read())


def make_project(path, mb, seed):
    rng = random.Random(seed)
    path.mkdir(parents=True)
    weights = max(1, mb * 4 // 5)
    for i in range(weights):
        (path / f"weights_{i:02d}.bin").write_bytes(rng.randbytes(1 << 20))
    text = "".join(f"def f{i}(x):\n    return x * {i} + {rng.random()}\n" for i in range(2000)).encode()
    for i in range(100):
        (path / "src" / f"m{i // 10}").mkdir(parents=True, exist_ok=True)
        (path / "src" / f"m{i // 10}" / f"mod{i}.py").write_bytes(text[: (mb - weights) * (1 << 20) // 100])


def wait_mark(mark, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if mark.exists() and mark.stat().st_size > 0:
            return float(mark.read_text())
        time.sleep(0.001)
    raise TimeoutError(f"the job did not start: {mark}")


def mark_command(mark):
    return f"date +%s.%N > {mark}"


def cli_sample(env, marks, working_dir=None):
    mark = Path(tempfile.mktemp(dir=marks))
    argv = [str(BIN / "torus"), "job", "submit", "--no-wait"]
    if working_dir is not None:
        argv += ["--working-dir", str(working_dir)]
    argv += ["--", "sh", "-c", mark_command(mark)]
    t0 = time.time()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (wait_mark(mark) - t0) * 1000


def rest_sample(head, marks, uri=None):
    mark = Path(tempfile.mktemp(dir=marks))
    body = {"entrypoint": mark_command(mark)}
    if uri is not None:
        body["runtime_env"] = {"working_dir": uri}
    t0 = time.time()
    head.call("POST", "/api/jobs/", body)
    return (wait_mark(mark) - t0) * 1000


def upload(head, project):
    """Packs `project` as Ray's client does (a zip of its files) and PUTs it; returns its URI."""
    buffer = io.BytesIO()
    digest = hashlib.sha256()
    with zipfile.ZipFile(buffer, "w", strict_timestamps=False) as z:
        for path in sorted(project.rglob("*")):
            if path.is_file():
                z.write(path, path.relative_to(project))
                digest.update(str(path.relative_to(project)).encode() + path.read_bytes())
    name = f"_ray_pkg_{digest.hexdigest()[:32]}.zip"
    head.call("PUT", f"/api/packages/gcs/{name}", raw=buffer.getvalue())
    return f"gcs://{name}"


def row(name, samples):
    samples = sorted(samples)
    p50 = statistics.median(samples)
    print(f"{name:58s} {len(samples):4d} {p50:10.1f} {samples[0]:10.1f} {samples[-1]:10.1f}", flush=True)
    return p50


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--mb", type=int, default=50)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="torus_bench_packages_"))
    env = dict(os.environ, TORUS_TEMP_DIR=str(root / "torus"))
    marks = root / "marks"
    marks.mkdir()
    subprocess.run([str(BIN / "torus"), "start", "--head", "--port", "0", "--dashboard-port", "0"], env=env,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        head = Head((root / "torus" / "session_latest").resolve())
        time.sleep(1)
        print(f"{args.mb} MB working directory; times in ms from the command's start to the entrypoint's first "
              f"instruction")
        print(f"{'measurement':58s} {'n':>4s} {'p50':>10s} {'min':>10s} {'max':>10s}")
        projects = [root / f"proj{i}" for i in range(args.repeats)]
        for i, p in enumerate(projects):
            make_project(p, args.mb, seed=i)
        cli_none = row("CLI, no working directory", [cli_sample(env, marks) for _ in range(args.repeats)])
        row("CLI, new working directory (pack, upload, fetch, unpack)",
            [cli_sample(env, marks, p) for p in projects])
        cli_cached = row("CLI, same working directory again (cached)",
                         [cli_sample(env, marks, projects[0]) for _ in range(args.repeats)])

        def touched():
            os.utime(projects[0] / "weights_00.bin")  # same bytes, new times: the tree is hashed again
            return cli_sample(env, marks, projects[0])
        row("CLI, same files, one touched (hash 50 MB, no upload)", [touched() for _ in range(args.repeats)])
        rest_none = row("REST, no working directory", [rest_sample(head, marks) for _ in range(args.repeats)])
        fresh = []
        for i in range(args.repeats):
            p = root / f"fresh{i}"
            make_project(p, args.mb, seed=1000 + i)
            fresh.append(upload(head, p))
        row("REST, package not yet on the node (fetch, unpack)", [rest_sample(head, marks, u) for u in fresh])
        rest_cached = row("REST, package cached on the node",
                          [rest_sample(head, marks, fresh[0]) for _ in range(args.repeats)])
        print(f"\ncached adds: CLI {cli_cached - cli_none:+.1f} ms, REST {rest_cached - rest_none:+.1f} ms (p50)")
    finally:
        subprocess.run([str(BIN / "torus"), "stop"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
