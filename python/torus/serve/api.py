"""ray.serve.api: Serve's functions with Ray 2.60's signatures, defaults and errors, on torus services.

serve.run builds the application (serve/_private/build.py), packs each deployment (cloudpickle, with the cluster's
address and token for its handles) into a package it uploads to the head, and deploys one service per deployment
(serve/_private/service_spec.py): the dependencies first, the ingress last, each service deployed again only when
its spec changed; services of the application that it no longer has are deleted. It waits until every service is
RUNNING (a deployment whose replicas keep failing to start raises RuntimeError with the error) and returns a
DeploymentHandle to the ingress deployment.

serve.status() reads the services back; serve.delete(name) deletes an application's services and waits until
they are gone; serve.shutdown() deletes every application's. Thread-safety: not thread-safe (as Ray's).
"""

import collections.abc
import dataclasses
import inspect
import logging
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from torus.serve._private import client as _client
from torus.serve._private import naming
from torus.serve._private import status as _status
from torus.serve._private.build import build_app
from torus.serve._private.defaults import DEFAULT, Default
from torus.serve._private.deployment_config import DeploymentConfig, ReplicaConfig, handle_num_replicas_auto
from torus.serve.config import HTTPOptions, ProxyLocation, gRPCOptions
from torus.serve.context import ReplicaContext, _get_internal_replica_context
from torus.serve.deployment import Application, Deployment
from torus.serve.exceptions import RayServeException
from torus.serve.handle import DeploymentHandle
from torus.serve.schema import ApplicationStatus, ServeStatus

logger = logging.getLogger("ray.serve")
SERVE_DEFAULT_APP_NAME = "default"
POLL_S = 0.1
DELETE_TIMEOUT_S = 60


def start(proxy_location=None, http_options=None, grpc_options=None, logging_config=None, tracing_config=None,
          controller_options=None, **kwargs):
    """Accepted for Ray programs: torus runs Serve without a controller, and every application's HTTP goes through
    the head's ingress (its --serve-port; `torus serve ingress` runs more). http_options are checked; a host or
    port other than the ingress's is not applied (the head's flags set them), and is said so in the log.
    gRPC servicers are refused (the ingress speaks HTTP/1.1 only)."""
    if isinstance(http_options, dict):
        http_options = HTTPOptions(**http_options)
    if isinstance(grpc_options, dict):
        grpc_options = gRPCOptions(**grpc_options)
    if grpc_options is not None and grpc_options.grpc_servicer_functions:
        raise ValueError("grpc_options: not supported by torus (its ingress serves HTTP/1.1 only); call the "
                         "application over HTTP or with a DeploymentHandle")
    ProxyLocation._normalize(proxy_location)
    if http_options is not None and (http_options.host, http_options.port) != ("127.0.0.1", 8000):
        logger.warning("serve.start(http_options=...): torus serves every application at the head's ingress; "
                       "its address is set by the head's --serve-port and --host, not by http_options")
    _client.current()


def shutdown():
    """Deletes every Serve application on the cluster (the services serve.run deployed)."""
    if _client.existing() is None and not _connected():
        logger.info("Nothing to shut down. There's no Serve application running on this Ray cluster.")
        return
    client = _client.current()
    names = sorted({_status.serve_env(s)["TORUS_SERVE_APP"] for s in client.head.list()
                    if _status.is_serve_service(s)})
    if not names:
        logger.info("Nothing to shut down. There's no Serve application running on this Ray cluster.")
    for name in names:
        _delete_app(client, name, blocking=True)
    _client.reset()


async def shutdown_async():
    shutdown()


def _connected():
    from torus._private import state as _st
    return _st.current() is not None or os.environ.get("TORUS_SERVE_REPLICA") == "1"


def get_replica_context() -> ReplicaContext:
    """The deployment and replica inside a replica; RayServeException elsewhere."""
    context = _get_internal_replica_context()
    if context is None:
        raise RayServeException("`serve.get_replica_context()` may only be called from within a Ray Serve "
                                "deployment.")
    return context


def ingress(app=None) -> Callable:
    """Wraps a deployment class with an ASGI app (FastAPI) that takes its HTTP requests; FastAPI routes defined
    on the class's methods get the replica's instance as `self`. `app` may also be a function building the app in
    the replica, or None when the class defines __serve_build_asgi_app__."""

    def decorator(cls=None):
        if cls is None:
            class ASGIIngressDeployment:
                def __init__(self, *args, **kwargs):
                    self.args = args
                    self.kwargs = kwargs
            cls = ASGIIngressDeployment
        if not inspect.isclass(cls):
            raise ValueError("@serve.ingress must be used with a class.")
        if issubclass(cls, collections.abc.Callable):
            raise ValueError("Classes passed to @serve.ingress may not have __call__ method.")
        if app is None and not hasattr(cls, "__serve_build_asgi_app__"):
            raise ValueError("serve.ingress() called without an app argument requires "
                             f"{cls.__name__} to define `__serve_build_asgi_app__`.")
        from torus.serve._private import asgi
        frozen = asgi.freeze(app, cls)

        class ASGIIngressWrapper(cls):
            pass

        setattr(ASGIIngressWrapper, "_torus_serve_asgi_app", frozen)
        asgi.copy_class_metadata(ASGIIngressWrapper, cls)
        return ASGIIngressWrapper

    return decorator


def deployment(_func_or_class: Optional[Callable] = None, name: Default[str] = DEFAULT.VALUE,
               version: Default[str] = DEFAULT.VALUE,
               num_replicas: Default[Optional[Union[int, str]]] = DEFAULT.VALUE,
               ray_actor_options: Default[Dict] = DEFAULT.VALUE,
               placement_group_bundles: Default[List[Dict[str, float]]] = DEFAULT.VALUE,
               placement_group_strategy: Default[str] = DEFAULT.VALUE,
               placement_group_bundle_label_selector: Default[List[Dict[str, str]]] = DEFAULT.VALUE,
               max_replicas_per_node: Default[int] = DEFAULT.VALUE,
               user_config: Default[Optional[Any]] = DEFAULT.VALUE,
               max_ongoing_requests: Default[int] = DEFAULT.VALUE,
               max_queued_requests: Default[int] = DEFAULT.VALUE,
               backpressure_config=DEFAULT.VALUE, autoscaling_config=DEFAULT.VALUE,
               graceful_shutdown_wait_loop_s: Default[float] = DEFAULT.VALUE,
               graceful_shutdown_timeout_s: Default[float] = DEFAULT.VALUE,
               health_check_period_s: Default[float] = DEFAULT.VALUE,
               health_check_timeout_s: Default[float] = DEFAULT.VALUE,
               logging_config=DEFAULT.VALUE, request_router_config=DEFAULT.VALUE,
               max_constructor_retry_count: Default[int] = DEFAULT.VALUE,
               gang_scheduling_config=DEFAULT.VALUE, deployment_actors=DEFAULT.VALUE,
               rolling_update_percentage: Default[float] = DEFAULT.VALUE,
               max_surge_percent: Default[int] = DEFAULT.VALUE) -> Callable[[Callable], Deployment]:
    """Makes a class or function a Deployment (Ray's options and defaults; docs/serving.md says what each becomes
    on torus)."""
    if version is not DEFAULT.VALUE:
        raise ValueError("`version` in `@serve.deployment` has been removed. Serve manages deployment versions "
                         "internally.")
    if max_ongoing_requests is None:
        raise ValueError("`max_ongoing_requests` must be non-null, got None.")
    if num_replicas == "auto":
        num_replicas = None
        max_ongoing_requests, autoscaling_config = handle_num_replicas_auto(max_ongoing_requests,
                                                                            autoscaling_config)
    configured = [option for option, value in locals().items()
                  if option != "_func_or_class" and value is not DEFAULT.VALUE]
    if num_replicas == 0:
        raise ValueError("num_replicas is expected to larger than 0")
    if num_replicas not in (DEFAULT.VALUE, None, "auto") and autoscaling_config not in (DEFAULT.VALUE, None):
        raise ValueError("Manually setting num_replicas is not allowed when autoscaling_config is provided.")
    config = DeploymentConfig.from_default(
        num_replicas=num_replicas if num_replicas is not None else 1, user_config=user_config,
        max_ongoing_requests=max_ongoing_requests, max_queued_requests=max_queued_requests,
        backpressure_config=backpressure_config, autoscaling_config=autoscaling_config,
        graceful_shutdown_wait_loop_s=graceful_shutdown_wait_loop_s,
        graceful_shutdown_timeout_s=graceful_shutdown_timeout_s, health_check_period_s=health_check_period_s,
        health_check_timeout_s=health_check_timeout_s, logging_config=logging_config,
        request_router_config=request_router_config, max_constructor_retry_count=max_constructor_retry_count,
        gang_scheduling_config=gang_scheduling_config, deployment_actors=deployment_actors,
        rolling_update_percentage=rolling_update_percentage, max_surge_percent=max_surge_percent)
    config.user_configured_option_names = set(configured)

    def decorator(_func_or_class):
        def given(value):
            return None if value is DEFAULT.VALUE else value
        replica_config = ReplicaConfig.create(
            _func_or_class, init_args=None, init_kwargs=None, ray_actor_options=given(ray_actor_options),
            placement_group_bundles=given(placement_group_bundles),
            placement_group_strategy=given(placement_group_strategy),
            placement_group_bundle_label_selector=given(placement_group_bundle_label_selector),
            max_replicas_per_node=given(max_replicas_per_node))
        return Deployment(name if name is not DEFAULT.VALUE else _func_or_class.__name__, config, replica_config,
                          version=None, _internal=True)

    return decorator(_func_or_class) if callable(_func_or_class) else decorator


def validate_route_prefix(route_prefix):
    if route_prefix is DEFAULT.VALUE or route_prefix is None:
        return
    if not isinstance(route_prefix, str) or not route_prefix.startswith("/"):
        raise ValueError(f"Invalid route_prefix '{route_prefix}', must start with a forward slash ('/').")
    if route_prefix != "/" and route_prefix.endswith("/"):
        raise ValueError(f"Invalid route_prefix '{route_prefix}', may not end with a trailing '/'.")
    if "{" in route_prefix or "}" in route_prefix:
        raise ValueError(f"Invalid route_prefix '{route_prefix}', may not contain wildcards.")


def _run(target: Application, *, _blocking: bool = True, name: str = SERVE_DEFAULT_APP_NAME,
         route_prefix: Optional[str] = "/", logging_config=None, _local_testing_mode: bool = False,
         external_scaler_enabled: bool = False, controller_options=None) -> DeploymentHandle:
    """serve.run without the blocking loop; `_blocking=False` returns once the services are deployed."""
    deployed = _deploy(target, name, route_prefix, _local_testing_mode)
    if _blocking:
        _wait_deployed(deployed)
    return DeploymentHandle(deployed.built.ingress_deployment_name, name)


class _Deployed:
    def __init__(self, client, name, route_prefix, built, baseline):
        self.client, self.name, self.route_prefix, self.built, self.baseline = (client, name, route_prefix, built,
                                                                               baseline)


def _deploy(target, name, route_prefix, local_testing_mode) -> _Deployed:
    _check_target(target, name, route_prefix, local_testing_mode)
    client = _client.current()
    built = build_app(target, name=name, route_prefix=route_prefix, make_handle=DeploymentHandle)
    from torus.serve._private import deploy
    return _Deployed(client, name, route_prefix, built, deploy.deploy_application(client, built))


def _check_target(target, name, route_prefix, local_testing_mode):
    if len(name) == 0:
        raise RayServeException("Application name must a non-empty string.")
    if not isinstance(target, Application):
        raise TypeError("`serve.run` expects an `Application` returned by `Deployment.bind()`.")
    validate_route_prefix(route_prefix)
    if local_testing_mode:
        raise ValueError("_local_testing_mode: not supported by torus; run the application on a local cluster "
                         "(ray.init() starts one)")


def _wait_deployed(deployed: _Deployed):
    _wait_running(deployed.client, deployed.name, deployed.baseline)
    url = ""
    if deployed.route_prefix is not None:
        ingress = deployed.client.head.get(
            naming.service_name(deployed.name, deployed.built.ingress_deployment_name)) or {}
        url = " at " + (ingress.get("url") or deployed.route_prefix)
    logger.info(f"Application '{deployed.name}' is ready{url}.")


@dataclasses.dataclass(frozen=True)
class RunTarget:
    """A Serve application for serve.run_many (Ray's fields)."""
    target: Application
    name: str = SERVE_DEFAULT_APP_NAME
    route_prefix: Optional[str] = "/"
    logging_config: Optional[Any] = None
    external_scaler_enabled: bool = False


def _run_many(targets, wait_for_ingress_deployment_creation: bool = True, wait_for_applications_running: bool = True,
              _local_testing_mode: bool = False, controller_options=None) -> List[DeploymentHandle]:
    if not targets:
        raise ValueError("No applications provided.")
    for t in targets:  # every target is checked before any is deployed
        _check_target(t.target, t.name, t.route_prefix, _local_testing_mode)
    deployed = [_deploy(t.target, t.name, t.route_prefix, _local_testing_mode) for t in targets]
    if wait_for_applications_running:
        for d in deployed:
            _wait_deployed(d)
    return [DeploymentHandle(d.built.ingress_deployment_name, d.name) for d in deployed]


def run_many(targets: Sequence[RunTarget], blocking: bool = False, wait_for_ingress_deployment_creation: bool = True,
             wait_for_applications_running: bool = True, _local_testing_mode: bool = False,
             controller_options=None) -> List[DeploymentHandle]:
    """Deploys several applications together, then waits until every one is RUNNING (as serve.run does for one);
    returns their ingress deployments' handles, in order."""
    handles = _run_many(targets, wait_for_ingress_deployment_creation=wait_for_ingress_deployment_creation,
                        wait_for_applications_running=wait_for_applications_running,
                        _local_testing_mode=_local_testing_mode, controller_options=controller_options)
    if blocking:
        _wait_for_interrupt()
    return handles


def _wait_for_interrupt():
    try:
        while True:
            time.sleep(10)
    except KeyboardInterrupt:
        logger.warning("Got KeyboardInterrupt, exiting...")
        raise


def run(target: Application, blocking: bool = False, name: str = SERVE_DEFAULT_APP_NAME,
        route_prefix: Optional[str] = "/", logging_config=None, _local_testing_mode: bool = False,
        external_scaler_enabled: bool = False, controller_options=None) -> DeploymentHandle:
    """Runs an application (one torus service per deployment) and returns a handle to its ingress deployment,
    once every deployment is RUNNING. blocking=True then waits until Ctrl-C."""
    handle = _run(target, name=name, route_prefix=route_prefix, logging_config=logging_config,
                  _local_testing_mode=_local_testing_mode, external_scaler_enabled=external_scaler_enabled,
                  controller_options=controller_options)
    if blocking:
        _wait_for_interrupt()
    return handle


def _app_services(client, name):
    return [s for s in client.head.list() if _status.serve_env(s).get("TORUS_SERVE_APP") == name]


def _wait_running(client, name, baseline):
    """Until every deployment is RUNNING. Failed starts are counted as they come (the head keeps a service's newest
    events only); a deployment that reaches max_constructor_retry_count of them is stopped and RuntimeError
    raised."""
    from torus.serve._private import deploy
    failures = {}
    warned = {}
    while True:
        services = _app_services(client, name)
        if not services:
            raise RuntimeError(f"Waiting for application {name} to be RUNNING, but application doesn't exist.")
        for service in services:
            failures.setdefault(service["name"], {}).update(
                _status.failed_startups(service, ignore=baseline.get(service["name"], ())))
        overview = _status.application_overview(services, failures)
        if overview.status == ApplicationStatus.RUNNING:
            return
        for deployment in overview.deployments.values():
            if "to be scheduled" in deployment.message and time.time() - warned.get(deployment.message, 0) >= 30:
                logger.warning(deployment.message)
                warned[deployment.message] = time.time()
        if overview.status == ApplicationStatus.DEPLOY_FAILED:
            for service in services:
                deployment = overview.deployments[_status.serve_env(service)["TORUS_SERVE_DEPLOYMENT"]]
                if deployment.status.value == "DEPLOY_FAILED" and \
                        not _status.serve_env(service).get("TORUS_SERVE_DEPLOY_FAILED"):
                    deploy.mark_failed(client, service, deployment.message)
            raise RuntimeError(f"Deploying application {name} failed: {overview.message}")
        time.sleep(POLL_S)


def delete(name: str, _blocking: bool = True):
    """Deletes the application's services (its replicas drain and stop); waits until they are gone."""
    _delete_app(_client.current(), name, _blocking)


def _delete_app(client, name, blocking):
    services = _app_services(client, name)
    for service in services:
        client.head.delete(service["name"])
    client.forget_app(name)
    if not blocking:
        return
    deadline = time.monotonic() + DELETE_TIMEOUT_S
    while _app_services(client, name):
        if time.monotonic() > deadline:
            raise TimeoutError(f"Some of these applications weren't deleted after {DELETE_TIMEOUT_S}s: {[name]}")
        time.sleep(POLL_S)


def status() -> ServeStatus:
    """Serve's applications and deployments on the cluster, read from their services."""
    client = _client.current()
    services = client.head.list()
    ingress_up = any(s.get("url") for s in services)
    return _status.serve_status(services, ingress_up)


def get_app_handle(name: str) -> DeploymentHandle:
    """A handle to the application's ingress deployment; RayServeException when there is no such application."""
    client = _client.current()
    for service in _app_services(client, name):
        env = _status.serve_env(service)
        if env.get("TORUS_SERVE_INGRESS") == "1":
            return DeploymentHandle(env["TORUS_SERVE_DEPLOYMENT"], name)
    raise RayServeException(f"Application '{name}' does not exist.")


def get_deployment_handle(deployment_name: str, app_name: Optional[str] = None, _check_exists: bool = True,
                          _record_telemetry: bool = True) -> DeploymentHandle:
    """A handle to a deployment by name; inside a replica app_name defaults to its own application."""
    context = _get_internal_replica_context()
    if app_name is None:
        if context is None:
            raise RayServeException("Please specify an application name when getting a deployment handle outside "
                                    "of a Serve application.")
        app_name = context.app_name
    if _check_exists:
        client = _client.current()
        service = client.head.get(naming.service_name(app_name, deployment_name))
        if service is None or _status.serve_env(service).get("TORUS_SERVE_APP") != app_name:
            raise KeyError(f"Deployment(name='{deployment_name}', app='{app_name}') does not exist.")
    return DeploymentHandle(deployment_name, app_name)


__all__ = ["Application", "Deployment", "delete", "deployment", "get_app_handle", "get_deployment_handle",
           "get_replica_context", "ingress", "run", "shutdown", "shutdown_async", "start", "status"]
