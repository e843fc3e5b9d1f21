#!/usr/bin/env python3
"""Tasks from Python: torus against Dask distributed, side by side in one run on this machine.

Starts a one-node torus cluster (`torus start --head`, in a temp dir) and a Dask LocalCluster with as many worker
processes as the machine has cores (one thread each), then measures, for each:
  - sync task round trip: `get(f.remote())` one after another (p50, p99), after 200 calls and 2 s of warm-up;
  - async throughput: N tasks submitted, then all results gathered (tasks/s, end to end; the median of 3 rounds);
  - actor method calls: sync round trip (p50) and async calls/s;
  - put + get of a numpy array in the same process;
  - torus only: async tasks of {"TPU": 1} on a simulated v6e host of 4 chips (a `torus up` cluster of its own);
  - torus only: get of that array by a task on the same node, and by a task on a second node (an agent started on
    another loopback address: the pull between the two agents' stores), and the store bytes each node then holds;
    as the peer of the pull, what one loopback TCP connection carries on this machine.
Prints a table with torus/Dask ratios (for times lower is better; for throughput higher is better).

With --tls both: the torus part twice in one run, plaintext then TLS (`torus start --head --tls`; the second agent
joins with the join token; every core worker serves a certificate of its own; the pull between nodes is mutual TLS),
and a table of TLS/plain instead of Dask. `torus.init()` (connect, start the driver's core worker: with TLS, its
certificate from the head) is timed too.

Usage: /usr/bin/python3 bench/tasks.py [--sync 300] [--async-tasks 3000] [--array-mb 1024] [--tls off|both [--rounds 2]]
"""

import glob

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(REPO, "python"), os.path.join(REPO, "build", "python")]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


ROUNDS = 3


def rate_of(run, n):
    """The median rate of ROUNDS runs of `run`, each doing `n` things: one round on this shared VM can be off by 2x."""
    rates = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        run()
        rates.append(n / (time.perf_counter() - t0))
    return statistics.median(rates)


def raw_tcp_rate(nbytes):
    """GB/s of one loopback TCP connection carrying `nbytes` from a thread to this one: what the network path of
    this machine allows, for the pull between nodes to be compared with."""
    import socket
    import threading
    payload = memoryview(bytearray(nbytes))
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def send():
        conn, _ = server.accept()
        conn.sendall(payload)
        conn.close()

    sender = threading.Thread(target=send)
    sender.start()
    into = memoryview(bytearray(nbytes))
    client = socket.create_connection(server.getsockname())
    t0 = time.perf_counter()
    got = 0
    while got < nbytes:
        n = client.recv_into(into[got:], min(1 << 24, nbytes - got))
        if not n:
            break
        got += n
    rate = got / (time.perf_counter() - t0) / 1e9
    sender.join()
    client.close()
    server.close()
    return rate


def bench_torus(args, tls=False):
    import numpy as np
    import torus

    root = tempfile.mkdtemp(prefix="bench-tasks-")
    for stale in ("TORUS_ADDRESS", "TORUS_TOKEN", "TORUS_TLS_CA"):  # an earlier cluster's, which its init exported
        os.environ.pop(stale, None)
    env = dict(os.environ, TORUS_TEMP_DIR=root)
    binary = os.path.join(REPO, "build", "bin", "torus")
    env_b = dict(os.environ, TORUS_TEMP_DIR=tempfile.mkdtemp(prefix="bench-tasks-b-"))
    store = str(args.array_mb * 2 + 256) + "Mi"
    subprocess.run([binary, "start", "--head", "--port", "0", "--dashboard-port", "0", "--object-store-memory", store]
                   + (["--tls"] if tls else []), env=env, check=True, capture_output=True)
    os.environ["TORUS_TEMP_DIR"] = root
    try:
        t0 = time.perf_counter()
        torus.init()
        init_s = time.perf_counter() - t0
        head = torus.get_runtime_context().get_node_id()
        address = os.environ["TORUS_ADDRESS"]

        @torus.remote
        def f(x):
            return x

        torus.get([f.remote(i) for i in range(20)])  # warm workers
        time.sleep(2)
        for i in range(200):
            torus.get(f.remote(i))
        sync = []
        for i in range(args.sync):
            t0 = time.perf_counter()
            torus.get(f.remote(i))
            sync.append(time.perf_counter() - t0)
        async_rate = rate_of(lambda: torus.get([f.remote(i) for i in range(args.async_tasks)]), args.async_tasks)
        @torus.remote
        class Counter:
            def __init__(self):
                self.n = 0

            def incr(self):
                self.n += 1
                return self.n

        c = Counter.remote()
        torus.get(c.incr.remote())
        actor_sync = []
        for _ in range(args.sync):
            t0 = time.perf_counter()
            torus.get(c.incr.remote())
            actor_sync.append(time.perf_counter() - t0)
        actor_async = rate_of(lambda: torus.get([c.incr.remote() for _ in range(args.async_tasks)]), args.async_tasks)
        arr = np.random.default_rng(0).random(args.array_mb * (1 << 20) // 8)
        t0 = time.perf_counter()
        ref = torus.put(arr)
        put_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        back = torus.get(ref)
        get_s = time.perf_counter() - t0
        assert np.array_equal(arr, back)
        del back

        @torus.remote
        def timed_get(refs):
            import hashlib
            import numpy  # imported before the clock starts, as a program that uses arrays has it
            t = time.perf_counter()
            x = torus.get(refs[0])
            took = time.perf_counter() - t
            return took, hashlib.sha256(x).hexdigest()

        # A second node for the pull between nodes (only now: the rows above are of a one-node cluster, as Dask's).
        # It keeps its session in a root of its own, so that each `torus down` stops its own.
        join = []
        if tls:
            session = os.path.dirname(glob.glob(os.path.join(root, "**", "ca.crt"), recursive=True)[0])
            join = ["--tls-ca", os.path.join(session, "ca.crt"),
                    "--join-token-file", os.path.join(session, "join_token")]
        subprocess.run([binary, "start", "--address", address, "--node-ip", "127.0.1.9", "--node-id", "bench-b",
                        "--num-cpus", "1", "--object-store-memory", store] + join,
                       env=dict(env_b, TORUS_TOKEN=torus._private.state.current().token), check=True, capture_output=True)
        deadline = time.time() + 30
        while len(torus.nodes()) < 2 and time.time() < deadline:
            time.sleep(0.1)
        from torus.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        def on(node):
            return timed_get.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
        digest = __import__("hashlib").sha256(arr).hexdigest()
        local_s, local_digest = torus.get(on(head).remote([ref]))
        remote_s, remote_digest = torus.get(on("bench-b").remote([ref]))
        assert local_digest == digest and remote_digest == digest
        held = {}
        for d in os.listdir("/dev/shm"):
            if d.startswith("torus-objects-"):
                node = d[len("torus-objects-"):].rsplit("-", 1)[0]
                files = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join("/dev/shm", d)) for f in fs]
                held[node] = held.get(node, 0) + sum(os.path.getsize(f) for f in files)
        torus.shutdown()
        return {"init": init_s, "sync_p50": pct(sync, 50), "sync_p99": pct(sync, 99), "async": async_rate,
                "put": put_s, "get": get_s,
                "actor_sync_p50": pct(actor_sync, 50), "actor_async": actor_async,
                "put_rate": arr.nbytes / put_s / 1e9, "get_other": local_s, "pull": remote_s,
                "pull_rate": arr.nbytes / remote_s / 1e9, "tcp_rate": raw_tcp_rate(arr.nbytes),
                "held_head": held.get(head, 0) / arr.nbytes, "held_b": held.get("bench-b", 0) / arr.nbytes}
    finally:
        subprocess.run([binary, "down"], env=env_b, capture_output=True)
        subprocess.run([binary, "down"], env=env, capture_output=True)


TPU_SPEC = """
head: {num_cpus: 2, memory: 4Gi}
node_groups:
  - {name: v6e, tpu: {pod_type: v6e-4, topology: 2x2}, slices: 1, num_cpus: 2, memory: 4Gi}
"""


def bench_tpu_tasks(args):
    """Async tasks of {"TPU": 1} on a simulated v6e host of 4 chips (`torus up`, a head and one TPU agent): each task
    runs in a worker bound to its chip (TPU_VISIBLE_CHIPS)."""
    import torus

    root = tempfile.mkdtemp(prefix="bench-tpu-")
    spec = os.path.join(root, "tpu.yaml")
    with open(spec, "w") as f:
        f.write(TPU_SPEC)
    env = dict(os.environ, TORUS_TEMP_DIR=root)
    binary = os.path.join(REPO, "build", "bin", "torus")
    subprocess.run([binary, "up", spec, "--port", "0", "--dashboard-port", "0"], env=env, check=True,
                   capture_output=True)
    os.environ["TORUS_TEMP_DIR"] = root
    for stale in ("TORUS_ADDRESS", "TORUS_TOKEN"):  # the first cluster's, which the first init exported
        os.environ.pop(stale, None)
    try:
        torus.init()

        @torus.remote(resources={"TPU": 1})
        def chip():
            return os.environ["TPU_VISIBLE_CHIPS"]

        for _ in range(10):
            torus.get([chip.remote() for _ in range(20)])  # warm workers
        chips = []
        rate = rate_of(lambda: chips.extend(torus.get([chip.remote() for _ in range(args.async_tasks)])),
                       args.async_tasks)
        assert set(chips) <= {"0", "1", "2", "3"}, set(chips)
        torus.shutdown()
        return rate
    finally:
        subprocess.run([binary, "down"], env=env, capture_output=True)


class _DaskCounter:
    def __init__(self):
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n


def bench_dask(args):
    import numpy as np
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=os.cpu_count(), threads_per_worker=1, processes=True, dashboard_address=None)
    client = Client(cluster)
    try:
        def f(x):
            return x

        client.gather([client.submit(f, i, pure=False) for i in range(20)])
        time.sleep(2)  # the same warm-up as torus's
        for i in range(200):
            client.submit(f, i, pure=False).result()
        sync = []
        for i in range(args.sync):
            t0 = time.perf_counter()
            client.submit(f, i, pure=False).result()
            sync.append(time.perf_counter() - t0)
        async_rate = rate_of(lambda: client.gather(client.map(f, range(args.async_tasks), pure=False)),
                             args.async_tasks)
        counter = client.submit(_DaskCounter, actor=True).result()
        counter.incr().result()
        actor_sync = []
        for _ in range(args.sync):
            t0 = time.perf_counter()
            counter.incr().result()
            actor_sync.append(time.perf_counter() - t0)
        def calls():
            for fut in [counter.incr() for _ in range(args.async_tasks)]:
                fut.result()
        actor_async = rate_of(calls, args.async_tasks)
        arr = np.random.default_rng(0).random(args.array_mb * (1 << 20) // 8)
        t0 = time.perf_counter()
        fut = client.scatter(arr)
        put_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        back = fut.result()
        get_s = time.perf_counter() - t0
        assert np.array_equal(arr, back)
        return {"sync_p50": pct(sync, 50), "sync_p99": pct(sync, 99), "async": async_rate, "put": put_s, "get": get_s,
                "actor_sync_p50": pct(actor_sync, 50), "actor_async": actor_async}
    finally:
        client.close()
        cluster.close()


# Rows of the tables: (label, key of bench_torus's result, unit, scale).
CALL_ROWS = [("sync task round trip p50", "sync_p50", "ms", 1e3), ("sync task round trip p99", "sync_p99", "ms", 1e3),
             ("async tasks, submit -> all gathered", "async", "tasks/s", 1),
             ("actor call round trip p50", "actor_sync_p50", "ms", 1e3),
             ("async actor calls, submit -> all gathered", "actor_async", "calls/s", 1)]
PULL_ROWS = [("get of it by a task on the same node", "get_other", "ms", 1e3),
             ("get of it by a task on another node", "pull", "ms", 1e3),
             ("  that is, pulled between nodes at", "pull_rate", "GB/s", 1),
             ("  one loopback TCP connection carries", "tcp_rate", "GB/s", 1)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sync", type=int, default=300)
    parser.add_argument("--async-tasks", type=int, default=3000)
    parser.add_argument("--array-mb", type=int, default=1024)
    parser.add_argument("--tls", choices=["off", "both"], default="off")
    parser.add_argument("--rounds", type=int, default=2, help="with --tls both: clusters of each kind, alternated")
    args = parser.parse_args()
    if args.tls == "both":
        compare_tls(args)
        return
    t = bench_torus(args)
    t["tpu_async"] = bench_tpu_tasks(args)
    try:
        d = bench_dask(args)
    except ImportError:
        d = None
        print("Dask (python3-distributed) is not installed: torus only")
    rows = CALL_ROWS + [(f"put of a {args.array_mb} MB numpy array", "put", "ms", 1e3),
                        (f"get of it (same process)", "get", "ms", 1e3)]
    torus_only = [("async {\"TPU\": 1} tasks, one v6e host", "tpu_async", "tasks/s", 1),
                  ("put rate", "put_rate", "GB/s", 1)] + PULL_ROWS + [
                  ("store bytes on the put's node / array", "held_head", "x", 1),
                  ("store bytes on the other node / array", "held_b", "x", 1)]
    print(f"| {'measure':42} | {'torus':>18} | {'Dask':>18} | torus/Dask |")
    print(f"|{'-' * 44}|{'-' * 20}|{'-' * 20}|-----------:|")
    for label, key, unit, scale in rows:
        tv = t[key] * scale
        dv = d[key] * scale if d else None
        ratio = f"{tv / dv:.2f}" if dv else "-"
        dtext = f"{dv:,.2f} {unit}" if dv is not None else "-"
        print(f"| {label:42} | {f'{tv:,.2f} {unit}':>18} | {dtext:>18} | {ratio:>10} |")
    for label, key, unit, scale in torus_only:
        print(f"| {label:42} | {f'{t[key] * scale:,.2f} {unit}':>18} | {'-':>18} | {'-':>10} |")


def compare_tls(args):
    """Plaintext and TLS alternately, `--rounds` times each (the one that goes first changes every round: on this VM
    the first cluster of a run is the slower); the median of each row."""
    runs = {False: [], True: []}
    for r in range(args.rounds):
        for tls_on in ((False, True) if r % 2 == 0 else (True, False)):
            runs[tls_on].append(bench_torus(args, tls=tls_on))
    plain, tls = ({k: statistics.median(run[k] for run in runs[mode]) for k in runs[mode][0]}
                  for mode in (False, True))
    rows = ([("torus.init() (connect, start the core worker)", "init", "ms", 1e3)] + CALL_ROWS +
            [(f"put of a {args.array_mb} MB numpy array", "put", "ms", 1e3)] + PULL_ROWS)
    print(f"| {'measure (torus)':46} | {'plaintext':>18} | {'TLS':>18} | TLS/plain |")
    print(f"|{'-' * 48}|{'-' * 20}|{'-' * 20}|----------:|")
    for label, key, unit, scale in rows:
        pv, tv = plain[key] * scale, tls[key] * scale
        print(f"| {label:46} | {f'{pv:,.2f} {unit}':>18} | {f'{tv:,.2f} {unit}':>18} | {tv / pv:>9.2f} |")


if __name__ == "__main__":
    main()
