"""The differential suite's case runner: `python harness.py CASES_FILE` runs every case of one file in one process,
under whatever `ray` resolves to (Ray itself, or torus through python/as_ray), and prints one JSON line per case:

    {"case": "tasks.square", "out": [...]}       what the case recorded with out(...) and returned
    {"case": "...", "error": "TypeName: message"}  an exception the case did not catch

A cases file is a module with `INIT` (the keyword arguments of ray.init, default {"num_cpus": 2, "include_dashboard": False}; None: the case
starts and stops ray itself), optionally `CLUSTER` (a simulated TPU cluster the suite starts under each system before
the file runs, clusters.py; the file then connects with INIT = {}) and functions decorated with @case. Each case records what both systems must agree on
(values, exception type names, the key part of messages) with out(); nothing else is compared.
"""

import json
import os
import runpy
import sys
import time
import traceback

_cases = []
_outputs = None


def case(fn=None, *, timeout=60):
    """Registers a case; a case runs with the cluster of its file's INIT."""
    def register(f):
        f._timeout = timeout
        _cases.append(f)
        return f
    return register(fn) if fn is not None else register


def out(*values):
    """Records values the two systems must agree on (JSON-able; others are recorded by repr)."""
    for v in values:
        _outputs.append(_jsonable(v))


def error_of(fn, *args, **kwargs):
    """Calls fn; returns "TypeName" of what it raised (None when it raised nothing)."""
    try:
        fn(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001 - the case compares it
        return type(e).__name__
    return None


def raised(fn, *args, **kwargs):
    """Calls fn; returns the exception it raised (None when it raised nothing)."""
    try:
        fn(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001
        return e
    return None


def _jsonable(v):
    try:
        json.dumps(v)
        return v
    except TypeError:
        if isinstance(v, (set, frozenset)):
            return sorted(_jsonable(x) for x in v)
        if isinstance(v, tuple):
            return [_jsonable(x) for x in v]
        return repr(v)


def _load(path):
    """The cases file's globals. It runs as __main__, as a user's script does, so that the functions it defines
    travel to workers by value under both systems."""
    return runpy.run_path(path, run_name="__main__")


def main(path, only=None):
    global _outputs
    import ray
    module = _load(path)
    init = module.get("INIT", {"num_cpus": 2, "include_dashboard": False})
    if init is not None:
        ray.init(**init)
    prefix = os.path.splitext(os.path.basename(path))[0]
    for fn in _cases:
        name = f"{prefix}.{fn.__name__}"
        if only and name not in only:
            continue
        _outputs = []
        record = {"case": name}
        start = time.monotonic()
        try:
            result = fn()
            if result is not None:
                out(result)
            record["out"] = _outputs
        except BaseException as e:  # noqa: BLE001 - reported, the next case runs
            record["out"] = _outputs
            record["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            record["traceback"] = traceback.format_exc()[-2000:]
        record["seconds"] = round(time.monotonic() - start, 3)
        print("@@CASE " + json.dumps(record), flush=True)
    if init is not None:
        ray.shutdown()


if __name__ == "__main__":
    # Cases import this file as `harness`: one module, one registry.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import harness
    harness.main(sys.argv[1], set(sys.argv[2:]) or None)
