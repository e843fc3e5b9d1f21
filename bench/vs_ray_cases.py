"""The cases of bench/vs_ray.py: one Ray program, run once under Ray and once under torus (`ray` resolved to torus),
that times each case in this process and prints one JSON object {case: seconds or rate} as its last line.

    python bench/vs_ray_cases.py --num-cpus 2 --scale 1.0 [--cases a,b] [--address auto]

`ray.init(num_cpus=...)` starts a local cluster under either system: what a user's first `ray.init()` does. Each
case warms up first (its functions registered, its workers started), then times what the user waits for, from the
call to the result in hand. `--scale` multiplies the counts (0.01 for the test run's tiny size).
"""

import argparse
import asyncio
import json
import statistics
import sys
import time

import numpy as np
import ray


@ray.remote
def noop(*args):
    return 0


@ray.remote
def size_of(x):
    return len(x)


@ray.remote
def tree(depth):
    if depth == 0:
        return 1
    return sum(ray.get([tree.remote(depth - 1) for _ in range(2)]))


@ray.remote
def make(n):
    return b"x" * n


@ray.remote
class Counter:
    def __init__(self):
        self.n = 0

    def inc(self):
        self.n += 1
        return self.n


@ray.remote(max_concurrency=100)
class AsyncActor:
    async def call(self):
        await asyncio.sleep(0)
        return 0


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_of(fn, rounds=3):
    return statistics.median(timed(fn) for _ in range(rounds))


def case_sync_task(n):
    ray.get([noop.remote() for _ in range(10)])
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        ray.get(noop.remote())
        times.append(time.perf_counter() - t0)
    return {"sync task round trip (ms)": statistics.median(times) * 1000}


def case_async_tasks(n):
    ray.get([noop.remote() for _ in range(100)])
    return {"async tasks (per s)": n / median_of(lambda: ray.get([noop.remote() for _ in range(n)]))}


def case_task_args(n):
    small, large = b"x" * (1 << 20), np.zeros(100 << 20, dtype=np.uint8)
    ray.get(size_of.remote(small))
    return {"tasks with a 1 MiB argument (per s)": n / median_of(lambda: ray.get([size_of.remote(small)
                                                                                for _ in range(n)])),
            "task with a 100 MiB argument (ms)": median_of(lambda: ray.get(size_of.remote(large))) * 1000}


def case_task_tree(_):
    ray.get(tree.remote(1))
    return {"task tree of depth 4 (ms)": median_of(lambda: ray.get(tree.remote(4))) * 1000}


def case_chained(n):
    ray.get(size_of.remote(make.remote(10)))
    return {"result consumed by another task (per s)": n / median_of(
        lambda: ray.get([size_of.remote(make.remote(1000)) for _ in range(n)]))}


def case_actor_creation(n):
    ray.get(Counter.remote().inc.remote())

    def create():
        actors = [Counter.remote() for _ in range(n)]
        ray.get([a.inc.remote() for a in actors])
        for a in actors:
            ray.kill(a)
    return {f"create {n} actors to all ready (s)": median_of(create, rounds=1)}


def case_actor_calls(n):
    c = Counter.remote()
    ray.get(c.inc.remote())
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        ray.get(c.inc.remote())
        times.append(time.perf_counter() - t0)
    a = AsyncActor.remote()
    ray.get(a.call.remote())
    return {"sync actor call (ms)": statistics.median(times) * 1000,
            "actor calls, 1 actor (per s)": n / median_of(lambda: ray.get([c.inc.remote() for _ in range(n)])),
            "async actor, calls in flight (per s)": n / median_of(lambda: ray.get([a.call.remote()
                                                                                  for _ in range(n)]))}


@ray.remote
class Caller:
    def __init__(self, targets):
        self.targets = targets

    def run(self, k):
        ray.get([self.targets[i % len(self.targets)].inc.remote() for i in range(k)])
        return k


def case_actor_fanout(n):
    """1:n: the driver calls 4 actors in turn; n:n: 4 actors each call the 4 actors, n calls in all."""
    targets = [Counter.remote() for _ in range(4)]
    callers = [Caller.remote(targets) for _ in range(4)]
    ray.get([c.run.remote(4) for c in callers])
    one_to_n = n / median_of(lambda: ray.get([targets[i % 4].inc.remote() for i in range(n)]))
    n_to_n = n / median_of(lambda: ray.get([c.run.remote(max(1, n // 4)) for c in callers]))
    for a in targets + callers:
        ray.kill(a)
    return {"actor calls, 1 caller to 4 actors (per s)": one_to_n,
            "actor calls, 4 actors to 4 actors (per s)": n_to_n}


def case_objects(n):
    array = np.zeros(256 << 20, dtype=np.uint8)
    ray.get(ray.put(b"warm"))
    put_get = median_of(lambda: ray.get(ray.put(array)))
    refs = [noop.remote() for _ in range(n)]
    ray.get(refs)
    return {"put + get of a 256 MiB array (ms)": put_get * 1000,
            "small puts (per s)": n / median_of(lambda: [ray.put(i) for i in range(n)]),
            f"wait over {n} ready refs (ms)": median_of(lambda: ray.wait(refs, num_returns=len(refs))) * 1000}


def case_placement_groups(n):
    from ray.util import placement_group, remove_placement_group

    def cycle(bundles):
        pg = placement_group([{"CPU": 0.01}] * bundles)
        ray.get(pg.ready())
        remove_placement_group(pg)
    cycle(1)
    return {"placement group of 1 bundle: create, ready, remove (ms)":
            median_of(lambda: [cycle(1) for _ in range(n)]) / n * 1000,
            "placement group of 16 bundles: create, ready, remove (ms)":
            median_of(lambda: [cycle(16) for _ in range(n)]) / n * 1000}


CASES = {"sync_task": (case_sync_task, 1000), "async_tasks": (case_async_tasks, 10000),
         "task_args": (case_task_args, 200), "task_tree": (case_task_tree, 0), "chained": (case_chained, 1000),
         "actor_creation": (case_actor_creation, 100), "actor_calls": (case_actor_calls, 1000),
         "actor_fanout": (case_actor_fanout, 2000),
         "objects": (case_objects, 10000), "placement_groups": (case_placement_groups, 20)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-cpus", type=int, default=2)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--address", default="", help="a running cluster's (\"auto\": this machine's latest) "
                                                      "instead of a new local one of --num-cpus")
    args = parser.parse_args()
    t0 = time.perf_counter()
    if args.address:
        ray.init(address=args.address, logging_level="ERROR")
    else:
        ray.init(num_cpus=args.num_cpus, logging_level="ERROR")
    ray.get(noop.remote())
    out = {"init to first task result (s)": time.perf_counter() - t0}
    for name in args.cases.split(","):
        fn, n = CASES[name]
        out.update(fn(max(1, int(n * args.scale)) if n else 0))
    ray.shutdown()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    sys.exit(main())
