"""Generator tasks and actor methods (as Ray's): num_returns="streaming" gives an ObjectRefGenerator whose refs come
as the task yields, num_returns="dynamic" one ref to a DynamicObjectRefGenerator once the task finished.

Streaming: the executor reports each yielded value to the caller as it comes (core.report_generator_item: the
caller owns it, as a task's return); an exception the generator raises is reported as one more item (its get
raises it), as Ray does. The task's own return (`completed()`) is None; it holds an error only when the task failed
otherwise (its worker died). `next(gen)` waits for the next item (core.next_generator_item); after the last one it
returns the completion ref when that holds an error, else stops.
"""

import asyncio
import inspect

from torus._private import serialization as ser
from torus._private import state as _st
from torus._private.object_ref import ObjectRef


class ObjectRefGenerator:
    """The refs of a streaming generator task's items, in the order it yielded them."""

    def __init__(self, completion_ref):
        self._completion = completion_ref
        self._next_index = 1
        self._raised = False
        self._ended = False

    def __iter__(self):
        return self

    def __next__(self):
        ref = self._next_sync(None)
        return ref

    def __aiter__(self):
        return self

    async def __anext__(self):
        loop = asyncio.get_running_loop()
        ref = await loop.run_in_executor(None, self._next_or_end)
        if ref is None:
            raise StopAsyncIteration
        return ref

    def _next_or_end(self):
        # StopIteration cannot cross a future: the end is None here.
        try:
            return self._next_sync(None)
        except StopIteration:
            return None

    def send(self, value):
        raise NotImplementedError("`gen.send` is not supported.")

    def throw(self, value):
        raise NotImplementedError("`gen.throw` is not supported.")

    def close(self):
        raise NotImplementedError("`gen.close` is not supported.")

    def completed(self):
        """A ref ready when the generator task ends; its get raises the task's error if it failed."""
        return self._completion

    def next_ready(self):
        """True when next(gen) would return at once with a ready ref."""
        if self.is_finished():
            return False
        core = _st.current().core
        return core.next_generator_item(self._completion._id[:16], self._next_index, 0) is not None or \
            self._task_failed_now()

    def is_finished(self):
        """True when the generator ended and every item (and its error, if any) was taken."""
        if self._ended:
            return True
        core = _st.current().core
        ready = core.wait([(self._completion._id, self._completion._owner)], 1, 0)
        if not ready:
            return False
        try:
            found = core.next_generator_item(self._completion._id[:16], self._next_index, 0)
        except ValueError:
            return False
        return found is None and not self._task_failed_now()

    def _task_failed_now(self):
        if self._raised:
            return False
        try:
            [(data, fmt, _)] = _st.current().core.get([(self._completion._id, self._completion._owner)], 0)
        except ValueError:
            return False
        return ser.error_from(data, fmt) is not None

    def _next_sync(self, timeout_s):
        if self._ended:
            raise StopIteration
        state = _st.current()
        if state is None:
            raise RuntimeError("torus is not initialized")
        timeout_ms = -1 if timeout_s is None or timeout_s < 0 else int(timeout_s * 1000)
        try:
            item = state.core.next_generator_item(self._completion._id[:16], self._next_index, timeout_ms)
        except ValueError:
            return ObjectRef.nil()
        if item is not None:
            self._next_index += 1
            return ObjectRef(item, state.core.address)
        # The task ended with no more items: its error, once, then the end.
        if not self._raised and self._task_failed_now():
            self._raised = True
            return self._completion
        self._ended = True
        raise StopIteration

    def __repr__(self):
        return f"ObjectRefGenerator({self._completion.hex()})"

    def __reduce__(self):
        raise TypeError("An ObjectRefGenerator cannot be passed to other tasks or actors; pass its refs instead")


class DynamicObjectRefGenerator:
    """The refs a num_returns="dynamic" task yielded, all at once: iterate it, or len() it."""

    def __init__(self, refs):
        self._refs = list(refs)

    def __iter__(self):
        return iter(self._refs)

    def __len__(self):
        return len(self._refs)


def call_shape(num_returns, is_generator):
    """(num_returns for the core, generator mode) of a call: num_returns None means "streaming" for a generator
    function and 1 otherwise; a generator call ("streaming" or "dynamic") has one return of its own (its completion,
    or its items' refs)."""
    if num_returns is None:
        num_returns = "streaming" if is_generator else 1
    if num_returns in ("streaming", "dynamic"):
        return 1, num_returns
    return num_returns, ""


def is_generator_function(fn):
    return inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)


# --- the executor's side (in the worker that runs the task) ---

def stream_items(core, task, result, error_value):
    """Reports each item of `result` (a generator or async generator) to the task's caller, and what it raises as
    a last item (`error_value(exc)` makes its value)."""
    count = 0
    try:
        for value in _iterate(result):
            count += 1
            data, buffers, contained = ser.dumps_oob(value)
            core.report_generator_item(task["task_id"], count, data, ser.FORMAT_PICKLE, buffers, contained, value)
    except Exception as e:  # noqa: BLE001 - the generator's error is its stream's last item
        blob, fmt = error_value(e)
        core.report_generator_item(task["task_id"], count + 1, blob, fmt, [], [], None)


async def stream_items_async(core, task, result, error_value):
    """stream_items for an async generator on an async actor's event loop: each report waits off the loop."""
    loop = asyncio.get_running_loop()
    count = 0
    try:
        async for value in result:
            count += 1
            data, buffers, contained = ser.dumps_oob(value)
            await loop.run_in_executor(None, core.report_generator_item, task["task_id"], count, data,
                                       ser.FORMAT_PICKLE, buffers, contained, value)
    except Exception as e:  # noqa: BLE001 - the generator's error is its stream's last item
        blob, fmt = error_value(e)
        await loop.run_in_executor(None, core.report_generator_item, task["task_id"], count + 1, blob, fmt, [], [],
                                   None)


def collect_dynamic(result):
    """A num_returns="dynamic" task's value: its items put in the object store (this worker owns them, the caller
    borrows them), as a DynamicObjectRefGenerator."""
    from torus._private import worker
    return DynamicObjectRefGenerator([worker.put(v) for v in _iterate(result)])


def _iterate(result):
    if inspect.isasyncgen(result):
        loop = asyncio.new_event_loop()
        try:
            while True:
                try:
                    yield loop.run_until_complete(result.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            loop.close()
    elif inspect.isgenerator(result) or hasattr(result, "__next__"):
        yield from result
    else:
        raise TypeError(f"a generator task must return a generator, got {type(result).__name__}")
