"""The rest of ray.util: this node's address and instance id, as_completed and map_unordered, log_once and its
switches, custom serializers, inspect_serializability and the accelerator type names."""

import io
import threading
import time
import warnings

import ray
from harness import case, out, raised


@ray.remote
def nap(x):
    time.sleep(0.05 * x)
    return x


class Point:
    """Cannot be pickled unless a serializer is registered for it."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __reduce__(self):
        raise TypeError("Point is not picklable")


@ray.remote
def coords(p):
    return [type(p).__name__, p.x, p.y]


class Holder:
    def __init__(self):
        self.lock = threading.Lock()


LOCK = threading.Lock()


def uses_lock():
    return LOCK


@case
def node_address():
    out(ray.util.get_node_ip_address() == ray.nodes()[0]["NodeManagerAddress"], ray.util.get_node_instance_id())


@case
def as_completed():
    refs = [nap.remote(x) for x in (4, 1, 3, 2)]
    out(sorted(ray.util.as_completed(refs, chunk_size=2)))
    got = list(ray.util.as_completed(refs, chunk_size=3, yield_obj_refs=True, timeout=30))
    out(len(got), all(isinstance(r, ray.ObjectRef) for r in got), sorted(ray.get(got)))
    out(list(ray.util.as_completed([])))
    e = raised(next, ray.util.as_completed(refs, chunk_size=0))
    out(type(e).__name__, str(e))
    e = raised(next, ray.util.as_completed(refs, num_returns=2))
    out(type(e).__name__, str(e))


@case
def map_unordered():
    out(sorted(ray.util.map_unordered(nap, range(7), backpressure_size=3, chunk_size=2)))
    refs = list(ray.util.map_unordered(nap, [1, 2], backpressure_size=None, yield_obj_refs=True))
    out(len(refs), sorted(ray.get(refs)))
    for bad in ({"backpressure_size": 0}, {"chunk_size": 0}, {"num_returns": 1}):
        e = raised(next, ray.util.map_unordered(nap, [1], **bad))
        out(type(e).__name__, str(e))


@case
def log_once():
    out(ray.util.log_once("util_misc.first"), ray.util.log_once("util_misc.first"),
        ray.util.log_once("util_misc.second"))
    out(ray.util.enable_periodic_logging(), ray.util.log_once("util_misc.third"))
    out(ray.util.disable_log_once_globally(), ray.util.log_once("util_misc.fourth"))


@case
def serializers():
    out(raised(ray.put, Point(1, 2)) is not None)
    ray.util.register_serializer(Point, serializer=lambda p: (p.x, p.y), deserializer=lambda t: Point(*t))
    back = ray.get(ray.put(Point(3, 4)))
    out(type(back).__name__, back.x, back.y)
    out(ray.get(coords.remote(Point(5, 6))))
    ray.util.deregister_serializer(Point)
    out(raised(ray.put, Point(1, 2)) is not None)
    out(ray.util.deregister_serializer(Point))


@case
def inspect_serializability():
    ok, failures = ray.util.inspect_serializability(Holder(), name="holder", print_file=io.StringIO())
    out(ok, sorted((type(f.obj).__name__, list(f.path), type(f.parent).__name__) for f in failures))
    ok, failures = ray.util.inspect_serializability(uses_lock, name="uses_lock", print_file=io.StringIO())
    out(ok, sorted((type(f.obj).__name__, list(f.path)) for f in failures))
    ok, failures = ray.util.inspect_serializability([1, "two"], print_file=io.StringIO())
    out(ok, failures)
    printed = io.StringIO()
    ray.util.inspect_serializability(Holder(), name="holder", print_file=printed)
    out("Checking Serializability of" in printed.getvalue(), "!!! FAIL" in printed.getvalue())
    only = next(iter(ray.util.inspect_serializability(LOCK, name="lock", depth=0, print_file=io.StringIO())[1]))
    out(repr(only).startswith("FailTuple(lock [path=lock, obj="))


@case
def accelerators():
    from ray.util import accelerators
    from ray.util.accelerators import accelerators as names
    out(accelerators.GOOGLE_TPU_V6E, accelerators.NVIDIA_A100, accelerators.NVIDIA_H100)
    out({k: v for k, v in vars(names).items() if not k.startswith("_") and isinstance(v, str)})
    out(sorted(accelerators.__all__), accelerators.tpu is ray.util.tpu)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = accelerators.NVIDIA_TESLA_A100
    out(old, [issubclass(w.category, DeprecationWarning) and str(w.message) for w in caught])
