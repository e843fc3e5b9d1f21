"""Detached actors (lifetime="detached") against a real `torus up` cluster: the head owns them, so they outlive the
driver that created them, are found by name from other drivers, restart after their worker's death, end with
torus.kill, and survive a kill -9 and restart of the head itself (same worker, same state)."""

import json
import os
import signal

from conftest import pid_alive, wait_until
from test_tasks import SPEC, cluster, driver_json, run_driver  # noqa: F401 - the module's cluster

COUNTER = """
        import json, os, sys, torus
        torus.init(namespace="svc")

        @torus.remote
        class Counter:
            def __init__(self, start, blob):
                self.n = start
                self.blob_size = len(blob)
            def incr(self):
                self.n += 1
                return self.n
            def info(self):
                return {"pid": os.getpid(), "n": self.n, "blob": self.blob_size}
"""


def actors_json(t):
    return json.loads(t.ok("list", "actors", "--json").stdout)


def test_a_detached_actor_outlives_its_driver_and_ends_with_kill(cluster, tmp_path):
    created = driver_json(cluster, tmp_path, COUNTER + """
        # A constructor argument of 300 KB (a stored value) and a ref both reach the head as values.
        c = Counter.options(name="keeper", lifetime="detached").remote(torus.put(10), b"x" * 300_000)
        print(json.dumps({"first": torus.get(c.incr.remote()), **torus.get(c.info.remote())}))
    """)
    assert created["first"] == 11 and created["blob"] == 300_000
    pid = created["pid"]
    # The driver is gone; the actor and its state are not.
    assert pid_alive(pid)
    entry = next(a for a in actors_json(cluster) if a["name"] == "keeper")
    assert entry["state"] == "ALIVE" and entry["is_detached"] is True, entry
    assert entry["owner_address"] == cluster.address, entry
    row = next(line for line in cluster.ok("list", "actors").stdout.splitlines() if "svc/keeper" in line)
    assert " ALIVE " in row and " detached " in row, row
    found = driver_json(cluster, tmp_path, COUNTER + """
        c = torus.get_actor("keeper")
        out = {"second": torus.get(c.incr.remote()), **torus.get(c.info.remote())}
        torus.kill(c)
        try:
            torus.get(c.incr.remote(), timeout=30)
        except torus.exceptions.ActorDiedError as e:
            out["dead"] = str(e)
        try:
            torus.get_actor("keeper")
        except ValueError as e:
            out["gone"] = str(e)
        print(json.dumps(out))
    """)
    assert found["second"] == 12 and found["pid"] == pid, found
    assert "killed" in found["dead"], found
    assert found["gone"].startswith("Failed to look up actor with name 'keeper'."), found
    wait_until(lambda: not pid_alive(pid), 15, message=f"the killed actor's worker (pid {pid}) to stop")
    entry = next(a for a in actors_json(cluster) if a["name"] == "keeper")
    assert entry["state"] == "DEAD" and "killed" in entry["death_cause"], entry


def test_a_detached_actor_restarts_after_its_worker_dies_with_no_driver_left(cluster, tmp_path):
    created = driver_json(cluster, tmp_path, COUNTER + """
        c = Counter.options(name="phoenix", lifetime="detached", max_restarts=1).remote(0, b"")
        torus.get(c.incr.remote())
        print(json.dumps(torus.get(c.info.remote())))
    """)
    os.kill(created["pid"], signal.SIGKILL)
    wait_until(lambda: (lambda e: e if e["state"] == "ALIVE" and e["restarts"] == 1 else None)(
        next(a for a in actors_json(cluster) if a["name"] == "phoenix")), 30,
        message="the detached actor to be restarted by the head")
    after = driver_json(cluster, tmp_path, COUNTER + """
        c = torus.get_actor("phoenix")
        print(json.dumps(torus.get(c.info.remote())))
        torus.kill(c)
    """)
    # A new process, its state built again by the constructor.
    assert after["pid"] != created["pid"] and after["n"] == 0, after


def test_a_detached_name_taken_and_an_oversized_constructor_are_refused(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, COUNTER + """
        a = Counter.options(name="taken", lifetime="detached").remote(0, b"")
        out = {}
        for label, make in [("taken", lambda: Counter.options(name="taken", lifetime="detached").remote(0, b"")),
                            ("huge", lambda: Counter.options(lifetime="detached").remote(0, b"y" * (9 << 20))),
                            ("lifetime", lambda: Counter.options(lifetime="forever").remote(0, b""))]:
            try:
                make()
            except ValueError as e:
                out[label] = str(e)
        torus.kill(a)
        print(json.dumps(out))
    """)
    assert result["taken"].startswith("The name taken (namespace=svc) is already taken."), result
    assert "at most 8 MiB for a detached actor" in result["huge"], result
    assert result["lifetime"] == "actor `lifetime` argument must be one of 'detached', 'non_detached' and 'None'."


def test_a_detached_actor_survives_a_head_restart_in_the_same_worker(torus, tmp_path):
    from test_head_restart import kill_head
    torus.up(spec=SPEC)
    created = driver_json(torus, tmp_path, COUNTER + """
        c = Counter.options(name="durable", lifetime="detached").remote(5, b"")
        torus.get(c.incr.remote())
        print(json.dumps(torus.get(c.info.remote())))
    """)
    kill_head(torus)
    assert pid_alive(created["pid"])
    result = torus.ok("head", "restart")
    assert "torus head restarted at " in result.stdout, result.stdout
    wait_until(lambda: (lambda s: s if s["nodes_alive"] == 5 else None)(torus.status()), 20,
               message="every agent to register with the restarted head")
    after = driver_json(torus, tmp_path, COUNTER + """
        c = torus.get_actor("durable")
        out = {"incr": torus.get(c.incr.remote()), **torus.get(c.info.remote())}
        torus.kill(c)
        print(json.dumps(out))
    """)
    assert after["pid"] == created["pid"] and after["incr"] == 7, after
    wait_until(lambda: not pid_alive(created["pid"]), 15, message="the killed actor's worker to stop")


def test_a_head_killed_while_creating_a_detached_actor_creates_it_again_and_stops_the_first_worker(torus, tmp_path):
    from test_head_restart import kill_head
    torus.up(spec=SPEC)
    marker = tmp_path / "first.pid"
    driver_json(torus, tmp_path, f"""
        import json, os, time, torus
        torus.init(namespace="svc")

        @torus.remote
        class Slow:
            def __init__(self, marker):
                if not os.path.exists(marker):  # the first creation: slow enough for the head to die meanwhile
                    with open(marker, "w") as f:
                        f.write(str(os.getpid()))
                    time.sleep(120)
            def pid(self):
                return os.getpid()

        Slow.options(name="slow", lifetime="detached").remote({str(marker)!r})
        print(json.dumps({{}}))
    """)
    wait_until(marker.exists, 30, message="the first creation to start")
    first = int(marker.read_text())
    kill_head(torus)
    result = torus.ok("head", "restart")
    assert "torus head restarted at " in result.stdout, result.stdout
    # The new head gives back the lease the dead one held for it (stopping that worker), and creates it again.
    wait_until(lambda: not pid_alive(first), 30, message=f"the first creation's worker (pid {first}) to be stopped")
    after = driver_json(torus, tmp_path, """
        import json, torus
        torus.init(namespace="svc")
        c = torus.get_actor("slow")
        out = {"pid": torus.get(c.pid.remote(), timeout=60)}
        torus.kill(c)
        print(json.dumps(out))
    """)
    assert after["pid"] != first, after
