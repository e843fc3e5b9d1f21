"""Objects: put/get, refs inside values (borrowing), numpy arrays (zero-copy, read-only), wait, large values."""

import numpy as np

import ray
from harness import case, out, raised


@case
def put_get_roundtrip_of_values():
    values = [1, 2.5, "s", b"b", None, [1, [2]], {"k": (1, 2)}, {1, 2}]
    out([repr(ray.get(ray.put(v))) for v in values])


@case
def numpy_array_is_read_only_after_get():
    arr = np.arange(1_000_000, dtype=np.int64)
    got = ray.get(ray.put(arr))
    out(int(got.sum()), bool(got.flags.writeable))


@ray.remote
def total(a):
    return int(a.sum())


@case
def large_array_as_argument():
    out(ray.get(total.remote(np.ones((1024, 1024), dtype=np.float32))))


@ray.remote
def make_ref():
    return [ray.put(41)]


@case
def ref_inside_a_returned_value():
    [inner] = ray.get(make_ref.remote())
    out(ray.get(inner) + 1)


@ray.remote
def read_nested(refs):
    return sum(ray.get(refs))


@case
def refs_inside_arguments_stay_refs():
    refs = [ray.put(i) for i in range(5)]
    out(ray.get(read_nested.remote(refs)))


@case
def put_of_a_ref_is_refused():
    e = raised(ray.put, ray.put(1))
    out(type(e).__name__)


@case
def wait_with_timeout_zero():
    refs = [ray.put(1), ray.put(2)]
    ready, rest = ray.wait(refs, num_returns=2, timeout=0)
    out(len(ready) + len(rest))


@case
def wait_duplicates_refused():
    r = ray.put(1)
    e = raised(ray.wait, [r, r])
    out(type(e).__name__, str(e))


@case
def wait_num_returns_too_large():
    e = raised(ray.wait, [ray.put(1)], num_returns=2)
    out(type(e).__name__, str(e))


@case
def wait_takes_a_list():
    e = raised(ray.wait, ray.put(1))
    out(type(e).__name__)


@ray.remote
def sleepy():
    import time
    time.sleep(30)


@case(timeout=90)
def get_timeout():
    e = raised(ray.get, sleepy.remote(), timeout=0.5)
    out(type(e).__name__, isinstance(e, TimeoutError), isinstance(e, ray.exceptions.RayError))


@case
def ref_hex_and_equality():
    r = ray.put(3)
    out(len(r.hex()) == 2 * len(r.binary()), r == r, hash(r) == hash(r))


@case
def object_ref_type_is_exported():
    out(isinstance(ray.put(1), ray.ObjectRef))
