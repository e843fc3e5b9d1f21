"""A task worker: `python3 -m torus._private.default_worker`, started by an agent for a lease. It runs the tasks pushed to it, one at
a time, and answers each with its return values (or its error).

A task interrupted by torus.cancel answers a TaskCancelledError raised where it ran (not retried). An actor whose
method calls exit_actor() (or sys.exit()) ends its worker with that exit code once the call is answered; code 0 is
an intended exit, which the owner never restarts."""

import asyncio
import concurrent.futures
import inspect
import json
import os
import signal
import sys
import threading
import time
import traceback

from torus import exceptions
from torus._private import generators
from torus._private import serialization as ser
from torus._private import state as _st
from torus._private import worker as _worker
from torus._private.ids import TaskID


def _resolve(core, kind, a, b):
    """An argument's value: ("v", data, format) inline, ("r", id, owner) fetched from its owner (or mapped from this
    node's object store). A failed dependency's error is raised."""
    if kind == "r":
        [(data, fmt, buffers)] = core.get([(a, b)], -1)
        return ser.value_of(data, fmt, buffers)
    return ser.value_of(a, b)


def _error_value(name, exc, tb_text):
    """The value a task that raised `exc` returns: a pickled RayTaskError, as Ray makes it. An error this task got
    from another (a RayTaskError re-raised) is not wrapped twice: its cause is this one's."""
    cause = exc.cause if isinstance(exc, exceptions.RayTaskError) else exc
    # The process title Ray shows (ray::<name>): the name without its module.
    module = max((m for m in list(sys.modules) if name.startswith(m + ".")), key=len, default="")
    title = f"torus::{name[len(module) + 1:] if module else name}"
    actor_id, actor_repr = None, None
    state = _st.current()
    if _actor is not None:
        try:
            actor_repr = repr(_actor)
        except Exception:  # noqa: BLE001 - a __repr__ that fails: the error is still reported
            actor_repr = f"<{type(_actor).__qualname__} object>"
        actor_id = state.actor_id.hex() if state is not None and state.actor_id else None
    err = exceptions.RayTaskError(name, tb_text, cause, proctitle=title, pid=os.getpid(),
                                  ip=os.environ.get("TORUS_NODE_IP"), actor_repr=actor_repr, actor_id=actor_id)
    return (ser.dumps(err), ser.FORMAT_ERROR)


def _retryable(task, exc):
    """Whether the task's error may be retried: with retry_exceptions as a list of types, only an instance of one of
    them (a subclass counts). A list this worker cannot load (its types' module missing here) retries nothing."""
    allowed = task.get("retry_exception_types")
    if not allowed:
        return True
    try:
        return isinstance(exc, ser.loads(allowed))
    except Exception:  # noqa: BLE001
        return False


def _cancelled_value(task, tb_text):
    """The value of a task interrupted by torus.cancel: as in Ray, a TaskCancelledError raised where it ran, under its
    traceback (Ray's RayTaskError(TaskCancelledError))."""
    err = exceptions.TaskCancelledError(TaskID(task["task_id"]))
    lines = tb_text.rstrip("\n").split("\n")
    if lines and lines[-1].startswith("KeyboardInterrupt"):
        lines[-1] = f"{type(err).__module__}.{type(err).__name__}: {str(err).rstrip()}"
    return _error_value(task["name"], err, "\n".join(lines))


class _FunctionUnknown(Exception):
    pass


_actor = None     # the instance, in an actor's worker
_executor = None  # how its calls run when it takes more than one at a time: a _Threads or an _AsyncLoop
_exiting = None   # the exit code the actor's own code asked for (exit_actor(), sys.exit() in a method)
_exit_answer = None  # what calls that come while it ends are answered (an intended exit)


def _exit_asked(task, exc):
    """An actor's method ended its actor (exit_actor(): SystemExit or, on an event loop, AsyncioActorExit; or a
    sys.exit()): notes the exit code its worker ends with, and gives the answer of that call. Code 0 is an intended
    exit, which Ray never restarts: the call fails with the actor's death, saying so (its owner sees the code and
    keeps the actor dead). Any other code is a crash: no answer, the caller sees the worker die, the owner restarts
    the actor if it may."""
    global _exiting, _exit_answer
    if isinstance(exc, exceptions.AsyncioActorExit):
        code = 0
    elif exc.code is None or isinstance(exc.code, int):
        code = exc.code or 0
    else:
        print(exc.code, file=sys.stderr)  # as Python does with sys.exit("message")
        code = 1
    if _exiting is None:
        _exiting = code
    if code != 0:
        return None
    exit_actor = getattr(exc, "_exit_actor", False) or isinstance(exc, exceptions.AsyncioActorExit)
    how = "exit_actor() is called" if exit_actor else "sys.exit() is called"
    message = (f"the actor is dead: it exited intentionally ({how} in {task['name']}): its worker ends with exit "
               f"code 0")
    if _exit_answer is None:
        _exit_answer = [(message.encode(), "actor_died")]
    return [(message.encode(), "actor_died")]


def _finish(core, task, returns, **kwargs):
    # A call whose actor exited with a crash's code gets no answer: its caller sees the worker die.
    if returns is not None:
        core.finish_task(task["task_id"], returns, **kwargs)


class _Threads:
    """A threaded actor (max_concurrency > 1): calls start in order and run on up to that many threads."""

    def __init__(self, n):
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=n, thread_name_prefix="torus-actor")

    def submit(self, core, functions, task):
        self.pool.submit(lambda: _finish(core, task, _run(core, functions, task)))

    def drain(self):
        """Lets the running calls end; the queued ones never start."""
        self.pool.shutdown(wait=True, cancel_futures=True)


class _Groups:
    """A threaded actor's calls by concurrency group (@ray.remote(concurrency_groups={"io": 2}) and
    @ray.method(concurrency_group="io")): the default group takes max_concurrency calls at once, each named group its
    own number, so the calls of one group never wait behind another's."""

    def __init__(self, default_n, groups, method_groups):
        self.default = _Threads(default_n)
        self.named = {g: _Threads(n) for g, n in groups.items()}
        self.method_groups = method_groups

    def submit(self, core, functions, task):
        self.named.get(self.method_groups.get(task["method"]), self.default).submit(core, functions, task)

    def drain(self):
        for pool in [self.default, *self.named.values()]:
            pool.drain()


def _method_groups(cls):
    """{method name: its concurrency group} of the methods @ray.method put in one."""
    out = {}
    for name in dir(cls):
        group = getattr(getattr(cls, name, None), "__ray_concurrency_group__", None)
        if group:
            out[name] = group
    return out


class _AsyncLoop:
    """An async actor (it has `async def` methods): calls run as tasks of one event loop, up to max_concurrency at
    once (each concurrency group its own number); a call's coroutine yields the loop to the others at each await."""

    def __init__(self, n, groups=None, method_groups=None):
        self.loop = asyncio.new_event_loop()
        self.limit = None
        self.n = n
        self.groups = dict(groups or {})
        self.method_groups = dict(method_groups or {})
        self.limits = {}
        self.running = 0  # calls past the limit, on the loop
        threading.Thread(target=self._serve, name="torus-actor-loop", daemon=True).start()

    def _serve(self):
        asyncio.set_event_loop(self.loop)
        self.limits = {g: asyncio.Semaphore(n) for g, n in self.groups.items()}
        self.limit = asyncio.Semaphore(self.n)
        self.loop.run_forever()

    def submit(self, core, functions, task):
        async def call():
            limit = self.limits.get(self.method_groups.get(task["method"]), self.limit)
            async with limit:
                if _exiting is not None:
                    return  # the actor is ending: a call that has not started never does
                self.running += 1
                try:
                    returns = await _run_async(core, functions, task)
                finally:
                    self.running -= 1
            _finish(core, task, returns)
        while self.limit is None:
            time.sleep(0.001)
        asyncio.run_coroutine_threadsafe(call(), self.loop)

    def drain(self):
        """Lets the running calls end; the waiting ones never start."""
        while self.running:
            time.sleep(0.01)


def _prepare(core, functions, task):
    """(callable, args, kwargs) of a task, or the returns it fails with at once."""
    name = task["name"]
    if task["method"]:
        if _actor is None:
            return None, [_error_value(name, RuntimeError("this worker holds no actor"), "RuntimeError: no actor")]
        fn = getattr(_actor, task["method"])
    else:
        fid = task["function_id"]
        fn = functions.get(fid)
        if fn is None:
            if not task["function"]:
                raise _FunctionUnknown()
            fn = ser.loads(task["function"])
            functions[fid] = fn
    try:
        values = [_resolve(core, *arg) for arg in task["args"]]
    except exceptions.TaskError as dep:
        # A dependency failed: this task fails with that error.
        return None, [(ser.dumps(dep), ser.FORMAT_ERROR)]
    except exceptions.TorusError as dep:
        return None, [_error_value(name, dep, f"{type(dep).__name__}: {dep}")]
    kwargs = values.pop() if values else {}
    return (fn, values, kwargs), None


def _return_value(value):
    """(data, format, buffers, contained refs, value) of a return value: its large buffers go to the object store
    without a copy here."""
    data, buffers, contained = ser.dumps_oob(value)
    # The value itself rides along, unread: the refs inside it stay held until the core has registered the caller
    # as their borrower (finish_task).
    return (data, ser.FORMAT_PICKLE, buffers, contained, value)


def _returns(core, task, result):
    """The returns of a call: its values, or for a generator its items reported (streaming: the count is the
    return) or put (dynamic: their refs are the return)."""
    mode = task.get("generator") or ""
    if mode == "streaming":
        generators.stream_items(core, task, result, lambda e: _error_value(task["name"], e, traceback.format_exc()))
        return [_return_value(None)]
    if mode == "dynamic":
        return [_return_value(generators.collect_dynamic(result))]
    num_returns = task["num_returns"]
    if num_returns == 1:
        return [_return_value(result)]
    result = tuple(result)
    if len(result) != num_returns:
        raise ValueError(f"{task['name']} returned {len(result)} values; num_returns is {num_returns}")
    return [_return_value(r) for r in result]


def _create(task, fn, values, kwargs):
    """Builds the actor's instance; sets up how its calls run."""
    global _actor, _executor
    cls, options = fn if isinstance(fn, tuple) else (fn, {})
    _actor = cls(*values, **kwargs)
    _st.current().actor_id = task["actor_id"]
    _st.current().actor_resources = dict(task.get("resources") or {})
    is_async = any(inspect.iscoroutinefunction(getattr(cls, n, None)) or inspect.isasyncgenfunction(getattr(cls, n, None))
                   for n in dir(cls) if not n.startswith("__"))
    concurrency = options.get("max_concurrency")
    groups = options.get("concurrency_groups") or {}
    method_groups = _method_groups(cls)
    if is_async:
        _executor = _AsyncLoop(concurrency or 1000, groups, method_groups)
    elif groups:
        _executor = _Groups(concurrency or 1, groups, method_groups)
    elif concurrency and concurrency > 1:
        _executor = _Threads(concurrency)
    return [(ser.dumps(None), ser.FORMAT_PICKLE)]


def _run(core, functions, task):
    name = task["name"]
    token = _st.current_task.set((task["task_id"], name, task.get("resources") or {}))
    try:
        call, failed = _prepare(core, functions, task)
        if failed is not None:
            return failed
        fn, values, kwargs = call
        if task["actor_creation"]:
            return _create(task, fn, values, kwargs)
        return _returns(core, task, fn(*values, **kwargs))
    except _FunctionUnknown:
        raise
    except KeyboardInterrupt:
        # torus.cancel interrupted it: not retried.
        task["retryable"] = False
        return [_cancelled_value(task, traceback.format_exc())]
    except (SystemExit, exceptions.AsyncioActorExit) as e:
        if not task["method"]:
            raise
        return _exit_asked(task, e)
    except Exception as e:  # noqa: BLE001 - any error of the user's function is the task's result
        task["retryable"] = _retryable(task, e)
        return [_error_value(name, e, traceback.format_exc())]
    finally:
        _st.current_task.reset(token)


async def _run_async(core, functions, task):
    name = task["name"]
    _st.current_task.set((task["task_id"], name, task.get("resources") or {}))
    try:
        call, failed = _prepare(core, functions, task)
        if failed is not None:
            return failed
        fn, values, kwargs = call
        result = fn(*values, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        if task.get("generator") == "streaming" and inspect.isasyncgen(result):
            await generators.stream_items_async(core, task, result,
                                                lambda e: _error_value(name, e, traceback.format_exc()))
            return [_return_value(None)]
        return _returns(core, task, result)
    except (SystemExit, exceptions.AsyncioActorExit) as e:
        return _exit_asked(task, e)
    except Exception as e:  # noqa: BLE001
        return [_error_value(name, e, traceback.format_exc())]


_main_task = None  # the id of the task running on the main thread


def _interrupt(task_id):
    # torus.cancel of the task on the main thread: KeyboardInterrupt there. A real SIGINT to that thread, so that a
    # blocking call (sleep, a socket read) is interrupted too.
    if task_id == _main_task:
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


def main():
    global _main_task
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if os.environ.get("TORUS_RAY_ALIAS") == "1":
        from torus._private import ray_alias
        ray_alias.install()
    state = _worker.init_worker()
    # What its tasks submit inherits its runtime_env (its job's, with its task's or actor's over it), as in Ray.
    state.job_runtime_env = json.loads(os.environ.get("TORUS_RUNTIME_ENV") or "{}")
    core = state.core
    core.set_cancel_handler(_interrupt)
    functions = {}
    while True:
        if _exiting is not None:
            _end(core)
        try:
            task = core.next_task(1000)
        except KeyboardInterrupt:
            continue  # a cancel that came after its task ended
        if task is None:
            continue
        if _executor is not None and task["method"]:
            _executor.submit(core, functions, task)
            continue
        try:
            _main_task = task["task_id"]
            try:
                returns = _run(core, functions, task)
            finally:
                _main_task = None
        except _FunctionUnknown:
            core.finish_task(task["task_id"], [], function_unknown=True)
            continue
        except KeyboardInterrupt:
            returns = [(b"", "cancelled")]
        sys.stdout.flush()
        sys.stderr.flush()
        _finish(core, task, returns, retryable=task.get("retryable", True))
        del returns  # the refs it held are the caller's now (borrowed): let go of them before the next task comes


def _end(core):
    """Ends the process as the actor's code asked: once the calls running on other threads end, with the exit code
    it gave (atexit handlers run)."""
    if _executor is not None:
        _executor.drain()
    # Calls that came meanwhile fail with the actor's death and its reason (those that come later find the actor
    # DEAD at its owner).
    while _exit_answer is not None:
        task = core.next_task(0)
        if task is None:
            break
        core.finish_task(task["task_id"], _exit_answer)
    sys.stdout.flush()
    sys.stderr.flush()
    core.shutdown()
    sys.exit(_exiting)


if __name__ == "__main__":
    main()
