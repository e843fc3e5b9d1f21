"""Values to bytes and back: cloudpickle (pickle protocol 5, large buffers out of band). Object refs inside values
travel as (id, owner) and are marked as escaped in their owner, which then keeps them for the reader."""

import pickle

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


def dumps_oob(value):
    """(data, buffers): `value` pickled with its large contiguous buffers (numpy arrays, bytearrays) left out of band,
    so that the core copies them once into the object store and readers map them back without a copy."""
    kind = type(value)
    if kind in _PLAIN or (kind in _EMPTY and not value):
        return pickle.dumps(value, protocol=5), []
    buffers = []
    data = cloudpickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    return data, [b.raw() for b in buffers]


def loads(data, buffers=None):
    return pickle.loads(data, buffers=buffers or ())


def error_from(data, fmt):
    """The exception a value of format `fmt` stands for, or None when it is a plain value."""
    if fmt != FORMAT_PICKLE and isinstance(data, memoryview):
        data = bytes(data)
    if fmt == FORMAT_ERROR:
        err = loads(data)
        if isinstance(err, exceptions.TaskError):
            return err.as_instanceof_cause()
        return err
    if fmt == "worker_crashed":
        return exceptions.WorkerCrashedError(data.decode("utf-8", "replace"))
    if fmt == "unschedulable":
        return exceptions.TaskUnschedulableError(data.decode("utf-8", "replace"))
    if fmt == "cancelled":
        return exceptions.TaskCancelledError(data.decode("utf-8", "replace") or "the task was cancelled (torus.cancel)")
    if fmt == "actor_died":
        return exceptions.ActorDiedError(data.decode("utf-8", "replace"))
    if fmt == "actor_creation_failed":
        cause = loads(data)
        if isinstance(cause, exceptions.TaskError):
            cause = cause.as_instanceof_cause()
        return exceptions.ActorDiedError(f"the actor is dead: its constructor raised an exception:\n{cause}", cause)
    if fmt == "object_store_full":
        return exceptions.ObjectStoreFullError(data.decode("utf-8", "replace"))
    if fmt == "stopping":
        return exceptions.TorusError(data.decode("utf-8", "replace") or "torus is shutting down")
    if fmt != FORMAT_PICKLE:
        return exceptions.TorusError(f"a value of unknown format {fmt!r}")
    return None


def value_of(data, fmt, buffers=None):
    """The Python value of (data, fmt, buffers); raises the error it holds. A value read from the object store is
    built on its mapping: numpy arrays in it are read-only views of the store's pages."""
    err = error_from(data, fmt)
    if err is not None:
        raise err
    return loads(data, buffers)
