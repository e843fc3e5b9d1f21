"""Pipelining and lease sizing of short tasks against a real `torus up` cluster: the tasks of a function that
finishes quickly are queued several at a time on each leased worker, on a few workers of the driver's node, but a
function that takes long still gets a worker per task, side by side — even right after many short tasks of the
same resource shape."""

from test_tasks import cluster, driver_json  # noqa: F401 (cluster: the module's fixture)


def test_long_tasks_run_side_by_side_after_many_short_ones_of_the_same_shape(cluster, tmp_path):
    started = tmp_path / "started"
    started.mkdir()
    result = driver_json(cluster, tmp_path, """
        import json, os, time, torus
        torus.init()

        @torus.remote
        def quick(i):
            return i

        @torus.remote
        def slow():
            # Each waits until all 4 have started (a barrier of files): they can only all get there side by side,
            # however long a worker takes to start. One queued behind another would wait out its 20 s.
            open(os.path.join(STARTED, str(os.getpid())), "w").close()
            deadline = time.monotonic() + 20
            while len(os.listdir(STARTED)) < 4 and time.monotonic() < deadline:
                time.sleep(0.05)
            return os.getpid(), len(os.listdir(STARTED)) == 4

        # One after another: a single lease is held when the long ones come (kept for the next task of its shape).
        quick_ok = [torus.get(quick.remote(i)) for i in range(300)] == list(range(300))
        runs = torus.get([slow.remote() for _ in range(4)])
        print(json.dumps({"quick_ok": quick_ok, "slow_workers": len({pid for pid, _ in runs}),
                          "all_at_once": all(met for _, met in runs)}))
    """.replace("STARTED", repr(str(started))))
    assert result == {"quick_ok": True, "slow_workers": 4, "all_at_once": True}


def test_a_burst_of_short_tasks_leases_on_the_local_node_and_spills_only_when_it_is_full(cluster, tmp_path):
    # The lease policy (core/lease_policy.h): a burst of no-op tasks needs a few workers, which the driver's own node
    # (4 CPUs) has; with that node's CPUs all held by actors, tasks go to the other nodes at once instead of waiting
    # there.
    result = driver_json(cluster, tmp_path, """
        import json, os, torus
        from torus.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        torus.init()

        @torus.remote
        def where():
            return torus.get_runtime_context().get_node_id(), os.getpid()

        @torus.remote(num_cpus=1)
        class Holder:
            def ready(self):
                return True

        local = torus.get_runtime_context().get_node_id()
        burst = torus.get([where.remote() for _ in range(1000)])
        out = {"burst_nodes": sorted({n == local for n, _ in burst}), "burst_workers": len({p for _, p in burst})}
        holders = [Holder.options(scheduling_strategy=NodeAffinitySchedulingStrategy(local, soft=False)).remote()
                   for _ in range(4)]
        torus.get([h.ready.remote() for h in holders], timeout=60)
        spilled = torus.get([where.remote() for _ in range(20)], timeout=30)
        out["spilled_local"] = sum(n == local for n, _ in spilled)
        print(json.dumps(out))
    """)
    assert result["burst_nodes"] == [True], result  # every task on the driver's node
    assert 1 <= result["burst_workers"] <= 4, result  # its CPUs, not a worker on every node
    assert result["spilled_local"] == 0, result
