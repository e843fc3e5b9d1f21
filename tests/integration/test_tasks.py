"""Tasks and objects from Python (`import torus`) against a real `torus up` cluster: each test runs a driver script
as its own process, with Debian's python3, the way a user runs a program."""

import json
import os
import subprocess
import textwrap

import pytest

from conftest import BIN_DIR, REPO, Torus, pid_alive, wait_until

SPEC = REPO / "tests" / "integration" / "specs" / "tasks.yaml"
PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    t = Torus(tmp_path_factory.mktemp("tasks") / "torus")
    try:
        t.up(spec=SPEC)
        yield t
    finally:
        t.cleanup()


def python_env(t, **extra):
    env = dict(t.env)
    # The source tree's package and the build's module first; what the test run was given after them.
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), str(BIN_DIR.parent / "python")] + inherited)
    env.update(extra)
    return env


def run_driver(t, tmp_path, source, timeout=120, env=None):
    """Runs `source` as a driver script; returns (returncode, stdout, stderr)."""
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(source))
    proc = subprocess.run([PYTHON, str(script)], env=python_env(t, **(env or {})), capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path)
    return proc.returncode, proc.stdout, proc.stderr


def driver_json(t, tmp_path, source, **kwargs):
    rc, out, err = run_driver(t, tmp_path, source, **kwargs)
    assert rc == 0, f"driver exited {rc}\nstdout:\n{out}\nstderr:\n{err}"
    return json.loads(out.strip().splitlines()[-1])


def test_tasks_return_values_take_refs_and_nest(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import json, torus
        torus.init()

        @torus.remote
        def add(a, b=0):
            return a + b

        @torus.remote(num_returns=2)
        def pair(x):
            return x, -x

        @torus.remote
        def fan_out(n):
            return sum(torus.get([add.remote(i, b=1) for i in range(n)]))

        ref = torus.put(40)
        first, second = pair.remote(7)
        out = {
            "add": torus.get(add.remote(1, b=2)),
            "ref_arg": torus.get(add.remote(ref, b=2)),
            "chained": torus.get(add.remote(add.remote(1, 1), 3)),
            "pair": torus.get([first, second]),
            "nested": torus.get(fan_out.remote(5)),
            "many": torus.get([add.remote(i) for i in range(50)]) == list(range(50)),
            "ready": len(torus.wait([add.remote(1)], num_returns=1, timeout=30)[0]),
        }
        torus.shutdown()
        print(json.dumps(out))
    """)
    assert result == {"add": 3, "ref_arg": 42, "chained": 5, "pair": [7, -7], "nested": 15, "many": True,
                      "ready": 1}


def test_a_task_error_is_raised_as_its_own_type_with_the_remote_traceback(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import json, torus

        class Custom(Exception):
            pass

        @torus.remote
        def fails(kind):
            if kind == "value":
                raise ValueError("bad value 17")
            raise Custom("custom failure")

        @torus.remote
        def uses(x):
            return x

        torus.init()
        out = {}
        try:
            torus.get(fails.remote("value"))
        except ValueError as e:
            out["value"] = [type(e).__name__, isinstance(e, torus.exceptions.RayTaskError), e.args == (e.cause,),
                            str(e.cause), "in fails" in str(e), "raise ValueError" in str(e)]
        try:
            torus.get(fails.remote("custom"))
        except Custom as e:
            out["custom"] = str(e.cause)
        try:
            torus.get(uses.remote(fails.remote("value")))
        except ValueError as e:
            out["dependency"] = [type(e).__name__, str(e.cause)]
        print(json.dumps(out))
    """)
    assert result == {"value": ["RayTaskError(ValueError)", True, True, "bad value 17", True, True],
                      "custom": "custom failure", "dependency": ["RayTaskError(ValueError)", "bad value 17"]}


def test_tpu_tasks_each_get_their_own_chip_of_the_slice(cluster, tmp_path):
    held_dir = tmp_path / "held"
    held_dir.mkdir()
    result = driver_json(cluster, tmp_path, """
        import json, os, time, torus
        torus.init()

        @torus.remote(resources={"TPU": 1})
        def chip():
            # Each task holds its chip until all 16 hold one (a barrier of files), however slowly they start.
            open(os.path.join(HELD_DIR, os.environ["TPU_VISIBLE_CHIPS"] + "@" + str(os.getpid())), "w").close()
            deadline = time.monotonic() + 90
            while len(os.listdir(HELD_DIR)) < 16:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"only {len(os.listdir(HELD_DIR))} of 16 tasks held a chip at once")
                time.sleep(0.05)
            ctx = torus.get_runtime_context()
            return [ctx.get_node_id(), os.environ["TPU_VISIBLE_CHIPS"], ctx.get_accelerator_ids()["TPU"],
                    os.environ.get("TPU_CHIPS_PER_HOST_BOUNDS"), ctx.get_assigned_resources()]

        @torus.remote(num_cpus=2, resources={"TPU": 2})
        class Pair:
            def assigned(self):
                return torus.get_runtime_context().get_assigned_resources()

        out = torus.get([chip.remote() for _ in range(16)], timeout=120)
        try:
            torus.get_runtime_context().get_assigned_resources()
            driver_assigned = "no error"
        except AssertionError as e:  # as Ray: only a worker has assigned resources
            driver_assigned = str(e)
        out.append([torus.get(Pair.remote().assigned.remote()), driver_assigned])
        print(json.dumps(out))
    """.replace("HELD_DIR", repr(str(held_dir))))
    actor_assigned, driver_assigned = result.pop()
    assert actor_assigned == {"CPU": 2.0, "TPU": 2.0}
    assert driver_assigned == "This method is only available when the process is a worker. Current mode: 0"
    assert all(r[4] == {"CPU": 1.0, "TPU": 1.0} for r in result)
    result = [r[:4] for r in result]
    assert len(result) == 16
    held = {(node, chips) for node, chips, _, _ in result}
    assert len(held) == 16, f"two tasks shared a chip: {sorted(result)}"
    assert {chips for _, chips, _, _ in result} == {"0", "1", "2", "3"}
    assert len({node for node, _, _, _ in result}) == 4
    assert all(ids == [chips] for _, chips, ids, _ in result)
    assert all(bounds == "1,1,1" for _, _, _, bounds in result)


def test_unschedulable_and_malformed_requests_are_refused_with_the_reason(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import json, torus
        torus.init()

        @torus.remote
        def f():
            return 1

        out = {}
        try:
            torus.get(f.options(resources={"TPU": 8}).remote(), timeout=60)
        except torus.exceptions.TaskUnschedulableError as e:
            out["eight"] = str(e)
        for name, opts in [("half", {"resources": {"TPU": 0.5}}), ("cpus", {"num_cpus": -1}),
                           ("unknown", {"num_gpu": 1})]:
            try:
                f.options(**opts).remote()
            except ValueError as e:
                out[name] = str(e)
        try:
            @torus.remote(lifetime="forever")
            class Actor:
                pass
        except ValueError as e:
            out["lifetime"] = str(e)
        try:
            f()
        except TypeError as e:
            out["direct"] = str(e)
        print(json.dumps(out))
    """)
    assert result["eight"].startswith('The task is not schedulable: no node can ever hold a task of '
                                      '{"CPU": 1, "TPU": 8}; nodes have '), result["eight"]
    # Ray's words, as Ray's option checks give them.
    assert result["half"] == ("The number of requested 'TPU' was set to 0.5 which is not a supported chip "
                              "configuration. Supported configs: (1, 2, 4, 8)")
    assert result["cpus"] == "The quantity of resource num_cpus cannot be negative"
    assert result["unknown"].startswith("Invalid option keyword num_gpu for remote functions. Valid ones are [")
    assert result["lifetime"] == "actor `lifetime` argument must be one of 'detached', 'non_detached' and 'None'."
    assert result["direct"] == ("Remote functions cannot be called directly. Instead of running '__main__.f()', try "
                                "'__main__.f.remote()'.")


def test_a_worker_killed_mid_task_is_retried_and_then_reported(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import json, os, signal, time, torus
        torus.init()
        marks = os.path.abspath("marks")
        os.makedirs(marks)

        @torus.remote
        def slow(tag):
            attempt = len(os.listdir(marks))
            with open(os.path.join(marks, f"{tag}-{attempt}"), "w") as f:
                f.write(str(os.getpid()))
            if attempt == 0:
                time.sleep(60)
            return attempt

        def kill_first(tag):
            path = os.path.join(marks, f"{tag}-0")
            while not os.path.exists(path) or not open(path).read():
                time.sleep(0.02)
            os.kill(int(open(path).read()), signal.SIGKILL)

        ref = slow.remote("a")
        kill_first("a")
        out = {"retried": torus.get(ref, timeout=60)}
        for name in os.listdir(marks):
            os.remove(os.path.join(marks, name))
        ref = slow.options(max_retries=0).remote("b")
        kill_first("b")
        try:
            torus.get(ref, timeout=60)
        except torus.exceptions.WorkerCrashedError as e:
            out["crashed"] = str(e)
        print(json.dumps(out))
    """)
    assert result["retried"] == 1
    assert result["crashed"].startswith("The worker died unexpectedly while executing this task.\n"
                                        "the worker running task __main__.slow died ("), result["crashed"]
    assert result["crashed"].endswith(") after 1 attempt")


def test_get_times_out_and_a_driver_that_dies_leaves_no_worker(cluster, tmp_path):
    pid_file = tmp_path / "worker.pid"
    rc, out, err = run_driver(cluster, tmp_path, f"""
        import json, os, time, torus
        torus.init()

        @torus.remote
        def hang():
            with open({str(pid_file)!r}, "w") as f:
                f.write(str(os.getpid()))
            time.sleep(300)

        ref = hang.remote()
        try:
            torus.get(ref, timeout=0.3)
        except TimeoutError as e:
            print(json.dumps({{"timeout": type(e).__name__}}), flush=True)
        while not os.path.exists({str(pid_file)!r}):
            time.sleep(0.02)
        os._exit(0)  # no shutdown: the agent must notice
    """)
    assert rc == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"timeout": "GetTimeoutError"}
    worker = int(pid_file.read_text())
    wait_until(lambda: not pid_alive(worker), 15, message=f"the dead driver's worker {worker} to be stopped")


def test_a_driver_shutting_down_with_1000_tasks_in_flight_and_waits_pending_exits_and_frees_its_workers(
        cluster, tmp_path):
    # Everything that waits in the driver at once: 1,000 tasks (a few running, the rest queued), calls on an actor
    # that cannot be placed (a resolve waits on its creation), a placement group that cannot be placed (ready()
    # waits on it) with a task in it (its bundles are fetched while it waits). shutdown() stops and joins it all.
    started = tmp_path / "started"
    started.mkdir()
    rc, out, err = run_driver(cluster, tmp_path, f"""
        import json, os, time, torus
        from torus.util import placement_group
        from torus.util.scheduling_strategies import PlacementGroupSchedulingStrategy as InGroup
        torus.init()

        @torus.remote
        def work(i):
            open(os.path.join({str(started)!r}, str(os.getpid())), "w").close()
            time.sleep(120)

        @torus.remote(resources={{"nowhere": 1}})
        class Unplaceable:
            def ping(self):
                return 1

        refs = [work.remote(i) for i in range(1000)]
        actor = Unplaceable.remote()
        calls = [actor.ping.remote() for _ in range(10)]
        never = placement_group([{{"CPU": 1000}}])
        ready = never.ready()
        grouped = work.options(scheduling_strategy=InGroup(never)).remote(-1)
        while len(os.listdir({str(started)!r})) < 2:
            time.sleep(0.05)
        group = never.id._torus_id()
        torus.shutdown()
        print(json.dumps({{"shut_down": True, "group": group}}))
    """, timeout=90)
    assert rc == 0, f"stdout:\n{out}\nstderr:\n{err}"
    result = json.loads(out.strip().splitlines()[-1])
    assert result["shut_down"] is True
    # A placement group outlives the program that made it (docs/python.md, Known gaps): removed here.
    cluster.ok("pg", "remove", result["group"])
    assert "terminate called" not in err and "Segmentation" not in err, err
    workers = [int(p.name) for p in started.iterdir()]
    assert workers
    wait_until(lambda: not any(pid_alive(w) for w in workers), 20,
               message=f"the workers {workers} of the driver that shut down to be stopped")
    # Its leases were returned: the cluster's CPUs are all free again.
    def cpus_free():
        status = cluster.status()
        return status["resources_available"]["CPU"] == status["resources_total"]["CPU"]

    wait_until(cpus_free, 20, message="the CPUs of the driver that shut down to be free again")


def test_init_without_a_cluster_starts_one_and_shutdown_stops_it(tmp_path):
    t = Torus(tmp_path / "fresh")
    try:
        result = driver_json(t, tmp_path, """
            import json, os, torus
            torus.init()
            nodes = torus.nodes()

            @torus.remote
            def where():
                return torus.get_runtime_context().get_node_id()

            out = {"nodes": len(nodes), "same": torus.get(where.remote()) == nodes[0]["NodeID"],
                   "cpus": torus.cluster_resources().get("CPU", 0) > 0}
            root = torus._private.state.current().local_cluster.root
            torus.shutdown()
            out["initialized"] = torus.is_initialized()
            out["root"] = root
            print(json.dumps(out))
        """)
        root = result.pop("root")
        assert result == {"nodes": 1, "same": True, "cpus": True, "initialized": False}
        # The cluster it started lived in its own temp root, which shutdown removed with its processes.
        leftovers = subprocess.run(["pgrep", "-f", root], capture_output=True, text=True).stdout.split()
        assert leftovers == [], f"processes of the local cluster are left: {leftovers}"
        assert not os.path.exists(root)
    finally:
        t.cleanup()


def test_label_selectors_and_node_affinity_choose_where_tasks_and_actors_run(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import json, torus
        from torus.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        torus.init()

        @torus.remote(resources={"TPU": 1})
        def where():
            return torus.get_runtime_context().get_node_id()

        @torus.remote
        def slow_where():
            import time
            time.sleep(2)  # long enough that every lease is granted before a task ends
            return torus.get_runtime_context().get_node_id()

        @torus.remote
        class Here:
            def where(self):
                return torus.get_runtime_context().get_node_id()

        nodes = torus.nodes()
        out = {}
        third = torus.get([where.options(label_selector={"ray.io/tpu-worker-id": "2"}).remote() for _ in range(6)])
        worker_ids = {n["NodeID"]: n["Labels"].get("torus.io/tpu-worker-id") for n in nodes}
        out["selector"] = sorted({worker_ids[node] for node in third})
        head = [n["NodeID"] for n in nodes if n["Resources"].get("TPU", 0) == 0][0]
        pinned = Here.options(scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)).remote()
        out["affinity"] = torus.get(pinned.where.remote()) == head
        spread = torus.get([slow_where.options(scheduling_strategy="SPREAD").remote() for _ in range(10)])
        out["spread_nodes"] = len(set(spread))
        try:
            torus.get(where.options(label_selector={"torus.io/tpu-worker-id": "in(7,8)"}).remote(), timeout=60)
        except torus.exceptions.TaskUnschedulableError as e:
            out["no_match"] = str(e)
        try:
            where.options(label_selector={"team": "in()"}).remote()
        except ValueError as e:
            out["bad"] = str(e)
        try:
            torus.get(Here.options(scheduling_strategy=NodeAffinitySchedulingStrategy("nope", soft=False)).remote().where.remote(),
                      timeout=60)
        except torus.exceptions.ActorUnschedulableError as e:
            out["gone"] = str(e)
        print(json.dumps(out))
    """)
    assert result["selector"] == ["2"]
    assert result["affinity"] is True
    assert result["spread_nodes"] == 5  # every node of the cluster, not the driver's first
    assert result["no_match"] == ('The task is not schedulable: no alive node matches the label selector '
                                  '{"torus.io/tpu-worker-id": "in(7,8)"}')
    assert result["bad"].startswith("Invalid label selector value `in()`. The label selector value should contain "
                                    "optional operators and a label value."), result["bad"]
    assert result["gone"] == ("The actor is not schedulable: node nope (its node affinity) is not an "
                              "alive node of the cluster")


def test_tasks_run_inside_placement_group_bundles(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import json, torus
        from torus.util import placement_group, remove_placement_group
        from torus.util.scheduling_strategies import PlacementGroupSchedulingStrategy as InGroup
        torus.init()

        @torus.remote
        def where():
            return torus.get_runtime_context().get_node_id()

        pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_SPREAD")
        torus.get(pg.ready(), timeout=60)
        nodes = [b["node_id"] for b in pg.table()["bundles"]]
        out = {
            "pinned": [torus.get(where.options(scheduling_strategy=InGroup(pg, i)).remote()) for i in (0, 1)] == nodes,
            "any": set(torus.get([where.options(scheduling_strategy=InGroup(pg)).remote() for _ in range(4)]))
                   <= set(nodes),
            "distinct": len(set(nodes)) == 2,
        }
        for name, opts in [("too_big", {"num_cpus": 2, "scheduling_strategy": InGroup(pg, 0)}),
                           ("no_bundle", {"scheduling_strategy": InGroup(pg, 5)})]:
            try:
                torus.get(where.options(**opts).remote(), timeout=60)
            except (torus.exceptions.TaskUnschedulableError, ValueError) as e:
                out[name] = [type(e).__name__, str(e)]
        never = placement_group([{"CPU": 1000}])
        out["never_ready"] = never.wait(0.5)
        remove_placement_group(never)
        remove_placement_group(pg)
        try:
            torus.get(pg.ready(), timeout=30)
        except torus.exceptions.TaskUnschedulableError as e:
            out["removed"] = str(e)
        print(json.dumps(out))
    """)
    assert result["pinned"] is True and result["any"] is True and result["distinct"] is True
    assert result["too_big"][0] == "TaskUnschedulableError"
    assert result["too_big"][1].endswith(' holds {"CPU": 1}; the lease asks for {"CPU": 2}'), result["too_big"]
    # A bundle the group does not have is refused at .remote(), with Ray's words (and its range, 0 to the count).
    assert result["no_bundle"] == ["ValueError",
                                   "placement group bundle index 5 is invalid. Valid placement group indexes: 0-2"]
    assert result["never_ready"] is False
    assert result["removed"].startswith("The task is not schedulable: placement group pg-") and \
        " is REMOVED" in result["removed"], result


def test_cancel_drops_a_queued_task_and_interrupts_or_kills_a_running_one(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import json, os, time, torus
        torus.init()
        marks = os.path.abspath("marks")
        os.makedirs(marks)

        @torus.remote(resources={"TPU": 4}, label_selector={"ray.io/tpu-worker-id": "0"})
        def hold(tag, seconds):
            with open(os.path.join(marks, tag), "w") as f:
                f.write(str(os.getpid()))
            try:
                time.sleep(seconds)
            except KeyboardInterrupt:
                with open(os.path.join(marks, tag + ".interrupted"), "w"):
                    pass
                raise
            return tag

        def started(tag):
            while not os.path.exists(os.path.join(marks, tag)):
                time.sleep(0.02)
            return int(open(os.path.join(marks, tag)).read() or 0)

        out = {}
        running = hold.remote("a", 60)
        started("a")
        queued = hold.remote("b", 60)  # the host's 4 chips are held by "a": "b" waits for a lease
        torus.cancel(queued)
        torus.cancel(running)
        for name, ref in (("queued", queued), ("running", running)):
            try:
                torus.get(ref, timeout=30)
            except torus.exceptions.TaskCancelledError as e:
                out[name] = "was cancelled." in str(e)
        out["interrupted"] = os.path.exists(os.path.join(marks, "a.interrupted"))
        out["b_started"] = os.path.exists(os.path.join(marks, "b"))
        forced = hold.options(max_retries=3).remote("c", 60)
        pid = started("c")
        torus.cancel(forced, force=True)
        try:
            torus.get(forced, timeout=30)
        except torus.exceptions.TaskCancelledError as e:
            out["forced"] = "was cancelled." in str(e)
        deadline = time.time() + 15
        while time.time() < deadline and os.path.exists(f"/proc/{pid}"):
            time.sleep(0.05)
        out["killed"] = not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split(")")[1].split()[0] == "Z"
        out["after"] = torus.get(hold.remote("d", 0), timeout=60)
        done = hold.remote("e", 0)
        torus.get(done)
        torus.cancel(done)
        out["finished_stays"] = torus.get(done)
        print(json.dumps(out))
    """)
    # Each as Ray says it: "Task: TaskID(...) was cancelled." (a running one's inside its RayTaskError).
    assert result == {"queued": True, "running": True, "interrupted": True, "b_started": False, "forced": True,
                      "killed": True, "after": "d", "finished_stays": "e"}


def test_the_quickstart_example_runs(cluster, tmp_path):
    rc, out, err = run_driver(cluster, tmp_path, (REPO / "examples" / "tasks_quickstart.py").read_text())
    assert rc == 0, err
    assert "squares: [0, 1, 4, 9, 16, 25, 36, 49, 64, 81]" in out
    assert "sum in a task: 285" in out
    assert "put, then used by a task: 998001" in out
    assert "caught: a remote error keeps its type" in out
    assert "TPU chips: [" in out


def test_workers_output_is_printed_by_the_driver_with_its_source(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import io, json, os, sys, time, torus
        captured = io.StringIO()
        real_stdout = sys.stdout
        sys.stdout = captured
        torus.init()

        @torus.remote
        def talk():
            print("hello from a task", flush=True)
            print("to stderr", file=sys.stderr, flush=True)
            return os.getpid(), torus.get_runtime_context().get_node_id()

        @torus.remote
        class Talker:
            def talk(self):
                print("hello from an actor", flush=True)
                return os.getpid()

        pid, node = torus.get(talk.remote())
        actor_pid = torus.get(Talker.remote().talk.remote())
        deadline = time.time() + 30
        while time.time() < deadline and not ("an actor" in captured.getvalue() and "stderr" in captured.getvalue()):
            time.sleep(0.05)
        lines = captured.getvalue().splitlines()
        sys.stdout = real_stdout
        print(json.dumps({"task": f"(pid={pid}, node={node}) hello from a task" in lines,
                          "stderr": f"(pid={pid}, node={node}) to stderr" in lines,
                          "actor": any(l.startswith(f"(pid={actor_pid}, ") and l.endswith(") hello from an actor")
                                       for l in lines)}))
    """)
    assert result == {"task": True, "stderr": True, "actor": True}


def test_retry_exceptions_retries_a_raising_task_and_max_retries_bounds_it(cluster, tmp_path):
    result = driver_json(cluster, tmp_path, """
        import json, os, torus
        torus.init()
        marks = os.path.abspath("tries")
        os.makedirs(marks)

        @torus.remote(retry_exceptions=True, max_retries=2)
        def flaky(tag, fail_times):
            n = len([f for f in os.listdir(marks) if f.startswith(tag)])
            open(os.path.join(marks, f"{tag}-{n}"), "w").close()
            if n < fail_times:
                raise RuntimeError(f"{tag} try {n}")
            return n

        out = {"recovers": torus.get(flaky.remote("a", 2))}
        try:
            torus.get(flaky.remote("b", 5))
        except RuntimeError as e:
            out["gives_up"] = e.cause.args[0]
        try:
            torus.get(flaky.options(retry_exceptions=False).remote("c", 1))
        except RuntimeError as e:
            out["no_retry"] = e.cause.args[0]
        print(json.dumps(out))
    """)
    assert result == {"recovers": 2, "gives_up": "b try 2", "no_retry": "c try 0"}


def list_tasks(t, *flags):
    return json.loads(t.ok("list", "tasks", "--json", *flags).stdout)


def test_tasks_are_listed_with_their_states_and_those_of_a_killed_driver_fail(cluster, tmp_path):
    script = tmp_path / "owner.py"
    script.write_text(textwrap.dedent("""
        import os, time, torus
        torus.init()

        @torus.remote
        def quick(i):
            return os.getpid()

        @torus.remote(max_retries=0)
        def broken():
            raise ValueError("no")

        @torus.remote
        def slow():
            time.sleep(600)

        @torus.remote(resources={"TPU": 4})
        def hog():
            time.sleep(600)

        @torus.remote
        class Counter:
            def incr(self):
                return 1

        pids = torus.get([quick.remote(i) for i in range(5)])
        try:
            torus.get(broken.remote())
        except ValueError:
            pass
        c = Counter.remote()
        torus.get([c.incr.remote() for _ in range(3)])
        ref = slow.remote()
        hogs = [hog.remote() for _ in range(5)]  # 16 chips: four run, one waits
        print(ref.hex(), pids[0], flush=True)
        time.sleep(600)
    """))
    proc = subprocess.Popen([PYTHON, str(script)], env=python_env(cluster), stdout=subprocess.PIPE, text=True)
    try:
        slow_ref, quick_pid = proc.stdout.readline().split()
        slow_id = slow_ref[:32]  # a return's id is its task's id and an index
        running = wait_until(lambda: [t for t in list_tasks(cluster, "--state", "RUNNING") if t["task_id"] == slow_id],
                             timeout=30, interval=0.3, message="the slow task listed as RUNNING")[0]
        assert running["name"] == "__main__.slow" and running["node_id"] != "" and running["pid"] > 0
        tasks = list_tasks(cluster, "--limit", "1000")
        by_name = {}
        for t in tasks:
            by_name.setdefault(t["name"], []).append(t)
        assert [t["state"] for t in by_name["__main__.quick"]] == ["FINISHED"] * 5
        assert int(quick_pid) in {t["pid"] for t in by_name["__main__.quick"]}
        assert [(t["state"], t["error"]) for t in by_name["__main__.broken"]] == [("FAILED", "it raised an exception")]
        assert [t["state"] for t in by_name["__main__.Counter.incr"]] == ["FINISHED"] * 3
        assert all(t["actor_id"] != "" for t in by_name["__main__.Counter.incr"])
        summary = {(s["name"], s["state"]): s["count"] for s in json.loads(cluster.ok("list", "tasks", "--summary",
                                                                                       "--json").stdout)}
        assert summary[("__main__.quick", "FINISHED")] >= 5
        assert summary[("__main__.slow", "RUNNING")] >= 1
        table = cluster.ok("list", "tasks", "--summary").stdout
        assert table.splitlines()[0].split() == ["FUNCTION", "PENDING", "RUNNING", "FINISHED", "FAILED"]
        # The task that waits for chips says why, in the task list and in `torus status`.
        waiting = wait_until(lambda: [t for t in list_tasks(cluster, "--state", "PENDING", "--name", "__main__.hog")
                                      if "does not fit" in t["error"]], timeout=40, interval=0.5,
                             message="a hog task PENDING with the agent's reason")
        assert len(waiting) == 1 and waiting[0]["error"].startswith("waiting for a worker: ")
        status = cluster.ok("status").stdout
        assert "pending, " in status and "__main__.hog (1): waiting for a worker: " in status, status
        assert "Actors: 1 alive" in status, status
    finally:
        proc.kill()
        proc.wait()
    # Its owner is gone: the head asks it every 2 s and gives up after three tries.
    failed = wait_until(lambda: [t for t in list_tasks(cluster, "--state", "FAILED") if t["task_id"] == slow_id],
                        timeout=30, interval=0.5, message="the killed driver's task FAILED")[0]
    assert failed["error"].startswith("its owner ") and " is gone (" in failed["error"]
    bad = cluster.run("list", "tasks", "--state", "DONE")
    assert bad.returncode != 0
    assert 'query parameter state: "DONE" is not a state; use PENDING, RUNNING, FINISHED or FAILED' in bad.stderr
