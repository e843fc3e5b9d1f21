"""Errors as Ray users know them: the classes of Ray's ray.exceptions, with its names, base classes, constructor
signatures and the key words of its messages, so that a Ray program's `except ray.exceptions.RayActorError:` or
`except ValueError:` around `ray.get` catches what torus raises.

How torus raises them (torus._private.serialization.error_from, torus._private.worker.get):
  a task raised             RayTaskError, as an instance of both RayTaskError and the exception's own class
  an actor is dead          ActorDiedError (a RayActorError); its constructor raised: the message holds that error
  an actor cannot be placed ActorUnschedulableError
  a task cannot be placed   TaskUnschedulableError
  a task's worker died      WorkerCrashedError
  a task was cancelled      TaskCancelledError
  get ran out of time       GetTimeoutError (also a TimeoutError)
  an object is gone         ObjectLostError, or its subclass OwnerDiedError when its owner cannot be reached
  a value does not fit      ObjectStoreFullError
  an error does not unpickle UnserializableException, holding the error's text

TorusError and TaskError, the names these had before, are RayError and RayTaskError.
"""

import builtins
import logging
import os
import re

logger = logging.getLogger(__name__)


class RayError(Exception):
    """Base of every error torus raises."""


class CrossLanguageError(RayError):
    """An error raised by code in another language. `ray_exception` is a text, or an object with `language` and
    `formatted_exception_string`."""

    def __init__(self, ray_exception):
        if isinstance(ray_exception, str):
            super().__init__(ray_exception)
        else:
            super().__init__(f"An exception raised from {getattr(ray_exception, 'language', 'another language')}:\n"
                             f"{getattr(ray_exception, 'formatted_exception_string', '')}")


class TaskCancelledError(RayError):
    """The task was cancelled (ray.cancel)."""

    def __init__(self, task_id=None, error_message=None):
        self.task_id = task_id
        self.error_message = error_message

    def __str__(self):
        text = f"Task: {self.task_id} was cancelled. " if self.task_id else ""
        return text + (self.error_message or "")


# Frames of torus's own machinery, left out of the traceback a RayTaskError shows.
_INTERNAL_FRAMES = ("torus/_private/", "torus/worker.py")


def _hidden_frame(line):
    return line.startswith("  File ") and any(marker in line for marker in _INTERNAL_FRAMES)


def _default_proctitle():
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        import sys
        return " ".join(sys.argv)


def _default_ip():
    from torus._private import state as _st  # here: exceptions sits below the rest of the package
    ip = os.environ.get("TORUS_NODE_IP")
    if ip:
        return ip
    state = _st.current()
    address = getattr(getattr(state, "core", None), "address", "") or ""
    return address.rsplit(":", 1)[0] if ":" in address else "127.0.0.1"


class RayTaskError(RayError):
    """A task (or actor call) raised an exception. `get` raises it as `as_instanceof_cause()`: an instance of both
    RayTaskError and the cause's class, so `except ValueError:` catches a remote ValueError.

    Attributes: function_name, traceback_str (the remote traceback), cause (the exception raised; a RayError naming
    it when it does not pickle), proctitle, pid, ip, actor_repr."""

    def __init__(self, function_name, traceback_str, cause, proctitle=None, pid=None, ip=None, actor_repr=None,
                 actor_id=None):
        assert traceback_str is not None
        self.proctitle = proctitle or _default_proctitle()
        self.pid = pid or os.getpid()
        self.ip = ip or _default_ip()
        self.function_name = function_name
        self.traceback_str = traceback_str
        self.actor_repr = actor_repr
        self._actor_id = actor_id
        self.cause = cause
        try:
            import cloudpickle
            cloudpickle.dumps(cause)
        except Exception as e:  # noqa: BLE001 - any pickling failure: the cause travels as text
            kind = f"{type(cause).__module__}.{type(cause).__name__}"
            self.cause = RayError(f"Exception {kind} isn't serializable: {e}.\nOriginal exception details:\n"
                                  f"{traceback_str}")
        self.args = (function_name, traceback_str, self.cause, proctitle, pid, ip)

    def __str__(self):
        where = f"{self.proctitle}() (pid={self.pid}, ip={self.ip}"
        if self.actor_repr:
            where += f", actor_id={self._actor_id}, repr={self.actor_repr}"
        where += ")"
        out = []
        hidden = False
        for line in self.traceback_str.strip().split("\n"):
            if line.startswith("Traceback "):
                hidden = False
                out.append(where)
            elif _hidden_frame(line):
                hidden = True
            elif hidden and line.startswith("    "):
                continue  # the source line (and carets) of a hidden frame
            else:
                hidden = False
                out.append(line)
        return "\n".join(out)

    def __reduce__(self):
        # The cause travels pickled on its own, so that a cause that cannot be rebuilt where it is read (a class
        # that is not importable there, an __init__ that its args do not fit) gives UnserializableException with
        # the error's text instead of failing the read.
        import cloudpickle
        state = {k: v for k, v in self.__dict__.items() if k != "cause"}
        try:
            cause = cloudpickle.dumps(self.cause)
        except Exception as e:  # noqa: BLE001 - changed since construction; send it as text
            cause = cloudpickle.dumps(RayError(f"Exception {type(self.cause).__name__} isn't serializable: {e}."))
        return (_rebuild_task_error, (RayTaskError, state, cause, f"{__name__}.RayTaskError: {self}\n", False))

    def as_instanceof_cause(self):
        """This error as an instance of a subclass of both RayTaskError and the cause's class (carrying the
        cause's attributes); itself when the cause's class cannot be combined with RayTaskError."""
        cause_cls = type(self.cause)
        if issubclass(RayTaskError, cause_cls) or isinstance(self, cause_cls):
            return self
        try:
            return _dual(self)
        except Exception as e:  # noqa: BLE001 - a class that refuses to be combined: the error stays as it is
            logger.warning("The exception type %s of a task cannot be combined with RayTaskError (%s): it is raised "
                           "as RayTaskError only; its `cause` holds the exception.", cause_cls, e)
            return self


_EXCEPTION_GROUP = getattr(builtins, "BaseExceptionGroup", ())  # Python 3.11 and later


def _dual(err):
    """An instance of RayTaskError(<cause's class>) standing for `err`: args is (cause,), str() is err's, other
    attributes are the cause's."""
    cause = err.cause
    cause_cls = type(cause)
    message = str(err)

    def __new__(cls, *unused):
        if isinstance(cause, _EXCEPTION_GROUP):
            return cause_cls.__new__(cls, cause.message, cause.exceptions)
        return cause_cls.__new__(cls, cause)

    def __init__(self, *unused):
        self._task_error_args = (cause,)

    def __getattr__(self, name):
        if name in ("cause", "_task_error", "_task_error_args", "_message") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.cause, name)

    def __reduce__(self):
        base = self._task_error
        reduced = RayTaskError.__reduce__(base)
        return (reduced[0], reduced[1][:4] + (True,))

    name = f"RayTaskError({cause_cls.__name__})"
    members = {
        "__new__": __new__, "__init__": __init__, "__getattr__": __getattr__, "__reduce__": __reduce__,
        "__str__": lambda self: self._message, "__module__": __name__, "__qualname__": name,
        # args is (cause,), kept apart from the cause class's own args (which may be read-only or a property).
        "args": property(lambda self: self._task_error_args,
                         lambda self, value: setattr(self, "_task_error_args", value)),
    }
    cls = type(name, (RayTaskError, cause_cls), members)
    dual = cls(cause)
    dual.cause = cause
    dual._message = message
    dual._task_error = err
    return dual


def _rebuild_task_error(cls, state, cause, text, as_cause):
    """A pickled RayTaskError read back: UnserializableException(text) when its cause does not unpickle here."""
    import pickle
    try:
        cause = pickle.loads(cause)
    except Exception:  # noqa: BLE001 - any failure to rebuild the cause
        return UnserializableException(text)
    err = cls.__new__(cls)
    err.__dict__.update(state)
    err.cause = cause
    err.args = (state.get("function_name"), state.get("traceback_str"), cause, state.get("proctitle"),
                state.get("pid"), state.get("ip"))
    return err.as_instanceof_cause() if as_cause else err


class LocalRayletDiedError(RayError):
    """The task's local node agent died."""

    def __str__(self):
        return "The task's local raylet died (the node agent of the process that ran it)."


class WorkerCrashedError(RayError):
    """The worker died unexpectedly while executing the task (killed, out of memory, its node lost), on every
    retry. torus gives the details as its argument."""

    def __str__(self):
        lead = "The worker died unexpectedly while executing this task."
        return f"{lead}\n{self.args[0]}" if self.args else lead


class RayActorError(RayError):
    """The actor failed before finishing the call: its process is dead (ActorDiedError) or unreachable for now
    (ActorUnavailableError)."""

    BASE_ERROR_MSG = "The actor experienced an error before finishing this task."

    def __init__(self, actor_id=None, error_msg=BASE_ERROR_MSG, actor_init_failed=False, preempted=False):
        self.actor_id = actor_id
        self.error_msg = error_msg
        self._actor_init_failed = actor_init_failed
        self._preempted = preempted

    def __str__(self):
        return self.error_msg

    @property
    def preempted(self):
        return self._preempted

    @property
    def actor_init_failed(self):
        return self._actor_init_failed


class ActorDiedError(RayActorError):
    """The actor is dead: killed, its process died with no restarts left, its owner exited, or its constructor
    raised (`cause`, a RayTaskError: then the message holds that error and actor_init_failed is True)."""

    BASE_ERROR_MSG = "The actor died unexpectedly before finishing this task."

    def __init__(self, cause=None):
        if isinstance(cause, RayTaskError):
            super().__init__(cause._actor_id, "The actor died because of an error raised in its creation task, "
                             f"{cause.__str__()}", actor_init_failed=True)
        elif cause:
            super().__init__(None, f"{ActorDiedError.BASE_ERROR_MSG}\n{cause}")
        else:
            super().__init__(None, ActorDiedError.BASE_ERROR_MSG)

    @staticmethod
    def from_task_error(task_error):
        return ActorDiedError(task_error)


def _actor_died(message, actor_id=None):
    """The ActorDiedError torus raises for an actor its core reports dead, `message` saying how."""
    err = ActorDiedError()
    err.actor_id = actor_id
    err.error_msg = f"{ActorDiedError.BASE_ERROR_MSG}\n{message}" if message else ActorDiedError.BASE_ERROR_MSG
    return err


class ActorUnavailableError(RayActorError):
    """The actor cannot be reached for now and may be later; the call may or may not have run."""

    def __init__(self, error_message, actor_id):
        actor_id = actor_id.hex() if isinstance(actor_id, bytes) else actor_id
        super().__init__(actor_id, f"The actor {actor_id} is unavailable: {error_message}. The task may or may not "
                                   f"have been executed on the actor.")


class RaySystemError(RayError):
    """torus failed itself (not the user's code)."""

    def __init__(self, client_exc, traceback_str=None):
        self.client_exc = client_exc
        self.traceback_str = traceback_str

    def __str__(self):
        text = f"System error: {self.client_exc}"
        return f"{text}\ntraceback: {self.traceback_str}" if self.traceback_str else text


class AuthenticationError(RayError):
    """The cluster refused this process's token."""

    def __init__(self, message):
        self.message = message
        self.__suppress_context__ = True
        super().__init__(message)

    def __str__(self):
        return f"{self.message}. Check that TORUS_TOKEN (or the token of `ray.init(address=...)`'s cluster) is set."


class UserCodeException(RayError):
    """An exception raised by user code, wrapped by a library."""


class ObjectStoreFullError(RayError):
    """A value does not fit in the object store of the node (or process) that holds it."""


class OutOfDiskError(RayError):
    """The object store and the disk it spills to are full."""


class OutOfMemoryError(RayError):
    """The node ran low on memory, and tasks or actors were killed to free it."""

    def __init__(self, message):
        self.message = message

    def __str__(self):
        return self.message


class NodeDiedError(RayError):
    """The node is dead or unreachable."""

    def __init__(self, message):
        self.message = message

    def __str__(self):
        return self.message


class ObjectLostError(RayError):
    """An object's value is gone from the cluster. Attributes: object_ref_hex, owner_address, call_site."""

    def __init__(self, object_ref_hex, owner_address=None, call_site=""):
        self.object_ref_hex = object_ref_hex
        self.owner_address = owner_address
        self.call_site = (call_site or "").replace(" | ", "\n  ")

    def _base_str(self):
        text = f"Failed to retrieve object {self.object_ref_hex}."
        if self.call_site:
            text += f" The ObjectRef was created at: {self.call_site}"
        detail = getattr(self, "_detail", None)
        return f"{text}\n{detail}" if detail else text

    def _reason(self):
        return f"All copies of {self.object_ref_hex} have been lost."

    def __str__(self):
        return f"{self._base_str()}\n\n{self._reason()}"


class ObjectFetchTimedOutError(ObjectLostError):
    """No copy of the object could be found in time."""

    def _reason(self):
        return f"Fetch for object {self.object_ref_hex} timed out because no locations were found for the object."


class RpcError(RayError):
    """A call between torus processes failed."""

    def __init__(self, message, rpc_code=None):
        self.message = message
        self.rpc_code = rpc_code

    def __str__(self):
        return self.message


class ReferenceCountingAssertionError(ObjectLostError, AssertionError):
    """The object was deleted while a reference to it was still held."""

    def _reason(self):
        return "The object has already been deleted by the reference counting protocol. This should not happen."


class ObjectFreedError(ObjectLostError):
    """The object was freed explicitly by the program."""

    def _reason(self):
        return "The object was manually freed using the internal `free` call."


class OwnerDiedError(ObjectLostError):
    """The process that owns the object (the one that created it with .remote() or put()) has exited."""

    def _reason(self):
        return ("The object's owner has exited. This is the Python worker that first created the ObjectRef via "
                "`.remote()` or `ray.put()`.")


class ObjectReconstructionFailedError(ObjectLostError):
    """The object is lost and cannot be computed again (`reason` says why)."""

    def __init__(self, object_ref_hex, reason=None, reason_message=None, owner_address=None, call_site=""):
        super().__init__(object_ref_hex, owner_address, call_site)
        self.reason = reason
        self.reason_message = reason_message or "The object cannot be reconstructed."

    def __str__(self):
        name = self.reason if isinstance(self.reason, str) else ("UNKNOWN" if self.reason is None else self.reason)
        return f"{self._base_str()}\n\n[{name}] {self.reason_message}"


def _object_lost(message):
    """The ObjectLostError torus raises when its core reports an object gone (`message` says how): OwnerDiedError
    when its owner cannot be reached."""
    found = re.match(r"object ([0-9a-f]+) ", message)
    object_hex = found.group(1) if found else ""
    cls = OwnerDiedError if "cannot be reached" in message else ObjectLostError
    err = cls(object_hex, None, "")
    err._detail = message
    return err


class GetTimeoutError(RayError, TimeoutError):
    """`get` ran out of time."""


class PlasmaObjectNotAvailable(RayError):
    """An object was not available within the time given."""


class AsyncioActorExit(RayError):
    """An async actor exits on purpose (exit_actor())."""


class RuntimeEnvSetupError(RayError):
    """A runtime environment could not be set up (`error_message` says why)."""

    def __init__(self, error_message=None):
        self.error_message = error_message

    def __str__(self):
        return "Failed to set up runtime environment." + (f"\n{self.error_message}" if self.error_message else "")


class TaskPlacementGroupRemoved(RayError):
    """The placement group of the task was removed."""

    def __str__(self):
        return "The placement group corresponding to this task has been removed."


class ActorPlacementGroupRemoved(RayError):
    """The placement group of the actor was removed."""

    def __str__(self):
        return "The placement group corresponding to this Actor has been removed."


class PendingCallsLimitExceeded(RayError):
    """An actor's calls waiting to run exceed its max_pending_calls."""


class TaskUnschedulableError(RayError):
    """No node of the cluster can ever run the task (`error_message` says why)."""

    def __init__(self, error_message):
        self.error_message = error_message

    def __str__(self):
        return f"The task is not schedulable: {self.error_message}"


class ActorUnschedulableError(RayError):
    """No node of the cluster can ever hold the actor (`error_message` says why)."""

    def __init__(self, error_message):
        self.error_message = error_message

    def __str__(self):
        return f"The actor is not schedulable: {self.error_message}"


class ObjectRefStreamEndOfStreamError(RayError):
    """A streaming generator has no more ObjectRefs."""


class StreamingGeneratorReplayInconsistentError(RaySystemError):
    """A retried streaming generator produced a different number of objects than its first run."""


class OufOfBandObjectRefSerializationException(RayError):
    """An ObjectRef was pickled outside torus's serialization."""


class RayChannelError(RaySystemError):
    """A compiled-graph channel failed."""


class RayChannelTimeoutError(RayChannelError, TimeoutError):
    """A compiled-graph channel operation ran out of time."""


class RayCgraphCapacityExceeded(RaySystemError):
    """A compiled-graph channel's buffer is full."""


class RayDirectTransportError(RaySystemError):
    """A direct transport transfer failed."""


class UnserializableException(RayError):
    """An error could not be unpickled where it was read (its class is not importable there, or its arguments do
    not fit its __init__); it holds the error's text as it was raised."""

    def __init__(self, original_stack_trace):
        self._original_stack_trace = original_stack_trace

    def __str__(self):
        return ("Failed to deserialize exception. Define the exception class where the reader can import it, and "
                "let its __init__ take the arguments it passes to Exception.__init__.\n"
                f"Original exception:\n{self._original_stack_trace}")


class ActorAlreadyExistsError(ValueError, RayError):
    """An actor of that name already exists in the namespace (also a ValueError)."""

    def __init__(self, error_message):
        super().__init__(error_message)
        self.error_message = error_message

    def __str__(self):
        return self.error_message


class ActorHandleNotFoundError(ValueError, RayError):
    """The actor handle belongs to an earlier connection (also a ValueError)."""

    def __init__(self, error_message):
        super().__init__(error_message)
        self.error_message = error_message

    def __str__(self):
        return self.error_message


RAY_EXCEPTION_TYPES = [
    PlasmaObjectNotAvailable, RayError, RayTaskError, WorkerCrashedError, RayActorError, ObjectStoreFullError,
    ObjectLostError, ObjectFetchTimedOutError, ReferenceCountingAssertionError, ObjectReconstructionFailedError,
    OwnerDiedError, GetTimeoutError, AsyncioActorExit, RuntimeEnvSetupError, TaskPlacementGroupRemoved,
    ActorPlacementGroupRemoved, PendingCallsLimitExceeded, LocalRayletDiedError, TaskUnschedulableError,
    ActorDiedError, ActorUnschedulableError, ActorUnavailableError, RayChannelError, RayChannelTimeoutError,
    OufOfBandObjectRefSerializationException, RayCgraphCapacityExceeded, UnserializableException,
    ActorAlreadyExistsError, ActorHandleNotFoundError, AuthenticationError,
]

# torus's earlier names.
TorusError = RayError
TaskError = RayTaskError
