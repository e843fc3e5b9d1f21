"""What keeps an object from being serialized (as ray.util.check_serialize): inspect_serializability tries to pickle
the object as torus would (cloudpickle); when that fails, it looks inside it, `depth` levels down — a function's
global and nonlocal variables, an object's functions and attributes — for the first part that fails, prints what
it tried (to `print_file`, default stdout) and returns (serializable, {FailureTuple of the parts to blame}).

    ok, failures = inspect_serializability(model, name="model")
    # (False, {FailTuple(lock [path=model -> lock, obj=<unlocked _thread.lock ...>, parent=<Model ...>])})
"""

import contextlib
import inspect
from typing import Any, Optional, Set, Tuple

import cloudpickle

_RULE = 80


class FailureTuple:
    """An object that does not serialize: `obj`, the names that lead to it (`path`) and the object holding it."""

    def __init__(self, obj: Any, path: tuple, parent: Any):
        self.obj = obj
        self.path = path
        self.parent = parent

    def __repr__(self):
        names = [str(p) if p is not None else "unknown" for p in self.path]
        last = names[-1] if names else "unknown"
        return f"FailTuple({last} [path={' -> '.join(names)}, obj={self.obj}, parent={self.parent}])"


class _Printer:
    def __init__(self, file):
        self.file = file
        self.level = 0

    @contextlib.contextmanager
    def nested(self):
        self.level += 1
        try:
            yield
        finally:
            self.level -= 1

    def line(self, text):
        print("    " * self.level + text, file=self.file)


def _parts(obj):
    """(kind of part, [(name, part)]) groups to look into, in order."""
    if inspect.isfunction(obj):
        closure = inspect.getclosurevars(obj)
        return [("global", list(closure.globals.items())), ("nonlocal", list(closure.nonlocals.items()))]
    functions = inspect.getmembers(obj, predicate=inspect.isfunction)
    members = [(n, v) for n, v in inspect.getmembers(obj)
               if not (n.startswith("__") and n.endswith("__")) and not inspect.isbuiltin(v)]
    return [("function", functions), ("attribute", members)]


def _check(obj, name, depth, parent, failures, printer, path):
    """(serializable, failures): adds to `failures` the deepest parts of `obj` found not to serialize."""
    top = failures is None
    if top:
        failures = set()
        title = f"Checking Serializability of {obj}"
        printer.line("=" * min(len(title), _RULE))
        printer.line(title)
        printer.line("=" * min(len(title), _RULE))
    else:
        printer.line(f"Serializing '{name}' {obj}...")
    try:
        cloudpickle.dumps(obj)
        return True, failures
    except Exception as e:  # noqa: BLE001 - whatever pickling raises is the finding
        printer.line(f"!!! FAIL serialization: {e}")
    here = path + ((name,) if name is not None else ())
    if depth <= 0:
        failures.add(FailureTuple(obj, here, parent))
        return False, failures
    found = False
    for kind, parts in _parts(obj):
        if found:
            break
        if parts and inspect.isfunction(obj):
            printer.line(f"Detected {len(parts)} {kind} variables. Checking serializability...")
        with printer.nested():
            for part_name, part in parts:
                ok, _ = _check(part, part_name, depth - 1, obj, failures, printer, here)
                if not ok:
                    found = True
                    break
    if not found:
        printer.line(f"WARNING: Did not find a part of {name or type(obj).__name__} that fails on its own: it may "
                     f"fail only together with others. Try inspect_serializability on its parts.")
    if not failures:
        failures.add(FailureTuple(obj, here, parent))
    if top:
        printer.line("=" * min(len(title), _RULE))
        listed = "\n".join(str(f) for f in failures)
        printer.line(f"Variable: \n\n\t{listed}\n\nwas found to be non-serializable. There may be multiple other "
                     f"undetected variables that were non-serializable. ")
        printer.line("Consider either removing the instantiation/imports of these variables or moving the "
                     "instantiation into the scope of the function/class. ")
        printer.line("=" * min(len(title), _RULE))
    return False, failures


def inspect_serializability(base_obj: Any, name: Optional[str] = None, depth: int = 3,
                            print_file: Optional[Any] = None) -> Tuple[bool, Set[FailureTuple]]:
    """(True, set()) when `base_obj` serializes; else (False, the parts found to blame), having printed the search."""
    return _check(base_obj, name, depth, None, None, _Printer(print_file), ())
