"""Queue: the examples of Ray's Queue docs, blocking and non-blocking puts and gets, batches, timeouts, the queue
shared with tasks and actors, async use and shutdown."""

import asyncio
import queue as std_queue

import ray
from harness import case, out, raised
from ray.util.queue import Empty, Full, Queue


@case
def items_come_out_in_order():
    q = Queue()
    items = list(range(10))
    for item in items:
        q.put(item)
    out([q.get() for _ in items])
    q.shutdown()


@case
def sizes():
    q = Queue(maxsize=2, actor_options={"num_cpus": 0})
    before = (q.size(), q.qsize(), len(q), q.empty(), q.full())
    q.put("a")
    q.put("b")
    out(before, (q.size(), q.qsize(), len(q), q.empty(), q.full()), q.maxsize)
    q.shutdown()


@case
def exceptions_are_the_standard_librarys():
    out(issubclass(Empty, std_queue.Empty), issubclass(Full, std_queue.Full), Empty.__name__, Full.__name__)


@case
def nowait_forms_raise_at_once():
    q = Queue(maxsize=1)
    e = raised(q.get_nowait)
    q.put_nowait(1)
    f = raised(q.put_nowait, 2)
    g = raised(q.put, 2, block=False)
    out(type(e).__name__, isinstance(e, std_queue.Empty), type(f).__name__, isinstance(f, std_queue.Full),
        type(g).__name__, q.get(block=False))
    q.shutdown()


@case
def blocking_get_times_out_with_empty():
    q = Queue()
    e = raised(q.get, timeout=0.2)
    out(isinstance(e, Empty), isinstance(e, std_queue.Empty))
    q.shutdown()


@case
def blocking_put_times_out_with_full():
    q = Queue(maxsize=1)
    q.put(1)
    e = raised(q.put, 2, timeout=0.2)
    out(isinstance(e, Full), q.qsize(), q.get())
    q.shutdown()


@case
def negative_timeouts():
    q = Queue()
    e = raised(q.put, 1, timeout=-1)
    g = raised(q.get, timeout=-1)
    out(type(e).__name__, str(e), type(g).__name__, str(g))
    q.shutdown()


@case
def batches():
    q = Queue(maxsize=3)
    q.put_nowait_batch([1, 2])
    over = raised(q.put_nowait_batch, [3, 4, 5])
    many = raised(q.get_nowait_batch, 5)
    neg = raised(q.get_nowait_batch, -1)
    bad = raised(q.get_nowait_batch, "2")
    not_iterable = raised(q.put_nowait_batch, 5)
    out(isinstance(over, Full), "Cannot add 3 items to queue of size 2 and maxsize 3." in str(over),
        isinstance(many, Empty), "Cannot get 5 items from queue of size 2." in str(many),
        type(neg).__name__, str(neg), type(bad).__name__, str(bad),
        type(not_iterable).__name__, str(not_iterable), q.get_nowait_batch(2), q.qsize())
    q.shutdown()


@ray.remote
def consumer(id, queue):
    got = []
    try:
        while True:
            got.append(queue.get(block=True, timeout=1))
    except Empty:
        pass
    return got


@case(timeout=120)
def consumers_share_a_queue():
    queue = Queue(maxsize=100)
    [queue.put(i) for i in range(10)]
    consumers = [consumer.remote(id, queue) for id in range(2)]
    results = ray.get(consumers)
    out(sorted(x for r in results for x in r))
    queue.shutdown()


@ray.remote
class Producer:
    def __init__(self, queue):
        self.queue = queue

    def produce(self, n):
        for i in range(n):
            self.queue.put(i * i)
        return n


@case
def an_actor_fills_a_queue():
    q = Queue()
    p = Producer.remote(q)
    n = ray.get(p.produce.remote(4))
    out(n, [q.get(timeout=10) for _ in range(n)])
    q.shutdown()


@case
def async_put_and_get():
    q = Queue(maxsize=1)

    async def run():
        await q.put_async("x")
        full = None
        try:
            await q.put_async("y", block=False)
        except Full as e:
            full = type(e).__name__
        got = await q.get_async()
        empty = None
        try:
            await q.get_async(timeout=0.2)
        except Empty:
            empty = "Empty"
        nowait = None
        try:
            await q.get_async(block=False)
        except Empty as e:
            nowait = type(e).__name__
        return got, full, empty, nowait

    out(asyncio.run(run()))
    q.shutdown()


@case
def a_blocked_get_gets_a_later_put():
    q = Queue()
    waiting = q.actor.get.remote(30)
    q.put("late")
    out(ray.get(waiting))
    q.shutdown()


@case
def shutdown_stops_the_actor():
    q = Queue()
    actor = q.actor
    q.shutdown(force=True)
    e = raised(ray.get, actor.qsize.remote())
    graceful = Queue()
    graceful.put(1)
    graceful.shutdown()
    out(q.actor is None, type(e).__name__, graceful.actor is None)
