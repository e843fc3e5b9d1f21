"""ray.serve.deployment: Deployment (a class or function made a deployment by @serve.deployment) and Application
(a deployment bound to its constructor's arguments, which serve.run deploys).

Each deployment of an application runs as a torus service (docs/serving.md): its replicas are the service's
replicas, each a gang of one process by default. Value types; not thread-safe.
"""

import copy
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from torus.serve._private.defaults import DEFAULT, Default
from torus.serve._private.deployment_config import DeploymentConfig, ReplicaConfig, handle_num_replicas_auto


class Application:
    """One or more deployments bound with arguments, deployed together by serve.run; can be passed to another
    Deployment.bind() to compose deployments (the callee gets a DeploymentHandle in its place)."""

    def __init__(self, bound_deployment: "Deployment"):
        self._bound_deployment = bound_deployment
        self._ingress_request_router = None

    def _with_ingress_request_router(self, ingress_request_router: "Application") -> "Application":
        self._ingress_request_router = ingress_request_router
        return self


class Deployment:
    """A class or function decorated with @serve.deployment, run on a number of replicas."""

    def __init__(self, name: str, deployment_config: DeploymentConfig, replica_config: ReplicaConfig,
                 version: Optional[str] = None, _internal: bool = False) -> None:
        if not _internal:
            raise RuntimeError("The Deployment constructor should not be called directly. Use `@serve.deployment` "
                               "instead.")
        self._validate_name(name)
        if not (version is None or isinstance(version, str)):
            raise TypeError("version must be a string.")
        self._name = name
        self._version = version
        self._deployment_config = deployment_config
        self._replica_config = replica_config

    def _validate_name(self, name: str):
        if not isinstance(name, str):
            raise TypeError("name must be a string.")
        if "#" in name:
            raise ValueError(f"Deployment names must not contain the '#' character. Current name: {name}.")

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> Optional[str]:
        return self._version

    @property
    def func_or_class(self) -> Union[Callable, str]:
        return self._replica_config.deployment_def

    @property
    def num_replicas(self) -> int:
        return self._deployment_config.num_replicas

    @property
    def user_config(self) -> Any:
        return self._deployment_config.user_config

    @property
    def max_ongoing_requests(self) -> int:
        return self._deployment_config.max_ongoing_requests

    @property
    def max_queued_requests(self) -> int:
        return self._deployment_config.max_queued_requests

    @property
    def backpressure_config(self):
        return self._deployment_config.backpressure_config

    @property
    def ray_actor_options(self) -> Optional[Dict]:
        return self._replica_config.ray_actor_options

    @property
    def init_args(self) -> Tuple[Any]:
        return self._replica_config.init_args

    @property
    def init_kwargs(self) -> Dict[Any, Any]:
        return self._replica_config.init_kwargs

    @property
    def logging_config(self) -> Dict:
        return self._deployment_config.logging_config

    def set_logging_config(self, logging_config: Dict):
        self._deployment_config.logging_config = logging_config

    def __call__(self):
        raise RuntimeError("Deployments cannot be constructed directly. Use `deployment.deploy() instead.`")

    def bind(self, *args, **kwargs) -> Application:
        """The deployment bound to its constructor's arguments: an Application for serve.run, or to bind into
        another deployment."""
        return Application(self.options(_init_args=args, _init_kwargs=kwargs))

    def options(self, func_or_class: Optional[Callable] = None, name: Default[str] = DEFAULT.VALUE,
                version: Default[str] = DEFAULT.VALUE,
                num_replicas: Default[Optional[Union[int, str]]] = DEFAULT.VALUE,
                ray_actor_options: Default[Optional[Dict]] = DEFAULT.VALUE,
                placement_group_bundles: Default[List[Dict[str, float]]] = DEFAULT.VALUE,
                placement_group_strategy: Default[str] = DEFAULT.VALUE,
                placement_group_bundle_label_selector: Default[List[Dict[str, str]]] = DEFAULT.VALUE,
                max_replicas_per_node: Default[int] = DEFAULT.VALUE,
                user_config: Default[Optional[Any]] = DEFAULT.VALUE,
                max_ongoing_requests: Default[int] = DEFAULT.VALUE,
                max_queued_requests: Default[int] = DEFAULT.VALUE,
                backpressure_config=DEFAULT.VALUE,
                autoscaling_config=DEFAULT.VALUE,
                graceful_shutdown_wait_loop_s: Default[float] = DEFAULT.VALUE,
                graceful_shutdown_timeout_s: Default[float] = DEFAULT.VALUE,
                health_check_period_s: Default[float] = DEFAULT.VALUE,
                health_check_timeout_s: Default[float] = DEFAULT.VALUE,
                logging_config=DEFAULT.VALUE,
                request_router_config=DEFAULT.VALUE,
                _init_args: Default[Tuple[Any]] = DEFAULT.VALUE,
                _init_kwargs: Default[Dict[Any, Any]] = DEFAULT.VALUE,
                _internal: bool = False,
                max_constructor_retry_count: Default[int] = DEFAULT.VALUE,
                gang_scheduling_config=DEFAULT.VALUE,
                deployment_actors=DEFAULT.VALUE,
                max_surge_percent: Default[int] = DEFAULT.VALUE) -> "Deployment":
        """A copy of this deployment with the given options changed (see @serve.deployment)."""
        if not _internal and version is not DEFAULT.VALUE:
            raise ValueError("`version` in `Deployment.options()` has been removed. Serve manages deployment "
                             "versions internally.")
        if max_ongoing_requests is None:
            raise ValueError("`max_ongoing_requests` must be non-null, got None.")
        if num_replicas == "auto":
            max_ongoing_requests, autoscaling_config = handle_num_replicas_auto(max_ongoing_requests,
                                                                                autoscaling_config)
        configured = [option for option, value in locals().items()
                      if option not in {"self", "func_or_class", "_internal"} and value is not DEFAULT.VALUE]
        config = copy.deepcopy(self._deployment_config)
        if not _internal:
            config.user_configured_option_names.update(configured)
        if num_replicas not in (DEFAULT.VALUE, None, "auto") and autoscaling_config not in (DEFAULT.VALUE, None):
            raise ValueError("Manually setting num_replicas is not allowed when autoscaling_config is provided.")
        if num_replicas == 0:
            raise ValueError("num_replicas is expected to larger than 0")
        if num_replicas not in (DEFAULT.VALUE, None, "auto"):
            config.num_replicas = num_replicas
        for field, value in (("user_config", user_config), ("max_ongoing_requests", max_ongoing_requests),
                             ("max_queued_requests", max_queued_requests),
                             ("backpressure_config", backpressure_config),
                             ("max_constructor_retry_count", max_constructor_retry_count),
                             ("max_surge_percent", max_surge_percent), ("autoscaling_config", autoscaling_config),
                             ("request_router_config", request_router_config),
                             ("graceful_shutdown_wait_loop_s", graceful_shutdown_wait_loop_s),
                             ("graceful_shutdown_timeout_s", graceful_shutdown_timeout_s),
                             ("health_check_period_s", health_check_period_s),
                             ("health_check_timeout_s", health_check_timeout_s),
                             ("logging_config", logging_config), ("gang_scheduling_config", gang_scheduling_config),
                             ("deployment_actors", deployment_actors)):
            if value is not DEFAULT.VALUE:
                setattr(config, field, value)
        rc = self._replica_config

        def keep(value, current):
            return current if value is DEFAULT.VALUE else value

        replica_config = ReplicaConfig.create(
            func_or_class if func_or_class is not None else rc.deployment_def,
            init_args=keep(_init_args, rc.init_args),
            init_kwargs=keep(_init_kwargs, rc.init_kwargs),
            ray_actor_options=keep(ray_actor_options, rc.ray_actor_options),
            placement_group_bundles=keep(placement_group_bundles, rc.placement_group_bundles),
            placement_group_strategy=keep(placement_group_strategy, rc.placement_group_strategy),
            placement_group_bundle_label_selector=keep(placement_group_bundle_label_selector,
                                                       rc.placement_group_bundle_label_selector),
            max_replicas_per_node=keep(max_replicas_per_node, rc.max_replicas_per_node),
            replica_gang=rc.replica_gang)
        return Deployment(keep(name, self._name), config, replica_config, version=keep(version, self._version),
                          _internal=True)

    def _with_replica_gang(self, spec: dict) -> "Deployment":
        """A copy of this deployment whose every replica is the torus replica gang `spec` (torus only; the hook
        for libraries that need whole slices per replica, such as an LLM server on a multi-host TPU slice).

        `spec` is a service's `replica` (docs/serving.md): the fields of a run's scaling_config, e.g.
        {"accelerator_type": "TPU-V6E", "topology": "4x4"} for one whole simulated or real slice per replica, or
        {"num_workers": 2, "resources_per_worker": {"CPU": 4, "GPU": 1}, "use_gpu": True}. serve.run puts it in
        the service spec as given, in place of what ray_actor_options and placement_group_bundles would ask for
        (those stay as they are and are not used for placement). The head checks it when serve.run deploys and
        its error names the field.

        Every process of the gang runs `python -m torus.serve._replica` with the gang's environment (RANK,
        WORLD_SIZE, MASTER_ADDR, TPU_WORKER_ID, ...). Rank 0 constructs the deployment and serves its requests,
        health checks and handle calls; ranks > 0 construct nothing, hold their share of the gang's devices and
        stay until the replica stops (the user class on rank 0 reaches them, e.g. with torch.distributed or
        jax.distributed, through that environment). A rank that exits ends the whole replica, which the service
        then replaces.
        """
        if not isinstance(spec, dict) or not spec:
            raise TypeError(f"_with_replica_gang: a non-empty dict (a service's replica spec) is required, got "
                            f"{spec!r}")
        copied = copy.copy(self)
        replica_config = copy.copy(self._replica_config)
        replica_config.replica_gang = copy.deepcopy(spec)
        copied._replica_config = replica_config
        return copied

    def __eq__(self, other):
        return all([self._name == other._name, self._version == other._version,
                    self._deployment_config == other._deployment_config,
                    self._replica_config.init_args == other._replica_config.init_args,
                    self._replica_config.init_kwargs == other._replica_config.init_kwargs,
                    self._replica_config.ray_actor_options == other._replica_config.ray_actor_options])

    def __str__(self):
        return f"Deployment(name={self._name})"

    def __repr__(self):
        return str(self)
