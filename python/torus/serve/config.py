"""ray.serve.config: AutoscalingConfig, HTTPOptions, gRPCOptions and ProxyLocation with Ray 2.60's fields,
defaults and checks.

AutoscalingConfig becomes the service's `autoscaling` (docs/serving.md): min_replicas, max_replicas,
initial_replicas (default min_replicas, as in Ray), target_ongoing_requests, upscale_delay_s and downscale_delay_s
drive the head's autoscaler. Ray's other fields (look_back_period_s, smoothing and scaling factors,
aggregation_function, policy, downscale_to_zero_delay_s, metrics_interval_s) are accepted and kept, and do not
change what torus's autoscaler does: it decides on the requests in flight every 0.2 s.

HTTPOptions and gRPCOptions are taken by serve.start(); torus's HTTP ingress is the head's (its --serve-port), so
only what they would change there is refused (docs/serving.md, "From Python: ray.serve").
"""

from enum import Enum
from typing import Any, Dict, List, Optional

from torus.serve._private import validation as v

DEFAULT_TARGET_ONGOING_REQUESTS = 2.0
DEFAULT_METRICS_INTERVAL_S = 10.0

# (field, default, kind, bounds) in Ray's order; kind: "int" / "float" / "any"; optional fields take None.
_AUTOSCALING_FIELDS = (
    ("min_replicas", 1, "int", {"ge": 0}, False),
    ("initial_replicas", None, "int", {"ge": 0}, True),
    ("max_replicas", 1, "int", {"gt": 0}, False),
    ("target_ongoing_requests", DEFAULT_TARGET_ONGOING_REQUESTS, "float", {"gt": 0}, True),
    ("metrics_interval_s", DEFAULT_METRICS_INTERVAL_S, "float", {"gt": 0}, False),
    ("look_back_period_s", 30.0, "float", {"gt": 0}, False),
    ("smoothing_factor", 1.0, "float", {"gt": 0}, False),
    ("upscale_smoothing_factor", None, "float", {"gt": 0}, True),
    ("downscale_smoothing_factor", None, "float", {"gt": 0}, True),
    ("upscaling_factor", None, "float", {"gt": 0}, True),
    ("downscaling_factor", None, "float", {"gt": 0}, True),
    ("downscale_delay_s", 600.0, "float", {"ge": 0}, False),
    ("downscale_to_zero_delay_s", None, "float", {"ge": 0}, True),
    ("upscale_delay_s", 30.0, "float", {"ge": 0}, False),
    ("aggregation_function", "mean", "any", {}, False),
    ("policy", None, "any", {}, True),
)


class AggregationFunction(str, Enum):
    MEAN = "mean"
    MAX = "max"
    MIN = "min"


class AutoscalingConfig:
    """Config for the Serve autoscaler (Ray's fields and defaults; see the module's docstring for what torus's
    autoscaler reads). Unknown keys are ignored, as Ray's model ignores them."""

    def __init__(self, _loc_prefix="", _model="AutoscalingConfig", **kwargs):
        self._set = set()
        for name, default, kind, limits, optional in _AUTOSCALING_FIELDS:
            loc = f"{_loc_prefix}{name}"
            if name in kwargs:
                self._set.add(name)
                value = kwargs[name]
                if value is None and optional:
                    pass
                elif kind == "int":
                    value = v.int_field(_model, loc, value, **limits)
                elif kind == "float":
                    value = v.float_field(_model, loc, value, **limits)
                elif name == "aggregation_function":
                    value = _aggregation(_model, loc, value)
            else:
                value = default
                if name == "aggregation_function":
                    value = AggregationFunction.MEAN
            object.__setattr__(self, name, value)
        self._check_replicas(_model, _loc_prefix.rstrip("."), kwargs)

    def _check_replicas(self, model, loc, given):
        message = None
        if self.max_replicas < self.min_replicas:
            message = (f"max_replicas ({self.max_replicas}) must be greater than or equal to min_replicas "
                       f"({self.min_replicas})!")
        elif self.initial_replicas is not None and self.initial_replicas < self.min_replicas:
            message = (f"min_replicas ({self.min_replicas}) must be less than or equal to initial_replicas "
                       f"({self.initial_replicas})!")
        elif self.initial_replicas is not None and self.initial_replicas > self.max_replicas:
            message = (f"max_replicas ({self.max_replicas}) must be greater than or equal to initial_replicas "
                       f"({self.initial_replicas})!")
        if message:
            raise v.value_error(model, loc, message, dict(given))

    @classmethod
    def default(cls):
        return cls(target_ongoing_requests=DEFAULT_TARGET_ONGOING_REQUESTS, min_replicas=1, max_replicas=100)

    def model_dump(self, exclude_unset=False) -> Dict[str, Any]:
        names = [f[0] for f in _AUTOSCALING_FIELDS]
        return {n: getattr(self, n) for n in names if not exclude_unset or n in self._set}

    dict = model_dump

    def get_upscaling_factor(self) -> float:
        return self.upscaling_factor or self.upscale_smoothing_factor or self.smoothing_factor

    def get_downscaling_factor(self) -> float:
        return self.downscaling_factor or self.downscale_smoothing_factor or self.smoothing_factor

    def get_target_ongoing_requests(self) -> float:
        return self.target_ongoing_requests

    def __setattr__(self, name, value):
        if name.startswith("_"):
            object.__setattr__(self, name, value)
            return
        dumped = self.model_dump(exclude_unset=True)
        dumped[name] = value
        checked = AutoscalingConfig(**dumped)
        self.__dict__.update(checked.__dict__)

    def __eq__(self, other):
        return isinstance(other, AutoscalingConfig) and self.model_dump() == other.model_dump()

    def __repr__(self):
        return " ".join(f"{k}={val!r}" for k, val in self.model_dump().items())


def _aggregation(model, loc, value):
    if isinstance(value, AggregationFunction):
        return value
    try:
        return AggregationFunction(str(value).lower())
    except ValueError:
        raise v.value_error(model, loc, f"'{str(value).lower()}' is not a valid AggregationFunction", value) from None


def autoscaling_config_of(value, model="DeploymentConfig", loc="autoscaling_config"):
    """An AutoscalingConfig from a dict or an AutoscalingConfig (None stays None); errors located at `loc`."""
    if value is None or isinstance(value, AutoscalingConfig):
        return value
    if isinstance(value, dict):
        return AutoscalingConfig(_loc_prefix=f"{loc}.", _model=model, **value)
    raise v.ValidationError(model, loc, "Input should be a valid dictionary or instance of AutoscalingConfig",
                            "model_type", value)


class ProxyLocation(str, Enum):
    """Where Ray runs its HTTP proxies. torus has one ingress, the head's (and `torus serve ingress` processes
    started apart): every value is accepted; Disabled does not turn the head's ingress off."""

    Disabled = "Disabled"
    HeadOnly = "HeadOnly"
    EveryNode = "EveryNode"

    @classmethod
    def _normalize(cls, location):
        if location is None:
            return None
        if isinstance(location, cls):
            return location
        if isinstance(location, str):
            if location in {"Disabled", "NoServer"}:
                return cls.Disabled
            return cls(location)
        raise TypeError(f"Must be a `ProxyLocation` or str, got: {type(location)}.")


class _Options:
    """A small typed record of options with Ray's defaults; unknown keys are refused as pydantic refuses them."""

    _model = ""
    _fields: Dict[str, Any] = {}

    def __init__(self, **kwargs):
        for name, value in kwargs.items():
            if name not in self._fields:
                raise v.ValidationError(self._model, name, "Extra inputs are not permitted", "extra_forbidden", value)
        for name, default in self._fields.items():
            object.__setattr__(self, name, kwargs.get(name, default() if callable(default) else default))

    def model_dump(self):
        return {name: getattr(self, name) for name in self._fields}

    dict = model_dump

    def __eq__(self, other):
        return type(other) is type(self) and self.model_dump() == other.model_dump()

    def __repr__(self):
        return f"{type(self).__name__}(" + ", ".join(f"{k}={val!r}" for k, val in self.model_dump().items()) + ")"


class HTTPOptions(_Options):
    """HTTP options of Ray's proxies (host, port, root_path, request_timeout_s, keep_alive_timeout_s, ssl_*).
    On torus the head's ingress serves every application; see serve.start()."""

    _model = "HTTPOptions"
    _fields = {"host": "127.0.0.1", "port": 8000, "middlewares": list, "location": None, "num_cpus": 0,
               "root_url": "", "root_path": "", "request_timeout_s": None, "keep_alive_timeout_s": 90,
               "ssl_keyfile": None, "ssl_certfile": None, "ssl_keyfile_password": None, "ssl_ca_certs": None}

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if self.middlewares:
            raise v.value_error(self._model, "middlewares",
                                "`middlewares` in HTTPOptions has been removed. Use Serve's FastAPI integration to "
                                "configure middlewares on ingress deployments instead: "
                                "https://docs.ray.io/en/latest/serve/http-guide.html#fastapi-http-deployments",
                                self.middlewares)
        if self.num_cpus:
            raise v.value_error(self._model, "num_cpus",
                                "`num_cpus` in HTTPOptions has been removed. Serve no longer supports configuring "
                                "CPU reservations for HTTP proxy actors via HTTPOptions.", self.num_cpus)
        self.port = v.int_field(self._model, "port", self.port)
        object.__setattr__(self, "location", ProxyLocation._normalize(self.location))
        if self.host is None:
            object.__setattr__(self, "location", ProxyLocation.Disabled)


class gRPCOptions(_Options):  # noqa: N801 - Ray's name
    """gRPC options of Ray's proxies. torus's ingress speaks HTTP/1.1 only: servicers are refused by serve.start."""

    _model = "gRPCOptions"
    _fields = {"port": 9000, "grpc_servicer_functions": list, "request_timeout_s": None}


__all__ = ["AggregationFunction", "AutoscalingConfig", "HTTPOptions", "ProxyLocation", "gRPCOptions"]
