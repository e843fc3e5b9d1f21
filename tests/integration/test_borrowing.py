"""Refs inside values against a real `torus up` cluster: an object lives while any process holds a ref to it — in a
task's arguments, a return value, a value put in the store, or an actor's state — and is freed from the node's store
once the last one lets go, a killed holder included. Each test measures the store's bytes in /dev/shm, as
test_objects.py does."""

import json
import os
import signal
import textwrap

from conftest import wait_until
from test_objects import STORE_USED
from test_tasks import cluster, driver_json  # noqa: F401 (cluster: the module's fixture)

SETUP = STORE_USED + textwrap.dedent("""
    import json, os, time, numpy as np, torus
    torus.init()
    MiB = 2**20

    def settle(start, timeout=15):
        # What the store holds beyond `start` once deletions are done (or the timeout passed).
        deadline = time.time() + timeout
        while used() - start > 0 and time.time() < deadline:
            time.sleep(0.05)
        return used() - start

    @torus.remote
    def total(refs, wait=0):
        time.sleep(wait)
        return int(sum(torus.get(r).sum() for r in refs))
""")


def test_refs_inside_arguments_are_held_by_the_call_and_freed_after_it(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, SETUP + textwrap.dedent("""
        start = used()
        inner = [torus.put(np.ones(4 * MiB, dtype=np.uint8)) for _ in range(3)]
        out = total.remote(inner, wait=1)
        del inner  # the running call holds them; its worker borrows them
        print(json.dumps({"total": torus.get(out), "held_after": settle(start)}))
    """))
    assert result == {"total": 12 * 2**20, "held_after": 0}


def test_refs_a_worker_returns_live_until_every_holder_lets_go(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, SETUP + textwrap.dedent("""
        @torus.remote
        def make(n):
            # Owned by this worker; its caller borrows them through the return value.
            return os.getpid(), [torus.put(np.full(2 * MiB, i, dtype=np.uint8)) for i in range(n)]

        start = used()
        outer = make.remote(2)
        owner_pid, refs = torus.get(outer)
        held = used() - start
        del outer
        time.sleep(1)
        sums = [int(torus.get(r).sum()) for r in refs]   # still there: this driver borrows them
        passed_on = torus.get(total.remote(refs))          # and another worker can read them
        del refs
        out = {"held": held, "sums": sums, "passed_on": passed_on, "held_after": settle(start, timeout=5)}
        os.kill(owner_pid, 0)  # freed by its owner, which is still there (not by the owner's exit)
        print(json.dumps(out))
    """))
    assert result["held"] >= 4 * 2**20, result
    assert result["sums"] == [0, 2 * 2**20] and result["passed_on"] == 2 * 2**20, result
    assert result["held_after"] == 0, result


def test_a_value_holding_refs_keeps_them_until_it_is_dropped(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, SETUP + textwrap.dedent("""
        start = used()
        inner = torus.put(np.ones(4 * MiB, dtype=np.uint8))
        box = torus.put({"refs": [inner]})
        del inner
        time.sleep(0.5)
        read = torus.get(total.remote(torus.get(box)["refs"]))
        kept = used() - start
        del box
        print(json.dumps({"read": read, "kept": kept, "held_after": settle(start)}))
    """))
    assert result["read"] == 4 * 2**20 and result["kept"] >= 4 * 2**20, result
    assert result["held_after"] == 0, result


def test_an_actor_holding_a_ref_keeps_it_and_a_killed_one_lets_go(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, SETUP + textwrap.dedent("""
        @torus.remote
        class Keeper:
            def keep(self, refs):
                self.refs = refs
                return os.getpid()
            def read(self):
                return int(torus.get(self.refs[0]).sum())

        start = used()
        ref = torus.put(np.ones(4 * MiB, dtype=np.uint8))
        keeper = Keeper.remote()
        pid = torus.get(keeper.keep.remote([ref]))
        del ref
        time.sleep(1)
        out = {"kept": used() - start, "read": torus.get(keeper.read.remote())}
        os.kill(pid, 9)  # the borrower dies without a word: its owner's probes find it gone
        out["held_after"] = settle(start, timeout=30)
        print(json.dumps(out))
    """), timeout=180)
    assert result["kept"] >= 4 * 2**20 and result["read"] == 4 * 2**20, result
    assert result["held_after"] == 0, result
