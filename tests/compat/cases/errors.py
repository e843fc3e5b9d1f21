"""Errors: ray.exceptions' classes and hierarchy, and what `get` raises when a task raised (as an instance of both
RayTaskError and the task's exception class), when a nested task or an argument's task failed, when an actor is dead
(killed, exited, its constructor raised), when a worker crashed, a task was cancelled, or `get` ran out of time."""

import os
import re
import signal
import tempfile
import threading
import time

import ray
from harness import case, out, raised


def plain(text):
    """`text` without terminal colours (Ray colours the title line of a task's error)."""
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def mro(cls):
    return [c.__name__ for c in cls.__mro__]


@ray.remote
def fails(message="bad value 17"):
    raise ValueError(message)


@ray.remote
def parent():
    return ray.get(fails.remote("from the child"))


@ray.remote
def use(x):
    return x


class WithAttributes(Exception):
    def __init__(self, message, code=0):
        super().__init__(message)
        self.code = code
        self.tags = ["a", "b"]


@ray.remote
def raises_with_attributes():
    raise WithAttributes("with attributes", code=7)


class TwoArguments(Exception):
    """An __init__ its pickled args (only the message) do not fit: it cannot be rebuilt where it is read."""

    def __init__(self, message, detail):
        super().__init__(message)
        self.detail = detail


@ray.remote
def raises_two_arguments():
    raise TwoArguments("two arguments", "its detail")


class HoldsALock(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.lock = threading.Lock()


@ray.remote
def raises_unpicklable():
    raise HoldsALock("holds a lock")


@ray.remote
class Counter:
    def __init__(self, fail=False):
        if fail:
            raise ValueError("constructor failed")
        self.n = 0

    def incr(self):
        self.n += 1
        return self.n

    def boom(self):
        raise KeyError("no such key")

    def exit_process(self):
        os._exit(1)


def nap(seconds):
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(0.05)  # short sleeps: Ray's cancel interrupts Python code, not a long sleep


@ray.remote
def sleeps(seconds):
    nap(seconds)
    return seconds


@ray.remote(max_retries=0)
def kills_its_worker():
    os.kill(os.getpid(), signal.SIGKILL)


def dead_call(actor, deadline=30):
    """The error of a call to `actor` once it is dead (a kill takes effect shortly after ray.kill returns)."""
    end = time.time() + deadline
    while True:
        e = raised(ray.get, actor.incr.remote(), timeout=deadline)
        if e is not None or time.time() > end:
            return e
        time.sleep(0.1)


@case
def hierarchy_is_rays():
    names = ["RayError", "RayTaskError", "RayActorError", "ActorDiedError", "ActorUnavailableError",
             "ActorUnschedulableError", "TaskCancelledError", "GetTimeoutError", "ObjectLostError", "OwnerDiedError",
             "ObjectFetchTimedOutError", "ObjectReconstructionFailedError", "ObjectFreedError",
             "ReferenceCountingAssertionError", "ObjectStoreFullError", "OutOfMemoryError", "OutOfDiskError",
             "NodeDiedError", "WorkerCrashedError", "TaskUnschedulableError", "TaskPlacementGroupRemoved",
             "ActorPlacementGroupRemoved", "PendingCallsLimitExceeded", "RuntimeEnvSetupError", "RaySystemError",
             "LocalRayletDiedError", "CrossLanguageError", "AsyncioActorExit", "PlasmaObjectNotAvailable",
             "UnserializableException", "ActorAlreadyExistsError", "ActorHandleNotFoundError",
             "ObjectRefStreamEndOfStreamError", "RayChannelError", "RayChannelTimeoutError", "RpcError",
             "UserCodeException", "AuthenticationError"]
    out({name: mro(getattr(ray.exceptions, name)) for name in names})


@case
def constructed_errors_say_what_ray_says():
    ex = ray.exceptions
    out(str(ex.TaskUnschedulableError("no node")), str(ex.ActorUnschedulableError("no node")),
        str(ex.RuntimeEnvSetupError("pip failed")), str(ex.TaskPlacementGroupRemoved()),
        str(ex.ActorPlacementGroupRemoved()), str(ex.RaySystemError("boom")), str(ex.TaskCancelledError(None, "why")),
        str(ex.RayActorError()), str(ex.ActorDiedError()), ex.ActorDiedError().actor_init_failed,
        str(ex.GetTimeoutError("slow")), str(ex.OutOfMemoryError("oom")), str(ex.NodeDiedError("gone")),
        str(ex.ActorAlreadyExistsError("taken")), isinstance(ex.ActorAlreadyExistsError("taken"), ValueError))


@case
def constructed_task_error_as_instance_of_its_cause():
    tb = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\nValueError: v'
    e = ray.exceptions.RayTaskError("f", tb, ValueError("v"))
    dual = e.as_instanceof_cause()
    out(e.args[0], e.args[1] == tb, type(e.args[2]).__name__, type(dual).__name__, mro(type(dual)),
        repr(dual.args), str(dual) == str(e), plain(str(e)).split("\n")[1:])


@case
def task_error_is_a_ray_task_error_and_the_cause_class():
    e = raised(ray.get, fails.remote())
    out(type(e).__name__, mro(type(e)), isinstance(e, ray.exceptions.RayTaskError),
        isinstance(e, ray.exceptions.RayError), isinstance(e, ValueError))


@case
def except_value_error_catches_a_remote_value_error():
    try:
        ray.get(fails.remote("caught by its class"))
        out("not raised")
    except ValueError as e:
        out("caught", type(e).__name__)


@case
def cause_and_args_are_kept():
    e = raised(ray.get, fails.remote("kept"))
    out(type(e.cause).__name__, e.cause.args, [type(a).__name__ for a in e.args], e.args[0] is e.cause,
        str(e.args[0]))


@case
def str_is_the_remote_traceback_under_a_title():
    text = plain(str(raised(ray.get, fails.remote())))
    lines = text.split("\n")
    out(bool(re.fullmatch(r"\S+::fails\(\) \(pid=\d+, ip=[0-9.]+\)", lines[0])), lines[1:],
        "_private" in text, "Traceback" in text)


@case
def custom_exception_keeps_its_attributes():
    try:
        ray.get(raises_with_attributes.remote())
        out("not raised")
    except WithAttributes as e:
        out(type(e).__name__, e.code, e.tags, e.cause.code, str(e.cause), isinstance(e, ray.exceptions.RayTaskError))


@case
def exception_whose_init_its_args_do_not_fit_is_unserializable():
    e = raised(ray.get, raises_two_arguments.remote())
    text = plain(str(e))
    out(type(e).__name__, mro(type(e)), text.startswith("Failed to deserialize exception."),
        "TwoArguments: two arguments" in text, "raise TwoArguments(" in text)


@case
def exception_that_does_not_pickle_leaves_a_ray_error_cause():
    e = raised(ray.get, raises_unpicklable.remote())
    out(type(e).__name__, type(e.cause).__name__, "HoldsALock isn't serializable" in str(e.cause),
        plain(str(e)).endswith("HoldsALock: holds a lock"))


@case
def nested_task_error_is_not_wrapped_twice():
    e = raised(ray.get, parent.remote())
    text = plain(str(e))
    lines = text.split("\n")
    out(type(e).__name__, type(e.cause).__name__, e.cause.args,
        bool(re.fullmatch(r"\S+::parent\(\) \(pid=\d+, ip=[0-9.]+\)", lines[0])),
        bool(re.search(r"^\S*RayTaskError\(ValueError\): \S+::fails\(\) \(pid=\d+", text, re.M)),
        lines[-1], "return ray.get(fails.remote(" in text)


@case
def argument_whose_task_failed_fails_the_task():
    e = raised(ray.get, use.remote(fails.remote("of the argument")))
    out(type(e).__name__, e.cause.args, plain(str(e)).endswith("ValueError: of the argument"))


@case
def get_of_a_list_raises_the_failed_ones_error():
    e = raised(ray.get, [ray.put(1), fails.remote("in a list")])
    out(type(e).__name__, str(e.cause))


@case
def actor_method_error_names_the_actor():
    a = Counter.remote()
    ray.get(a.incr.remote())
    e = raised(ray.get, a.boom.remote())
    first = plain(str(e)).split("\n")[0]
    out(type(e).__name__, isinstance(e, KeyError), str(e.cause),
        bool(re.fullmatch(r"\S+::Counter\.boom\(\) \(pid=\d+, ip=[0-9.]+, actor_id=[0-9a-f]+, repr=<.*>\)", first)),
        ray.get(a.incr.remote()))


@case
def actor_whose_constructor_raised_is_dead_with_the_cause():
    a = Counter.remote(fail=True)
    e = raised(ray.get, a.incr.remote())
    text = plain(str(e))
    out(type(e).__name__, isinstance(e, ray.exceptions.RayActorError), e.actor_init_failed,
        text.startswith("The actor died because of an error raised in its creation task, "),
        text.endswith("ValueError: constructor failed"), [type(x).__name__ for x in e.args],
        type(e.args[0].cause).__name__)
    again = raised(ray.get, a.incr.remote())
    out(type(again).__name__, again.actor_init_failed)


@case
def killed_actor_is_dead():
    a = Counter.remote()
    ray.get(a.incr.remote())
    ray.kill(a)
    e = dead_call(a)
    out(type(e).__name__, isinstance(e, ray.exceptions.RayActorError), e.actor_init_failed, e.preempted,
        str(e).startswith("The actor died unexpectedly before finishing this task."))


@case
def actor_whose_process_exited_is_dead():
    a = Counter.remote()
    ray.get(a.incr.remote())
    during = raised(ray.get, a.exit_process.remote())
    after = dead_call(a)
    out(type(during).__name__, type(after).__name__,
        str(during).startswith("The actor died unexpectedly before finishing this task."),
        str(after).startswith("The actor died unexpectedly before finishing this task."))


@case
def worker_killed_mid_task_is_worker_crashed():
    e = raised(ray.get, kills_its_worker.remote(), timeout=60)
    out(type(e).__name__, mro(type(e)),
        str(e).startswith("The worker died unexpectedly while executing this task."))


@case
def get_timeout():
    ref = sleeps.remote(30)
    e = raised(ray.get, ref, timeout=0.5)
    out(type(e).__name__, isinstance(e, TimeoutError), isinstance(e, ray.exceptions.RayError),
        str(e).startswith("Get timed out"))
    ray.cancel(ref)  # its CPU is free for the next cases


def wait_for(path, deadline=60):
    end = time.time() + deadline
    while not os.path.exists(path) and time.time() < end:
        time.sleep(0.05)


@ray.remote
def marks_and_sleeps(path, seconds):
    open(path, "w").close()
    nap(seconds)
    return seconds


@case
def cancelled_running_task():
    started = os.path.join(tempfile.mkdtemp(), "started")
    ref = marks_and_sleeps.remote(started, 120)
    wait_for(started)
    ray.cancel(ref)
    e = raised(ray.get, ref, timeout=60)
    # A task interrupted while running fails with RayTaskError(TaskCancelledError) in Ray: a TaskCancelledError.
    out(isinstance(e, ray.exceptions.TaskCancelledError), isinstance(e, ray.exceptions.RayError))


@case
def cancelled_queued_task():
    started = os.path.join(tempfile.mkdtemp(), "started")
    hold = marks_and_sleeps.options(num_cpus=2).remote(started, 3)
    wait_for(started)
    queued = sleeps.remote(0)  # waits for a CPU while `hold` has both
    ray.cancel(queued)
    e = raised(ray.get, queued, timeout=60)
    out(type(e).__name__, ray.get(hold, timeout=60))
