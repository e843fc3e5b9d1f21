"""Objects from Python against a real `torus up` cluster: the object store of each node (large values written once,
read in place, pulled between nodes, bounded, freed with their owner's refs or when their owner goes). Each test
runs a driver script as its own process, as test_tasks.py does."""

import json
import os
import subprocess
import textwrap

from conftest import Torus, wait_until
from test_tasks import PYTHON, cluster, driver_json, python_env  # noqa: F401 (cluster: the module's fixture)


def test_a_full_object_store_refuses_puts_and_fails_returns_that_do_not_fit(tmp_path):
    # torus.init without a cluster starts one whose node has a 64 MiB object store.
    t = Torus(tmp_path / "fresh")
    try:
        result = driver_json(t, tmp_path, """
            import json, numpy as np, torus
            torus.init(object_store_memory=64 * 2**20)

            @torus.remote
            def big(mb):
                return np.ones(mb * 2**20, dtype=np.uint8)

            out = {}
            first = torus.put(np.zeros(40 * 2**20, dtype=np.uint8))
            try:
                torus.put(np.zeros(40 * 2**20, dtype=np.uint8))
            except torus.exceptions.ObjectStoreFullError as e:
                out["put"] = str(e)
                out["is_memory_error"] = isinstance(e, MemoryError)
            try:
                torus.get(big.remote(40))
            except torus.exceptions.ObjectStoreFullError as e:
                out["return"] = str(e)
            del first
            out["after_free"] = int(torus.get(big.remote(40)).sum())
            try:
                torus.init(address="auto", ignore_reinit_error=False, object_store_memory=-1)
            except ValueError as e:
                out["bad"] = str(e)
            torus.shutdown()
            print(json.dumps(out))
        """)
    finally:
        t.cleanup()
    full = ("object store full: an object of 40.0 MiB does not fit; this node's store holds 40.0 MiB of 64.0 MiB in 1 "
            "objects (free objects by dropping their refs, or start the node with a larger --object-store-memory)")
    assert result["put"] == full, result["put"]
    assert result["is_memory_error"] is False  # Ray's ObjectStoreFullError is a RayError only
    assert result["return"].startswith("a return value of the task could not be stored on node ") and \
        result["return"].endswith(": " + full), result["return"]
    assert result["after_free"] == 40 * 2**20
    assert result["bad"] == "object_store_memory: a positive number of bytes is required, got -1"


def test_large_values_are_read_zero_copy_from_the_node_store_and_held_once(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import json, os, numpy as np, torus
        torus.init()
        here = torus.get_runtime_context().get_node_id()
        array = np.arange(16 * 2**20 // 8, dtype=np.int64)
        ref = torus.put(array)
        a, b = torus.get(ref), torus.get(ref)

        @torus.remote
        def mapped_from(x):
            # The argument is a view of the store's pages: its memory is a shared mapping of the store's file.
            addr = x.__array_interface__["data"][0]
            with open("/proc/self/maps") as maps:
                for line in maps:
                    lo, hi = (int(v, 16) for v in line.split()[0].split("-"))
                    if lo <= addr < hi:
                        return line.split()[-1], bool(x.flags.writeable), int(x[-1])

        from torus.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        on_here = mapped_from.options(scheduling_strategy=NodeAffinitySchedulingStrategy(here, soft=False))
        path, writeable, last = torus.get(on_here.remote(ref))
        small = torus.get(torus.put(np.arange(10)))
        print(json.dumps({
            "same_pages": a.__array_interface__["data"][0] == b.__array_interface__["data"][0],
            "driver_writeable": bool(a.flags.writeable), "equal": bool((a == array).all()),
            "worker_file": path, "worker_writeable": writeable, "last": last,
            "small_writeable": bool(small.flags.writeable),
        }))
    """)
    assert result["same_pages"] is True  # two gets, one copy: both map the same pages
    assert result["driver_writeable"] is False and result["worker_writeable"] is False
    assert result["equal"] is True and result["last"] == 16 * 2**20 // 8 - 1
    assert result["worker_file"].startswith("/dev/shm/torus-objects-"), result["worker_file"]
    assert result["small_writeable"] is True  # small values travel inline and are ordinary arrays


def test_a_driver_reads_back_its_own_put_without_asking_its_agent(cluster, tmp_path):
    import select
    import signal
    go = tmp_path / "go"
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, time, numpy as np, torus
        torus.init()
        ref = torus.put(np.arange(4 * 2**20 // 8, dtype=np.int64))
        print(torus.get_runtime_context().get_node_id(), flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.02)
        x = torus.get(ref)
        print(json.dumps({{"last": int(x[-1]), "writeable": bool(x.flags.writeable)}}), flush=True)
    """))
    proc = subprocess.Popen([PYTHON, str(script)], env=python_env(cluster), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    agent = None
    try:
        node_id = proc.stdout.readline().strip()
        assert node_id, proc.stderr.read()
        agent = cluster.pid_of(node_id)
        os.kill(agent, signal.SIGSTOP)  # the store's files stay; the agent answers nothing
        go.write_text("")
        ready, _, _ = select.select([proc.stdout], [], [], 10)
        line = proc.stdout.readline() if ready else ""
        os.kill(agent, signal.SIGCONT)  # before the head would take the node for dead
        assert line, "the driver's get waited for the stopped agent"
        assert json.loads(line) == {"last": 4 * 2**20 // 8 - 1, "writeable": False}
    finally:
        if agent is not None:
            os.kill(agent, signal.SIGCONT)
        try:
            proc.wait(timeout=30)  # it exits, freeing its object, before the next test measures the store
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


STORE_USED = """
import os
def _size(path):
    try:
        return os.path.getsize(path)
    except FileNotFoundError:  # freed while it was being counted
        return 0
def used():
    return sum(_size(os.path.join(r, f)) for d in os.listdir("/dev/shm") if d.startswith("torus-objects-")
               for r, _, fs in os.walk(os.path.join("/dev/shm", d)) for f in fs)
"""


def shm_bytes(prefix="torus-objects-"):
    total = 0
    for d in os.listdir("/dev/shm"):
        if d.startswith(prefix):
            for root, _, files in os.walk(os.path.join("/dev/shm", d)):
                for f in files:
                    try:
                        total += os.path.getsize(os.path.join(root, f))
                    except FileNotFoundError:  # freed while it was being counted
                        pass
    return total


def test_a_large_argument_goes_through_the_store_and_is_freed_when_its_task_ends(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, STORE_USED + textwrap.dedent("""
        import json, time, numpy as np, torus
        torus.init()

        @torus.remote
        def where(x, scale=None):
            addr = x.__array_interface__["data"][0]
            with open("/proc/self/maps") as maps:
                for line in maps:
                    lo, hi = (int(v, 16) for v in line.split()[0].split("-"))
                    if lo <= addr < hi:
                        return line.split()[-1], int(x.sum()), int(scale.sum())

        start = used()
        path, total, scale = torus.get(where.remote(np.ones(8 * 2**20, dtype=np.uint8),
                                                    scale=np.full(2**20, 2, dtype=np.uint8)))
        deadline = time.time() + 10
        while used() - start > 0 and time.time() < deadline:
            time.sleep(0.05)
        # This driver is still alive: only the task's end freed its arguments.
        print(json.dumps({"path": path, "total": total, "scale": scale, "held_after": used() - start}))
    """))
    assert result["path"].startswith("/dev/shm/torus-objects-"), result  # mapped from the store
    assert result["total"] == 8 * 2**20 and result["scale"] == 2 * 2**20
    assert result["held_after"] == 0


def test_an_object_passed_to_a_task_is_freed_once_dropped_and_the_task_has_ended(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, STORE_USED + textwrap.dedent("""
        import json, time, numpy as np, torus
        torus.init()

        @torus.remote
        def total(x):
            time.sleep(1)
            return int(x.sum())

        start = used()
        ref = torus.put(np.ones(4 * 2**20, dtype=np.uint8))
        out = total.remote(ref)
        del ref  # the running task still holds it
        result = torus.get(out)
        deadline = time.time() + 10
        while used() - start > 0 and time.time() < deadline:
            time.sleep(0.05)
        print(json.dumps({"result": result, "held_after": used() - start}))
    """))
    assert result == {"result": 4 * 2**20, "held_after": 0}


def test_a_drivers_store_objects_are_freed_when_dropped_and_when_it_is_killed(cluster, tmp_path):
    before = shm_bytes()
    # Dropped refs free the store's copy.
    result = driver_json(cluster, tmp_path, STORE_USED + textwrap.dedent("""
        import json, numpy as np, torus
        torus.init()
        start = used()
        ref = torus.put(np.ones(32 * 2**20, dtype=np.uint8))
        held = used() - start
        del ref
        import time
        deadline = time.time() + 10
        while used() - start > 0 and time.time() < deadline:
            time.sleep(0.05)
        print(json.dumps({"held": held, "after_del": used() - start}))
    """))
    assert 32 * 2**20 <= result["held"] < 33 * 2**20
    assert result["after_del"] == 0
    # A driver killed with its objects in the store: the agent frees them once it sees the driver gone.
    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent("""
        import numpy as np, sys, time, torus
        torus.init()
        refs = [torus.put(np.ones(16 * 2**20, dtype=np.uint8)) for _ in range(2)]
        print("stored", flush=True)
        time.sleep(300)
    """))
    proc = subprocess.Popen([PYTHON, str(script)], env=python_env(cluster), stdout=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    try:
        assert proc.stdout.readline().strip() == "stored"
        assert shm_bytes() - before >= 32 * 2**20
        proc.kill()
        proc.wait(timeout=30)
        wait_until(lambda: shm_bytes() - before <= 0, timeout=30, message="the killed driver's objects are freed")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_200_mb_array_put_on_one_node_is_read_bit_identical_on_another(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import hashlib, json, numpy as np, torus
        from torus.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        torus.init()
        array = np.random.default_rng(7).integers(0, 2**62, size=200 * 2**20 // 8, dtype=np.int64)
        ref = torus.put(array)
        here = torus.get_runtime_context().get_node_id()
        there = [n["NodeID"] for n in torus.nodes() if n["NodeID"] != here][0]

        @torus.remote
        def digest(x):
            import hashlib
            return hashlib.sha256(x.tobytes()).hexdigest(), x.dtype.str, x.shape, torus.get_runtime_context().get_node_id()

        remote = torus.get(digest.options(scheduling_strategy=NodeAffinitySchedulingStrategy(there, soft=False))
                           .remote(ref), timeout=300)
        print(json.dumps({"same": remote[0] == hashlib.sha256(array.tobytes()).hexdigest(), "dtype": remote[1],
                          "shape": list(remote[2]), "read_on_other_node": remote[3] == there != here}))
    """, timeout=300)
    assert result == {"same": True, "dtype": "<i8", "shape": [200 * 2**20 // 8], "read_on_other_node": True}
