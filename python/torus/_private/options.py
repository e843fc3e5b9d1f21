"""Options of tasks, actors and actor methods (as ray._common.ray_option_utils): which keywords each takes, their
checks with Ray's errors (type and message), and their conversion to what the core takes (fixed-point resources,
the worker's environment, where it runs).

Checks run where Ray runs them: at @remote and .options() time. Conversions run at .remote() time.
"""

import importlib
import json
import math
import os
import re

from torus._private import state as _st

SCALE = 10000  # resources are fixed point: 1/10000
TPU_VALID_CHIP_OPTIONS = (1, 2, 4, 8)


class Option:
    def __init__(self, types=None, check=None, default=None):
        self.types = types
        self.check = check
        self.default = default

    def validate(self, keyword, value):
        if self.types is not None and not isinstance(value, self.types):
            raise TypeError(f"The type of keyword '{keyword}' must be {self.types}, but received type {type(value)}")
        if self.check is not None:
            message = self.check(value)
            if message:
                raise ValueError(message)


def _counting(name, infinite=True, default=None):
    if infinite:
        return Option((int, type(None)),
                      lambda x: None if x is None or x >= -1 else
                      f"The keyword '{name}' only accepts None, 0, -1 or a positive integer, where -1 represents "
                      f"infinity.", default)
    return Option((int, type(None)),
                  lambda x: None if x is None or x >= 0 else
                  f"The keyword '{name}' only accepts None, 0 or a positive integer.", default)


def resource_quantity_error(name, quantity):
    """Ray's message for a bad amount of resource `name` (num_cpus, num_gpus, memory or a custom name), or None."""
    if quantity < 0:
        return f"The quantity of resource {name} cannot be negative"
    if isinstance(quantity, float) and quantity != 0.0 and int(quantity * SCALE) == 0:
        return f"The precision of the fractional quantity of resource {name} cannot go beyond 0.0001"
    if name == "TPU" and quantity not in TPU_VALID_CHIP_OPTIONS:
        return (f"The number of requested 'TPU' was set to {quantity} which is not a supported chip configuration. "
                f"Supported configs: {TPU_VALID_CHIP_OPTIONS}")
    return None


def _resource(name, default=None):
    return Option((float, int, type(None)), lambda x: None if x is None else resource_quantity_error(name, x),
                  default)


def _resources_error(resources):
    if resources is None:
        return None
    if "CPU" in resources or "GPU" in resources:
        return "Use the 'num_cpus' and 'num_gpus' keyword instead of 'CPU' and 'GPU' in 'resources' keyword"
    for name, quantity in resources.items():
        if not isinstance(quantity, (int, float)) or isinstance(quantity, bool):
            return f"The quantity of resource {name} must be a number, got {quantity!r}"
        message = resource_quantity_error(name, quantity)
        if message:
            return message
    return None


# Label syntax as Kubernetes (and Ray) define it.
_LABEL = r"([a-zA-Z0-9]([a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9])?)"
_LABEL_PREFIX = rf"^({_LABEL}?(\.{_LABEL}?)*)$"
_SELECTOR_VALUE = re.compile(rf"^!?(?:in)?\({_LABEL}(?:, ?{_LABEL})*\)$|^!?{_LABEL}$")
_NAME_RULE = ("must be 63 chars or less beginning and ending with an alphanumeric character ([a-z0-9A-Z]) with "
              "dashes (-), underscores (_),dots (.), and alphanumerics between.")


def label_key_error(key):
    if "/" in key:
        prefix, name = key.rsplit("/", 1)
        if len(prefix) > 253 or not re.fullmatch(_LABEL_PREFIX, prefix):
            return (f"Invalid label key prefix `{prefix}`. Prefix must be a series of DNS labels separated by dots "
                    f"(.), not longer than 253 characters in total.")
    else:
        name = key
    if len(name) > 63 or not re.fullmatch(_LABEL, name):
        return f"Invalid label key name `{name}`. Name {_NAME_RULE}"
    return None


def label_selector_error(selector):
    """Ray's message for a label selector it refuses, or None."""
    if selector is None:
        return None
    for key, value in selector.items():
        if not isinstance(key, str):
            return f"Invalid label key {key!r}: label keys are strings"
        message = label_key_error(key)
        if message:
            return message
        if value is None or value == "":
            continue
        if not isinstance(value, str) or not _SELECTOR_VALUE.fullmatch(value):
            return (f"Invalid label selector value `{value}`. The label selector value should contain optional "
                    f"operators and a label value. Supported operators are: ! and {{'in'}}. Value {_NAME_RULE}")
    return None


def fallback_strategy_error(fallback):
    if fallback is None:
        return None
    for strategy in fallback:
        if not isinstance(strategy, dict):
            return "Each element in fallback_strategy must be a dictionary."
        if not strategy:
            return "Empty dictionary found in `fallback_strategy`."
        for option in strategy:
            if option != "label_selector":
                return f"Unsupported option found: '{option}'. Only ['label_selector'] is currently supported."
        selector = strategy.get("label_selector")
        if selector:
            if not isinstance(selector, dict):
                return 'The value of "label_selector" must be a dictionary.'
            message = label_selector_error(selector)
            if message:
                return message
    return None


def _scheduling_strategy_types():
    from torus.util.scheduling_strategies import (NodeAffinitySchedulingStrategy, NodeLabelSchedulingStrategy,
                                                  PlacementGroupSchedulingStrategy)
    return (type(None), str, PlacementGroupSchedulingStrategy, NodeAffinitySchedulingStrategy,
            NodeLabelSchedulingStrategy)


class _LazyTypes(Option):
    """An option whose accepted types live in modules that import this one."""

    def __init__(self, types_fn, default=None):
        super().__init__(None, None, default)
        self.types_fn = types_fn

    def validate(self, keyword, value):
        self.types = self.types_fn()
        super().validate(keyword, value)


def _placement_group_types():
    from torus.util.placement_group import PlacementGroup
    return (type(None), str, PlacementGroup)


COMMON = {
    "label_selector": Option((dict, type(None)), label_selector_error),
    "fallback_strategy": Option((list, type(None)), fallback_strategy_error),
    "accelerator_type": Option((str, type(None))),
    "memory": _resource("memory"),
    "name": Option((str, type(None))),
    "num_cpus": _resource("num_cpus"),
    "num_gpus": _resource("num_gpus"),
    "object_store_memory": _counting("object_store_memory", False),
    "placement_group": _LazyTypes(_placement_group_types, "default"),
    "placement_group_bundle_index": Option(int, default=-1),
    "placement_group_capture_child_tasks": Option((bool, type(None))),
    "resources": Option((dict, type(None)), _resources_error),
    "runtime_env": Option((dict, type(None))),
    "scheduling_strategy": _LazyTypes(_scheduling_strategy_types),
    "enable_task_events": Option(bool, default=True),
    "_labels": Option((dict, type(None))),
}


def _issubclass_safe(obj, cls):
    try:
        return issubclass(obj, cls)
    except TypeError:
        return False


def _num_returns_error(x):
    if x is None or x in ("dynamic", "streaming") or (isinstance(x, int) and x >= 0):
        return None
    return ("Default None. When None is passed, The default value is 1 for a task and actor task, and 'streaming' "
            "for generator tasks and generator actor tasks. The keyword 'num_returns' only accepts None, a "
            "non-negative integer, 'streaming' (for generators), or 'dynamic'. 'dynamic' flag will be deprecated in "
            "the future, and it is recommended to use 'streaming' instead.")


TASK_ONLY = {
    "max_calls": _counting("max_calls", False, 0),
    "max_retries": _counting("max_retries", default=3),
    "num_cpus": _resource("num_cpus", 1),
    "num_returns": Option((int, str, type(None)), _num_returns_error),
    "object_store_memory": Option((int, type(None)), lambda x: None if x is None else
                                  "Setting 'object_store_memory' is not implemented for tasks"),
    "retry_exceptions": Option((bool, list, tuple), lambda x: None if isinstance(x, bool) or (
        isinstance(x, (list, tuple)) and all(_issubclass_safe(e, Exception) for e in x))
        else "retry_exceptions must be either a boolean or a list of exceptions", False),
    "_generator_backpressure_num_objects": Option((int, type(None))),
    "_num_objects_per_yield": Option((int, type(None)), None, 1),
}

ACTOR_ONLY = {
    "concurrency_groups": Option((list, dict, type(None))),
    "enable_tensor_transport": Option((bool, type(None))),
    "lifetime": Option((str, type(None)), lambda x: None if x in (None, "detached", "non_detached") else
                       "actor `lifetime` argument must be one of 'detached', 'non_detached' and 'None'."),
    "max_concurrency": _counting("max_concurrency", False),
    "max_restarts": _counting("max_restarts", default=0),
    "max_task_retries": _counting("max_task_retries", default=0),
    "max_pending_calls": _counting("max_pending_calls", default=-1),
    "namespace": Option((str, type(None))),
    "get_if_exists": Option(bool, default=False),
    "allow_out_of_order_execution": Option((bool, type(None))),
    "_actor_generator_backpressure_num_objects": Option((int, type(None))),
}

TASK_OPTIONS = {**COMMON, **TASK_ONLY}
ACTOR_OPTIONS = {**COMMON, **ACTOR_ONLY}
VALID_OPTIONS = {**TASK_ONLY, **ACTOR_ONLY, **COMMON}

REMOTE_ARGS_ERROR = ("The @ray.remote decorator must be applied either with no arguments and no parentheses, for "
                     "example '@ray.remote', or it must be applied using some of the arguments in the list "
                     f"{list(VALID_OPTIONS)}, for example "
                     "'@ray.remote(num_returns=2, resources={\"CustomResource\": 1})'.")


def _check_deprecated_placement_group(options):
    if options.get("placement_group", "default") not in ("default", None) and \
            options.get("scheduling_strategy") is not None:
        raise ValueError("Placement groups should be specified via the scheduling_strategy option. The "
                         "placement_group option is deprecated.")


def validate_num_returns(is_generator, num_returns):
    if num_returns is None:
        return
    if isinstance(num_returns, int) and num_returns < 0:
        raise ValueError(f"num_returns must be >= 0, but got {num_returns}.")
    if num_returns in ("streaming", "dynamic") and not is_generator:
        raise ValueError(f"num_returns='{num_returns}' can only be used with generator functions (functions that "
                         f"use 'yield'). The decorated function is not a generator function.")


def validate_task_options(options, in_options, is_generator=None):
    for k, v in options.items():
        if k not in TASK_OPTIONS:
            raise ValueError(f"Invalid option keyword {k} for remote functions. Valid ones are "
                             f"{list(TASK_OPTIONS)}.")
        TASK_OPTIONS[k].validate(k, v)
    if in_options and "max_calls" in options:
        raise ValueError("Setting 'max_calls' is not supported in '.options()'.")
    _check_deprecated_placement_group(options)
    if is_generator is not None:
        validate_num_returns(is_generator, options.get("num_returns"))


def validate_actor_options(options, in_options):
    for k, v in options.items():
        if k not in ACTOR_OPTIONS:
            raise ValueError(f"Invalid option keyword {k} for actors. Valid ones are {list(ACTOR_OPTIONS)}.")
        ACTOR_OPTIONS[k].validate(k, v)
    if in_options and "concurrency_groups" in options:
        raise ValueError("Setting 'concurrency_groups' is not supported in '.options()'.")
    groups = options.get("concurrency_groups")
    if isinstance(groups, list):
        raise ValueError("concurrency_groups: a dict of group name -> calls at once is required (a list of names is "
                         "not taken by torus)")
    for group, n in (groups or {}).items():
        if not isinstance(group, str) or isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"concurrency_groups: group {group!r} needs a positive number of calls at once, got {n!r}")
    if options.get("get_if_exists") and not options.get("name"):
        raise ValueError("The actor name must be specified to use `get_if_exists`.")
    _check_deprecated_placement_group(options)


# --- conversion to the core's forms (at .remote()) ---

def fixed(field, amount):
    """`amount` of a resource in fixed point (1/10000)."""
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount) or amount < 0:
        raise ValueError(f"{field}: a non-negative number is required, got {amount!r}")
    return int(round(amount * SCALE))


def resources(opts, default_cpus):
    """The core's resource map (fixed point) of a task's or actor's options: num_cpus, num_gpus, memory, resources
    and accelerator_type (Ray's `accelerator_type:<type>` resource, 0.001 of it)."""
    cpus = opts.get("num_cpus")
    out = {"CPU": fixed("num_cpus", default_cpus if cpus is None else cpus)}
    if opts.get("num_gpus"):
        out["GPU"] = fixed("num_gpus", opts["num_gpus"])
    if opts.get("memory"):
        fixed("memory", opts["memory"])
        out["memory"] = int(opts["memory"]) * SCALE
    for name, amount in (opts.get("resources") or {}).items():
        out[name] = fixed(f"resources[{name!r}]", amount)
    return {k: v for k, v in out.items() if v > 0}


def check_runtime_env(env, field="runtime_env"):
    """A runtime_env's checked copy: env_vars (strings) and working_dir are what torus applies; other keys are
    refused, naming them (never silently ignored)."""
    env = env or {}
    if not isinstance(env, dict):
        raise TypeError(f"{field} must be a dict, got {type(env).__name__}")
    unknown = set(env) - {"env_vars", "working_dir", "config"}
    if unknown:
        raise ValueError(f"{field}: unsupported keys {sorted(unknown)}; accepted: env_vars, working_dir")
    env_vars = env.get("env_vars") or {}
    if not isinstance(env_vars, dict):
        raise TypeError(f"runtime_env['env_vars'] must be of type Dict[str, str], got {type(env_vars)}")
    for k, v in env_vars.items():
        if not isinstance(k, str):
            raise TypeError(f"runtime_env['env_vars'] must be of type Dict[str, str], but the key {k} is of type "
                            f"{type(k)}")
        if not isinstance(v, str):
            raise TypeError(f"runtime_env['env_vars'] must be of type Dict[str, str], but the value {v} is of type "
                            f"{type(v)}")
    working_dir = env.get("working_dir")
    if working_dir is not None and not isinstance(working_dir, str):
        raise TypeError(f"`working_dir` must be a string, got {type(working_dir)}.")
    out = {}
    if env_vars:
        out["env_vars"] = dict(env_vars)
    if working_dir:
        out["working_dir"] = working_dir
    return out


def runtime_env(opts, job_env):
    """(env_vars, working_dir) of the worker: the job's runtime_env (init's), overridden by the task's."""
    mine = check_runtime_env(opts.get("runtime_env"))
    env_vars = dict(job_env.get("env_vars") or {})
    env_vars.update(mine.get("env_vars") or {})
    # Workers look up and name actors in their driver's namespace.
    state = _st.current()
    if state is not None:
        env_vars["TORUS_NAMESPACE"] = state.namespace
    env_vars.update(context_env(opts, job_env))
    # A driver that runs as `ray` has workers that do too (ray_alias).
    if os.environ.get("TORUS_RAY_ALIAS") == "1":
        env_vars["TORUS_RAY_ALIAS"] = "1"
    return env_vars, mine.get("working_dir") or job_env.get("working_dir") or ""


def _placement_group_module():
    # torus.util.placement_group the attribute is the function (as in Ray); the module is this.
    return importlib.import_module("torus.util.placement_group")


def _group_of(opts):
    """(PlacementGroup or None, bundle index, capture) of a task's or actor's options, as Ray resolves them: the
    scheduling_strategy's group (a PlacementGroupSchedulingStrategy's, None in it meaning none), else the deprecated
    placement_group option, else -- when the submitting task captures its children -- the submitting task's group.
    A strategy of another kind (or "DEFAULT") means no group."""
    pgm = _placement_group_module()
    from torus.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    strategy = opts.get("scheduling_strategy")
    if strategy is not None and not isinstance(strategy, PlacementGroupSchedulingStrategy):
        return None, -1, False
    group = opts.get("placement_group", "default")
    index = opts.get("placement_group_bundle_index", -1)
    capture = opts.get("placement_group_capture_child_tasks")
    if isinstance(strategy, PlacementGroupSchedulingStrategy):
        group, index, capture = (strategy.placement_group, strategy.placement_group_bundle_index,
                                 strategy.placement_group_capture_child_tasks)
    if capture is None:
        capture = pgm.current_capture()
    if isinstance(group, str) and group == "default":
        group = pgm.get_current_placement_group() if capture else None
    if not group:
        group = None
    elif not isinstance(group, pgm.PlacementGroup):
        raise TypeError(f"placement_group: a PlacementGroup, None or \"default\" is required, got "
                        f"{type(group).__name__}")
    elif group.is_empty:
        group = None
    return group, index, bool(capture)


def context_env(opts, job_env):
    """The worker environment that tells a task or actor what get_runtime_context() reports: the placement group it
    runs in and whether the tasks it submits join it (get_current_placement_group,
    placement_group_capture_child_tasks), and its runtime_env (its job's, with its own over it) as JSON."""
    pgm = _placement_group_module()
    mine = check_runtime_env(opts.get("runtime_env"))
    merged = dict(job_env or {})
    merged_vars = {**(merged.get("env_vars") or {}), **(mine.get("env_vars") or {})}
    merged.update({k: v for k, v in mine.items() if k != "env_vars"})
    if merged_vars:
        merged["env_vars"] = merged_vars
    out = {"TORUS_RUNTIME_ENV": json.dumps(merged, sort_keys=True)}
    group, _, capture = _group_of(opts)
    if group is not None:
        out[pgm.GROUP_ENV] = group.id._torus_id()
        out[pgm.CAPTURE_ENV] = "1" if capture else "0"
    return out


def _merge_selector(selector, extra):
    """`selector` with `extra`'s expressions AND-ed in (two on one key: "a,b" in the core's syntax)."""
    out = dict(selector)
    for key, expr in extra.items():
        out[key] = f"{out[key]},{expr}" if out.get(key) else expr
    return out


def placement(opts):
    """(label_selector, fallback selectors, strategy, placement group id, bundle index) for the core, with Ray's
    errors for a bad bundle index. The strategy is "" (default), "SPREAD", "NODE:<id>" or "NODE_SOFT:<id>";
    accelerator_type and a NodeLabelSchedulingStrategy's `hard` expressions add to the label selectors, its `soft`
    ones to the primary selector only. What the core cannot honour is refused, naming it:
    NodeAffinitySchedulingStrategy's `_fail_on_unavailable`, a label selector or fallback_strategy on work inside a
    placement group."""
    pgm = _placement_group_module()
    from torus.util import scheduling_strategies as ss
    selector = dict(opts.get("label_selector") or {})
    # fallback_strategy's selectors, tried in order when no node can hold the work under the ones before; the
    # resources stay the same, so accelerator_type's label goes into each.
    fallbacks = [dict(f.get("label_selector") or {}) for f in (opts.get("fallback_strategy") or [])]
    if opts.get("accelerator_type"):
        for s in [selector] + fallbacks:
            s.setdefault("ray.io/accelerator-type", opts["accelerator_type"])
    group, index, _ = _group_of(opts)
    pgm.check_placement_group_index(group or pgm.PlacementGroup.empty(), index)
    strategy = opts.get("scheduling_strategy")
    if group is not None:
        if selector:
            raise ValueError("label_selector/accelerator_type: not supported inside a placement group by torus (the "
                             "work runs on its bundle's node); select nodes with the group's bundle_label_selector")
        if fallbacks:
            raise ValueError("fallback_strategy: not supported inside a placement group by torus (the work runs on "
                             "its bundle's node)")
        return selector, fallbacks, "", group.id._torus_id(), index
    if strategy is None or strategy == "DEFAULT" or isinstance(strategy, ss.PlacementGroupSchedulingStrategy):
        wire = ""
    elif strategy == "SPREAD":
        wire = "SPREAD"
    elif isinstance(strategy, ss.NodeAffinitySchedulingStrategy):
        if strategy._fail_on_unavailable:
            raise ValueError("NodeAffinitySchedulingStrategy(_fail_on_unavailable=True) is not supported by torus: "
                             "work pinned to a busy node waits for it")
        wire = ("NODE_SOFT:" if strategy.soft else "NODE:") + strategy.node_id
    elif isinstance(strategy, ss.NodeLabelSchedulingStrategy):
        # `hard` narrows every selector; `soft` is the primary choice, with the same selectors without it as the
        # fallbacks tried when no node can hold the work under it.
        hard = ss.label_selector_of(strategy.hard)
        selector = _merge_selector(selector, hard)
        fallbacks = [_merge_selector(f, hard) for f in fallbacks]
        if strategy.soft:
            soft = ss.label_selector_of(strategy.soft)
            fallbacks = [selector] + fallbacks
            selector = _merge_selector(selector, soft)
        wire = ""
    else:
        raise ValueError(f"Invalid scheduling_strategy {strategy!r}: accepted are \"DEFAULT\", \"SPREAD\", "
                         f"NodeAffinitySchedulingStrategy, NodeLabelSchedulingStrategy and "
                         f"PlacementGroupSchedulingStrategy")
    for s in [selector] + fallbacks:
        if s:
            _st.import_core().check_label_selector(s)
    return selector, fallbacks, wire, "", -1
