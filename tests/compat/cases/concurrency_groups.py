"""Concurrency groups: a threaded or async actor's methods in named groups, each with its own number of calls at
once, apart from the default group's max_concurrency."""

import asyncio
import threading

import ray
from harness import case, out, raised


@ray.remote(concurrency_groups={"io": 2})
class Grouped:
    def __init__(self):
        self.event = threading.Event()

    def wait_for_signal(self):
        # The default group takes one call at a time: the signal can only come through another group.
        return self.event.wait(timeout=20)

    @ray.method(concurrency_group="io")
    def signal(self):
        self.event.set()
        return "sent"


@case(timeout=120)
def a_named_group_runs_beside_the_busy_default_group():
    g = Grouped.remote()
    waiting = g.wait_for_signal.remote()
    out(ray.get(g.signal.remote(), timeout=60), ray.get(waiting, timeout=60))


@ray.remote(concurrency_groups={"io": 1, "compute": 1})
class AsyncGrouped:
    def __init__(self):
        self.event = asyncio.Event()
        self.inside = {"io": 0, "compute": 0}
        self.most = {"io": 0, "compute": 0}

    @ray.method(concurrency_group="io")
    async def io(self):
        self.inside["io"] += 1
        self.most["io"] = max(self.most["io"], self.inside["io"])
        await asyncio.sleep(0.1)
        self.inside["io"] -= 1

    @ray.method(concurrency_group="compute")
    async def compute(self):
        self.inside["compute"] += 1
        self.most["compute"] = max(self.most["compute"], self.inside["compute"])
        await asyncio.sleep(0.1)
        self.inside["compute"] -= 1

    async def most_at_once(self):
        return self.most


@case(timeout=120)
def each_group_has_its_own_limit_on_an_async_actor():
    a = AsyncGrouped.remote()
    ray.get([a.io.remote() for _ in range(4)] + [a.compute.remote() for _ in range(4)])
    out(ray.get(a.most_at_once.remote()))


@case
def concurrency_groups_cannot_be_set_in_options():
    e = raised(lambda: Grouped.options(concurrency_groups={"x": 1}))
    out(type(e).__name__, str(e))
