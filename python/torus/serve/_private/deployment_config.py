"""A deployment's options, checked as Ray 2.60 checks them (ray.serve._private.config): DeploymentConfig (Serve's
settings: replicas, autoscaling, user_config, health checks, shutdown) and ReplicaConfig (the code, its bound
arguments and each replica's resources).

Checks run when they run in Ray (@serve.deployment, .options(), .bind()) and raise Ray's errors. Options whose
meaning torus cannot give are refused here, naming the option and why, never dropped: gang_scheduling_config,
deployment_actors, max_replicas_per_node, a request_router_config, a backpressure_config other than 503 without
Retry-After, and ray_actor_options' fallback_strategy. Value types; not thread-safe (each is built and then read).
"""

import copy
import inspect
import json

from torus._private import options as _actor_options
from torus.serve._private import validation as v
from torus.serve.config import autoscaling_config_of

MODEL = "DeploymentConfig"

DEFAULT_MAX_ONGOING_REQUESTS = 5
DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S = 20
DEFAULT_GRACEFUL_SHUTDOWN_WAIT_LOOP_S = 2
DEFAULT_HEALTH_CHECK_PERIOD_S = 10
DEFAULT_HEALTH_CHECK_TIMEOUT_S = 30
DEFAULT_CONSTRUCTOR_RETRY_COUNT = 20

# Ray's ray_actor_options keys, in Ray's order (its message prints them as a set).
ALLOWED_RAY_ACTOR_OPTIONS = ("accelerator_type", "memory", "num_cpus", "num_gpus", "resources", "runtime_env",
                             "label_selector", "fallback_strategy")


def unsupported(option, why):
    return ValueError(f"{option}: not supported by torus ({why})")


def _check_user_config(value):
    if value is None or isinstance(value, bytes):
        return value
    try:
        json.dumps(value)
    except TypeError as e:
        raise v.value_error(MODEL, "user_config", f"user_config is not JSON-serializable: {e}.", value) from None
    return value


def _check_max_queued(value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("max_queued_requests must be an integer.")
    if value < 1 and value != -1:
        raise v.value_error(MODEL, "max_queued_requests",
                            "max_queued_requests must be -1 (no limit) or a positive integer.", value)
    return value


def _check_logging_config(value):
    if value is None:
        return value
    if not isinstance(value, dict):
        raise TypeError(f"Got invalid type '{type(value)}' for logging_config. Expected a dictionary.")
    return dict(value)


def _check_backpressure(value):
    if value is None:
        return None
    fields = value if isinstance(value, dict) else getattr(value, "__dict__", {})
    if fields.get("status_code", 503) != 503 or fields.get("retry_after_s") is not None:
        raise unsupported("backpressure_config", "the ingress answers a full queue with 503 and no Retry-After; "
                                                 "leave status_code at 503")
    return value


def _refuse_unless_none(option, why):
    def check(value):
        if value is not None:
            raise unsupported(option, why)
        return value
    return check


_CHECKS = {
    "num_replicas": lambda x: None if x is None else v.int_field(MODEL, "num_replicas", x, ge=0),
    "max_ongoing_requests": lambda x: v.int_field(MODEL, "max_ongoing_requests", x, gt=0),
    "max_queued_requests": _check_max_queued,
    "backpressure_config": _check_backpressure,
    "user_config": _check_user_config,
    "graceful_shutdown_timeout_s": lambda x: v.float_field(MODEL, "graceful_shutdown_timeout_s", x, ge=0),
    "graceful_shutdown_wait_loop_s": lambda x: v.float_field(MODEL, "graceful_shutdown_wait_loop_s", x, ge=0),
    "health_check_period_s": lambda x: v.float_field(MODEL, "health_check_period_s", x, gt=0),
    "health_check_timeout_s": lambda x: v.float_field(MODEL, "health_check_timeout_s", x, gt=0),
    "autoscaling_config": autoscaling_config_of,
    "request_router_config": _refuse_unless_none(
        "request_router_config", "the head's ingress picks the READY replica with the fewest requests in flight"),
    "logging_config": _check_logging_config,
    "max_constructor_retry_count": lambda x: v.int_field(MODEL, "max_constructor_retry_count", x, gt=0),
    "gang_scheduling_config": _refuse_unless_none(
        "gang_scheduling_config", "a replica is one gang of its own; give placement_group_bundles for its processes"),
    "deployment_actors": _refuse_unless_none(
        "deployment_actors", "start the actors from the replica's constructor instead"),
    "rolling_update_percentage": lambda x: v.float_field(MODEL, "rolling_update_percentage", x, gt=0.0, le=1.0),
    "max_surge_percent": lambda x: v.int_field(MODEL, "max_surge_percent", x, ge=0, le=100),
}

_DEFAULTS = {
    "num_replicas": 1, "max_ongoing_requests": DEFAULT_MAX_ONGOING_REQUESTS, "max_queued_requests": -1,
    "backpressure_config": None, "user_config": None,
    "graceful_shutdown_timeout_s": DEFAULT_GRACEFUL_SHUTDOWN_TIMEOUT_S,
    "graceful_shutdown_wait_loop_s": DEFAULT_GRACEFUL_SHUTDOWN_WAIT_LOOP_S,
    "health_check_period_s": DEFAULT_HEALTH_CHECK_PERIOD_S, "health_check_timeout_s": DEFAULT_HEALTH_CHECK_TIMEOUT_S,
    "autoscaling_config": None, "request_router_config": None, "logging_config": None,
    "max_constructor_retry_count": DEFAULT_CONSTRUCTOR_RETRY_COUNT, "gang_scheduling_config": None,
    "deployment_actors": None, "rolling_update_percentage": 0.2, "max_surge_percent": 0,
}


class DeploymentConfig:
    """Serve-level settings of a deployment; every assignment is checked (as Ray's validate_assignment)."""

    def __init__(self):
        for name, value in _DEFAULTS.items():
            object.__setattr__(self, name, value)
        self.user_configured_option_names = set()

    def __setattr__(self, name, value):
        if name in _CHECKS:
            value = _CHECKS[name](value)
        elif name != "user_configured_option_names":
            raise AttributeError(f"DeploymentConfig has no option {name!r}")
        object.__setattr__(self, name, value)

    @classmethod
    def from_default(cls, **kwargs):
        """A default config with kwargs set; DEFAULT values are skipped. TypeError for an unknown keyword."""
        from torus.serve._private.defaults import DEFAULT
        config = cls()
        for key, value in kwargs.items():
            if key not in _CHECKS:
                raise TypeError(f'Got invalid Deployment config option "{key}" (with value {value}) as keyword '
                                f"argument. All Deployment config options must come from this list: "
                                f"{list(_CHECKS)}.")
        for key, value in kwargs.items():
            if value is not DEFAULT.VALUE:
                setattr(config, key, value)
        return config

    def __eq__(self, other):
        return isinstance(other, DeploymentConfig) and self.__dict__ == other.__dict__

    def __repr__(self):
        return " ".join(f"{k}={val!r}" for k, val in self.__dict__.items())


def handle_num_replicas_auto(max_ongoing_requests, autoscaling_config):
    """num_replicas="auto": Ray's default autoscaling (1 to 100 replicas, 2 requests each), with the given
    autoscaling_config's fields over it."""
    from torus.serve._private.defaults import DEFAULT
    from torus.serve.config import AutoscalingConfig
    if autoscaling_config in (DEFAULT.VALUE, None):
        return max_ongoing_requests, AutoscalingConfig.default()
    fields = AutoscalingConfig.default().model_dump(exclude_unset=True)
    given = autoscaling_config if isinstance(autoscaling_config, dict) else \
        autoscaling_config.model_dump(exclude_unset=True)
    fields.update(given)
    return max_ongoing_requests, AutoscalingConfig(**fields)


class ReplicaConfig:
    """What each replica runs and holds: the class or function, its bound arguments, ray_actor_options (num_cpus
    defaults to 1, as in Ray), placement_group_bundles/strategy/bundle_label_selector, and torus's replica gang
    (Deployment._with_replica_gang) when one was given."""

    def __init__(self, deployment_def, init_args, init_kwargs, ray_actor_options, placement_group_bundles,
                 placement_group_strategy, placement_group_bundle_label_selector, max_replicas_per_node,
                 replica_gang=None):
        self.deployment_def = deployment_def
        self.init_args = init_args
        self.init_kwargs = init_kwargs
        self.ray_actor_options = ray_actor_options
        self.placement_group_bundles = placement_group_bundles
        self.placement_group_strategy = placement_group_strategy
        self.placement_group_bundle_label_selector = placement_group_bundle_label_selector
        self.max_replicas_per_node = max_replicas_per_node
        self.replica_gang = replica_gang

    @classmethod
    def create(cls, deployment_def, init_args=None, init_kwargs=None, ray_actor_options=None,
               placement_group_bundles=None, placement_group_strategy=None,
               placement_group_bundle_label_selector=None, max_replicas_per_node=None, replica_gang=None):
        if not callable(deployment_def) and not isinstance(deployment_def, str):
            raise TypeError("@serve.deployment must be called on a class or function.")
        if not (init_args is None or isinstance(init_args, (tuple, list))):
            raise TypeError("init_args must be a tuple.")
        if not (init_kwargs is None or isinstance(init_kwargs, dict)):
            raise TypeError("init_kwargs must be a dict.")
        if inspect.isfunction(deployment_def):
            if init_args:
                raise ValueError("init_args not supported for function deployments.")
            if init_kwargs:
                raise ValueError("init_kwargs not supported for function deployments.")
        options = copy.copy(ray_actor_options) if ray_actor_options is not None else {}
        _check_ray_actor_options(options)
        selectors = placement_group_bundle_label_selector
        if placement_group_bundles and selectors and len(selectors) == 1 and len(placement_group_bundles) > 1:
            selectors = [dict(selectors[0]) for _ in placement_group_bundles]
        _check_placement(options, placement_group_bundles, placement_group_strategy, selectors)
        if max_replicas_per_node is not None:
            _check_max_replicas_per_node(max_replicas_per_node, placement_group_bundles)
        return cls(deployment_def, tuple(init_args or ()), dict(init_kwargs or {}), options,
                   placement_group_bundles, placement_group_strategy, selectors, max_replicas_per_node,
                   replica_gang)


def _check_ray_actor_options(options):
    if not isinstance(options, dict):
        raise TypeError(f'Got invalid type "{type(options)}" for ray_actor_options. Expected a dictionary.')
    allowed = "{" + ", ".join(repr(k) for k in ALLOWED_RAY_ACTOR_OPTIONS) + "}"
    for option in options:
        if option not in ALLOWED_RAY_ACTOR_OPTIONS:
            raise ValueError(f"Specifying '{option}' in ray_actor_options is not allowed. Allowed options: {allowed}")
    _actor_options.validate_actor_options(options, in_options=True)
    if options.get("fallback_strategy") is not None:
        raise unsupported("ray_actor_options['fallback_strategy']",
                          "a replica is placed by its service; give placement_group_bundles, or a replica gang with "
                          "TPU fallbacks")
    if "runtime_env" in options:
        _actor_options.check_runtime_env(options["runtime_env"], "ray_actor_options['runtime_env']")
    if options.get("num_cpus") is None:
        options["num_cpus"] = 1


def _check_placement(options, bundles, strategy, selectors):
    if strategy is not None and bundles is None:
        raise ValueError("If `placement_group_strategy` is provided, `placement_group_bundles` must also be provided.")
    if selectors is not None and bundles is None:
        raise ValueError("If `placement_group_bundle_label_selector` is provided, `placement_group_bundles` must "
                         "also be provided.")
    if bundles is None:
        return
    from torus.util.placement_group import validate_placement_group
    validate_placement_group(bundles=bundles, strategy=strategy or "PACK", lifetime="detached",
                             bundle_label_selector=selectors)
    prefix = ("When using `placement_group_bundles`, the replica actor will be placed in the first bundle, so the "
              "resource requirements for the actor must be a subset of the first bundle.")
    first = bundles[0]
    if first.get("CPU", 0) < options.get("num_cpus", 0):
        raise ValueError(f"{prefix} `num_cpus` for the actor is {options.get('num_cpus', 0)}, but the bundle only has "
                         f"{first.get('CPU', 0)} `CPU` specified.")
    if first.get("GPU", 0) < options.get("num_gpus", 0):
        raise ValueError(f"{prefix} `num_gpus` for the actor is {options.get('num_gpus', 0)}, but the bundle only has "
                         f"{first.get('GPU', 0)} `GPU` specified.")
    for resource, amount in (options.get("resources") or {}).items():
        if first.get(resource, 0) < amount:
            raise ValueError(f"{prefix} `{resource}` requirement for the actor is {amount}, but the bundle only has "
                             f"{first.get(resource, 0)} `{resource}` specified.")


def _check_max_replicas_per_node(value, bundles):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"Get invalid type '{type(value)}' for max_replicas_per_node. Expected None or an integer in "
                        f"the range of [1, 100].")
    if value < 1 or value > 100:
        raise ValueError(f"Invalid max_replicas_per_node {value}. Valid values are None or an integer in the range "
                         f"of [1, 100].")
    if bundles is not None:
        raise ValueError("Setting max_replicas_per_node is not allowed when placement_group_bundles is provided.")
    raise unsupported("max_replicas_per_node", "the head places each replica's gang where it fits; spread replicas "
                                               "with a label_selector instead")
