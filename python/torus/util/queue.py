"""Queue (as ray.util.queue): a first-in, first-out queue held by an actor, shared by passing the Queue to tasks and
actors.

    q = Queue(maxsize=2)
    q.put(1); q.put_nowait(2)
    q.put(3, timeout=0.5)        # Full after half a second: the queue holds 2
    q.get(), q.get_nowait()      # 1, 2
    q.get(block=False)           # Empty
    q.shutdown()

put/get block until there is room/an item (at most `timeout` seconds, then Full/Empty); block=False and the
*_nowait forms raise Full/Empty at once; the *_batch forms move several items in one call, all or none. Empty and Full
subclass the standard library's queue.Empty and queue.Full, and are raised as such here and in the tasks that use
the queue. Several producers or consumers blocked on one queue are served in no promised order.
"""

import asyncio
import queue
from collections.abc import Iterable

from torus._private import worker as _worker
from torus._private.make_remote import remote


class Empty(queue.Empty):
    pass


class Full(queue.Full):
    pass


class Queue:
    """A queue of at most `maxsize` items (0: no limit); `actor_options` go to the holding actor's .options()."""

    def __init__(self, maxsize=0, actor_options=None):
        actor_options = actor_options or {}
        self.maxsize = maxsize
        self.actor = remote(_QueueActor).options(**actor_options).remote(self.maxsize)

    def __len__(self):
        return self.size()

    def size(self):
        """How many items the queue holds."""
        return _worker.get(self.actor.qsize.remote())

    def qsize(self):
        return self.size()

    def empty(self):
        return _worker.get(self.actor.empty.remote())

    def full(self):
        return _worker.get(self.actor.full.remote())

    def put(self, item, block=True, timeout=None):
        """Adds `item`; when full, waits for room (up to `timeout` seconds, then Full), or with block=False raises
        Full at once. ValueError for a negative timeout."""
        if not block:
            try:
                _worker.get(self.actor.put_nowait.remote(item))
            except asyncio.QueueFull:
                raise Full from None
            return
        _check_timeout(timeout)
        _worker.get(self.actor.put.remote(item, timeout))

    async def put_async(self, item, block=True, timeout=None):
        """put() for coroutines: awaits instead of blocking the thread."""
        if not block:
            try:
                await _awaited(self.actor.put_nowait.remote(item))
            except asyncio.QueueFull:
                raise Full from None
            return
        _check_timeout(timeout)
        await _awaited(self.actor.put.remote(item, timeout))

    def get(self, block=True, timeout=None):
        """Takes the oldest item; when empty, waits for one (up to `timeout` seconds, then Empty), or with
        block=False raises Empty at once. ValueError for a negative timeout."""
        if not block:
            try:
                return _worker.get(self.actor.get_nowait.remote())
            except asyncio.QueueEmpty:
                raise Empty from None
        _check_timeout(timeout)
        return _worker.get(self.actor.get.remote(timeout))

    async def get_async(self, block=True, timeout=None):
        """get() for coroutines: awaits instead of blocking the thread."""
        if not block:
            try:
                return await _awaited(self.actor.get_nowait.remote())
            except asyncio.QueueEmpty:
                raise Empty from None
        _check_timeout(timeout)
        return await _awaited(self.actor.get.remote(timeout))

    def put_nowait(self, item):
        return self.put(item, block=False)

    def put_nowait_batch(self, items):
        """Adds `items` in order, all of them or (Full) none."""
        if not isinstance(items, Iterable):
            raise TypeError("Argument 'items' must be an Iterable")
        _worker.get(self.actor.put_nowait_batch.remote(list(items)))

    def get_nowait(self):
        return self.get(block=False)

    def get_nowait_batch(self, num_items):
        """Takes the `num_items` oldest items, all of them or (Empty) none."""
        if not isinstance(num_items, int):
            raise TypeError("Argument 'num_items' must be an int")
        if num_items < 0:
            raise ValueError("'num_items' must be nonnegative")
        return _worker.get(self.actor.get_nowait_batch.remote(num_items))

    def shutdown(self, force=False, grace_period_s=5):
        """Stops the holding actor and frees what it holds. Without `force`, the calls this process sent it before
        are let start first (for up to `grace_period_s` seconds); calls still waiting in it then fail with
        ActorDiedError."""
        if self.actor:
            if not force:
                _worker.wait([self.actor.qsize.remote()], timeout=grace_period_s)
            from torus.actor import kill
            kill(self.actor, no_restart=True)
        self.actor = None


def _check_timeout(timeout):
    if timeout is not None and timeout < 0:
        raise ValueError("'timeout' must be a non-negative number")


async def _awaited(ref):
    """The value of `ref`, waited for on a thread so that the event loop runs meanwhile."""
    return await asyncio.get_running_loop().run_in_executor(None, _worker.get, ref)


class _QueueActor:
    """The queue itself: an asyncio.Queue in an async actor, so that blocked puts and gets wait without a thread."""

    def __init__(self, maxsize):
        self.maxsize = maxsize
        self.queue = asyncio.Queue(self.maxsize)

    def qsize(self):
        return self.queue.qsize()

    def empty(self):
        return self.queue.empty()

    def full(self):
        return self.queue.full()

    async def put(self, item, timeout=None):
        try:
            await asyncio.wait_for(self.queue.put(item), timeout)
        except asyncio.TimeoutError:
            raise Full from None

    async def get(self, timeout=None):
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            raise Empty from None

    def put_nowait(self, item):
        self.queue.put_nowait(item)

    def put_nowait_batch(self, items):
        if self.maxsize > 0 and len(items) + self.qsize() > self.maxsize:
            raise Full(f"Cannot add {len(items)} items to queue of size {self.qsize()} and maxsize {self.maxsize}.")
        for item in items:
            self.queue.put_nowait(item)

    def get_nowait(self):
        return self.queue.get_nowait()

    def get_nowait_batch(self, num_items):
        if num_items > self.qsize():
            raise Empty(f"Cannot get {num_items} items from queue of size {self.qsize()}.")
        return [self.queue.get_nowait() for _ in range(num_items)]
