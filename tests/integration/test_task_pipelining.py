"""Pipelining of short tasks against a real `torus up` cluster: the tasks of a function that finishes quickly are
queued several at a time on each leased worker, but a function that takes long still gets a worker per task, side
by side — even right after many short tasks of the same resource shape."""

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
