"""@torus.remote on functions: RemoteFunction, .options(), .remote()."""

import functools
import inspect
import math

from torus import _runtime
from torus import _serialization as ser
from torus import exceptions

_SCALE = 10000

_TASK_OPTIONS = {"num_cpus", "num_gpus", "memory", "resources", "num_returns", "max_retries", "retry_exceptions",
                 "runtime_env", "name", "label_selector", "scheduling_strategy", "accelerator_type"}


def _fixed(field, amount):
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount) or amount < 0:
        raise ValueError(f"{field}: a non-negative number is required, got {amount!r}")
    return int(round(amount * _SCALE))


def _resources(opts):
    out = {"CPU": _fixed("num_cpus", opts.get("num_cpus", 1))}
    if opts.get("num_gpus"):
        gpus = opts["num_gpus"]
        out["GPU"] = _fixed("num_gpus", gpus)
    if opts.get("memory"):
        _fixed("memory", opts["memory"])
        out["memory"] = int(opts["memory"]) * _SCALE
    for name, amount in (opts.get("resources") or {}).items():
        if name in ("CPU", "GPU", "memory"):
            raise ValueError(f"resources: use num_cpus, num_gpus or memory for {name!r}, not resources")
        if not isinstance(name, str) or not name:
            raise ValueError(f"resources: names must be non-empty strings, got {name!r}")
        out[name] = _fixed(f"resources[{name!r}]", amount)
    tpu = out.get("TPU", 0)
    if tpu % _SCALE:
        raise ValueError(f"resources['TPU']: TPU chips are whole (1, 2, 4, 8 or a whole host), got {tpu / _SCALE}")
    return {k: v for k, v in out.items() if v > 0}


def _runtime_env(opts):
    env = opts.get("runtime_env") or {}
    unknown = set(env) - {"env_vars", "working_dir"}
    if unknown:
        raise ValueError(f"runtime_env: unsupported keys {sorted(unknown)}; accepted: env_vars, working_dir")
    env_vars = env.get("env_vars") or {}
    for k, v in env_vars.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError(f"runtime_env.env_vars: names and values must be strings, got {k!r}: {v!r}")
    env_vars = dict(env_vars)
    # Workers look up and name actors in their driver's namespace.
    env_vars["TORUS_NAMESPACE"] = _runtime._state_or_init().namespace
    return env_vars, env.get("working_dir") or ""


def _placement(opts):
    """(label_selector, strategy, placement group id, bundle index) for the core: the selector checked as placement
    groups check theirs, the strategy as "" (default), "SPREAD", "NODE:<id>" or "NODE_SOFT:<id>"."""
    from torus.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy
    selector = opts.get("label_selector") or {}
    if not isinstance(selector, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                 for k, v in selector.items()):
        raise ValueError(f"label_selector: a dict of label key -> expression strings is required, got {selector!r}")
    if selector:
        _runtime._import_core().check_label_selector(selector)
    strategy = opts.get("scheduling_strategy")
    if isinstance(strategy, PlacementGroupSchedulingStrategy):
        return dict(selector), "", strategy.placement_group.id, strategy.placement_group_bundle_index
    if strategy in (None, "DEFAULT"):
        wire = ""
    elif strategy == "SPREAD":
        wire = "SPREAD"
    elif isinstance(strategy, NodeAffinitySchedulingStrategy):
        wire = ("NODE_SOFT:" if strategy.soft else "NODE:") + strategy.node_id
    else:
        raise ValueError(f"scheduling_strategy: accepted are \"DEFAULT\", \"SPREAD\", "
                         f"NodeAffinitySchedulingStrategy and PlacementGroupSchedulingStrategy "
                         f"(torus.util.scheduling_strategies); got {strategy!r}")
    return dict(selector), wire, "", -1


def _check_options(opts):
    unknown = set(opts) - _TASK_OPTIONS
    if unknown:
        raise ValueError(f"unknown options {sorted(unknown)}; accepted: {sorted(_TASK_OPTIONS)}")
    if opts.get("accelerator_type"):
        raise ValueError("accelerator_type: not supported for tasks yet; use label_selector "
                         "{\"torus.io/accelerator-type\": \"TPU-V6E\"}")
    num_returns = opts.get("num_returns", 1)
    if not isinstance(num_returns, int) or num_returns < 1:
        raise ValueError(f"num_returns: a positive integer is required, got {num_returns!r}")


class Remote:
    """What remote functions and actor classes share: their options, `.options(...)` and their code, pickled once
    and named by its hash (workers keep it by that id)."""

    _kind = "remote function"

    def __init__(self, target, options):
        self._target = target
        self._options = options
        self._blob = None
        self._function_id = None
        self._name = f"{target.__module__}.{target.__qualname__}"

    def _shipped(self):
        """What the worker gets (the function itself here; actor classes add their settings)."""
        return self._target

    def _code(self):
        if self._blob is None:
            self._blob = ser.dumps(self._shipped())
            self._function_id = _runtime.function_id(self._blob)
        return self._function_id, self._blob

    def options(self, **options):
        merged = dict(self._options)
        merged.update(options)
        copy = type(self)(self._target, merged)
        if copy._shipped_settings() == self._shipped_settings():
            copy._blob, copy._function_id = self._blob, self._function_id
        return copy

    def _shipped_settings(self):
        return None

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self._kind} {self._name} cannot be called directly; use {self._target.__name__}.remote(...)")


class RemoteFunction(Remote):
    def __init__(self, function, options):
        _check_options(options)
        super().__init__(function, options)
        functools.update_wrapper(self, function)

    def remote(self, *args, **kwargs):
        state = _runtime._state_or_init()
        opts = self._options
        function_id, blob = self._code()
        resources = _resources(opts)
        env, working_dir = _runtime_env(opts)
        selector, strategy, group, bundle = _placement(opts)
        wire_args = _wire_args(args, kwargs)
        num_returns = opts.get("num_returns", 1)
        max_retries = opts.get("max_retries", 3)
        ids = state.core.submit(_runtime._core_new_task_id(), opts.get("name") or self._name, function_id,
                                blob, wire_args, num_returns, resources, env, working_dir, max_retries,
                                bool(opts.get("retry_exceptions", False)), selector, strategy, group, bundle)
        refs = [_runtime.ObjectRef(i, state.core.address) for i in ids]
        return refs[0] if num_returns == 1 else refs


def _wire_args(args, kwargs, keep_refs=False, keep_nested=False):
    """Positional arguments (refs as refs), then the keyword arguments as one value.

    A ref passed as an argument reaches the worker as its value, so the submitted call holds the object only until
    it ends (the core worker counts it); the refs inside an argument's value are held until then too, and the worker
    registers as their borrower. `keep_refs` (an actor's constructor, which runs again on each restart) keeps the
    objects this process owns for as long as it lives; `keep_nested` keeps those inside values so (a constructor)."""
    wire = [_arg(a, keep_refs, keep_nested) for a in args]
    wire.append(_value_arg(kwargs, keep_nested))
    return wire


def _arg(a, keep_refs, keep_nested):
    if isinstance(a, _runtime.ObjectRef):
        state = _runtime._state
        if keep_refs and state is not None and a._owner == state.core.address:
            state.core.mark_escaped(a._id)
        return ("r", a._id, a._owner)
    return _value_arg(a, keep_nested)


def _value_arg(value, keep_nested=False):
    """A value passed to a task or actor call: inline when small; a large one (numpy arrays and the like) is put in
    this node's object store as an object that the submitted call holds until it finishes, and its worker maps it."""
    data, buffers, contained = ser.dumps_oob(value)
    state = _runtime._state
    if keep_nested and state is not None:
        for object_id, owner in contained:
            if owner == state.core.address:
                state.core.mark_escaped(object_id)
    hold = [] if keep_nested else contained
    if state is not None and len(data) + sum(b.nbytes for b in buffers) >= _runtime._import_core().INLINE_MAX_BYTES:
        try:
            object_id = state.core.put(data, ser.FORMAT_PICKLE, buffers, hold)
        except BufferError as e:
            raise exceptions.ObjectStoreFullError(str(e)) from None
        return ("r", object_id, state.core.address)
    if buffers:
        data = ser.dumps_oob(value, in_band=True)[0]  # small arrays travel in band
    return ("v", data, ser.FORMAT_PICKLE, hold)


def remote(*args, **options):
    """@torus.remote or @torus.remote(num_cpus=..., resources={"TPU": 1}, ...) on a function or a class."""
    if len(args) == 1 and not options and callable(args[0]):
        return _make(args[0], {})
    if args:
        raise TypeError("torus.remote takes a function, or keyword options only")
    return lambda f: _make(f, options)


def _make(f, options):
    if inspect.isclass(f):
        from torus._actor import ActorClass
        return ActorClass(f, options)
    if not callable(f):
        raise TypeError(f"torus.remote takes a function, got {type(f).__name__}")
    return RemoteFunction(f, options)
