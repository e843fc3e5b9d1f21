"""Values to bytes and back: cloudpickle (pickle protocol 5, large buffers out of band). Object refs inside values
travel as (id, owner): dumps_oob lists them (the core holds them for the value, and registers its reader as their
borrower); loads registers this process as a borrower of those read that another process owns. A ref pickled any
other way is marked as escaped in its owner, which then keeps it for good."""

import pickle
import threading

import cloudpickle

from torus import exceptions

FORMAT_PICKLE = "pickle5"
FORMAT_ERROR = "error"


def dumps(value):
    return cloudpickle.dumps(value, protocol=5)


# Values that the standard pickler writes exactly as cloudpickle would (by value, nothing by reference to __main__):
# pickled with it, which is several times faster for the arguments and results of most calls.
_PLAIN = frozenset({int, float, bool, str, bytes, type(None)})
_EMPTY = frozenset({list, tuple, dict})


_tracking = threading.local()  # .contained while dumps_oob runs, .borrowed while loads runs: lists of (id, owner)
_on_borrowed = None            # set by the runtime: registers this process as a borrower of [(id, owner)]


def dumps_oob(value, in_band=False):
    """(data, buffers, contained): `value` pickled with its large contiguous buffers (numpy arrays, bytearrays) left
    out of band (unless `in_band`), so that the core copies them once into the object store and readers map them back
    without a copy; `contained` lists the object refs inside it as (id, owner)."""
    kind = type(value)
    if kind in _PLAIN or (kind in _EMPTY and not value):
        return pickle.dumps(value, protocol=5), [], []
    buffers = []
    outer = getattr(_tracking, "contained", None)
    _tracking.contained = contained = []
    try:
        data = cloudpickle.dumps(value, protocol=5, buffer_callback=None if in_band else buffers.append)
    finally:
        _tracking.contained = outer
    return data, [b.raw() for b in buffers], list(dict.fromkeys(contained))


def register_reducer(cls, reducer):
    """From now on in this process, instances of `cls` are pickled as `reducer(obj)` gives them: (callable, args)
    (ray.util.register_serializer). Values of the plain types above keep the standard pickler."""
    cloudpickle.CloudPickler.dispatch_table[cls] = reducer


def deregister_reducer(cls):
    """Forgets the reducer of `cls` (nothing when it has none)."""
    cloudpickle.CloudPickler.dispatch_table.pop(cls, None)


def note_contained(object_id, owner):
    """A ref is being pickled: True when dumps_oob tracks it (else nothing will)."""
    contained = getattr(_tracking, "contained", None)
    if contained is None:
        return False
    contained.append((object_id, owner))
    return True


def note_borrowed(object_id, owner):
    """A ref owned by another process was unpickled (loads registers this process as its borrower)."""
    borrowed = getattr(_tracking, "borrowed", None)
    if borrowed is not None:
        borrowed.append((object_id, owner))


def loads(data, buffers=None):
    outer = getattr(_tracking, "borrowed", None)
    _tracking.borrowed = borrowed = []
    try:
        value = pickle.loads(data, buffers=buffers or ())
    finally:
        _tracking.borrowed = outer
    if borrowed and _on_borrowed is not None:
        _on_borrowed(borrowed)
    return value


def error_from(data, fmt, task_id=None):
    """The exception a value of format `fmt` stands for (as Ray raises it at `get`), or None when it is a plain
    value. `task_id`: the task that returns the object, when the reader knows it (a cancellation names it)."""
    if fmt == FORMAT_PICKLE:
        return None
    if isinstance(data, memoryview):
        data = bytes(data)
    if fmt == FORMAT_ERROR:
        err = loads(data)
        return err.as_instanceof_cause() if isinstance(err, exceptions.RayTaskError) else err
    if fmt == "actor_creation_failed":
        # The constructor's error: Ray's ActorDiedError built from it (an error that cannot be read here stays
        # what it is: UnserializableException).
        cause = loads(data)
        if isinstance(cause, exceptions.RayTaskError):
            return exceptions.ActorDiedError(cause)
        return cause
    text = data.decode("utf-8", "replace")
    if fmt == "worker_crashed":
        return exceptions.WorkerCrashedError(text)
    if fmt == "unschedulable":
        return exceptions.TaskUnschedulableError(text)
    if fmt == "cancelled":
        if task_id:
            from torus._private.ids import TaskID
            return exceptions.TaskCancelledError(TaskID(task_id))
        return exceptions.TaskCancelledError(None, text or "the task was cancelled (ray.cancel)")
    if fmt == "actor_died":
        unplaceable = "the actor is dead: it could not be placed: "
        if text.startswith(unplaceable):
            return exceptions.ActorUnschedulableError(text[len(unplaceable):])
        return exceptions._actor_died(text)
    if fmt == "object_store_full":
        return exceptions.ObjectStoreFullError(text)
    if fmt == "stopping":
        return exceptions.RayError(text or "torus is shutting down")
    return exceptions.RaySystemError(f"Unrecognized value format {fmt!r}")


def value_of(data, fmt, buffers=None, task_id=None):
    """The Python value of (data, fmt, buffers); raises the error it holds. A value read from the object store is
    built on its mapping: numpy arrays in it are read-only views of the store's pages."""
    err = error_from(data, fmt, task_id)
    if err is not None:
        raise err
    return loads(data, buffers)
