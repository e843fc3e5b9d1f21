"""@torus.remote on classes: ActorClass, ActorHandle, ActorMethod."""

import inspect

from torus import _runtime
from torus import _serialization as ser
from torus._remote import Remote, _placement, _resources, _runtime_env, _wire_args

_ACTOR_OPTIONS = {"num_cpus", "num_gpus", "memory", "resources", "max_restarts", "runtime_env", "name",
                  "namespace", "lifetime", "max_task_retries", "max_concurrency", "label_selector",
                  "scheduling_strategy", "accelerator_type"}


def _check_actor_options(opts):
    unknown = set(opts) - _ACTOR_OPTIONS
    if unknown:
        raise ValueError(f"unknown actor options {sorted(unknown)}; accepted: {sorted(_ACTOR_OPTIONS)}")
    if opts.get("accelerator_type"):
        raise ValueError("accelerator_type: not supported for actors yet; use resources={\"TPU\": n} or a "
                         "label_selector")
    for field in ("name", "namespace"):
        value = opts.get(field)
        if value is not None and (not isinstance(value, str) or not value or len(value.encode()) > 256):
            raise ValueError(f"{field}: a non-empty string of at most 256 bytes is required, got {value!r}")
    if opts.get("namespace") is not None and opts.get("name") is None:
        raise ValueError("namespace: applies to named actors only; give name= too")
    if opts.get("lifetime") not in (None, "non_detached", "detached"):
        raise ValueError(f"lifetime: None, 'non_detached' (the actor ends with the program that created it) or "
                         f"'detached' (the cluster's head owns it: it lives until torus.kill), got {opts['lifetime']!r}")
    concurrency = opts.get("max_concurrency")
    if concurrency is not None and (not isinstance(concurrency, int) or concurrency < 1):
        raise ValueError(f"max_concurrency: a positive integer is required, got {concurrency!r}")
    _check_task_retries(opts.get("max_task_retries", 0))
    restarts = opts.get("max_restarts", 0)
    if not isinstance(restarts, int) or restarts < -1:
        raise ValueError(f"max_restarts: an integer >= -1 is required, got {restarts!r}")


def _check_task_retries(retries):
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < -1:
        raise ValueError(f"max_task_retries: an integer >= -1 is required, got {retries!r}")


class ActorClass(Remote):
    _kind = "actor class"

    def __init__(self, cls, options):
        _check_actor_options(options)
        super().__init__(cls, options)

    def _shipped_settings(self):
        return {"max_concurrency": self._options.get("max_concurrency")}

    def _shipped(self):
        # The worker gets the class and how many calls it takes at once.
        return (self._target, self._shipped_settings())

    def remote(self, *args, **kwargs):
        state = _runtime._state_or_init()
        opts = self._options
        function_id, blob = self._code()
        # Actors hold no CPU unless asked (as in Ray, where 1 CPU is for placement only).
        resources = _resources(dict(opts, num_cpus=opts.get("num_cpus", 0)))
        env, working_dir = _runtime_env(opts)
        selector, strategy, group, bundle = _placement(opts)
        detached = opts.get("lifetime") == "detached"
        # A detached actor's arguments go to the head as values; an owned actor's refs are kept for its restarts.
        wire_args = _wire_args(args, kwargs, keep_refs=not detached, keep_nested=True)
        methods = [n for n, _ in inspect.getmembers(self._target, callable) if not n.startswith("__")]
        name = opts.get("name") or ""
        namespace = opts.get("namespace") or state.namespace
        try:
            actor_id = state.core.create_actor(_runtime._core_new_task_id(), f"{self._name}.__init__", function_id,
                                               blob, wire_args, resources, env, working_dir,
                                               int(opts.get("max_restarts", 0)), int(opts.get("max_task_retries", 0)),
                                               selector, strategy, group, bundle,
                                               name, namespace, self._name, methods, detached)
        except ValueError as e:
            raise ValueError(f"{self._target.__name__}: {e}") from None
        owner = state.core.head_address if detached else state.core.address
        return ActorHandle(actor_id, owner, self._name, methods, int(opts.get("max_task_retries", 0)))


class ActorHandle:
    """A handle on an actor: `handle.method.remote(...)`. It can be passed to tasks and other actors."""

    def __init__(self, actor_id, owner, class_name, methods, max_task_retries=0):
        self._actor_id = actor_id
        self._owner = owner
        self._class_name = class_name
        self._methods = set(methods)
        self._max_task_retries = max_task_retries

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name not in self._methods:
            raise AttributeError(f"actor {self._class_name} has no method {name!r}")
        return ActorMethod(self, name, 1, self._max_task_retries)

    def __reduce__(self):
        return (ActorHandle, (self._actor_id, self._owner, self._class_name, sorted(self._methods),
                              self._max_task_retries))

    def __repr__(self):
        return f"Actor({self._class_name}, {self._actor_id.hex()})"

    def _state(self, wait=0):
        return _runtime._state_or_init().core.resolve_actor(self._actor_id, self._owner, int(wait * 1000))


class ActorMethod:
    def __init__(self, handle, name, num_returns, max_task_retries=0):
        self._handle = handle
        self._name = name
        self._num_returns = num_returns
        self._max_task_retries = max_task_retries

    def options(self, num_returns=1, max_task_retries=None, **unsupported):
        if unsupported:
            raise ValueError(f"actor method options: only num_returns and max_task_retries are supported, got "
                             f"{sorted(unsupported)}")
        retries = self._max_task_retries if max_task_retries is None else max_task_retries
        _check_task_retries(retries)
        return ActorMethod(self._handle, self._name, num_returns, retries)

    def remote(self, *args, **kwargs):
        state = _runtime._state_or_init()
        wire_args = _wire_args(args, kwargs)
        h = self._handle
        ids = state.core.call_actor(h._actor_id, h._owner, _runtime._core_new_task_id(),
                                    f"{h._class_name}.{self._name}", self._name, wire_args, self._num_returns,
                                    self._max_task_retries)
        refs = [_runtime.ObjectRef(i, state.core.address) for i in ids]
        return refs[0] if self._num_returns == 1 else refs


def get_actor(name, namespace=None):
    """A handle on the live actor named `name` in `namespace` (default: this program's namespace, see
    torus.init). Raises ValueError when there is none."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name: a non-empty string is required, got {name!r}")
    state = _runtime._state_or_init()
    ns = namespace or state.namespace
    try:
        found = state.core.get_named_actor(ns, name)
    except KeyError as e:
        raise ValueError(f"no live actor named {name!r} in namespace {ns!r} ({e.args[0]})") from None
    return ActorHandle(bytes.fromhex(found["actor_id"]), found["owner_address"], found["class_name"],
                       found["methods"], found["max_task_retries"])


def kill(actor, *, no_restart=True):
    """Stops the actor's worker now; with no_restart=False it is restarted if it has restarts left."""
    if not isinstance(actor, ActorHandle):
        raise TypeError(f"torus.kill takes an actor handle, got {type(actor).__name__}")
    _runtime._state_or_init().core.kill_actor(actor._actor_id, actor._owner, bool(no_restart))
