"""Async actors and asyncio: `await ref`, ref.future(), async methods running concurrently, max_concurrency."""

import asyncio

import ray
from harness import case, out


@ray.remote
def slow_square(x):
    import time
    time.sleep(0.1)
    return x * x


@ray.remote
class AsyncWorker:
    def __init__(self):
        self.running = 0
        self.most = 0

    async def sleep_and_count(self, seconds):
        self.running += 1
        self.most = max(self.most, self.running)
        await asyncio.sleep(seconds)
        self.running -= 1
        return seconds

    async def most_at_once(self):
        return self.most

    async def await_a_task(self, x):
        return await slow_square.remote(x)


@case(timeout=120)
def async_methods_interleave():
    a = AsyncWorker.remote()
    ray.get([a.sleep_and_count.remote(0.3) for _ in range(10)])
    out(ray.get(a.most_at_once.remote()))


@case(timeout=120)
def async_max_concurrency_bounds_calls():
    a = AsyncWorker.options(max_concurrency=2).remote()
    ray.get([a.sleep_and_count.remote(0.2) for _ in range(6)])
    out(ray.get(a.most_at_once.remote()))


@case(timeout=120)
def await_a_ref_inside_an_async_actor():
    a = AsyncWorker.remote()
    out(ray.get(a.await_a_task.remote(7)))


@case
def await_refs_in_the_driver():
    async def main():
        return await asyncio.gather(*[slow_square.remote(i) for i in range(5)])
    out(asyncio.run(main()))


@case
def future_of_a_ref():
    f = slow_square.remote(6).future()
    out(f.result(timeout=60))


@case
def wrap_future_in_asyncio():
    async def main():
        return await asyncio.wrap_future(slow_square.remote(3).future())
    out(asyncio.run(main()))


@ray.remote
def fails():
    raise KeyError("missing")


@case
def await_raises_the_task_error():
    async def main():
        try:
            await fails.remote()
        except KeyError as e:
            return ["KeyError", isinstance(e, ray.exceptions.RayTaskError)]
    out(asyncio.run(main()))


@ray.remote
class AsyncCounter:
    def __init__(self):
        self.n = 0

    async def incr(self):
        self.n += 1
        return self.n


@case(timeout=120)
def async_actor_counts_every_call():
    c = AsyncCounter.remote()
    # Ray does not order an async actor's calls: their set is what both agree on.
    out(sorted(ray.get([c.incr.remote() for _ in range(10)])))
