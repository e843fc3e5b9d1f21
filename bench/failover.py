#!/usr/bin/env python3
"""Head failover on a journal in etcd: two heads (`torus-head --state-store etcd://... --standby`), one leading.

Each trial kills the leader with SIGKILL, then times until a write (a placement group created through the CLI) is
accepted by the head that takes over, and starts the killed one again as the next standby. Prints p50 and max of
the failover time, for the lease given (`--lease-s`, the heads' `--state-store-lease-s`).

Starts its own one-member etcd (Debian's etcd-server) on loopback ports; everything lives in a temporary directory.

With `--cluster SPEC` it measures the same on a whole local cluster instead: `torus up --ha SPEC` (a 3-member etcd,
two heads, an agent per simulated host, all following the leader); each trial kills the leading head, times until
`torus pg create` (given both heads' addresses) succeeds, and brings the killed head back with `torus head restart`.

Usage: /usr/bin/python3 bench/failover.py [--trials 20] [--lease-s 4] [--cluster examples/clusters/local.yaml]
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("TORUS_BIN_DIR", os.path.join(REPO, "build", "bin"))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from etcd_local import start_etcd  # noqa: E402


def wait_for(predicate, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.005)
    raise TimeoutError("timed out")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--lease-s", type=int, default=4)
    parser.add_argument("--cluster", help="a cluster spec: measure on `torus up --ha SPEC` instead")
    args = parser.parse_args()
    if args.cluster:
        return on_cluster(args)
    root = tempfile.mkdtemp(prefix="bench-failover-")
    etcd, endpoint = start_etcd(root)
    url = f"etcd://{endpoint}/bench"
    token = os.path.join(root, "token")
    heads = []
    count = [0]

    def start_head():
        count[0] += 1
        session = os.path.join(root, f"head{count[0]}")
        os.makedirs(session)
        log = open(os.path.join(session, "head.log"), "wb")
        proc = subprocess.Popen([os.path.join(BIN, "torus-head"), "--session-dir", session, "--port", "0",
                                 "--dashboard-port", "0", "--state-store", url, "--standby",
                                 "--state-store-lease-s", str(args.lease_s), "--token-file", token],
                                stdout=log, stderr=log, start_new_session=True)
        heads.append((proc, session))
        return proc, session

    def address(session):
        path = os.path.join(session, "head_address")
        return open(path).read().strip() if os.path.exists(path) else None

    def write(session, i):
        a = address(session)
        if a is None:
            return False
        result = subprocess.run([os.path.join(BIN, "torus"), "pg", "create", "--address", a, "--token",
                                 open(token).read().strip(), "--bundles", '[{"no_such_resource": 1}]'],
                                capture_output=True, timeout=30)
        return result.returncode == 0

    times = []
    try:
        leader = start_head()
        wait_for(lambda: address(leader[1]), 30)
        standby = start_head()
        time.sleep(1)
        for i in range(args.trials):
            assert write(leader[1], i), "the leader does not take writes"
            t0 = time.perf_counter()
            leader[0].send_signal(signal.SIGKILL)
            leader[0].wait()
            wait_for(lambda: write(standby[1], i), 60)
            times.append(time.perf_counter() - t0)
            leader, standby = standby, start_head()
            time.sleep(0.5)  # the new standby is up and waiting
            print(f"trial {i + 1}: {times[-1] * 1e3:.0f} ms", flush=True)
    finally:
        for proc, _ in heads:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        etcd.kill()
        etcd.wait()
    times.sort()
    print(f"\n| lease | trials | failover p50 | max |\n|---:|---:|---:|---:|\n"
          f"| {args.lease_s} s | {len(times)} | {statistics.median(times) * 1e3:,.0f} ms | "
          f"{times[-1] * 1e3:,.0f} ms |")


def on_cluster(args):
    root = tempfile.mkdtemp(prefix="bench-failover-")
    env = dict(os.environ, TORUS_TEMP_DIR=root)
    env.pop("TORUS_ADDRESS", None)
    env.pop("TORUS_TOKEN", None)

    def torus(*argv, check=True):
        result = subprocess.run([os.path.join(BIN, "torus"), *argv], env=env, capture_output=True, text=True,
                                timeout=120)
        if check and result.returncode != 0:
            raise RuntimeError(f"torus {' '.join(argv)}: {result.stderr}")
        return result

    torus("up", "--ha", args.cluster, "--port", "0", "--dashboard-port", "0")
    session = os.path.realpath(os.path.join(root, "session_latest"))
    agents = sum(1 for line in open(os.path.join(session, "processes")) if line.startswith("node "))

    def leader():
        pids = {}
        for line in open(os.path.join(session, "processes")):
            role, name, pid = line.split()
            if role == "head":
                pids[name] = int(pid)
        for name, pid in pids.items():
            log = open(os.path.join(session, "logs", f"{name}.log")).read()
            alive = os.path.exists(f"/proc/{pid}") and "zombie" not in open(f"/proc/{pid}/status").read()
            if alive and log.rfind("listening on") > log.rfind("standing by:"):
                return pid
        return None

    times = []
    try:
        for i in range(args.trials):
            torus("pg", "create", "--bundles", '[{"no_such_resource": 1}]')
            pid = leader()
            t0 = time.perf_counter()
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: torus("pg", "create", "--bundles", '[{"no_such_resource": 1}]',
                                   check=False).returncode == 0, 60)
            times.append(time.perf_counter() - t0)
            torus("head", "restart")
            time.sleep(1)  # the restarted head stands by
            print(f"trial {i + 1}: {times[-1] * 1e3:.0f} ms", flush=True)
    finally:
        torus("down", check=False)
    times.sort()
    print(f"\n| cluster | trials | failover p50 | max |\n|---|---:|---:|---:|\n"
          f"| `torus up --ha`, {agents} agents | {len(times)} | {statistics.median(times) * 1e3:,.0f} ms | "
          f"{times[-1] * 1e3:,.0f} ms |")


if __name__ == "__main__":
    main()
