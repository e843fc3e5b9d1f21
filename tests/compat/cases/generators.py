"""Generators: streaming generator tasks and actor methods (num_returns="streaming", the default for a generator
function), dynamic generators, errors in the middle of a stream, async iteration."""

import asyncio

import ray
from harness import case, out, raised


@ray.remote
def count_to(n):
    for i in range(n):
        yield i * 10


@case
def streaming_is_the_default_for_generators():
    gen = count_to.remote(4)
    out(type(gen).__name__, [ray.get(ref) for ref in gen])


@case
def explicit_streaming():
    gen = count_to.options(num_returns="streaming").remote(3)
    out([ray.get(r) for r in gen])


@case
def empty_generator():
    out([ray.get(r) for r in count_to.remote(0)])


@ray.remote
def fails_after(n):
    for i in range(n):
        yield i
    raise ValueError("stream broke")


@case
def error_after_items():
    got = []
    for ref in fails_after.remote(2):
        try:
            got.append(ray.get(ref))
        except ValueError as e:
            got.append(["ValueError", "stream broke" in str(e)])
    out(got)


@case
def the_error_is_the_last_item_and_completed_is_none():
    gen = fails_after.remote(1)
    refs = list(gen)
    e = raised(ray.get, refs[-1])
    out(len(refs), type(e).__name__, isinstance(e, ray.exceptions.RayTaskError), ray.get(gen.completed()))


@case
def next_after_the_end_stops():
    gen = count_to.remote(1)
    ray.get(next(gen))
    e = raised(next, gen)
    out(type(e).__name__)


@case
def async_iteration_in_the_driver():
    async def main():
        return [await ref async for ref in count_to.remote(3)]
    out(asyncio.run(main()))


@case
def dynamic_returns_one_ref_of_refs():
    ref = count_to.options(num_returns="dynamic").remote(3)
    refs = ray.get(ref)
    out(type(refs).__name__, len(refs), [ray.get(r) for r in refs])


@case
def streaming_needs_a_generator_function():
    @ray.remote
    def plain():
        return 1
    e = raised(lambda: plain.options(num_returns="streaming"))
    out(type(e).__name__, str(e))


@ray.remote
def large_items():
    import numpy as np
    for i in range(3):
        yield np.full(300_000, i, dtype=np.int64)


@case
def large_items_come_through_the_store():
    out([int(ray.get(r).sum()) for r in large_items.remote()])


@ray.remote
class Streamer:
    def __init__(self):
        self.calls = 0

    def numbers(self, n):
        for i in range(n):
            self.calls += 1
            yield i

    async def async_numbers(self, n):
        for i in range(n):
            await asyncio.sleep(0)
            yield -i

    def total_calls(self):
        return self.calls


@case(timeout=120)
def actor_generator_method():
    s = Streamer.remote()
    out([ray.get(r) for r in s.numbers.remote(4)], ray.get(s.total_calls.remote()))


@case(timeout=120)
def async_actor_generator_method():
    s = Streamer.remote()
    out([ray.get(r) for r in s.async_numbers.remote(3)])


@ray.remote
def consume(refs):
    return sum(ray.get(refs))


@case
def stream_refs_passed_to_a_task():
    refs = list(count_to.remote(4))
    out(ray.get(consume.remote(refs)))
