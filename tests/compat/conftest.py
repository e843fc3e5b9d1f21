"""The differential suite: every case of tests/compat/cases runs under Ray (the development venv's ray) and under
torus (`ray` resolved to torus through python/as_ray), and the two records must be equal.

Each cases file runs once per system, in one process each, both at once; the results are cached for the file's
cases. The venv comes from scripts/setup.sh (.venv, or TORUS_DEV_VENV). A file that names a CLUSTER gets that
simulated TPU cluster under each system first (clusters.py), stopped after its cases.
"""

import ast
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import clusters

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CASES = HERE / "cases"
BUILD = Path(os.environ.get("TORUS_BUILD_DIR", REPO / "build"))
VENV = Path(os.environ.get("TORUS_DEV_VENV", REPO / ".venv"))
_LEAKY_ENV = ("TORUS_ADDRESS", "TORUS_TOKEN", "TORUS_TEMP_DIR", "RAY_ADDRESS", "TORUS_DASHBOARD_ADDRESS",
              "TORUS_RAY_ALIAS", "PYTHONPATH")


def venv_python():
    python = VENV / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} is missing: scripts/setup.sh makes the development venv with Ray in it")
    return str(python)


def case_names(path):
    """The @case functions of a cases file, read without running it."""
    tree = ast.parse(path.read_text())
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                if isinstance(target, ast.Name) and target.id == "case":
                    names.append(f"{path.stem}.{node.name}")
    return names


def base_env(tmp):
    env = {k: v for k, v in os.environ.items() if k not in _LEAKY_ENV}
    env.update(RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1", TMPDIR=str(tmp))
    return env


def start(system, path, tmp, cluster_env=None):
    env = base_env(tmp)
    if system == "torus":
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python" / "as_ray"), str(REPO / "python"),
                                             str(BUILD / "python")])
        env["TORUS_TEMP_DIR"] = str(tmp / "torus")
        env["PATH"] = f"{BUILD / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.update(cluster_env or {})
    log = open(tmp / f"{system}.log", "w+")
    proc = subprocess.Popen([venv_python(), str(HERE / "harness.py"), str(path)], env=env, stdout=log,
                            stderr=subprocess.STDOUT, cwd=str(tmp), start_new_session=True)
    return proc, log


def collect(proc, log, timeout):
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
    log.seek(0)
    text = log.read()
    records = {}
    for line in text.splitlines():
        if line.startswith("@@CASE "):
            r = json.loads(line[len("@@CASE "):])
            records[r["case"]] = r
    return records, text


_results = {}


def results(path):
    """{system: ({case: record}, log)} of a cases file, run under both systems at once (cached)."""
    if path not in _results:
        tmp = Path(tempfile.mkdtemp(prefix=f"compat-{path.stem}-"))
        (tmp / "torus").mkdir()
        timeout = 900
        started = {}
        try:
            spec = clusters.cluster_of(path)
            if spec is not None:
                (tmp / "torus-cluster").mkdir()
                (tmp / "ray-cluster").mkdir()
                started["torus"] = clusters.TorusCluster(spec, tmp / "torus-cluster", BUILD / "bin", base_env(tmp))
                started["ray"] = clusters.RayCluster(spec, tmp / "ray-cluster", VENV / "bin" / "ray", base_env(tmp))
            running = {s: start(s, path, tmp, started[s].harness_env() if s in started else None)
                       for s in ("ray", "torus")}
            _results[path] = {s: collect(*running[s], timeout) for s in running}
        finally:
            for c in started.values():
                c.stop()
            # Ray's and torus's processes of this file end with it.
            subprocess.run(["pkill", "-f", str(tmp)], capture_output=True)
            shutil.rmtree(tmp, ignore_errors=True)
    return _results[path]
