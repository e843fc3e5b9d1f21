"""Actors from Python against a real `torus up` cluster: state, call order, handles passed around, restarts after
kill -9, torus.kill, constructor errors, and actors dying with their driver."""

import json
import subprocess
import textwrap

from conftest import pid_alive, wait_until
from test_tasks import PYTHON, cluster, driver_json, python_env, run_driver  # noqa: F401 - the module's cluster


def test_an_actor_keeps_state_and_runs_calls_in_order(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import json, torus
        torus.init()

        @torus.remote
        class Log:
            def __init__(self, first):
                self.items = [first]
            def add(self, x):
                self.items.append(x)
                return len(self.items)
            def items_(self):
                return self.items
            def whoami(self):
                ctx = torus.get_runtime_context()
                return ctx.get_actor_id()

        @torus.remote
        def add_from_task(log, x):
            return torus.get(log.add.remote(x))

        log = Log.remote("start")
        sizes = torus.get([log.add.remote(i) for i in range(200)])
        from_task = torus.get(add_from_task.remote(log, "task"))
        print(json.dumps({"sizes_in_order": sizes == list(range(2, 202)), "items": torus.get(log.items_.remote())[:4],
                          "from_task": from_task, "actor_id": len(torus.get(log.whoami.remote()))}))
    """)
    assert result == {"sizes_in_order": True, "items": ["start", 0, 1, 2], "from_task": 202, "actor_id": 32}


def test_a_killed_worker_restarts_the_actor_until_its_restarts_are_spent(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import json, os, signal, time, torus
        torus.init()

        @torus.remote(max_restarts=1)
        class Counter:
            def __init__(self):
                self.n = 0
            def incr(self):
                self.n += 1
                return self.n
            def pid(self):
                return os.getpid()

        c = Counter.remote()
        out = {"before": torus.get([c.incr.remote() for _ in range(3)])}
        first = torus.get(c.pid.remote())
        os.kill(first, signal.SIGKILL)
        # The restarted actor starts from its constructor again.
        deadline = time.time() + 60
        while True:
            try:
                out["after_restart"] = torus.get(c.incr.remote())
                break
            except torus.exceptions.ActorDiedError:
                assert time.time() < deadline
                time.sleep(0.1)
        second = torus.get(c.pid.remote())
        out["new_process"] = second != first
        os.kill(second, signal.SIGKILL)
        time.sleep(1)
        try:
            torus.get(c.incr.remote(), timeout=60)
        except torus.exceptions.ActorDiedError as e:
            out["dead"] = str(e)
        print(json.dumps(out))
    """)
    assert result["before"] == [1, 2, 3]
    assert result["after_restart"] == 1
    assert result["new_process"] is True
    assert result["dead"].startswith("The actor died unexpectedly before finishing this task.\n"
                                     "the actor is dead: its worker was killed by signal 9 (SIGKILL)"), result


def test_kill_and_a_failing_constructor_leave_the_actor_dead_with_the_reason(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import json, torus
        torus.init()

        @torus.remote(max_restarts=5)
        class A:
            def ping(self):
                return "pong"

        @torus.remote
        class Broken:
            def __init__(self):
                raise KeyError("missing config")
            def ping(self):
                return "pong"

        a = A.remote()
        out = {"ping": torus.get(a.ping.remote())}
        torus.kill(a)
        try:
            torus.get(a.ping.remote())
        except torus.exceptions.ActorDiedError as e:
            out["killed"] = str(e)
        try:
            torus.get(Broken.remote().ping.remote())
        except torus.exceptions.ActorDiedError as e:
            out["broken"] = [e.actor_init_failed, type(e.args[0]).__name__, isinstance(e.args[0].cause, KeyError),
                             str(e).startswith("The actor died because of an error raised in its creation task, "),
                             str(e).endswith("KeyError: 'missing config'")]
        # As Ray: max_concurrency=0 is taken, and the actor runs its calls one at a time.
        out["concurrency"] = torus.get(A.options(max_concurrency=0).remote().ping.remote())
        print(json.dumps(out))
    """)
    assert result == {"ping": "pong",
                      "killed": "The actor died unexpectedly before finishing this task.\n"
                                "the actor is dead: it was killed (torus.kill)",
                      "broken": [True, "RayTaskError", True, True, True],
                      "concurrency": "pong"}


def test_actors_die_with_their_driver(cluster, tmp_path):
    pid_file = tmp_path / "actor.pid"
    rc, out, err = run_driver(cluster, tmp_path, f"""
        import os, torus
        torus.init()

        @torus.remote
        class Holder:
            def pid(self):
                return os.getpid()

        h = Holder.remote()
        with open({str(pid_file)!r}, "w") as f:
            f.write(str(torus.get(h.pid.remote())))
        os._exit(0)
    """)
    assert rc == 0, err
    actor_pid = int(pid_file.read_text())
    wait_until(lambda: not pid_alive(actor_pid), 15, message=f"the dead driver's actor (pid {actor_pid}) to stop")


def test_sixteen_tpu_actors_pinned_to_a_slice_placement_group_all_reduce(cluster, tmp_path):
    from conftest import REPO
    rc, out, err = run_driver(cluster, tmp_path, (REPO / "examples" / "actors_allreduce.py").read_text(), timeout=300)
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err}"
    result = json.loads(out.strip().splitlines()[-1])
    assert result["sums"] == [136.0] * 16
    assert len({(node, chips) for node, chips in result["placements"]}) == 16
    assert {chips for _, chips in result["placements"]} == {"0", "1", "2", "3"}
    # Ranks 4k..4k+3 on the host of bundle k: the slice's hosts, in worker id order.
    hosts = [node for node, _ in result["placements"]]
    assert hosts == [h for h in result["slice_hosts"] for _ in range(4)], hosts


def test_threaded_and_async_actors_run_calls_at_the_same_time(cluster, tmp_path):
    # A call that waits for a later call's signal finishes only if the two run at once.
    result = driver_json(cluster, tmp_path, """
        import asyncio, json, threading, torus
        torus.init()

        @torus.remote(max_concurrency=2)
        class Threaded:
            def __init__(self):
                self.event = threading.Event()
            def wait(self):
                return self.event.wait(timeout=20)
            def signal(self):
                self.event.set()
                return torus.get_runtime_context().get_task_name()

        @torus.remote
        class Async:
            def __init__(self):
                self.event = None
            async def wait(self):
                self.event = self.event or asyncio.Event()
                await asyncio.wait_for(self.event.wait(), timeout=20)
                return "woken"
            async def signal(self):
                self.event = self.event or asyncio.Event()
                self.event.set()
                return torus.get_runtime_context().get_task_name()

        @torus.remote
        class Serial:
            def __init__(self):
                self.event = threading.Event()
            def wait(self):
                return self.event.wait(timeout=1)
            def signal(self):
                self.event.set()

        t, a, s = Threaded.remote(), Async.remote(), Serial.remote()
        # Two calls that wait, then the one that wakes them: it reaches the actor although the calls ahead of it
        # (as many as go to one worker at once) have not ended.
        t3 = Threaded.options(max_concurrency=3).remote()
        waits = [t.wait.remote(), a.wait.remote(), s.wait.remote(), t3.wait.remote(), t3.wait.remote()]
        names = torus.get([t.signal.remote(), a.signal.remote(), t3.signal.remote()])
        s.signal.remote()
        print(json.dumps({"woken": torus.get(waits, timeout=60), "names": names}))
    """)
    # The serial actor ran its wait to its timeout before the signal: calls one at a time.
    assert result == {"woken": [True, "woken", False, True, True],
                      "names": ["Threaded.signal", "Async.signal", "Threaded.signal"]}


def test_leases_held_by_a_driver_are_in_metrics(cluster, tmp_path):
    import subprocess
    import textwrap
    from test_metrics import scrape
    from test_tasks import PYTHON, python_env
    go = tmp_path / "go"
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(f"""
        import os, time, torus
        torus.init()

        @torus.remote(resources={{"TPU": 1}})
        class Held:
            def ping(self):
                return 1

        held = [Held.remote() for _ in range(3)]
        torus.get([h.ping.remote() for h in held])
        print(torus.get_runtime_context().get_job_id(), flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.05)
    """))
    proc = subprocess.Popen([PYTHON, str(script)], env=python_env(cluster), stdout=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    try:
        import select
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the driver printed no job id within 60 s"
        job_id = proc.stdout.readline().strip()
        assert job_id.startswith("driver-"), job_id

        def leases():
            return sum(v for (name, labels), v in scrape(cluster).items()
                       if name == "torus_node_task_leases" and ("job_id", job_id) in labels)
        assert wait_until(lambda: leases() == 3, 30, interval=0.5, message="3 leases of the driver in /metrics")
    finally:
        go.write_text("")
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    wait_until(lambda: leases() == 0, 30, interval=0.5, message="the driver's leases to leave /metrics")


def test_an_actor_whose_agent_is_killed_restarts_on_another_node(torus, tmp_path):
    import os
    import signal
    import subprocess
    import textwrap
    from test_tasks import PYTHON, SPEC, python_env
    torus.up(spec=SPEC)
    go = tmp_path / "go"
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, time, torus
        torus.init()

        @torus.remote(resources={{"TPU": 1}}, max_restarts=1)
        class Counter:
            def __init__(self):
                self.n = 0
            def incr(self):
                self.n += 1
                return self.n, torus.get_runtime_context().get_node_id()

        c = Counter.remote()
        first = [torus.get(c.incr.remote()) for _ in range(3)]
        print(first[-1][1], flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.05)
        deadline = time.time() + 60
        while True:
            try:
                after = torus.get(c.incr.remote(), timeout=60)
                break
            except torus.exceptions.ActorDiedError:
                assert time.time() < deadline
                time.sleep(0.2)
        print(json.dumps({{"before": first[-1], "after": after}}), flush=True)
    """))
    proc = subprocess.Popen([PYTHON, str(script)], env=python_env(torus), stdout=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    try:
        node = proc.stdout.readline().strip()
        os.kill(torus.pid_of(node), signal.SIGKILL)
        go.write_text("")
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    result = json.loads(out.strip().splitlines()[-1])
    assert result["before"] == [3, node]
    # A new process on another node: its state built again by the constructor.
    assert result["after"][0] == 1
    assert result["after"][1] != node


def test_the_rl_loop_example_learns(cluster, tmp_path):
    from conftest import REPO
    rc, out, err = run_driver(cluster, tmp_path, (REPO / "examples" / "rl_loop.py").read_text(), timeout=300)
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err}"
    rewards = json.loads(out.strip().splitlines()[-1])["rewards"]
    assert len(rewards) == 15
    # Seeded: the learner's policy improves on the bandit through the weights it publishes.
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3 + 0.2, rewards


def test_available_resources_drop_while_an_actor_holds_chips(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import json, time, torus
        torus.init()

        @torus.remote(resources={"TPU": 4})
        class WholeHost:
            def ping(self):
                return 1

        def tpu_free():
            return torus.available_resources().get("TPU", 0)

        def settle(want):
            deadline = time.time() + 20
            while tpu_free() != want and time.time() < deadline:
                time.sleep(0.1)
            return tpu_free()

        total = torus.cluster_resources()["TPU"]
        before = settle(total)
        a = WholeHost.remote()
        torus.get(a.ping.remote())
        held = settle(total - 4)
        torus.kill(a)
        after = settle(total)
        print(json.dumps({"total": total, "before": before, "held": held, "after": after}))
    """)
    assert result == {"total": 16.0, "before": 16.0, "held": 12.0, "after": 16.0}


def test_a_placement_group_is_placed_around_the_chips_that_actors_hold(cluster, tmp_path):
    # Three actors lease the chips of three of the slice's four hosts from their agents (leases the head's groups
    # do not account for); a one-host group then goes to the fourth host, and a second one waits until an actor
    # goes — its reason says what it waits for — and is then placed on that actor's host.
    result = driver_json(cluster, tmp_path, """
        import json, time, torus
        from torus.util import placement_group, remove_placement_group
        torus.init()

        @torus.remote(resources={"TPU": 4})
        class WholeHost:
            def node(self):
                return torus.get_runtime_context().get_node_id()

        actors = [WholeHost.remote() for _ in range(3)]
        held = [torus.get(a.node.remote()) for a in actors]
        groups = []
        try:
            # Groups outlive their driver: removed whatever happens, so later tests find the slice free.
            first = placement_group([{"TPU": 4}])
            groups.append(first)
            first_ready = first.wait(timeout_seconds=30)
            first_node = (first.table()["bundles"] or [{"node_id": None}])[0]["node_id"]
            second = placement_group([{"TPU": 4}])
            groups.append(second)
            second_ready_early = second.wait(timeout_seconds=2)
            waiting = second.table()
            torus.kill(actors[1])
            second_ready = second.wait(timeout_seconds=30)
            second_node = (second.table()["bundles"] or [{"node_id": None}])[0]["node_id"]
        finally:
            for g in groups:
                remove_placement_group(g)
        print(json.dumps({"held": held, "first_ready": first_ready, "first_node": first_node,
                          "second_ready_early": second_ready_early, "waiting_state": waiting["state"],
                          "waiting_reason": waiting.get("reason", ""), "second_ready": second_ready,
                          "second_node": second_node}))
    """)
    assert len(set(result["held"])) == 3, result
    assert result["first_ready"], result
    assert result["first_node"] not in result["held"], result
    assert not result["second_ready_early"], result
    assert result["waiting_state"] == "PENDING", result
    assert "TPU" in result["waiting_reason"], result
    assert result["second_ready"], result
    assert result["second_node"] == result["held"][1], result


def list_actors(t, *flags):
    result = t.ok("list", "actors", "--json", *flags)
    return {a["actor_id"]: a for a in json.loads(result.stdout)}


def http_get(t, path):
    import urllib.request
    address = (t.session / "dashboard_address").read_text().strip()
    request = urllib.request.Request(f"http://{address}{path}", headers={"Authorization": f"Bearer {t.token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_named_actors_are_found_by_name_from_tasks_and_other_drivers_and_listed(cluster, tmp_path):
    other = tmp_path / "other.py"
    other.write_text(textwrap.dedent("""
        import json, torus
        torus.init(namespace="rl")
        learner = torus.get_actor("learner")
        print(json.dumps({"step": torus.get(learner.step.remote(10))}))
    """))
    result = driver_json(cluster, tmp_path, f"""
        import json, os, subprocess, sys, torus
        torus.init(namespace="rl")

        @torus.remote
        class Learner:
            def __init__(self):
                self.steps = 0
            def step(self, n=1):
                self.steps += n
                return self.steps
            def pid(self):
                return os.getpid()

        @torus.remote
        def from_task():
            return torus.get(torus.get_actor("learner").step.remote(100))

        learner = Learner.options(name="learner").remote()
        out = {{"first": torus.get(learner.step.remote())}}
        out["by_name"] = torus.get(torus.get_actor("learner").step.remote())
        out["from_task"] = torus.get(from_task.remote())
        other = subprocess.run([sys.executable, {str(other)!r}], capture_output=True, text=True, timeout=120)
        out["other_driver"] = json.loads(other.stdout.strip().splitlines()[-1]) if other.returncode == 0 else other.stderr
        for bad in [lambda: Learner.options(name="learner").remote(),
                    lambda: torus.get_actor("nope"),
                    lambda: torus.get_actor("learner", namespace="serve")]:
            try:
                bad()
            except ValueError as e:
                out.setdefault("errors", []).append(str(e))
        out["pid"] = torus.get(learner.pid.remote())
        out["actor_id"] = learner._actor_id.hex()
        print(json.dumps(out))
    """)
    assert result["first"] == 1 and result["by_name"] == 2 and result["from_task"] == 102
    assert result["other_driver"] == {"step": 112}
    lookup_failed = ("Failed to look up actor with name '{}'. This could because 1. You are trying to look up a named "
                     "actor you didn't create. 2. The named actor died. 3. You did not use a namespace matching the "
                     "namespace of the actor.")
    assert result["errors"] == [
        "The name learner (namespace=rl) is already taken. Please use a different name or get the existing actor "
        "using ray.get_actor('learner', namespace='rl')",
        lookup_failed.format("nope"),
        lookup_failed.format("learner"),
    ]
    # The driver has exited: its actor is DEAD, and says why.
    actors = list_actors(cluster)
    entry = actors[result["actor_id"]]
    assert entry["name"] == "learner" and entry["namespace"] == "rl" and entry["class_name"] == "__main__.Learner"
    assert entry["pid"] == result["pid"] and entry["state"] == "DEAD"
    assert entry["death_cause"] == "its owner is shutting down"
    assert sorted(entry["methods"]) == ["pid", "step"]
    status, by_id = http_get(cluster, f"/api/v0/actors/{result['actor_id']}")
    assert status == 200 and by_id["state"] == "DEAD" and by_id["node_id"] == entry["node_id"] != ""
    status, missing = http_get(cluster, "/api/v0/actors/abc123")
    assert status == 404 and missing["error"] == "unknown actor abc123"
    status, bad = http_get(cluster, "/api/v0/actors?state=GONE")
    assert status == 400 and "query parameter state" in bad["error"]


def test_the_actors_of_a_killed_driver_are_dead_in_the_directory_and_free_their_names(cluster, tmp_path):
    script = tmp_path / "owner.py"
    script.write_text(textwrap.dedent("""
        import sys, time, torus
        torus.init(namespace="orphans")

        @torus.remote
        class Holder:
            def ping(self):
                return "pong"

        h = Holder.options(name="holder").remote()
        torus.get(h.ping.remote())
        print(h._actor_id.hex(), flush=True)
        time.sleep(600)
    """))
    proc = subprocess.Popen([PYTHON, str(script)], env=python_env(cluster), stdout=subprocess.PIPE, text=True)
    try:
        actor_id = proc.stdout.readline().strip()
        assert list_actors(cluster, "--state", "ALIVE")[actor_id]["name"] == "holder"
    finally:
        proc.kill()
        proc.wait()
    # The head asks owners every 2 s and gives up after three failed probes.
    wait_until(lambda: list_actors(cluster)[actor_id]["state"] == "DEAD", timeout=30, interval=0.5,
               message="the killed driver's actor is DEAD")
    assert list_actors(cluster)[actor_id]["death_cause"].startswith("its owner ")
    assert " is gone (" in list_actors(cluster)[actor_id]["death_cause"]
    result = driver_json(cluster, tmp_path, """
        import json, torus
        torus.init(namespace="orphans")

        @torus.remote
        class Holder:
            def ping(self):
                return "again"

        h = Holder.options(name="holder").remote()
        print(json.dumps({"ping": torus.get(torus.get_actor("holder").ping.remote())}))
    """)
    assert result == {"ping": "again"}


def test_the_state_api_lists_actors_and_tasks_with_filters(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import json, time, torus
        from torus.util.state import get_actor, list_actors, list_tasks, summarize_tasks
        torus.init(namespace="state-api")

        @torus.remote
        class Keeper:
            def ping(self):
                return 1

        @torus.remote
        def work(i):
            return i

        k = Keeper.options(name="keeper").remote()
        torus.get(k.ping.remote())
        torus.get([work.remote(i) for i in range(4)])
        time.sleep(1.5)  # task states reach the head about once a second
        mine = torus.get_runtime_context().get_job_id()
        alive = list_actors(filters=[("state", "=", "ALIVE"), ("ray_namespace", "=", "state-api")])
        tasks = list_tasks(filters=[("job_id", "=", mine), ("name", "=", "work")])
        not_finished = list_tasks(filters=[("job_id", "=", mine), ("state", "!=", "FINISHED")])
        created = list_tasks(filters=[("job_id", "=", mine), ("type", "=", "ACTOR_CREATION_TASK")])
        out = {"alive": [(a.name, a.class_name, a.state) for a in alive],
               "by_id": get_actor(k._actor_id.hex())["name"],
               "tasks": sorted(t.state for t in tasks),
               "not_finished": [t.name for t in not_finished],
               "created": [(t.name, t.state) for t in created],
               "summary": summarize_tasks()["cluster"]["summary"]["work"]["state_counts"]}
        try:
            list_tasks(filters=[("state", "~", "x")])
        except ValueError as e:
            out["bad"] = str(e)
        print(json.dumps(out))
    """)
    assert result["alive"] == [["keeper", "Keeper", "ALIVE"]]
    assert result["by_id"] == "keeper"
    assert result["tasks"] == ["FINISHED"] * 4
    assert result["not_finished"] == []
    assert result["created"] == [["keeper:Keeper.__init__", "FINISHED"]]
    assert result["summary"]["FINISHED"] >= 4
    assert result["bad"] == "Unsupported filter predicate ~ is given. Available predicates: =, !=."


def test_max_task_retries_sends_a_call_again_to_the_restarted_actor(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import json, os, signal, time, torus
        torus.init()

        @torus.remote(max_restarts=2, max_task_retries=1)
        class Worker:
            def pid(self):
                return os.getpid()
            def slow(self, seconds):
                time.sleep(seconds)
                return os.getpid()

        w = Worker.remote()
        first = torus.get(w.pid.remote())
        retried = w.slow.remote(3)
        time.sleep(1)
        os.kill(first, signal.SIGKILL)
        out = {"retried_ran_in_new_process": torus.get(retried, timeout=60) != first}
        second = torus.get(w.pid.remote())
        not_retried = w.slow.options(max_task_retries=0).remote(3)
        time.sleep(1)
        os.kill(second, signal.SIGKILL)
        try:
            torus.get(not_retried, timeout=60)
        except torus.exceptions.ActorDiedError as e:
            out["not_retried"] = str(e)[:120]
        try:
            w.slow.options(max_task_retries=-2)
        except ValueError as e:
            out["bad"] = str(e)
        # A handle found by name retries as the actor's creator said.
        Worker.options(name="retrier").remote()
        found = torus.get_actor("retrier")
        third = torus.get(found.pid.remote())
        retried_by_name = found.slow.remote(3)
        time.sleep(1)
        os.kill(third, signal.SIGKILL)
        out["get_actor_handle_retried"] = torus.get(retried_by_name, timeout=60) != third
        print(json.dumps(out))
    """)
    assert result["get_actor_handle_retried"] is True
    assert result["retried_ran_in_new_process"] is True
    assert result["not_retried"].startswith("The actor died unexpectedly before finishing this task.\n"
                                            "the actor's worker died while running"), result
    assert result["bad"] == ("The keyword 'max_task_retries' only accepts None, 0, -1 or a positive integer, where -1 "
                             "represents infinity.")
