"""@serve.batch (torus.serve.batching) on an event loop, as a replica runs it: batch forming by size and by timeout,
per-caller results and errors, methods, keyword arguments, batch_size_fn, streaming, concurrency, and Ray's
checks of its options."""

import asyncio

import pytest

from torus import serve
from torus.serve.exceptions import RayServeException


def run(coro):
    return asyncio.run(coro)


def test_concurrent_calls_form_batches_of_max_batch_size_and_each_gets_its_result():
    sizes = []

    @serve.batch(max_batch_size=4, batch_wait_timeout_s=10)
    async def double(items):
        sizes.append(len(items))
        return [2 * x for x in items]

    async def main():
        return await asyncio.gather(*(double(i) for i in range(8)))

    assert run(main()) == [0, 2, 4, 6, 8, 10, 12, 14]
    assert sizes == [4, 4]


def test_a_partial_batch_goes_after_batch_wait_timeout_s():
    sizes = []

    @serve.batch(max_batch_size=10, batch_wait_timeout_s=0.05)
    async def echo(items):
        sizes.append(len(items))
        return items

    async def main():
        loop = asyncio.get_running_loop()
        start = loop.time()
        out = await asyncio.gather(echo("a"), echo("b"))
        return out, loop.time() - start

    out, waited = run(main())
    assert out == ["a", "b"] and sizes == [2]
    assert waited >= 0.05


def test_a_method_gets_its_instance_and_keyword_arguments_become_lists():
    class Model:
        def __init__(self):
            self.calls = []

        @serve.batch(max_batch_size=3, batch_wait_timeout_s=10)
        async def predict(self, xs, scale=None):
            self.calls.append((list(xs), scale))
            return [x * s for x, s in zip(xs, scale)]

    model = Model()

    async def main():
        return await asyncio.gather(*(model.predict(x, scale=s) for x, s in ((1, 10), (2, 20), (3, 30))))

    assert run(main()) == [10, 40, 90]
    assert model.calls == [([1, 2, 3], [10, 20, 30])]


def test_an_exception_reaches_every_caller_of_its_batch():
    @serve.batch(max_batch_size=2, batch_wait_timeout_s=10)
    async def fail(items):
        raise ValueError(f"bad batch {items}")

    async def main():
        return await asyncio.gather(fail(1), fail(2), return_exceptions=True)

    errors = run(main())
    assert [(type(e), str(e)) for e in errors] == [(ValueError, "bad batch [1, 2]")] * 2


def test_a_result_of_another_length_is_refused_in_rays_words():
    @serve.batch(max_batch_size=2, batch_wait_timeout_s=10)
    async def short(items):
        return items[:1]

    async def main():
        return await asyncio.gather(short(1), short(2), return_exceptions=True)

    errors = run(main())
    assert all(isinstance(e, RayServeException) for e in errors)
    assert str(errors[0]) == ("Batched function doesn't preserve batch size. The input list has length 2 but the "
                              "returned list has length 1.")


def test_batch_size_fn_bounds_a_batch_by_its_items_weight():
    batches = []

    @serve.batch(max_batch_size=5, batch_wait_timeout_s=10, batch_size_fn=lambda items: sum(len(s) for s in items))
    async def lengths(items):
        batches.append(list(items))
        return [len(s) for s in items]

    async def main():
        fits = await asyncio.gather(lengths("aa"), lengths("bbb"), lengths("cccc"), lengths("d"))
        too_big = await asyncio.gather(lengths("xxxxxx"), return_exceptions=True)
        return fits, too_big

    fits, too_big = run(main())
    assert fits == [2, 3, 4, 1]
    assert batches == [["aa", "bbb"], ["cccc", "d"]]
    assert isinstance(too_big[0], RuntimeError) and str(too_big[0]).startswith(
        "Size of item is greater than max_batch_size.")


def test_an_async_generator_streams_each_caller_its_own_items_until_its_end():
    @serve.batch(max_batch_size=2, batch_wait_timeout_s=10)
    async def count(limits):
        for i in range(max(limits)):
            yield [i if i < n else StopIteration for n in limits]

    async def collect(n):
        return [x async for x in count(n)]

    async def main():
        return await asyncio.gather(collect(2), collect(4))

    assert run(main()) == [[0, 1], [0, 1, 2, 3]]


def test_max_concurrent_batches_runs_batches_side_by_side():
    running, most = 0, 0

    @serve.batch(max_batch_size=1, batch_wait_timeout_s=0, max_concurrent_batches=3)
    async def slow(items):
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.05)
        running -= 1
        return items

    async def main():
        return await asyncio.gather(*(slow(i) for i in range(6)))

    assert run(main()) == list(range(6))
    assert most == 3


def test_setters_change_the_next_batches():
    sizes = []

    @serve.batch(max_batch_size=2, batch_wait_timeout_s=10)
    async def f(items):
        sizes.append(len(items))
        return items

    f.set_max_batch_size(3)
    f.set_batch_wait_timeout_s(5)
    assert (f._get_max_batch_size(), f._get_batch_wait_timeout_s()) == (3, 5)

    async def main():
        return await asyncio.gather(*(f(i) for i in range(3)))

    assert run(main()) == [0, 1, 2] and sizes == [3]
    with pytest.raises(ValueError) as e:
        f.set_max_batch_size(0)
    assert str(e.value) == "max_batch_size must be an integer >= 1, got 0"


@pytest.mark.parametrize("kwargs, kind, message", [
    ({"max_batch_size": 0}, ValueError, "max_batch_size must be an integer >= 1, got 0"),
    ({"max_batch_size": 1.5}, TypeError, "max_batch_size must be integer >= 1, got 1.5"),
    ({"batch_wait_timeout_s": -1}, ValueError, "batch_wait_timeout_s must be a float >= 0, got -1"),
    ({"batch_wait_timeout_s": "1"}, TypeError, "batch_wait_timeout_s must be a float >= 0, got 1"),
    ({"max_concurrent_batches": 0}, TypeError, "max_concurrent_batches must be an integer >= 1, got 0"),
    ({"batch_size_fn": 3}, TypeError, "batch_size_fn must be a callable or None, got <class 'int'>"),
])
def test_bad_options_get_rays_errors(kwargs, kind, message):
    with pytest.raises(kind) as e:
        serve.batch(**kwargs)
    assert str(e.value) == message


def test_only_async_functions_are_batched():
    def sync(items):
        return items

    with pytest.raises(TypeError) as e:
        serve.batch(sync)
    assert str(e.value) == "Functions decorated with @serve.batch must be 'async def'"
