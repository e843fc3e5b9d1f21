"""@serve.batch: calls of an async function or method, made one item at a time by concurrent requests, are gathered
into lists and handed to it together (Ray Serve's batching: its options, defaults, checks and messages).

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.05)
    async def handle(self, items: List[str]) -> List[str]: ...      # called as `await self.handle(item)`

A batch is sent when it holds max_batch_size items (or batch_size_fn of its items reaches it), or
batch_wait_timeout_s after its first item came; at most max_concurrent_batches run at once. The function returns
one result per item, in order; an async generator yields such lists, and each caller gets its own stream (an item
that is StopIteration or StopAsyncIteration ends that caller's stream). An exception reaches every caller of the
batch. Each positional or keyword argument becomes the list of that argument over the batch.

Thread-safety: a batched function belongs to one event loop (the replica's); its queue is made on the first call.
"""

import asyncio
import collections
import functools
import inspect
import logging
import time
from typing import Any, Callable, List, Optional

from torus.serve.exceptions import RayServeException

logger = logging.getLogger("ray.serve")
_END_OF_STREAM = (StopIteration, StopAsyncIteration)


def _check_max_batch_size(max_batch_size):
    if not isinstance(max_batch_size, int):
        if not (isinstance(max_batch_size, float) and max_batch_size.is_integer()):
            raise TypeError(f"max_batch_size must be integer >= 1, got {max_batch_size}")
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be an integer >= 1, got {max_batch_size}")


def _check_batch_wait_timeout_s(batch_wait_timeout_s):
    if not isinstance(batch_wait_timeout_s, (float, int)):
        raise TypeError(f"batch_wait_timeout_s must be a float >= 0, got {batch_wait_timeout_s}")
    if batch_wait_timeout_s < 0:
        raise ValueError(f"batch_wait_timeout_s must be a float >= 0, got {batch_wait_timeout_s}")


class _Call:
    __slots__ = ("owner", "args", "kwargs", "future")

    def __init__(self, owner, args, kwargs, future):
        self.owner, self.args, self.kwargs, self.future = owner, args, kwargs, future


class _Queue:
    """The calls waiting for a batch, and the task that forms and runs batches, on one event loop."""

    def __init__(self, func, options):
        self.func = func
        self.options = options
        self.loop = asyncio.get_running_loop()
        self.waiting = collections.deque()
        self.arrived = asyncio.Event()
        self.slots = asyncio.Semaphore(options.max_concurrent_batches)
        self.task = self.loop.create_task(self._form_batches())

    def put(self, call):
        self.waiting.append(call)
        self.arrived.set()

    def _size(self, calls):
        if self.options.batch_size_fn is None:
            return len(calls)
        return self.options.batch_size_fn([c.args[0] if c.args else next(iter(c.kwargs.values())) for c in calls])

    async def _next_batch(self):
        while not self.waiting:
            self.arrived.clear()
            await self.arrived.wait()
        max_size, timeout_s = self.options.max_batch_size, self.options.batch_wait_timeout_s
        first = self.waiting.popleft()
        if self.options.batch_size_fn is not None and self._size([first]) > max_size:
            _fail(first.future, RuntimeError("Size of item is greater than max_batch_size. Please increase the "
                                             "max_batch_size or check the implementation of the batch_size_fn."))
            return []
        batch = [first]
        deadline = time.monotonic() + timeout_s
        while True:
            while self.waiting:
                batch.append(self.waiting[0])
                if self._size(batch) > max_size:
                    batch.pop()
                    return batch
                self.waiting.popleft()
            if self._size(batch) >= max_size:
                return batch
            left = deadline - time.monotonic()
            if left <= 0:
                return batch
            self.arrived.clear()
            try:
                await asyncio.wait_for(self.arrived.wait(), left)
            except asyncio.TimeoutError:
                pass

    async def _form_batches(self):
        while True:
            batch = await self._next_batch()
            batch = [c for c in batch if not c.future.done()]
            if not batch:
                continue
            await self.slots.acquire()
            task = self.loop.create_task(self._run(batch))
            task.add_done_callback(lambda _: self.slots.release())

    async def _run(self, batch):
        futures = [c.future for c in batch]
        try:
            args, kwargs = _batched_arguments(batch)
            owner = batch[0].owner
            result = self.func(owner, *args, **kwargs) if owner is not None else self.func(*args, **kwargs)
            if inspect.isasyncgen(result):
                await _feed_streams(result, futures)
            else:
                results = await result
                _check_length(results, len(batch))
                for value, future in zip(results, futures):
                    if not future.done():
                        future.set_result(value)
        except Exception as e:  # noqa: BLE001 - every caller of the batch gets the function's exception
            for future in futures:
                _fail(future, e)


def _fail(future, error):
    if not future.done():
        future.set_exception(error)


def _check_length(results, expected):
    if len(results) != expected:
        raise RayServeException(f"Batched function doesn't preserve batch size. The input list has length "
                                f"{expected} but the returned list has length {len(results)}.")


def _batched_arguments(batch):
    shapes = {(len(c.args), tuple(sorted(c.kwargs))) for c in batch}
    if len(shapes) != 1:
        raise RayServeException("All batch requests should have the same number of parameters (the same "
                                "positional count and keyword names).")
    positional = len(batch[0].args)
    args = [[c.args[i] for c in batch] for i in range(positional)]
    kwargs = {name: [c.kwargs[name] for c in batch] for name in batch[0].kwargs}
    return args, kwargs


class _StreamItem:
    __slots__ = ("value", "next")

    def __init__(self, value, next_future):
        self.value, self.next = value, next_future


async def _feed_streams(generator, futures):
    """Each yielded list gives every open caller its next item; a caller's future resolves to a _StreamItem holding
    the future of the item after it, or raises StopAsyncIteration at its end."""
    loop = asyncio.get_running_loop()
    current = list(futures)
    try:
        async for results in generator:
            _check_length(results, len(futures))
            for i, value in enumerate(results):
                future = current[i]
                if future is None:
                    continue
                if value in _END_OF_STREAM or isinstance(value, _END_OF_STREAM):
                    _fail(future, StopAsyncIteration())
                    current[i] = None
                    continue
                following = loop.create_future()
                if not future.done():
                    future.set_result(_StreamItem(value, following))
                current[i] = following
        for future in current:
            if future is not None:
                _fail(future, StopAsyncIteration())
    except Exception as e:  # noqa: BLE001 - the streams end with the function's exception
        for future in current:
            if future is not None:
                _fail(future, e)


async def _stream_of(first):
    future = first
    while True:
        try:
            item = await future
        except StopAsyncIteration:
            return
        future = item.next
        yield item.value


class _Options:
    def __init__(self, max_batch_size, batch_wait_timeout_s, max_concurrent_batches, batch_size_fn):
        self.max_batch_size = int(max_batch_size)
        self.batch_wait_timeout_s = batch_wait_timeout_s
        self.max_concurrent_batches = max_concurrent_batches
        self.batch_size_fn = batch_size_fn


def batch(_func: Optional[Callable] = None, /, max_batch_size: int = 10, batch_wait_timeout_s: float = 0.01,
          max_concurrent_batches: int = 1, batch_size_fn: Optional[Callable[[List], int]] = None) -> Callable:
    """Ray's @serve.batch (see the module's docstring); usable bare or with options."""
    if _func is not None:
        if not callable(_func):
            raise TypeError("@serve.batch can only be used to decorate functions or methods.")
        # As Ray: a bare @serve.batch takes coroutine functions only; with options an async generator too.
        if not inspect.iscoroutinefunction(_func):
            raise TypeError("Functions decorated with @serve.batch must be 'async def'")
    _check_max_batch_size(max_batch_size)
    _check_batch_wait_timeout_s(batch_wait_timeout_s)
    if not isinstance(max_concurrent_batches, int) or max_concurrent_batches < 1:
        raise TypeError(f"max_concurrent_batches must be an integer >= 1, got {max_concurrent_batches}")
    if batch_size_fn is not None and not callable(batch_size_fn):
        raise TypeError(f"batch_size_fn must be a callable or None, got {type(batch_size_fn)}")
    options = _Options(max_batch_size, batch_wait_timeout_s, max_concurrent_batches, batch_size_fn)

    def decorate(func):
        queues = {}

        def enqueue(args, kwargs):
            loop = asyncio.get_running_loop()
            queue = queues.get(loop)
            if queue is None:
                queue = queues[loop] = _Queue(func, options)
            owner = None
            if args and _is_bound_to(args[0], func.__name__, wrapper):
                owner, args = args[0], args[1:]
            future = loop.create_future()
            queue.put(_Call(owner, tuple(args), dict(kwargs), future))
            return future

        if inspect.isasyncgenfunction(func):
            @functools.wraps(func)
            def wrapper(*args, **kwargs):
                return _stream_of(enqueue(args, kwargs))
        else:
            @functools.wraps(func)
            async def wrapper(*args, **kwargs):
                return await enqueue(args, kwargs)

        def set_max_batch_size(new_max_batch_size: int) -> None:
            _check_max_batch_size(new_max_batch_size)
            options.max_batch_size = int(new_max_batch_size)

        def set_batch_wait_timeout_s(new_batch_wait_timeout_s: float) -> None:
            _check_batch_wait_timeout_s(new_batch_wait_timeout_s)
            options.batch_wait_timeout_s = new_batch_wait_timeout_s

        wrapper.set_max_batch_size = set_max_batch_size
        wrapper.set_batch_wait_timeout_s = set_batch_wait_timeout_s
        wrapper._get_max_batch_size = lambda: options.max_batch_size
        wrapper._get_batch_wait_timeout_s = lambda: options.batch_wait_timeout_s
        return wrapper

    return decorate(_func) if callable(_func) else decorate


def _is_bound_to(obj, name, wrapper) -> bool:
    """Whether `obj` is the instance a method call passed first (its `name` attribute is `wrapper` bound to it)."""
    bound = getattr(type(obj), name, None)
    return bound is wrapper
