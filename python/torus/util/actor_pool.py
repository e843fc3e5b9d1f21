"""ActorPool (as ray.util.actor_pool): work spread over a fixed set of actors, one call per actor at a time.

    pool = ActorPool([Doubler.remote(), Doubler.remote()])
    list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3, 4]))            # [2, 4, 6, 8], in order
    set(pool.map_unordered(lambda a, v: a.double.remote(v), [1, 2, 3, 4]))   # as they finish

`fn(actor, value)` must return an ObjectRef (or a list of them); the actor is busy until it is ready. Values
submitted while every actor is busy wait in order for the first actor to come back. get_next() returns results in
submission order, get_next_unordered() in finishing order; both raise TimeoutError("Timed out waiting for result")
when `timeout` passes, and with ignore_if_timedout=True drop that result ("... The task <ref> has been ignored.")
and give its actor back. An actor whose call raised ActorDiedError leaves the pool.

Not thread-safe: one thread drives a pool.
"""

from torus import exceptions
from torus._private import worker as _worker

_TIMEOUT = "Timed out waiting for result"


class ActorPool:
    """A fixed pool of actor handles."""

    def __init__(self, actors):
        self._idle_actors = list(actors)
        self._future_to_actor = {}   # ref (a tuple for a list of refs) -> (submission index, actor)
        self._index_to_future = {}   # submission index -> what fn returned
        self._next_task_index = 0
        self._next_return_index = 0
        self._pending_submits = []   # (fn, value) waiting for an idle actor

    def map(self, fn, values):
        """An iterator over fn's results on `values`, in order, computed over the pool's actors. Results not taken
        from an earlier map or submit are dropped first."""
        while self.has_next():
            try:
                self.get_next(timeout=0, ignore_if_timedout=True)
            except TimeoutError:
                pass
        for v in values:
            self.submit(fn, v)

        def results():
            while self.has_next():
                yield self.get_next()
        return results()

    def map_unordered(self, fn, values):
        """As map(), in the order the results come."""
        while self.has_next():
            try:
                self.get_next_unordered(timeout=0)
            except TimeoutError:
                pass
        for v in values:
            self.submit(fn, v)

        def results():
            while self.has_next():
                yield self.get_next_unordered()
        return results()

    def submit(self, fn, value):
        """Runs fn(actor, value) on an idle actor now, or once one comes back."""
        if not self._idle_actors:
            self._pending_submits.append((fn, value))
            return
        actor = self._idle_actors.pop()
        future = fn(actor, value)
        self._future_to_actor[_key(future)] = (self._next_task_index, actor)
        self._index_to_future[self._next_task_index] = future
        self._next_task_index += 1

    def has_next(self):
        """Whether a submitted result has not been returned yet."""
        return bool(self._future_to_actor)

    def get_next(self, timeout=None, ignore_if_timedout=False):
        """The next result in submission order, waiting up to `timeout` seconds (None: without limit)."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        if self._next_return_index >= self._next_task_index:
            raise ValueError("It is not allowed to call get_next() after get_next_unordered().")
        future = self._index_to_future[self._next_return_index]
        timed_out = False
        if timeout is not None:
            ready, _ = _worker.wait(_refs(future), num_returns=len(_refs(future)), timeout=timeout)
            if len(ready) < len(_refs(future)):
                if not ignore_if_timedout:
                    raise TimeoutError(_TIMEOUT)
                timed_out = True
        del self._index_to_future[self._next_return_index]
        self._next_return_index += 1
        _, actor = self._future_to_actor.pop(_key(future))
        if timed_out:
            self._return_actor(actor)
            raise TimeoutError(f"{_TIMEOUT}. The task {future} has been ignored.")
        return self._get_result(future, actor)

    def get_next_unordered(self, timeout=None, ignore_if_timedout=False):
        """Whichever submitted result is ready first, waiting up to `timeout` seconds (None: without limit). With
        ignore_if_timedout=True, a timeout drops the oldest pending result."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        pending = list(self._future_to_actor)
        refs = [r for key in pending for r in _refs(key)]
        ready, _ = _worker.wait(refs, num_returns=1, timeout=timeout)
        if ready:
            key = next(k for k in pending if ready[0] in _refs(k))
        elif not ignore_if_timedout:
            raise TimeoutError(_TIMEOUT)
        else:
            key = min(pending, key=lambda k: self._future_to_actor[k][0])
        index, actor = self._future_to_actor.pop(key)
        future = self._index_to_future.pop(index)
        self._next_return_index = max(self._next_return_index, index + 1)
        if not ready:
            self._return_actor(actor)
            raise TimeoutError(f"{_TIMEOUT}. The task {future} has been ignored.")
        return self._get_result(future, actor)

    def _get_result(self, future, actor):
        alive = True
        try:
            return _worker.get(future)
        except exceptions.ActorDiedError:
            alive = False
            raise
        finally:
            self._return_actor(actor, alive)

    def _return_actor(self, actor, alive=True):
        # A dead actor stays out: submit() would keep picking it.
        if alive:
            self._idle_actors.append(actor)
        if self._pending_submits and self._idle_actors:
            self.submit(*self._pending_submits.pop(0))

    def has_free(self):
        """Whether an actor is idle and no submission waits for one."""
        return len(self._idle_actors) > 0 and len(self._pending_submits) == 0

    def pop_idle(self):
        """Takes an idle actor out of the pool; None when none is free."""
        if self.has_free():
            return self._idle_actors.pop()
        return None

    def push(self, actor):
        """Adds `actor` to the idle actors; ValueError if it is in the pool already."""
        busy = [a for _, a in self._future_to_actor.values()]
        if actor in self._idle_actors or actor in busy:
            raise ValueError("Actor already belongs to current ActorPool")
        self._return_actor(actor)


def _key(future):
    return tuple(future) if isinstance(future, list) else future


def _refs(future):
    return list(future) if isinstance(future, (list, tuple)) else [future]
