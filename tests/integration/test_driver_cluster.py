"""The local cluster that init() starts when there is none: it shares its driver's fate (however the driver ends,
the cluster stops and its directory goes), two drivers never collide, and init()'s node options shape its node."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import BIN_DIR, REPO, wait_until

DRIVER = textwrap.dedent("""
    import json, os, sys, time
    import torus
    ctx = torus.init(**json.loads(sys.argv[1]))
    @torus.remote
    def one():
        return 1
    assert torus.get(one.remote()) == 1
    state = torus._private.state.current()
    print(json.dumps({"session": state.session_dir, "root": state.local_cluster.root,
                      "address": ctx.address_info["address"],
                      "resources": torus.cluster_resources(),
                      "labels": torus.nodes()[0]["Labels"]}), flush=True)
    if sys.argv[2] == "wait":
        time.sleep(600)
""")


def driver_env(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("TORUS_ADDRESS", "TORUS_TOKEN", "RAY_ADDRESS")}
    env["TORUS_TEMP_DIR"] = str(tmp_path / "no-session-here")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), str(BIN_DIR.parent / "python")])
    env["PATH"] = f"{BIN_DIR}{os.pathsep}{env['PATH']}"
    return env


def start_driver(tmp_path, init_kwargs=None, mode="wait"):
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    proc = subprocess.Popen(["/usr/bin/python3", str(script), json.dumps(init_kwargs or {}), mode],
                            env=driver_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        pytest.fail(f"the driver printed nothing; stderr: {proc.stderr.read()[-3000:]}")
    return proc, json.loads(line)


def cluster_pids(session):
    pids = []
    for line in Path(session, "processes").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2].isdigit():
            pids.append(int(fields[2]))
    return pids


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_cluster_stops_when_its_driver_is_killed(tmp_path, sig):
    proc, info = start_driver(tmp_path)
    pids = cluster_pids(info["session"])
    assert len(pids) == 2 and all(alive(p) for p in pids), pids  # the head and the agent
    proc.send_signal(sig)
    proc.wait(timeout=30)
    wait_until(lambda: not any(alive(p) for p in pids), 30, message="the cluster's processes to exit")
    wait_until(lambda: not Path(info["root"]).exists(), 30, message="the cluster's directory to be removed")


def test_cluster_stops_when_its_driver_returns(tmp_path):
    proc, info = start_driver(tmp_path, mode="exit")
    pids = cluster_pids(info["session"])
    assert proc.wait(timeout=60) == 0
    assert not any(alive(p) for p in pids)
    assert not Path(info["root"]).exists()


def test_two_drivers_each_have_their_own_cluster(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, a = start_driver(tmp_path / "a")
    second, b = start_driver(tmp_path / "b")
    try:
        assert a["address"] != b["address"]
        assert a["root"] != b["root"]
    finally:
        for p in (first, second):
            p.kill()
            p.wait()


def test_init_node_options_shape_the_local_node(tmp_path):
    proc, info = start_driver(tmp_path, {"num_cpus": 3, "resources": {"custom": 2}, "labels": {"zone": "a"}},
                              mode="exit")
    assert proc.wait(timeout=60) == 0
    assert info["resources"]["CPU"] == 3
    assert info["resources"]["custom"] == 2
    assert info["labels"]["zone"] == "a"


def test_node_options_refused_when_connecting(torus, tmp_path):
    torus.ok("start", "--head", "--port", "0", "--dashboard-port", "0")
    script = tmp_path / "connect.py"
    script.write_text("import torus\ntorus.init('auto', num_cpus=2)\n")
    env = driver_env(tmp_path)
    env["TORUS_TEMP_DIR"] = str(torus.root)
    out = subprocess.run(["/usr/bin/python3", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "ValueError: When connecting to an existing cluster, num_cpus and num_gpus must not be provided.")


def test_unknown_init_argument_is_refused(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("import torus\ntorus.init(num_cpu=2)\n")
    out = subprocess.run(["/usr/bin/python3", str(script)], env=driver_env(tmp_path), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == "RuntimeError: Unknown keyword argument(s): num_cpu"
