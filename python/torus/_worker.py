"""A task worker: `python3 -m torus._worker`, started by an agent for a lease. It runs the tasks pushed to it, one at
a time, and answers each with its return values (or its error)."""

import os
import sys
import traceback

from torus import _runtime
from torus import _serialization as ser
from torus import exceptions


def _resolve(core, kind, a, b):
    """An argument's value: ("v", data, format) inline, ("r", id, owner) fetched from its owner. A failed
    dependency's error is raised."""
    if kind == "r":
        [(data, fmt)] = core.get([(a, b)], -1)
    else:
        data, fmt = a, b
    return ser.value_of(data, fmt)


def _error_value(name, exc, tb_text):
    err = exceptions.TaskError(name, tb_text, None, os.getpid(), os.environ.get("TORUS_NODE_ID"))
    try:
        # Keep the original exception when it pickles, so the caller can catch it by its type.
        ser.loads(ser.dumps(exc))
        err.cause = exc
        blob = ser.dumps(err)
    except Exception:
        err.cause = None
        blob = ser.dumps(err)
    return (blob, ser.FORMAT_ERROR)


class _FunctionUnknown(Exception):
    pass


_actor = None  # the instance, in an actor's worker


def _run(core, functions, task):
    global _actor
    name = task["name"]
    if task["method"]:
        if _actor is None:
            return [_error_value(name, RuntimeError("this worker holds no actor"), "RuntimeError: no actor")]
        fn = getattr(_actor, task["method"])
    else:
        fid = task["function_id"]
        fn = functions.get(fid)
        if fn is None:
            if not task["function"]:
                raise _FunctionUnknown()
            fn = ser.loads(task["function"])
            functions[fid] = fn
    state = _runtime._state
    state.current_task_id = task["task_id"]
    state.current_task_name = name
    num_returns = task["num_returns"]
    try:
        try:
            values = [_resolve(core, *arg) for arg in task["args"]]
        except exceptions.TaskError as dep:
            # A dependency failed: this task fails with that error.
            return [(ser.dumps(dep), ser.FORMAT_ERROR)]
        except exceptions.TorusError as dep:
            return [_error_value(name, dep, f"{type(dep).__name__}: {dep}")]
        kwargs = values.pop() if values else {}
        result = fn(*values, **kwargs)
        if task["actor_creation"]:
            _actor = result
            state.actor_id = task["actor_id"]
            return [(ser.dumps(None), ser.FORMAT_PICKLE)]
        if num_returns == 1:
            return [(ser.dumps(result), ser.FORMAT_PICKLE)]
        result = tuple(result)
        if len(result) != num_returns:
            raise ValueError(f"{name} returned {len(result)} values; num_returns is {num_returns}")
        return [(ser.dumps(r), ser.FORMAT_PICKLE) for r in result]
    except Exception as e:  # noqa: BLE001 - any error of the user's function is the task's result
        tb = traceback.format_exc()
        return [_error_value(name, e, tb)]
    finally:
        state.current_task_id = None
        state.current_task_name = None


def main():
    state = _runtime._init_worker()
    core = state.core
    functions = {}
    while True:
        task = core.next_task(1000)
        if task is None:
            continue
        try:
            returns = _run(core, functions, task)
        except _FunctionUnknown:
            core.finish_task(task["task_id"], [], function_unknown=True)
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        core.finish_task(task["task_id"], returns)


if __name__ == "__main__":
    main()
