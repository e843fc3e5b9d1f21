"""Tasks: Ray Core's task guide — remote functions, options, multiple returns, passing refs, nesting, errors."""

import ray
from harness import case, out, raised


@ray.remote
def square(x):
    return x * x


@case
def values_in_order():
    out(ray.get([square.remote(i) for i in range(10)]))


@case
def refs_as_arguments():
    a = square.remote(3)
    out(ray.get(square.remote(a)))


@ray.remote(num_returns=3)
def three():
    return 1, "two", [3]


@case
def multiple_returns():
    refs = three.remote()
    out(len(refs), ray.get(list(refs)))


@ray.remote
def nested(n):
    if n == 0:
        return 0
    return ray.get(nested.remote(n - 1)) + 1


@case(timeout=120)
def nested_tasks_wait_for_children():
    out(ray.get(nested.remote(4)))


@case
def calling_a_remote_function_directly_is_a_type_error():
    e = raised(square, 1)
    out(type(e).__name__, "cannot be called directly" in str(e))


@case
def bad_option_name():
    e = raised(lambda: square.options(num_cpu=1))
    out(type(e).__name__, str(e).startswith("Invalid option keyword num_cpu for remote functions."))


@case
def negative_cpus():
    e = raised(lambda: square.options(num_cpus=-1))
    out(type(e).__name__, str(e))


@case
def tpu_must_be_a_chip_configuration():
    e = raised(lambda: square.options(resources={"TPU": 3}))
    out(type(e).__name__, str(e))


@case
def get_of_a_non_ref():
    e = raised(ray.get, 1)
    out(type(e).__name__)


@case
def wait_returns_ready_first():
    refs = [square.remote(i) for i in range(4)]
    ready, rest = ray.wait(refs, num_returns=4, timeout=60)
    out(len(ready), len(rest), sorted(ray.get(ready)))


@case
def put_and_get():
    ref = ray.put({"a": [1, 2, 3]})
    out(ray.get(ref), ray.get(square.remote(ray.put(7))))
