"""Actors: Ray Core's actor guide — state, handles passed around, ordering, options, methods, kill, named actors."""

import ray
from harness import case, out, raised


@ray.remote
class Counter:
    def __init__(self, start=0):
        self.n = start

    def incr(self, by=1):
        self.n += by
        return self.n

    def value(self):
        return self.n

    @ray.method(num_returns=2)
    def pair(self):
        return self.n, -self.n


@case
def state_is_kept_between_calls():
    c = Counter.remote(10)
    out(ray.get([c.incr.remote() for _ in range(5)]))


@case
def calls_of_one_caller_run_in_order():
    c = Counter.remote()
    refs = [c.incr.remote(i) for i in range(20)]
    out(ray.get(refs)[-1], ray.get(c.value.remote()))


@case
def method_decorator_num_returns():
    c = Counter.remote(3)
    a, b = c.pair.remote()
    out(ray.get([a, b]))


@case
def method_options_num_returns():
    c = Counter.remote(4)
    refs = c.pair.options(num_returns=2).remote()
    out(len(refs), ray.get(list(refs)))


@ray.remote
def use_counter(counter, times):
    for _ in range(times):
        ray.get(counter.incr.remote())
    return ray.get(counter.value.remote())


@case(timeout=120)
def handle_passed_to_tasks():
    c = Counter.remote()
    ray.get([use_counter.remote(c, 3) for _ in range(3)])
    out(ray.get(c.value.remote()))


@case
def actors_cannot_be_instantiated_directly():
    e = raised(Counter)
    out(type(e).__name__, str(e))


@case
def methods_cannot_be_called_directly():
    c = Counter.remote()
    e = raised(c.incr)
    out(type(e).__name__, str(e))


@case
def unknown_method_is_an_attribute_error():
    c = Counter.remote()
    e = raised(lambda: c.nope)
    out(type(e).__name__)


@case
def bad_actor_option():
    e = raised(lambda: Counter.options(max_restart=1))
    out(type(e).__name__, str(e).startswith("Invalid option keyword max_restart for actors."))


@case
def bad_lifetime():
    e = raised(lambda: Counter.options(lifetime="forever"))
    out(type(e).__name__, str(e))


@case
def get_if_exists_needs_a_name():
    e = raised(lambda: Counter.options(get_if_exists=True))
    out(type(e).__name__, str(e))


@case
def named_actor_found_by_name():
    keep = Counter.options(name="named-counter").remote(5)  # noqa: F841 - an actor lives while a handle does
    h = ray.get_actor("named-counter")
    out(ray.get(h.incr.remote()))


@case
def get_if_exists_returns_the_live_one():
    a = Counter.options(name="shared", get_if_exists=True).remote(1)
    ray.get(a.incr.remote())
    b = Counter.options(name="shared", get_if_exists=True).remote(100)
    out(ray.get(b.value.remote()))


@case
def get_actor_unknown_name():
    e = raised(ray.get_actor, "no-such-actor")
    out(type(e).__name__, "Failed to look up actor with name 'no-such-actor'" in str(e))


@case
def name_taken():
    first = Counter.options(name="taken").remote()
    ray.get(first.value.remote())
    e = raised(lambda: Counter.options(name="taken").remote())
    out(type(e).__name__, "taken" in str(e))


@case(timeout=120)
def kill_makes_calls_fail():
    c = Counter.remote()
    ray.get(c.incr.remote())
    ray.kill(c)
    # The kill takes effect a little later (a call made at once may still run): calls fail from then on.
    import time
    deadline = time.time() + 60
    e = None
    while e is None and time.time() < deadline:
        e = raised(lambda: ray.get(c.incr.remote(), timeout=30))
        time.sleep(0.05)
    out(type(e).__name__, isinstance(e, ray.exceptions.RayActorError))


@ray.remote(max_restarts=1)
class Restartable:
    def __init__(self, start):
        self.n = start

    def incr(self):
        self.n += 1
        return self.n

    def pid_and_value(self):
        import os
        return os.getpid(), self.n


@case(timeout=120)
def restart_after_kill_with_max_restarts():
    c = Restartable.remote(7)
    ray.get(c.incr.remote())
    first_pid, _ = ray.get(c.pid_and_value.remote())
    ray.kill(c, no_restart=False)
    # The kill takes effect a little later; the restarted actor (another process) is built again with the same
    # arguments.
    import time
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            pid, value = ray.get(c.pid_and_value.remote(), timeout=30)
            if pid != first_pid:
                out(value)
                break
        except ray.exceptions.RayActorError:
            pass
        time.sleep(0.1)


@case
def kill_of_a_non_actor():
    e = raised(ray.kill, "nope")
    out(type(e).__name__)


@ray.remote
class Raises:
    def __init__(self):
        raise ValueError("constructor failed")

    def f(self):
        return 1


@case(timeout=120)
def constructor_error_surfaces_on_calls():
    a = Raises.remote()
    e = raised(lambda: ray.get(a.f.remote(), timeout=60))
    out(type(e).__name__, isinstance(e, ray.exceptions.RayActorError), "constructor failed" in str(e))


@ray.remote
class Threaded:
    def __init__(self):
        import threading
        self.lock = threading.Lock()
        self.inside = 0
        self.most = 0

    def work(self):
        import time
        with self.lock:
            self.inside += 1
            self.most = max(self.most, self.inside)
        time.sleep(0.2)
        with self.lock:
            self.inside -= 1
        return 1

    def most_at_once(self):
        return self.most


@case(timeout=120)
def max_concurrency_runs_calls_at_once():
    t = Threaded.options(max_concurrency=4).remote()
    ray.get([t.work.remote() for _ in range(8)])
    out(ray.get(t.most_at_once.remote()))


@case(timeout=120)
def default_concurrency_is_one():
    t = Threaded.remote()
    ray.get([t.work.remote() for _ in range(4)])
    out(ray.get(t.most_at_once.remote()))


@ray.remote
class Child:
    def ping(self):
        return "pong"


@ray.remote
class Parent:
    def __init__(self):
        self.children = [Child.remote() for _ in range(3)]

    def ask(self):
        return ray.get([c.ping.remote() for c in self.children])


@case(timeout=120)
def tree_of_actors():
    p = Parent.remote()
    out(ray.get(p.ask.remote()))


@case
def actor_handle_repr_names_class():
    c = Counter.remote()
    out(repr(c).startswith("Actor(Counter, "))
