"""The programs of Ray Core's patterns and anti-patterns pages, written here: nested parallelism, limiting pending
tasks with wait, an actor that synchronises others, map-reduce, processing results in completion order."""

import random

import ray
from harness import case, out


@ray.remote
def quick_sort(items):
    if len(items) <= 200:
        return sorted(items)
    pivot = items[0]
    less = [x for x in items[1:] if x < pivot]
    more = [x for x in items[1:] if x >= pivot]
    left, right = quick_sort.remote(less), quick_sort.remote(more)
    return ray.get(left) + [pivot] + ray.get(right)


@case(timeout=180)
def nested_parallelism_quicksort():
    rng = random.Random(7)
    items = [rng.randint(0, 10**6) for _ in range(4000)]
    out(ray.get(quick_sort.remote(items)) == sorted(items))


@ray.remote
def work(i):
    return i * 2


@case(timeout=120)
def limit_pending_tasks_with_wait():
    pending, done = [], []
    for i in range(40):
        if len(pending) >= 4:
            ready, pending = ray.wait(pending, num_returns=1)
            done.extend(ray.get(ready))
        pending.append(work.remote(i))
    done.extend(ray.get(pending))
    out(sorted(done) == [i * 2 for i in range(40)])


@ray.remote
class Signal:
    def __init__(self):
        import asyncio
        self.ready = asyncio.Event()

    def send(self):
        self.ready.set()

    async def wait(self):
        await self.ready.wait()


@ray.remote
def wait_then(signal, value):
    ray.get(signal.wait.remote())
    return value


@case(timeout=120)
def actor_synchronises_tasks():
    signal = Signal.remote()
    refs = [wait_then.remote(signal, i) for i in range(2)]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=1)
    out(len(ready))
    ray.get(signal.send.remote())
    out(ray.get(refs))


@ray.remote
def mapper(chunk):
    counts = {}
    for word in chunk.split():
        counts[word] = counts.get(word, 0) + 1
    return counts


@ray.remote
def reducer(*partials):
    total = {}
    for p in partials:
        for k, v in p.items():
            total[k] = total.get(k, 0) + v
    return total


@case(timeout=120)
def map_reduce_word_count():
    chunks = ["a b a", "b c", "a c c c"]
    result = ray.get(reducer.remote(*[mapper.remote(c) for c in chunks]))
    out(sorted(result.items()))


@ray.remote
def delayed(i):
    import time
    time.sleep(0.05 * (5 - i))
    return i


@case(timeout=120)
def process_results_as_they_finish():
    refs = [delayed.remote(i) for i in range(5)]
    seen = []
    while refs:
        ready, refs = ray.wait(refs)
        seen.extend(ray.get(ready))
    out(sorted(seen))


@ray.remote
def fib(n):
    if n < 2:
        return n
    return sum(ray.get([fib.remote(n - 1), fib.remote(n - 2)]))


@case(timeout=180)
def recursive_fibonacci():
    out(ray.get(fib.remote(7)))


@ray.remote
def pass_through(x):
    return x


@case
def chain_without_fetching_in_the_driver():
    ref = ray.put(1)
    for _ in range(10):
        ref = pass_through.remote(ref)
    out(ray.get(ref))
