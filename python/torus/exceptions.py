"""Errors as Ray users know them (ray.exceptions), raised by torus.get and friends."""


class TorusError(Exception):
    """Base of every error torus raises."""


class TaskError(TorusError):
    """A task raised an exception. `torus.get` raises it as an instance of both TaskError and the original
    exception's type (as Ray's RayTaskError does), so `except ValueError:` still catches a remote ValueError."""

    def __init__(self, function_name, traceback_str, cause=None, pid=None, node_id=None):
        super().__init__(function_name, traceback_str)
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.cause = cause
        self.pid = pid
        self.node_id = node_id

    def __str__(self):
        where = f" (pid={self.pid}, node={self.node_id})" if self.pid else ""
        return f"{type(self).__name__}: {self.function_name}(){where} failed:\n{self.traceback_str}"

    def __reduce__(self):
        return (TaskError, (self.function_name, self.traceback_str, self.cause, self.pid, self.node_id))

    def as_instanceof_cause(self):
        """This error as an instance of a subclass of both TaskError and the cause's type."""
        cause_cls = type(self.cause) if self.cause is not None else None
        if cause_cls is None or isinstance(self.cause, TaskError):
            return self
        try:
            cls = type(f"TaskError({cause_cls.__name__})", (TaskError, cause_cls), {"__module__": __name__})
            err = cls.__new__(cls)
            # Arguments of the cause, so that code reading e.args sees what it would locally.
            err.args = self.cause.args
            err.function_name, err.traceback_str, err.cause = self.function_name, self.traceback_str, self.cause
            err.pid, err.node_id = self.pid, self.node_id
            err.__dict__.update(getattr(self.cause, "__dict__", {}))
            return err
        except TypeError:
            # Some types (those with conflicting layouts, final classes) cannot be combined.
            return self


class WorkerCrashedError(TorusError):
    """The worker running the task died (killed, out of memory, or its node lost) after every retry."""


class TaskUnschedulableError(TorusError):
    """No node of the cluster can ever hold the task's resources."""


class ObjectLostError(TorusError):
    """An object's value is gone: its owner exited or freed it."""


class ObjectStoreFullError(TorusError, MemoryError):
    """A value does not fit in the object store of the process that holds it (its object_store_memory)."""


class GetTimeoutError(TorusError, TimeoutError):
    """torus.get ran out of time."""


class ActorDiedError(TorusError):
    """The actor is dead (killed, its worker died with no restarts left, its owner exited, or its constructor
    raised), or its worker died while running this call. `cause` holds the constructor's error when it raised."""

    def __init__(self, message, cause=None):
        super().__init__(message)
        self.cause = cause


class TaskCancelledError(TorusError):
    """The task was cancelled with torus.cancel."""
