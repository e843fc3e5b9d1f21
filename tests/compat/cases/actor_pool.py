"""ActorPool: the examples of Ray's ActorPool docs, ordering, idle actors, waiting submissions and timeouts."""

import time

import ray
from harness import case, out, raised
from ray.util import ActorPool


@ray.remote
class Actor:
    def double(self, v):
        return 2 * v

    def slow_double(self, v):
        time.sleep(v)
        return 2 * v


def double(a, v):
    return a.double.remote(v)


@case
def map_returns_results_in_order():
    a1, a2 = Actor.remote(), Actor.remote()
    pool = ActorPool([a1, a2])
    out(list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3, 4])))


@case
def map_unordered_returns_every_result():
    pool = ActorPool([Actor.remote(), Actor.remote()])
    results = list(pool.map_unordered(lambda a, v: a.double.remote(v), [1, 2, 3, 4]))
    out(len(results), sorted(results))


@case
def map_unordered_gives_the_fast_result_first():
    pool = ActorPool([Actor.remote(), Actor.remote()])
    out(list(pool.map_unordered(lambda a, v: a.slow_double.remote(v), [1.5, 0])))


@case
def submit_then_get_next():
    pool = ActorPool([Actor.remote(), Actor.remote()])
    pool.submit(double, 1)
    pool.submit(double, 2)
    out(pool.get_next(), pool.get_next())


@case
def has_next_until_taken():
    pool = ActorPool([Actor.remote(), Actor.remote()])
    pool.submit(double, 1)
    first = pool.has_next()
    value = pool.get_next()
    out(first, value, pool.has_next())


@case
def has_free_and_pop_idle():
    a1 = Actor.remote()
    pool = ActorPool([a1])
    pool.submit(double, 1)
    busy = (pool.has_free(), pool.pop_idle() is None)
    value = pool.get_next()
    out(busy, value, pool.has_free(), pool.pop_idle() == a1, pool.has_free())


@case
def submissions_wait_for_a_free_actor_in_order():
    pool = ActorPool([Actor.remote()])
    for v in range(5):
        pool.submit(double, v)
    waiting = pool.has_free()
    out(waiting, [pool.get_next() for _ in range(5)], pool.has_next())


@case
def push_adds_an_actor_once():
    a1, a2 = Actor.remote(), Actor.remote()
    pool = ActorPool([a1])
    pool.push(a2)
    e = raised(pool.push, a2)
    pool.submit(double, 1)
    pool.submit(double, 2)
    busy = raised(pool.push, a1)
    out(type(e).__name__, str(e), type(busy).__name__, sorted([pool.get_next(), pool.get_next()]))


@case
def get_next_with_nothing_pending():
    pool = ActorPool([Actor.remote()])
    e = raised(pool.get_next)
    u = raised(pool.get_next_unordered)
    out(type(e).__name__, str(e), type(u).__name__, str(u))


@case
def get_next_timeout_keeps_the_result():
    pool = ActorPool([Actor.remote()])
    pool.submit(lambda a, v: a.slow_double.remote(v), 2)
    e = raised(pool.get_next, timeout=0.1)
    out(type(e).__name__, str(e), pool.has_next(), pool.get_next())


@case
def get_next_timeout_ignored_drops_the_result():
    pool = ActorPool([Actor.remote()])
    pool.submit(lambda a, v: a.slow_double.remote(v), 2)
    e = raised(pool.get_next, timeout=0.1, ignore_if_timedout=True)
    text = str(e)
    out(type(e).__name__, text.startswith("Timed out waiting for result. The task "),
        text.endswith(" has been ignored."), pool.has_next(), pool.has_free())


@case
def get_next_unordered_timeout():
    pool = ActorPool([Actor.remote()])
    pool.submit(lambda a, v: a.slow_double.remote(v), 1.5)
    e = raised(pool.get_next_unordered, timeout=0.1)
    out(type(e).__name__, str(e), pool.get_next_unordered(timeout=30))


@case
def get_next_after_get_next_unordered():
    pool = ActorPool([Actor.remote(), Actor.remote()])
    pool.submit(lambda a, v: a.slow_double.remote(v), 1.5)
    pool.submit(lambda a, v: a.slow_double.remote(v), 0)
    fast = pool.get_next_unordered()
    e = raised(pool.get_next)
    out(fast, type(e).__name__, str(e))


@case
def map_drops_results_not_taken():
    pool = ActorPool([Actor.remote()])
    pool.submit(double, 100)
    out(list(pool.map(double, [1, 2, 3])))
