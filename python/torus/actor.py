"""Actors (as ray.actor): `@torus.remote` on a class makes an ActorClass; `.remote()` creates an actor and returns
its ActorHandle; `handle.method.remote()` calls it. `@torus.method` sets a method's defaults."""

import asyncio
import inspect

from torus import exceptions
from torus._private import generators
from torus._private import options as opt
from torus._private import state as _st
from torus._private import worker
from torus._private.arguments import wire_args
from torus._private.object_ref import ObjectRef
from torus._private.remote_base import RemoteBase

# An async actor's calls at once when max_concurrency is not given; the return index Ray reserves for a streaming
# generator's own return.
DEFAULT_MAX_CONCURRENCY_ASYNC = 1000
STREAMING_GENERATOR_RETURN = -2


class ActorClassInheritanceException(TypeError):
    """A class derived from an actor class (`class B(A)` where A is @remote): not supported, as in Ray."""


_METHOD_OPTIONS = ["num_returns", "concurrency_group", "max_task_retries", "retry_exceptions",
                   "_generator_backpressure_num_objects", "_num_objects_per_yield", "enable_task_events",
                   "tensor_transport"]


def method(*args, **kwargs):
    """@torus.method(num_returns=..., max_task_retries=..., concurrency_group=...) on an actor's method: its
    defaults for every call (`.options()` on a call overrides them)."""
    def annotate(m):
        if "num_returns" in kwargs:
            opt.validate_num_returns(inspect.isgeneratorfunction(m) or inspect.isasyncgenfunction(m),
                                     kwargs["num_returns"])
            m.__ray_num_returns__ = kwargs["num_returns"]
        if "max_task_retries" in kwargs:
            m.__ray_max_task_retries__ = kwargs["max_task_retries"]
        if "retry_exceptions" in kwargs:
            m.__ray_retry_exceptions__ = kwargs["retry_exceptions"]
        if "concurrency_group" in kwargs:
            m.__ray_concurrency_group__ = kwargs["concurrency_group"]
        return m

    if len(args) == 1 and callable(args[0]) and not kwargs:
        return annotate(args[0])
    error = ("The @ray.method decorator must be applied using no arguments or at least one of the arguments in the "
             f"list {_METHOD_OPTIONS}, for example '@ray.method(num_returns=2)'.")
    if args:
        raise AssertionError(error)
    for key in kwargs:
        if key not in _METHOD_OPTIONS:
            raise AssertionError(error)
    return annotate


def _method_defaults(cls):
    """{name: {option: value}} of the methods decorated with @method."""
    out = {}
    for name, member in inspect.getmembers(cls, callable):
        if name.startswith("__") and name != "__call__":
            continue
        d = {}
        for attr, key in (("__ray_num_returns__", "num_returns"), ("__ray_max_task_retries__", "max_task_retries"),
                          ("__ray_retry_exceptions__", "retry_exceptions"),
                          ("__ray_concurrency_group__", "concurrency_group")):
            if hasattr(member, attr):
                d[key] = getattr(member, attr)
        if inspect.isgeneratorfunction(member) or inspect.isasyncgenfunction(member):
            d["is_generator"] = True
        out[name] = d
    return out


class ActorClass(RemoteBase):
    """A class whose instances are actors: `Cls.remote(*args)` creates one, `Cls.options(...)` sets options."""

    _kind = "actor class"

    def __init__(self, cls, options):
        super().__init__(cls, options)
        self._validate(options, in_options=False)
        self.__name__ = cls.__name__
        self.__qualname__ = cls.__qualname__
        self.__module__ = cls.__module__
        self.__doc__ = cls.__doc__

    def _validate(self, options, in_options):
        opt.validate_actor_options(options, in_options)

    def _shipped_settings(self):
        return {"max_concurrency": self._default_options.get("max_concurrency"),
                "concurrency_groups": self._default_options.get("concurrency_groups")}

    def _shipped(self):
        # The worker gets the class and how many calls it takes at once.
        return (self._target, self._shipped_settings())

    def __call__(self, *args, **kwargs):
        name = self._target.__name__
        raise TypeError(f"Actors cannot be instantiated directly. Instead of '{name}()', use '{name}.remote()'.")

    def __mro_entries__(self, bases):
        raise ActorClassInheritanceException(
            f"Attempted to define a subclass of actor class '{self._target.__name__}'. Inheriting from actor classes "
            f"is not currently supported. You can instead inherit from a non-actor base class and make the derived "
            f"class an actor class (with @ray.remote).")

    def remote(self, *args, **kwargs):
        state = worker.state_or_init()
        opts = self._default_options
        if opts.get("name") == "":
            raise ValueError("Actor name cannot be an empty string.")
        if opts.get("namespace") is not None:
            _check_namespace(opts["namespace"])
        name = opts.get("name") or ""
        namespace = opts.get("namespace") or state.namespace
        if opts.get("get_if_exists") and name:
            try:
                return get_actor(name, namespace)
            except ValueError:
                pass
        function_id, blob = self._code()
        # Actors hold no CPU unless asked (as in Ray, where 1 CPU is for placement only).
        resources = opt.resources(opts, default_cpus=0)
        env, working_dir = opt.runtime_env(opts, state.job_runtime_env)
        selector, fallbacks, strategy, group, bundle = opt.placement(opts)
        detached = opts.get("lifetime") == "detached"
        # A detached actor's arguments go to the head as values; an owned actor's refs are kept for its restarts.
        args_wire = wire_args(args, kwargs, keep_refs=not detached, keep_nested=True)
        defaults = _method_defaults(self._target)
        methods = sorted(defaults)
        max_task_retries = opts.get("max_task_retries") or 0
        try:
            actor_id = state.core.create_actor(worker.new_task_id(), f"{self._name}.__init__", function_id, blob,
                                               args_wire, resources, env, working_dir,
                                               int(opts.get("max_restarts") or 0), int(max_task_retries),
                                               selector, strategy, group, bundle,
                                               name, namespace, self._name, methods, detached,
                                               fallback_selectors=fallbacks)
        except ValueError as e:
            if name and "is taken" in str(e):
                if opts.get("get_if_exists"):
                    return get_actor(name, namespace)  # another process created it meanwhile
                from torus.exceptions import ActorAlreadyExistsError
                raise ActorAlreadyExistsError(
                    f"The name {name} (namespace={namespace}) is already taken. Please use a different name or get "
                    f"the existing actor using ray.get_actor('{name}', namespace='{namespace}')") from None
            raise ValueError(f"{self._target.__name__}: {e}") from None
        owner = state.core.head_address if detached else state.core.address
        return ActorHandle(actor_id, owner, self._name, defaults, int(max_task_retries))


class ActorHandle:
    """A handle on an actor: `handle.method.remote(...)`. It can be passed to tasks and other actors."""

    def __init__(self, actor_id, owner, class_name, methods, max_task_retries=0):
        self._actor_id = actor_id
        self._owner = owner
        self._class_name = class_name
        # {name: its @method defaults}; a list of names from older handles.
        self._methods = dict(methods) if isinstance(methods, dict) else {m: {} for m in methods}
        self._max_task_retries = max_task_retries

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_actor_id", "_owner", "_class_name", "_methods",
                                             "_max_task_retries"):
            raise AttributeError(name)
        methods = self._methods
        if name not in methods:
            raise AttributeError(f"'ActorHandle' object has no attribute '{name}'")
        return ActorMethod(self, name, methods[name], self._max_task_retries)

    def __reduce__(self):
        return (ActorHandle, (self._actor_id, self._owner, self._class_name, self._methods,
                              self._max_task_retries))

    def __repr__(self):
        return f"Actor({self._class_name.rsplit('.', 1)[-1]}, {self._actor_id.hex()})"

    def __eq__(self, other):
        return isinstance(other, ActorHandle) and other._actor_id == self._actor_id

    def __hash__(self):
        return hash(self._actor_id)

    def _state(self, wait=0):
        return worker.state_or_init().core.resolve_actor(self._actor_id, self._owner, int(wait * 1000))


class ActorMethod:
    """One method of an actor: `.remote(*args)` calls it; `.options(num_returns=...)` sets options for a call."""

    def __init__(self, handle, name, defaults, max_task_retries=0, overrides=None):
        self._handle = handle
        self._method_name = name
        self._defaults = defaults
        self._max_task_retries = max_task_retries
        self._overrides = overrides or {}

    def __call__(self, *args, **kwargs):
        raise TypeError(f"Actor methods cannot be called directly. Instead of running "
                        f"'object.{self._method_name}()', try 'object.{self._method_name}.remote()'.")

    def options(self, **options):
        for key in options:
            if key not in ("num_returns", "max_task_retries", "retry_exceptions", "concurrency_group", "name",
                           "enable_task_events", "_generator_backpressure_num_objects"):
                raise ValueError(f"Invalid option keyword {key} for actor methods.")
        if "num_returns" in options:
            opt.validate_num_returns(self._defaults.get("is_generator", False), options["num_returns"])
        if "max_task_retries" in options:
            opt.ACTOR_ONLY["max_task_retries"].validate("max_task_retries", options["max_task_retries"])
        if options.get("concurrency_group") is not None:
            raise ValueError("concurrency_group in a call's .options(): not supported by torus; put the method in its "
                             "group with @ray.method(concurrency_group=...)")
        merged = dict(self._overrides)
        merged.update(options)
        return ActorMethod(self._handle, self._method_name, self._defaults, self._max_task_retries, merged)

    def _option(self, key, default):
        if key in self._overrides:
            return self._overrides[key]
        return self._defaults.get(key, default)

    def remote(self, *args, **kwargs):
        state = worker.state_or_init()
        h = self._handle
        num_returns, generator = generators.call_shape(self._option("num_returns", None),
                                                       self._defaults.get("is_generator", False))
        retries = self._option("max_task_retries", self._max_task_retries)
        if retries is None:
            retries = self._max_task_retries
        if self._option("retry_exceptions", False):
            raise ValueError("retry_exceptions on an actor method: not supported by torus (a call is sent again only "
                             "when its actor's worker dies, up to max_task_retries)")
        name = self._option("name", None) or f"{h._class_name}.{self._method_name}"
        ids = state.core.call_actor(h._actor_id, h._owner, worker.new_task_id(), name, self._method_name,
                                    wire_args(args, kwargs), max(num_returns, 1), retries, generator=generator)
        refs = [ObjectRef(i, state.core.address) for i in ids]
        if generator == "streaming":
            return generators.ObjectRefGenerator(refs[0])
        if num_returns == 0:
            return None
        return refs[0] if num_returns == 1 else refs


def _check_namespace(namespace):
    if not isinstance(namespace, str):
        raise TypeError("namespace must be None or a string.")
    if namespace == "":
        raise ValueError('"" is not a valid namespace. Pass None to not specify a namespace.')


def get_actor(name, namespace=None):
    """A handle on the live actor named `name` in `namespace` (default: this program's namespace, see
    torus.init). Raises ValueError when there is none."""
    if not name:
        raise ValueError("Please supply a non-empty value to get_actor")
    if namespace is not None:
        _check_namespace(namespace)
    state = worker.state_or_init()
    ns = namespace or state.namespace
    try:
        found = state.core.get_named_actor(ns, name)
    except KeyError:
        raise ValueError(f"Failed to look up actor with name '{name}'. This could because 1. You are trying to look "
                         f"up a named actor you didn't create. 2. The named actor died. 3. You did not use a "
                         f"namespace matching the namespace of the actor.") from None
    methods = {m: {} for m in found["methods"]}
    return ActorHandle(bytes.fromhex(found["actor_id"]), found["owner_address"], found["class_name"],
                       methods, found["max_task_retries"])


def kill(actor, *, no_restart=True):
    """Stops the actor's worker now; with no_restart=False it is restarted if it has restarts left."""
    if not isinstance(actor, ActorHandle):
        raise ValueError(f"ray.kill() only supported for actors. For tasks, try ray.cancel(). Got: {type(actor)}.")
    worker.state_or_init().core.kill_actor(actor._actor_id, actor._owner, bool(no_restart))



def exit_actor():
    """Ends the calling actor on purpose, from one of its methods: that call fails with ActorDiedError saying so, the
    actor is DEAD however many restarts it has left, and later calls fail with ActorDiedError. Calls running on other
    threads (a threaded or async actor) end first; atexit handlers run. TypeError outside an actor."""
    state = _st.current()
    if state is None or not state.is_worker or not state.actor_id:
        mode = 1 if state is not None and state.is_worker else 0  # Ray's WORKER_MODE, SCRIPT_MODE
        raise TypeError(f"exit_actor API is called on a non-actor worker, {mode}. Call this API inside an actor "
                        "methodsif you'd like to exit the actor gracefully.")
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        # A method on a thread: SystemExit unwinds it (finally blocks run), and the worker ends with code 0.
        exit_ = SystemExit(0)
        exit_._exit_actor = True
        raise exit_ from None
    # A method on the event loop of an async actor: SystemExit would stop the loop, not the worker.
    raise exceptions.AsyncioActorExit()
