"""Tasks that submit tasks and wait for them, on a one-node cluster of 2 CPUs that `torus.init(num_cpus=2)` starts
(as Ray's nested-parallelism patterns run on a laptop): a worker blocked in get or wait lends its CPU to the tasks
it waits for, so trees of tasks and actors deeper than the node has CPUs finish instead of deadlocking. Each test
runs one driver script, with Debian's python3, as a user would."""

import json
import os
import subprocess
import textwrap

from conftest import BIN_DIR, REPO

PYTHON = "/usr/bin/python3"


def run_driver(tmp_path, source, timeout):
    """Runs `source` as a driver (its own local cluster, stopped with it); returns the JSON of its last line."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORUS_", "RAY_"))}
    inherited = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), str(BIN_DIR.parent / "python")] + inherited)
    env["TMPDIR"] = str(tmp_path)
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(source))
    proc = subprocess.run([PYTHON, str(script)], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path)
    assert proc.returncode == 0, f"driver exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_tree_of_tasks_and_a_recursive_quicksort_finish_on_two_cpus(tmp_path):
    result = run_driver(tmp_path, """
        import json, random, time, torus
        torus.init(num_cpus=2)

        @torus.remote
        def tree(depth):
            # 2^depth leaves; every inner task waits for its two children.
            if depth == 0:
                return 1
            return sum(torus.get([tree.remote(depth - 1), tree.remote(depth - 1)]))

        @torus.remote
        def fib(n):
            if n < 2:
                return n
            return sum(torus.get([fib.remote(n - 1), fib.remote(n - 2)]))

        @torus.remote
        def quick_sort(items):
            if len(items) <= 100:
                return sorted(items)
            pivot = items[0]
            left = quick_sort.remote([x for x in items[1:] if x < pivot])
            right = quick_sort.remote([x for x in items[1:] if x >= pivot])
            return torus.get(left) + [pivot] + torus.get(right)

        @torus.remote
        def waits(n):
            # wait() blocks like get(): its CPU is lent too.
            refs = [fib.remote(i) for i in range(n)]
            ready, _ = torus.wait(refs, num_returns=n)
            return sorted(torus.get(ready))

        rng = random.Random(3)
        items = [rng.randint(0, 10**6) for _ in range(3000)]
        start = time.monotonic()
        out = {
            "tree": torus.get(tree.remote(5)),
            "fib": torus.get(fib.remote(6)),
            "sorted": torus.get(quick_sort.remote(items)) == sorted(items),
            "waits": torus.get(waits.remote(5)),
        }
        out["seconds"] = time.monotonic() - start
        torus.shutdown()
        print(json.dumps(out))
    """, timeout=240)
    assert result["tree"] == 32
    assert result["fib"] == 8
    assert result["sorted"] is True
    assert result["waits"] == [0, 1, 1, 2, 3]


def test_a_tree_of_actors_and_an_actor_that_blocks_in_get(tmp_path):
    result = run_driver(tmp_path, """
        import json, torus
        torus.init(num_cpus=2)

        @torus.remote
        class Node:
            def __init__(self, depth):
                self.children = [Node.remote(depth - 1) for _ in range(2)] if depth > 0 else []

            def total(self):
                return 1 + sum(torus.get([c.total.remote() for c in self.children]))

        @torus.remote
        def square(x):
            return x * x

        @torus.remote
        class Summer:
            # Actors hold no CPU (as in Ray, whose actors never lend theirs): its calls block in get on tasks that
            # take both CPUs.
            def sum_of_squares(self, n):
                return sum(torus.get([square.remote(i) for i in range(n)]))

        summers = [Summer.remote() for _ in range(2)]
        out = {
            "actors": torus.get(Node.remote(3).total.remote()),
            "summers": torus.get([s.sum_of_squares.remote(6) for s in summers]),
        }
        torus.shutdown()
        print(json.dumps(out))
    """, timeout=240)
    assert result["actors"] == 15
    assert result["summers"] == [55, 55]


def test_cancel_is_recursive_unless_told_otherwise(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    result = run_driver(tmp_path, """
        import json, os, time, torus
        torus.init(num_cpus=4)
        MARKS = MARKS_DIR

        @torus.remote
        def child(tag, naps):
            open(os.path.join(MARKS, tag + ".started"), "w").close()
            try:
                for _ in range(naps):
                    time.sleep(0.1)
            except KeyboardInterrupt:
                open(os.path.join(MARKS, tag + ".interrupted"), "w").close()
                raise
            return tag

        @torus.remote
        def parent(tag, naps):
            return torus.get(child.remote(tag, naps))

        def started(tag):
            while not os.path.exists(os.path.join(MARKS, tag + ".started")):
                time.sleep(0.02)

        out = {}
        # A parent blocked in get is interrupted once its get returns: at once when its child is cancelled with it,
        # when the child ends (3 s here) otherwise.
        for tag, recursive, naps in (("deep", True, 600), ("shallow", False, 30)):
            ref = parent.remote(tag, naps)
            started(tag)
            torus.cancel(ref, recursive=recursive)
            try:
                torus.get(ref, timeout=30)
            except torus.exceptions.TaskCancelledError:
                out[tag + "_parent"] = "cancelled"
            deadline = time.time() + 10
            while time.time() < deadline and not os.path.exists(os.path.join(MARKS, tag + ".interrupted")):
                time.sleep(0.05)
            out[tag + "_child_interrupted"] = os.path.exists(os.path.join(MARKS, tag + ".interrupted"))
        print(json.dumps(out))
    """.replace("MARKS_DIR", repr(str(marks))), timeout=180)
    # recursive=True (Ray's default) cancels the child the parent waits for; recursive=False leaves it running.
    assert result == {"deep_parent": "cancelled", "deep_child_interrupted": True,
                      "shallow_parent": "cancelled", "shallow_child_interrupted": False}
